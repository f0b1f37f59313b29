#include "host/src/compiler/metric_sums.h"

#include <algorithm>
#include <string>

namespace sinkrt::host::compiler {
namespace {

bool IsF32Scalar(const Graph& g, TensorId t) {
  return t != kInvalidTensor && g.tensor(t).dtype == DType::F32 && g.tensor(t).shape.empty();
}

}  // namespace

void AddMetricSums(const Graph& g, const ProgramPlan& plan, TensorId accuracy,
                   const std::function<uint32_t(TensorId)>& buffer_of, std::vector<BufferDef>* buffers,
                   ProgramDef* prog) {
  if (plan.inputs.empty() || plan.reports.empty()) return;
  const Shape& first = g.tensor(plan.inputs.front()).shape;
  const TensorId loss = plan.reports.front();
  if (first.empty() || !IsF32Scalar(g, loss)) return;

  KernelDef sum;
  sum.op = OpCode::MetricSum;
  sum.inputs.push_back(buffer_of(loss));
  // The host adds mean loss x rows per batch, in double: rows is exact in
  // a double, and so is the product (MetricSum's comment says why).
  sum.attrs.weights.push_back(static_cast<double>(first[0]));
  const bool counts = std::find(plan.reports.begin() + 1, plan.reports.end(), accuracy) != plan.reports.end() &&
                      IsF32Scalar(g, accuracy);
  if (counts) {
    sum.inputs.push_back(buffer_of(accuracy));
    sum.attrs.weights.push_back(1.0);
  }

  BufferDef out;
  out.name = kMetricSumsName;
  while (std::any_of(buffers->begin(), buffers->end(), [&](const BufferDef& b) { return b.name == out.name; }))
    out.name += "_";
  out.dtype = DType::F64;
  out.shape = {static_cast<int64_t>(sum.inputs.size())};
  out.bytes = sum.inputs.size() * sizeof(double);
  // Persistent: it holds the sums across the steps of a sink.
  out.role = BufferRole::Output;
  out.persistent = true;
  out.program = prog->kind;
  const uint32_t index = static_cast<uint32_t>(buffers->size());
  buffers->push_back(std::move(out));

  sum.outputs = {index};
  prog->tasks.push_back({"eval/metric_sum", std::move(sum)});
  prog->accumulators.push_back(index);
  prog->reports.push_back(index);
}

}  // namespace sinkrt::host::compiler
