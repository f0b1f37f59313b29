// Concat and Split along one axis: byte copies between the pieces and the
// whole, so any element size: f32 or bf16 (Concat); f32, bf16 or i32
// (Split). All operands share one dtype.
//
// Along axis a, every piece is a [outer, extent · inner] matrix (outer: the
// product of the dims before a, inner: of the dims after), and the whole is
// those matrices side by side. So both ops are `outer` rows of one memcpy per
// piece, planned at load.
#include <cstring>
#include <string>
#include <vector>

#include "device/src/kernels/check.h"
#include "device/src/kernels/kernel_list.h"

namespace sinkrt::device {
namespace {

struct PiecesState : KernelState {
  int64_t outer = 1;
  size_t whole_row = 0;           // bytes per row of the whole
  std::vector<size_t> piece_row;  // bytes per row of each piece
  std::vector<size_t> offset;     // where each piece starts in a row of the whole, bytes
};

// Checks that `pieces` (operands of kind `piece_kind`) joined along `axis`
// give `whole`, and plans the copies.
Status PlanPieces(const KernelArgs& args, const TensorRef& whole, Operand whole_operand, int axis,
                  bool pieces_are_inputs, std::unique_ptr<KernelState>* state) {
  const std::vector<TensorRef>& pieces = pieces_are_inputs ? args.inputs : args.outputs;
  const int rank = whole.rank();
  SINKRT_RETURN_IF_ERROR(CheckAxis(args, axis, rank, whole_operand));
  auto s = std::make_unique<PiecesState>();
  int64_t inner = 1;
  for (int d = 0; d < axis; ++d) s->outer *= whole.shape[d];
  for (int d = axis + 1; d < rank; ++d) inner *= whole.shape[d];
  const size_t elem = DTypeSize(whole.dtype);
  int64_t extent = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Operand o = pieces_are_inputs ? In(static_cast<int>(i)) : Out(static_cast<int>(i));
    SINKRT_RETURN_IF_ERROR(CheckDType(args, o, whole.dtype));
    const TensorRef& p = pieces[i];
    Shape want = whole.shape;
    if (p.rank() == rank) want[axis] = p.shape[axis];
    if (p.rank() != rank || p.shape[axis] < 1) {
      return OpError(args, o.Name() + " has shape " + ShapeToString(p.shape) + ", expected " +
                               ShapeToString(whole.shape) + " but for axis " + std::to_string(axis) + " (" +
                               whole_operand.Name() + ")");
    }
    SINKRT_RETURN_IF_ERROR(CheckShape(args, o, want,
                                      ShapeToString(want) + " (" + whole_operand.Name() + " " +
                                          ShapeToString(whole.shape) + " but for axis " + std::to_string(axis) + ")"));
    s->offset.push_back(static_cast<size_t>(extent * inner) * elem);
    s->piece_row.push_back(static_cast<size_t>(p.shape[axis] * inner) * elem);
    extent += p.shape[axis];
  }
  if (extent != whole.shape[axis]) {
    return OpError(args, std::string("the ") + (pieces_are_inputs ? "inputs" : "outputs") + " add up to " +
                             std::to_string(extent) + " along axis " + std::to_string(axis) + ", " +
                             whole_operand.Name() + " " + ShapeToString(whole.shape) + " has " +
                             std::to_string(whole.shape[axis]));
  }
  s->whole_row = static_cast<size_t>(extent * inner) * elem;
  SINKRT_RETURN_IF_ERROR(CheckNoOverlap(args, /*allow_exact_alias=*/false));
  *state = std::move(s);
  return Status::Ok();
}

Status ConcatPrepare(const KernelArgs& args, PrepareContext&, std::unique_ptr<KernelState>* state) {
  SINKRT_RETURN_IF_ERROR(CheckOperandsAtLeast(args, 1, 1));
  SINKRT_ASSIGN_OR_RETURN(const fb::AxisOptions* opts, GetOptions<fb::AxisOptions>(args));
  // Activations, f32 or bf16 (mixed precision); the inputs must match.
  SINKRT_RETURN_IF_ERROR(CheckFloatDType(args, {Out(0)}).status());
  return PlanPieces(args, args.outputs[0], Out(0), opts->axis(), /*pieces_are_inputs=*/true, state);
}

Status SplitPrepare(const KernelArgs& args, PrepareContext&, std::unique_ptr<KernelState>* state) {
  SINKRT_ASSIGN_OR_RETURN(const fb::SplitOptions* opts, GetOptions<fb::SplitOptions>(args));
  const size_t n = opts->sizes() ? opts->sizes()->size() : 0;
  if (n == 0) return OpError(args, "SplitOptions.sizes is empty");
  SINKRT_RETURN_IF_ERROR(CheckOperands(args, 1, n));
  // f32 or bf16 activations, and i32 labels (a pipeline stage cuts its
  // batch into micro-batches, docs/design/pipeline.md): a byte copy either way.
  if (args.inputs[0].dtype != DType::I32) SINKRT_RETURN_IF_ERROR(CheckFloatDType(args, {In(0)}).status());
  const int axis = opts->axis();
  SINKRT_RETURN_IF_ERROR(CheckAxis(args, axis, args.inputs[0].rank(), In(0)));
  for (size_t k = 0; k < n; ++k) {
    const TensorRef& p = args.outputs[k];
    const int64_t want = opts->sizes()->Get(static_cast<flatbuffers::uoffset_t>(k));
    if (p.rank() == args.inputs[0].rank() && p.shape[axis] != want) {
      return OpError(args, Out(static_cast<int>(k)).Name() + " has shape " + ShapeToString(p.shape) + ", expected " +
                               std::to_string(want) + " along axis " + std::to_string(axis) + " (sizes[" +
                               std::to_string(k) + "])");
    }
  }
  return PlanPieces(args, args.inputs[0], In(0), axis, /*pieces_are_inputs=*/false, state);
}

Status ConcatRun(const KernelArgs& args, KernelState* state, RunContext&) {
  const auto& s = *static_cast<PiecesState*>(state);
  auto* y = static_cast<uint8_t*>(args.outputs[0].data);
  for (size_t i = 0; i < s.piece_row.size(); ++i) {
    const auto* x = static_cast<const uint8_t*>(args.inputs[i].data);
    const size_t bytes = s.piece_row[i];
    for (int64_t o = 0; o < s.outer; ++o) std::memcpy(y + o * s.whole_row + s.offset[i], x + o * bytes, bytes);
  }
  return Status::Ok();
}

Status SplitRun(const KernelArgs& args, KernelState* state, RunContext&) {
  const auto& s = *static_cast<PiecesState*>(state);
  const auto* x = static_cast<const uint8_t*>(args.inputs[0].data);
  for (size_t i = 0; i < s.piece_row.size(); ++i) {
    auto* y = static_cast<uint8_t*>(args.outputs[i].data);
    const size_t bytes = s.piece_row[i];
    for (int64_t o = 0; o < s.outer; ++o) std::memcpy(y + o * bytes, x + o * s.whole_row + s.offset[i], bytes);
  }
  return Status::Ok();
}

}  // namespace

const KernelImpl kConcatKernel = {ConcatPrepare, ConcatRun};
const KernelImpl kSplitKernel = {SplitPrepare, SplitRun};

}  // namespace sinkrt::device
