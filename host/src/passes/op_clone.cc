// One op copied under a name prefix (passes/op_clone.h).
#include "host/src/passes/op_clone.h"

#include <utility>

namespace sinkrt::host::passes {

Status CloneOp(const Graph& from, const OpNode& op, const std::string& prefix, Graph& to, std::vector<TensorId>& map,
               const std::string& where, const std::function<TensorId(TensorId)>& output) {
  // Copies: `from` may be `to`, whose vectors grow below.
  const OpNode copy = op;
  std::vector<TensorId> inputs, outputs;
  for (TensorId t : copy.inputs) {
    if (map[t] == kInvalidTensor)
      return Internal(where + ": op '" + copy.name + "' reads '" + from.tensor(t).name + "' before it is written");
    inputs.push_back(map[t]);
  }
  for (TensorId t : copy.outputs) {
    TensorId made = output ? output(t) : kInvalidTensor;
    if (made == kInvalidTensor) {
      TensorInfo info = from.tensor(t);
      info.name = prefix + info.name;
      info.kind = TensorKind::Intermediate;
      made = to.AddTensor(std::move(info));
    }
    map[t] = made;
    outputs.push_back(made);
  }
  to.AddOpInto(copy.op, std::move(inputs), copy.attrs, std::move(outputs), prefix + copy.name);
  return to.status().WithContext(where);
}

}  // namespace sinkrt::host::passes
