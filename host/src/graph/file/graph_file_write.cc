// Graph -> binary fb::Graph. Tables are built in tensor and op order and
// defaults are left out, so equal graphs give equal bytes.
#include <algorithm>

#include "host/src/graph/file/graph_file_internal.h"
#include "host/src/graph/file/lr_schedule_options.h"
#include "host/src/graph/file/op_options.h"
#include "host/src/util/schema_enums.h"

namespace sinkrt::host {
namespace {

namespace fbs = flatbuffers;

Result<fb::TensorKind> FileKind(const TensorInfo& t) {
  switch (t.kind) {
    case TensorKind::Intermediate:
      return fb::TensorKind::Intermediate;
    case TensorKind::Input:
      return fb::TensorKind::Input;
    case TensorKind::Param:
      return fb::TensorKind::Param;
    case TensorKind::Const:
      return fb::TensorKind::Const;
    case TensorKind::State:
      return fb::TensorKind::State;
    case TensorKind::Grad:
    case TensorKind::OptState:
      break;
  }
  return InvalidArgument("SerializeGraph: tensor '" + t.name + "' is a " +
                         (t.kind == TensorKind::Grad ? "Grad" : "OptState") +
                         " tensor; a graph file holds the forward graph, before autodiff and the optimizer pass");
}

fbs::Offset<fb::Init> WriteInit(fbs::FlatBufferBuilder& fbb, const InitSpec& s) {
  // Inline bytes travel in fb::Tensor.inline_data; the blob offsets are the
  // task stream's business.
  return fb::CreateInit(fbb, ToFb(s.kind), s.value, s.low, s.high, s.mean, s.stddev, s.seed, s.fan_in, s.fan_out);
}

fbs::Offset<fb::Optimizer> WriteOptimizer(fbs::FlatBufferBuilder& fbb, const OptimizerSpec& o) {
  fb::OptimizerKind kind = fb::OptimizerKind::SGD;
  switch (o.kind) {
    case OptimizerKind::SGD:
      kind = fb::OptimizerKind::SGD;
      break;
    case OptimizerKind::Momentum:
      kind = fb::OptimizerKind::Momentum;
      break;
    case OptimizerKind::Adam:
      kind = fb::OptimizerKind::Adam;
      break;
    case OptimizerKind::AdamWeightDecay:
      kind = fb::OptimizerKind::AdamWeightDecay;
      break;
    case OptimizerKind::Lamb:
      kind = fb::OptimizerKind::Lamb;
      break;
  }
  // Absent without groups, so such files keep their bytes.
  fbs::Offset<fbs::Vector<fbs::Offset<fb::OptimizerGroup>>> groups = 0;
  if (!o.groups.empty()) {
    std::vector<fbs::Offset<fb::OptimizerGroup>> entries;
    for (const ParamGroup& group : o.groups)
      entries.push_back(fb::CreateOptimizerGroup(fbb, fbb.CreateVectorOfStrings(group.names), group.weight_decay,
                                                 group.learning_rate));
    groups = fbb.CreateVector(entries);
  }
  // Absent without a schedule, so such files keep their bytes.
  const fbs::Offset<fb::LrScheduleOptions> schedule = o.schedule.enabled() ? WriteLrSchedule(fbb, o.schedule) : 0;
  return fb::CreateOptimizer(fbb, kind, o.learning_rate, o.momentum, o.nesterov, o.beta1, o.beta2, o.epsilon,
                             o.weight_decay, schedule, groups, o.clip_grad_norm);
}

// Absent when the op has none, so files without strategies keep their bytes.
fbs::Offset<fbs::Vector<fbs::Offset<fb::ShardStrategy>>> WriteStrategy(fbs::FlatBufferBuilder& fbb, const OpNode& op) {
  if (op.strategy.empty()) return 0;
  std::vector<fbs::Offset<fb::ShardStrategy>> entries;
  entries.reserve(op.strategy.size());
  for (const std::vector<int64_t>& dims : op.strategy)
    entries.push_back(fb::CreateShardStrategy(fbb, fbb.CreateVector(dims)));
  return fbb.CreateVector(entries);
}

}  // namespace

Result<std::vector<uint8_t>> SerializeGraph(const Graph& graph, const std::optional<OptimizerSpec>& optimizer) {
  const std::string where = "SerializeGraph: graph '" + graph.name() + "'";
  SINKRT_RETURN_IF_ERROR(graph.status(), where);
  if (!graph.valid(graph.loss()))
    return InvalidArgument(where + " has no loss: a graph file is a training graph (call SetLoss)");
  for (const OpNode& op : graph.ops())
    if (!graph_file::IsForwardOp(op.op))
      return InvalidArgument(where + ": op '" + op.name + "' (" + OpCodeName(op.op) +
                             ") is not a forward op; a graph file holds the graph before autodiff and the optimizer "
                             "pass");

  fbs::FlatBufferBuilder fbb(16 * 1024);
  fbb.ForceDefaults(false);

  std::vector<fbs::Offset<fb::Tensor>> tensors;
  tensors.reserve(graph.tensors().size());
  for (const TensorInfo& t : graph.tensors()) {
    SINKRT_ASSIGN_OR_RETURN(fb::TensorKind kind, FileKind(t));
    auto name = fbb.CreateString(t.name);
    // Always present, even for scalars: a leaf without a shape is an error
    // when read, and [] is a shape.
    auto shape = fbb.CreateVector(t.shape);
    const bool leaf = kind == fb::TensorKind::Param || kind == fb::TensorKind::Const || kind == fb::TensorKind::State;
    fbs::Offset<fb::Init> init = leaf ? WriteInit(fbb, t.init) : 0;
    fbs::Offset<fbs::Vector<uint8_t>> data =
        leaf && t.init.kind == InitKind::Inline ? fbb.CreateVector(t.init.data) : 0;
    tensors.push_back(fb::CreateTensor(fbb, name, ToFb(t.dtype), shape, kind, init, data));
  }
  auto tensors_vec = fbb.CreateVector(tensors);

  std::vector<fbs::Offset<fb::Op>> ops;
  ops.reserve(graph.ops().size());
  for (const OpNode& op : graph.ops()) {
    auto name = fbb.CreateString(op.name);
    auto inputs = fbb.CreateVector(op.inputs);
    auto outputs = fbb.CreateVector(op.outputs);
    auto [options_type, options] = OpAttrsFor(fbb, op.op, op.attrs);
    ops.push_back(fb::CreateOp(fbb, name, ToFb(op.op), inputs, outputs, options_type, options, WriteStrategy(fbb, op)));
  }
  auto ops_vec = fbb.CreateVector(ops);

  auto name = fbb.CreateString(graph.name());
  fbs::Offset<fb::Optimizer> opt = optimizer ? WriteOptimizer(fbb, *optimizer) : 0;
  auto outputs = fbb.CreateVector(graph.outputs());
  auto root = fb::CreateGraph(fbb, graph_file::kFormatMajor, graph_file::kFormatMinor, name, tensors_vec, ops_vec,
                              static_cast<int32_t>(graph.loss()), opt, outputs);
  fb::FinishGraphBuffer(fbb, root);
  return std::vector<uint8_t>(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
}

}  // namespace sinkrt::host
