// ShardSlice: this rank's block of one axis cut into n equal parts, the
// local half of a redistribution from a whole tensor to a split one
// (docs/design/sharding.md §6). Any dtype; the position and n come from the
// CommOptions the compiler wrote for this rank.
#include <cstring>
#include <string>

#include "device/src/kernels/check.h"
#include "device/src/kernels/kernel_list.h"

namespace sinkrt::device {
namespace {

struct ShardSliceState : KernelState {
  int64_t outer = 1;  // product of the dims before the axis
  size_t in_row = 0;  // bytes of one outer index of the input (the whole axis)
  size_t block = 0;   // bytes of this rank's block per outer index
  size_t offset = 0;  // where that block starts in an input row
};

Status ShardSlicePrepare(const KernelArgs& args, PrepareContext&, std::unique_ptr<KernelState>* state) {
  SINKRT_RETURN_IF_ERROR(CheckOperands(args, 1, 1));
  SINKRT_ASSIGN_OR_RETURN(const fb::CommOptions* opts, GetOptions<fb::CommOptions>(args));
  const TensorRef &x = args.inputs[0], &y = args.outputs[0];
  SINKRT_RETURN_IF_ERROR(CheckDType(args, Out(0), x.dtype));
  const int64_t parts = opts->group() ? static_cast<int64_t>(opts->group()->size()) : 0;
  if (parts < 1) return OpError(args, "the group is empty");
  if (opts->position() >= parts) {
    return OpError(args,
                   "position " + std::to_string(opts->position()) + " is outside a group of " + std::to_string(parts));
  }
  const int axis = opts->axis() < 0 ? opts->axis() + x.rank() : opts->axis();
  if (axis < 0 || axis >= x.rank()) {
    return OpError(args,
                   "axis " + std::to_string(opts->axis()) + " is out of range for input 0 " + ShapeToString(x.shape));
  }
  if (x.dim(axis) % parts != 0) {
    return OpError(args, "axis " + std::to_string(axis) + " of input 0 " + ShapeToString(x.shape) +
                             " does not cut into " + std::to_string(parts) + " equal parts");
  }
  Shape want = x.shape;
  want[axis] /= parts;
  SINKRT_RETURN_IF_ERROR(CheckShape(
      args, Out(0), want,
      ShapeToString(want) + " (input 0 with axis " + std::to_string(axis) + " cut in " + std::to_string(parts) + ")"));
  SINKRT_RETURN_IF_ERROR(CheckNoOverlap(args, /*allow_exact_alias=*/false));
  auto s = std::make_unique<ShardSliceState>();
  size_t inner = DTypeSize(x.dtype);
  for (int d = axis + 1; d < x.rank(); ++d) inner *= static_cast<size_t>(x.dim(d));
  for (int d = 0; d < axis; ++d) s->outer *= x.dim(d);
  s->in_row = inner * static_cast<size_t>(x.dim(axis));
  s->block = inner * static_cast<size_t>(want[axis]);
  s->offset = s->block * opts->position();
  (void)y;
  *state = std::move(s);
  return Status::Ok();
}

Status ShardSliceRun(const KernelArgs& args, KernelState* state, RunContext&) {
  const auto& s = *static_cast<ShardSliceState*>(state);
  const auto* x = static_cast<const uint8_t*>(args.inputs[0].data);
  auto* y = static_cast<uint8_t*>(args.outputs[0].data);
  for (int64_t o = 0; o < s.outer; ++o) std::memcpy(y + o * s.block, x + o * s.in_row + s.offset, s.block);
  return Status::Ok();
}

}  // namespace

const KernelImpl kShardSliceKernel = {ShardSlicePrepare, ShardSliceRun};

}  // namespace sinkrt::device
