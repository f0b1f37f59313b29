#include "host/src/parallel/partition/partition.h"

#include <algorithm>
#include <cstring>
#include <numeric>

namespace sinkrt::host::parallel {
namespace {

int64_t Product(const Shape& s, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end; ++i) p *= s[i];
  return p;
}

// Rank `rank`'s slice of row-major f32 `data` of `whole` shape.
std::vector<uint8_t> SliceBytes(const std::vector<uint8_t>& data, const Shape& whole, const Shape& slice,
                                const std::vector<int64_t>& offset) {
  const int64_t n = Product(slice, 0, slice.size());
  std::vector<uint8_t> out(static_cast<size_t>(n) * sizeof(float));
  std::vector<int64_t> idx(slice.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t flat = 0;
    for (size_t d = 0; d < slice.size(); ++d) flat = flat * whole[d] + offset[d] + idx[d];
    std::memcpy(&out[static_cast<size_t>(i) * sizeof(float)], &data[static_cast<size_t>(flat) * sizeof(float)],
                sizeof(float));
    for (size_t d = slice.size(); d-- > 0;) {
      if (++idx[d] < slice[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

class Emitter {
 public:
  Emitter(const Graph& g, const PartitionPlan& plan, int64_t rank, uint32_t first_rank)
      : g_(g), plan_(plan), rank_(rank), first_rank_(first_rank) {}

  Result<LocalGraph> Run() {
    out_.graph = Graph(g_.name());
    out_.rank = rank_;
    out_.local_of.assign(g_.tensors().size(), kInvalidTensor);
    for (TensorId t = 0; t < g_.tensors().size(); ++t) {
      const TensorKind k = g_.tensor(t).kind;
      if ((k == TensorKind::Param || k == TensorKind::Const || k == TensorKind::State || k == TensorKind::Input) &&
          plan_.layout_owner[t] >= 0)
        SINKRT_RETURN_IF_ERROR(EmitLeaf(t));
    }
    for (size_t i = 0; i < g_.ops().size(); ++i) SINKRT_RETURN_IF_ERROR(EmitOp(i));
    if (g_.loss() != kInvalidTensor) l().SetLoss(out_.local_of[g_.loss()]);
    for (TensorId o : g_.outputs()) l().AddOutput(out_.local_of[o]);
    if (!l().status().ok()) return l().status();
    out_.layouts.assign(l().tensors().size(), TensorLayout{});
    for (auto& [t, layout] : read_layouts_) out_.layouts[t] = std::move(layout);
    for (TensorId t = 0; t < g_.tensors().size(); ++t)
      if (out_.local_of[t] != kInvalidTensor) out_.layouts[out_.local_of[t]] = plan_.layouts[t];
    return std::move(out_);
  }

 private:
  Graph& l() { return out_.graph; }

  std::vector<uint32_t> Group(const DeviceMatrix& dm, const std::vector<int>& axes) const {
    std::vector<uint32_t> group;
    for (int64_t r : GroupAlong(dm, axes, rank_)) group.push_back(first_rank_ + static_cast<uint32_t>(r));
    return group;
  }

  Status EmitLeaf(TensorId t) {
    const TensorInfo& info = g_.tensor(t);
    const TensorLayout& layout = plan_.layouts[t];
    const Shape slice = SliceShape(layout);
    TensorInfo local = info;
    local.shape = slice;
    if (slice != info.shape && info.kind != TensorKind::Input) {
      const std::vector<int64_t> offset = SliceOffset(layout, rank_);
      if (info.init.kind == InitKind::Inline) {
        local.init.data = SliceBytes(info.init.data, info.shape, slice, offset);
      } else {
        local.init.global_shape = info.shape;
        local.init.slice_offset = offset;
      }
    }
    out_.local_of[t] = l().AddTensor(std::move(local));
    if (info.kind == TensorKind::Param) {
      LocalParameter p;
      p.local = out_.local_of[t];
      p.global = t;
      p.layout = layout;
      p.mirror_group = Group(layout.device_matrix, plan_.mirror_axes[t]);
      out_.parameters.push_back(std::move(p));
    }
    return Status::Ok();
  }

  TensorId Add(OpCode op, TensorId x, OpAttrs attrs, Shape shape, const std::string& name) {
    const DType dtype = l().valid(x) ? l().tensor(x).dtype : DType::F32;
    std::vector<TensorId> outs = l().AddOp(op, {x}, std::move(attrs), {{std::move(shape), dtype}}, name);
    return outs.empty() ? kInvalidTensor : outs[0];
  }

  TensorId Reshape(TensorId x, const Shape& s, const std::string& name) {
    if (l().tensor(x).shape == s) return x;
    return Add(OpCode::Reshape, x, OpAttrs{}, s, name);
  }

  TensorId Transpose(TensorId x, const std::vector<int>& perm, const std::string& name) {
    bool identity = true;
    for (size_t i = 0; i < perm.size(); ++i) identity &= perm[i] == static_cast<int>(i);
    if (identity) return x;
    const Shape& s = l().tensor(x).shape;
    Shape out;
    for (int p : perm) out.push_back(s[p]);
    OpAttrs a;
    a.perm = perm;
    return Add(OpCode::Transpose, x, std::move(a), std::move(out), name);
  }

  TensorId Comm(OpCode op, TensorId x, Shape out, const std::vector<uint32_t>& group, bool mean, int axis,
                const std::string& name) {
    OpAttrs a;
    a.group = group;
    a.group_position = static_cast<uint32_t>(
        std::find(group.begin(), group.end(), first_rank_ + static_cast<uint32_t>(rank_)) - group.begin());
    a.mean = mean;
    a.axis = axis;
    return Add(op, x, std::move(a), std::move(out), name);
  }

  // One redistribution step on `x` (this rank's slice, shape s.in_slice).
  TensorId EmitStep(TensorId x, const RedistStep& s, const std::string& name) {
    const std::vector<uint32_t> group = Group(s.mesh, {s.axis});
    const int64_t n = static_cast<int64_t>(group.size());
    const Shape& in = s.in_slice;
    const Shape& out = s.out_slice;
    const size_t d = s.dim < 0 ? 0 : static_cast<size_t>(s.dim);
    const int64_t outer = Product(in, 0, d), inner = Product(in, d + 1, in.size());
    switch (s.kind) {
      case RedistKind::Slice:
        return Comm(OpCode::ShardSlice, x, out, group, false, static_cast<int>(d), name + "/shard_slice");
      case RedistKind::AllReduce:
        return Comm(OpCode::AllReduce, x, out, group, s.mean, 0, name + "/allreduce");
      case RedistKind::AllGather: {
        Shape gathered = {n};
        gathered.insert(gathered.end(), in.begin(), in.end());
        TensorId y = Comm(OpCode::AllGather, x, gathered, group, false, 0, name + "/allgather");
        if (outer > 1) {
          y = Reshape(y, {n, outer, in[d] * inner}, name + "/blocks");
          y = Transpose(y, {1, 0, 2}, name + "/to_dim");
        }
        return Reshape(y, out, name + "/merge");
      }
      case RedistKind::ReduceScatter: {
        TensorId y = x;
        if (outer > 1) {
          y = Reshape(y, {outer, n, out[d] * inner}, name + "/blocks");
          y = Transpose(y, {1, 0, 2}, name + "/to_front");
        }
        Shape blocks = {n};
        blocks.insert(blocks.end(), out.begin(), out.end());
        y = Reshape(y, blocks, name + "/split");
        return Comm(OpCode::ReduceScatter, y, out, group, s.mean, 0, name + "/reducescatter");
      }
      case RedistKind::AllToAll: {
        // Cut the dim to split (to_dim) into (n, rest) and bring n to the
        // front; exchange; then put the received n in front of the dim to
        // gather and merge it in.
        const size_t to = static_cast<size_t>(s.to_dim);
        Shape expanded;
        for (size_t i = 0; i < in.size(); ++i) {
          if (i == to) {
            expanded.push_back(n);
            expanded.push_back(in[i] / n);
          } else {
            expanded.push_back(in[i]);
          }
        }
        const int at = static_cast<int>(to);
        std::vector<int> front = {at};
        for (int i = 0; i < static_cast<int>(expanded.size()); ++i)
          if (i != at) front.push_back(i);
        TensorId y = Reshape(x, expanded, name + "/cut");
        y = Transpose(y, front, name + "/to_front");
        y = Comm(OpCode::AllToAll, y, l().tensor(y).shape, group, false, 0, name + "/alltoall");
        // The rest dims in order are `expanded` without n: `in`'s dims, the
        // cut one shrunk, so the gathered dim is dim d of them (at d + 1
        // behind the received n); n goes in front of it.
        const int gathered = static_cast<int>(d);
        std::vector<int> back;
        for (int i = 1; i <= gathered; ++i) back.push_back(i);
        back.push_back(0);
        for (int i = gathered + 1; i < static_cast<int>(expanded.size()); ++i) back.push_back(i);
        y = Transpose(y, back, name + "/to_dim");
        return Reshape(y, out, name + "/merge");
      }
    }
    return kInvalidTensor;
  }

  Status EmitOp(size_t i) {
    const OpNode& op = g_.ops()[i];
    const OpPlan& p = plan_.ops[i];
    std::vector<TensorId> inputs;
    for (size_t k = 0; k < op.inputs.size(); ++k) {
      TensorId x = out_.local_of[op.inputs[k]];
      if (x == kInvalidTensor) return Internal(op.name + ": input " + std::to_string(k) + " was not emitted");
      const InputPlan& ip = p.inputs[k];
      const std::string base = op.name + "/in" + std::to_string(k);
      for (size_t s = 0; s < ip.redistribution.steps.size(); ++s)
        x = EmitStep(x, ip.redistribution.steps[s], base + "/r" + std::to_string(s));
      if (!ip.grad_partial_axes.empty()) {
        x = Comm(OpCode::GradAllReduce, x, l().tensor(x).shape, Group(p.sharding.device_matrix, ip.grad_partial_axes),
                 false, 0, base + "/grad_allreduce");
      }
      // What the op reads is its input in the layout it needs.
      if (x != out_.local_of[op.inputs[k]]) read_layouts_.emplace_back(x, ip.need);
      inputs.push_back(x);
    }
    std::vector<std::pair<Shape, DType>> outs;
    for (size_t o = 0; o < op.outputs.size(); ++o)
      outs.emplace_back(SliceShape(p.outputs[o]), g_.tensor(op.outputs[o]).dtype);
    std::vector<TensorId> made = l().AddOp(op.op, std::move(inputs), op.attrs, std::move(outs), op.name);
    if (made.size() != op.outputs.size()) return l().status().ok() ? Internal(op.name + ": not emitted") : l().status();
    for (size_t o = 0; o < op.outputs.size(); ++o) out_.local_of[op.outputs[o]] = made[o];
    return Status::Ok();
  }

  const Graph& g_;
  const PartitionPlan& plan_;
  int64_t rank_;
  uint32_t first_rank_;  // the world rank of the plan's rank 0
  LocalGraph out_;
  std::vector<std::pair<TensorId, TensorLayout>> read_layouts_;  // a redistribution's result: its op's need
};

}  // namespace

Result<LocalGraph> PartitionForRank(const Graph& g, const PartitionPlan& plan, int64_t rank, uint32_t first_rank) {
  if (plan.layouts.size() != g.tensors().size() || plan.ops.size() != g.ops().size())
    return InvalidArgument("the partition plan is not of graph " + g.name());
  if (!plan.layouts.empty()) {
    int64_t devices = 0;
    for (const TensorLayout& l : plan.layouts)
      if (!l.device_matrix.empty()) devices = DeviceCount(l.device_matrix);
    if (rank < 0 || (devices > 0 && rank >= devices))
      return InvalidArgument("rank " + std::to_string(rank) + " is outside the plan's " + std::to_string(devices) +
                             " devices");
  }
  return Emitter(g, plan, rank, first_rank).Run();
}

}  // namespace sinkrt::host::parallel
