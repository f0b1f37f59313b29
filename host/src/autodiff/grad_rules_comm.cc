// The communication ops' rules (docs/design/sharding.md §6: a gradient has its
// tensor's layout, replicas hold the same gradient). Each emits the op's
// transpose over the same group. The gradient keeps dy's dtype: a
// redistributed bf16 activation has a bf16 gradient (Cast's rule casts it
// back).
#include "host/src/autodiff/grad_rule.h"

namespace sinkrt::host::autodiff_internal {
namespace {

OpAttrs CommAttrs(const OpAttrs& forward, bool mean = false, int axis = 0) {
  OpAttrs a;
  a.group = forward.group;
  a.group_position = forward.group_position;
  a.mean = mean;
  a.axis = axis;
  return a;
}

int64_t GroupSize(const Rule& r) { return static_cast<int64_t>(r.op.attrs.group.size()); }

// Every addend gets the whole (replicated) gradient; a mean's is 1/n of it.
Ref AllReduceGradOf(const Rule& r) {
  if (!r.op.attrs.mean) return r.dy;
  return r.Emit(OpCode::BroadcastTo, {r.dy}, ScaleAttrs(1.0f / static_cast<float>(GroupSize(r))), r.in_shape(0), "grad",
                r.b.dtype(r.dy));
}

Ref GradAllReduceGradOf(const Rule& r) {
  return r.Emit(OpCode::AllReduce, {r.dy}, CommAttrs(r.op.attrs), r.in_shape(0), "grad", r.b.dtype(r.dy));
}

// dy [n, ...] is the same on every member: keep this member's block.
Ref AllGatherGradOf(const Rule& r) {
  const DType dt = r.b.dtype(r.dy);
  Shape block = r.b.shape(r.dy);
  block[0] = 1;
  const Ref mine = r.Emit(OpCode::ShardSlice, {r.dy}, CommAttrs(r.op.attrs, false, 0), block, "grad/shard_slice", dt);
  return r.Emit(OpCode::Reshape, {mine}, OpAttrs{}, r.in_shape(0), "grad", dt);
}

// x [n, ...]: every member's addend needs the whole sum's gradient.
Ref ReduceScatterGradOf(const Rule& r) {
  const OpAttrs& f = r.op.attrs;
  const Shape& sx = r.in_shape(0);
  const DType dt = r.b.dtype(r.dy);
  Ref dx = r.Emit(OpCode::AllGather, {r.dy}, CommAttrs(f), sx, "grad", dt);
  if (f.mean)
    dx = r.Emit(OpCode::BroadcastTo, {dx}, ScaleAttrs(1.0f / static_cast<float>(GroupSize(r))), sx, "grad/mean", dt);
  return dx;
}

// Gather the members' blocks back along the sliced axis.
Ref ShardSliceGradOf(const Rule& r) {
  const OpAttrs& f = r.op.attrs;
  const Shape& sx = r.in_shape(0);
  const int64_t n = GroupSize(r);
  const DType dt = r.b.dtype(r.dy);
  const Shape& sy = r.b.shape(r.dy);
  const size_t d = static_cast<size_t>(f.axis < 0 ? f.axis + static_cast<int>(sx.size()) : f.axis);
  int64_t outer = 1, inner = 1;
  for (size_t i = 0; i < d; ++i) outer *= sy[i];
  for (size_t i = d + 1; i < sy.size(); ++i) inner *= sy[i];
  Shape gathered = {n};
  gathered.insert(gathered.end(), sy.begin(), sy.end());
  Ref g = r.Emit(OpCode::AllGather, {r.dy}, CommAttrs(f), gathered, "grad/allgather", dt);
  if (outer > 1) {
    g = r.Emit(OpCode::Reshape, {g}, OpAttrs{}, {n, outer, sy[d] * inner}, "grad/blocks", dt);
    OpAttrs t;
    t.perm = {1, 0, 2};
    g = r.Emit(OpCode::Transpose, {g}, std::move(t), {outer, n, sy[d] * inner}, "grad/to_dim", dt);
  }
  return r.Emit(OpCode::Reshape, {g}, OpAttrs{}, sx, "grad", dt);
}

// Its own inverse over the same group.
Ref AllToAllGradOf(const Rule& r) {
  return r.Emit(OpCode::AllToAll, {r.dy}, CommAttrs(r.op.attrs), r.in_shape(0), "grad", r.b.dtype(r.dy));
}

// A comm op has one input; its gradient is `of`'s.
template <Ref (*of)(const Rule&)>
Status CommGrad(const Rule& r, Dx& dx) {
  if (r.want(0)) dx[0] = of(r);
  return Status::Ok();
}

constexpr GradRule kRules[] = {
    {OpCode::AllReduce, CommGrad<AllReduceGradOf>},   {OpCode::GradAllReduce, CommGrad<GradAllReduceGradOf>},
    {OpCode::AllGather, CommGrad<AllGatherGradOf>},   {OpCode::ReduceScatter, CommGrad<ReduceScatterGradOf>},
    {OpCode::ShardSlice, CommGrad<ShardSliceGradOf>}, {OpCode::AllToAll, CommGrad<AllToAllGradOf>},
};

}  // namespace

std::span<const GradRule> CommGradRules() { return kRules; }

}  // namespace sinkrt::host::autodiff_internal
