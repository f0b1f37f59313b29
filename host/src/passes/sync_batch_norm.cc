#include "host/src/passes/sync_batch_norm.h"

#include <algorithm>
#include <string>
#include <utility>

namespace sinkrt::host::passes {

bool HasSyncBatchNorm(const Graph& g) {
  for (const OpNode& op : g.ops())
    if (op.op == OpCode::BatchNorm && op.attrs.bn_sync) return true;
  return false;
}

Result<Graph> ExpandSyncBatchNorm(const Graph& forward, const SyncGroupOf& group_of, uint32_t rank) {
  // A graph with an error goes on as it is: the training graph reports it.
  if (!forward.status().ok() || !HasSyncBatchNorm(forward)) return forward;
  Graph g(forward.name());
  for (const TensorInfo& t : forward.tensors()) g.AddTensor(t);
  for (const OpNode& op : forward.ops()) {
    OpNode copy = op;
    const std::vector<uint32_t> group =
        op.op == OpCode::BatchNorm && op.attrs.bn_sync ? group_of(op) : std::vector<uint32_t>{};
    const auto me = std::find(group.begin(), group.end(), rank);
    if (group.size() > 1 && op.inputs.size() == 5) {
      if (me == group.end())
        return Internal("SyncBatchNorm '" + op.name + "': rank " + std::to_string(rank) + " is not in its group");
      const uint32_t position = static_cast<uint32_t>(me - group.begin());
      const Shape sums{2, forward.tensor(op.inputs[0]).shape.at(1)};
      const TensorId local = g.AddTensor({.name = op.name + "/sums",
                                          .dtype = DType::F32,
                                          .shape = sums,
                                          .kind = TensorKind::Intermediate,
                                          .init = {}});
      const TensorId reduced = g.AddTensor({.name = op.name + "/sums/allreduce",
                                            .dtype = DType::F32,
                                            .shape = sums,
                                            .kind = TensorKind::Intermediate,
                                            .init = {}});
      // Sums about the moving mean (read before this step's update):
      // the same shift on every member, and no cancellation when the
      // channel's mean is far from 0.
      g.AddOpInto(OpCode::BatchNormStats, {op.inputs[0], op.inputs[3]}, op.attrs, {local}, op.name + "/stats");
      OpAttrs comm;
      comm.group = group;
      comm.group_position = position;
      g.AddOpInto(OpCode::AllReduce, {local}, comm, {reduced}, op.name + "/stats/allreduce");
      copy.inputs.push_back(reduced);
      copy.attrs.group = group;
      copy.attrs.group_position = position;
    }
    g.AddOpInto(copy.op, std::move(copy.inputs), std::move(copy.attrs), std::move(copy.outputs), copy.name);
    if (!copy.recompute.empty()) g.SetOpRecompute(g.ops().size() - 1, copy.recompute);
  }
  if (forward.valid(forward.loss())) g.SetLoss(forward.loss());
  for (TensorId t : forward.outputs()) g.AddOutput(t);
  SINKRT_RETURN_IF_ERROR(g.status(), "SyncBatchNorm on graph '" + forward.name() + "'");
  return g;
}

}  // namespace sinkrt::host::passes
