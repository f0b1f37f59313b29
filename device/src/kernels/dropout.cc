// Dropout and DropoutGrad (y = x · mask / (1 − p), dx = dy · mask / (1 − p))
// and DropoutStep (the step counter, += 1 once per training step).
//
// The mask is drawn here, from the counter, by dropout_mask.h's definition:
// DropoutGrad regenerates exactly the mask its Dropout used, so no mask is
// stored between forward and backward (nothing to plan, nothing for
// recomputation to keep). The tensor is a block of a global one
// (DropoutOptions.global_shape, offset): each element's global row-major
// index keys its bit, so a rank, a shard or a micro-batch draws the mask
// one device would for the same rows. f32 and bf16 (amp), computed in f32.
#include <algorithm>
#include <string>
#include <type_traits>

#include "device/src/kernels/check.h"
#include "device/src/kernels/kernel_list.h"
#include "device/src/kernels/parallel_range.h"
#include "device/src/kernels/storage.h"
#include "device/src/kernels/vector_math.h"
#include "device/src/random/dropout_keep.h"
#include "device/src/random/dropout_mask.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif

namespace sinkrt::device {
namespace {

constexpr int kMaxRank = 8;

struct DropoutState : KernelState {
  DropoutKey key;                                // step filled in per run
  uint32_t threshold = 0;                        // floor(p · 2^16) (dropout_mask.h)
  DropoutKeepIsa isa = DropoutKeepIsa::kScalar;  // the keep bits' path for this CPU
  float scale = 1.0f;                            // 1 / (1 − p)
  // The tensor as rows of `run` elements contiguous in the global tensor;
  // row r's local index over dims [0, outer_rank) gives its global start.
  int64_t run = 1;
  int outer_rank = 0;
  int64_t local_dims[kMaxRank] = {};
  uint64_t global_strides[kMaxRank] = {};
  int64_t offsets[kMaxRank] = {};
  uint64_t run_start = 0;  // global offset of a row's first element past the outer dims
  int64_t row_stride = 1;  // dim 0's local index i sits at offsets[0] + i · row_stride
};

// y[i] = x[i] · scale where bit i of `bits` keeps it, else 0, for i in
// [0, n): the kept elements scaled, the dropped ones +0 (whatever x holds).
template <typename T>
SINKRT_VECTOR_CLONES void ApplyBits(const T* x, T* y, int64_t n, const uint64_t* bits, float scale) {
  for (int64_t i = 0; i < n; ++i) {
    const bool keep = (bits[i >> 6] >> (i & 63)) & 1;
    y[i] = Store<T>(keep ? Load(x[i]) * scale : 0.0f);
  }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// f32 on AVX-512: 16 elements per masked multiply (the same IEEE product
// and the same +0 as ApplyBits).
__attribute__((target("avx512f"))) void ApplyBitsAvx512(const float* x, float* y, int64_t n, const uint64_t* bits,
                                                        float scale) {
  const __m512 s = _mm512_set1_ps(scale);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __mmask16 keep = static_cast<__mmask16>(bits[i >> 6] >> (i & 63));
    _mm512_storeu_ps(y + i, _mm512_maskz_mul_ps(keep, _mm512_loadu_ps(x + i), s));
  }
  const __mmask16 tail = static_cast<__mmask16>((1u << (n - i)) - 1);
  if (tail) {
    const __mmask16 keep = static_cast<__mmask16>(bits[i >> 6] >> (i & 63)) & tail;
    _mm512_mask_storeu_ps(y + i, tail, _mm512_maskz_mul_ps(keep, _mm512_maskz_loadu_ps(tail, x + i), s));
  }
}
#endif

template <typename T>
void Apply(const DropoutState& s, const T* x, T* y, int64_t n, const uint64_t* bits) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if constexpr (std::is_same_v<T, float>)
    if (s.isa == DropoutKeepIsa::kAvx512) return ApplyBitsAvx512(x, y, n, bits, s.scale);
#endif
  ApplyBits(x, y, n, bits, s.scale);
}

// y[k] = x[k] · scale where global element g + k is kept, else 0, for k
// in [0, n): the keep bits of a chunk of 128-element groups
// (dropout_keep.h), shifted so that bit i is element k + i, then applied.
template <typename T>
void ApplyRun(const DropoutState& s, const T* x, T* y, uint64_t g, int64_t n) {
  constexpr int64_t kGroup = static_cast<int64_t>(kDropoutGroupElements);
  constexpr int64_t kChunkGroups = 8;  // 1,024 elements: the bits stay in L1 beside x and y
  uint64_t words[2 * kChunkGroups + 2], bits[2 * kChunkGroups];
  int64_t k = 0;
  while (k < n) {
    const uint64_t at = g + static_cast<uint64_t>(k);
    const int64_t offset = static_cast<int64_t>(at % kDropoutGroupElements);  // of element k in its group
    const int64_t m = std::min<int64_t>(n - k, kChunkGroups * kGroup - offset);
    const int64_t groups = (offset + m + kGroup - 1) / kGroup;
    DropoutKeepWords(s.isa, s.key, s.threshold, at / kDropoutGroupElements, groups, words);
    const int64_t first = offset >> 6, shift = offset & 63, have = 2 * groups;
    for (int64_t w = 0; w < (m + 63) / 64; ++w) {
      const uint64_t next = first + w + 1 < have ? words[first + w + 1] : uint64_t{0};
      bits[w] = shift == 0 ? words[first + w] : words[first + w] >> shift | next << (64 - shift);
    }
    Apply(s, x + k, y + k, m, bits);
    k += m;
  }
}

// Local elements [begin, end), row by row.
template <typename T>
void ApplyRange(const DropoutState& s, const T* x, T* y, int64_t begin, int64_t end) {
  while (begin < end) {
    int64_t row = begin / s.run;
    const int64_t in_row = begin - row * s.run;
    uint64_t g = s.run_start + static_cast<uint64_t>(in_row);
    for (int d = s.outer_rank - 1; d >= 0; --d) {
      const int64_t j = row % s.local_dims[d];
      row /= s.local_dims[d];
      g += static_cast<uint64_t>(j * (d == 0 ? s.row_stride : 1) + s.offsets[d]) * s.global_strides[d];
    }
    const int64_t n = std::min(end - begin, s.run - in_row);
    ApplyRun(s, x + begin, y + begin, g, n);
    begin += n;
  }
}

Status CheckPlacement(const KernelArgs& args, const fb::DropoutOptions& o, const Shape& shape, DropoutState* s) {
  Shape local = shape;
  const bool has_global = o.global_shape() && o.global_shape()->size() > 0;
  const bool has_offset = o.offset() && o.offset()->size() > 0;
  if (has_global != has_offset) return OpError(args, "global_shape and offset must be given together");
  // One more dim in the global shape: dim 0 is read as [dim 0 / T, T] with
  // T = global_shape[1] (a data-parallel rank's samples of T rows each, as
  // [B·T, D]; the same bytes, so only the indexing changes).
  if (has_global && o.global_shape()->size() == local.size() + 1 && !local.empty()) {
    const int64_t t = o.global_shape()->Get(1);
    if (t < 1 || local[0] % t != 0)
      return OpError(args, "global_shape[1] " + std::to_string(t) + " (rows per sample) does not divide dim 0 of " +
                               ShapeToString(shape));
    local.insert(local.begin() + 1, t);
    local[0] /= t;
  }
  const int rank = static_cast<int>(local.size());
  if (rank > kMaxRank) return OpError(args, "rank " + std::to_string(rank) + " is above " + std::to_string(kMaxRank));
  Shape global = local;
  std::vector<int64_t> offset(local.size(), 0);
  const int64_t stride = o.row_stride();
  if (stride < 1 || (stride != 1 && (!has_global || rank == 0)))
    return OpError(args,
                   "row_stride " + std::to_string(stride) + " needs to be at least 1, and 1 without global_shape");
  if (has_global) {
    if (o.global_shape()->size() != local.size() || o.offset()->size() != local.size())
      return OpError(args, "global_shape and offset must have one entry per dim of input 0 " + ShapeToString(shape) +
                               " (or one more, splitting dim 0)");
    for (int d = 0; d < rank; ++d) {
      global[d] = o.global_shape()->Get(d);
      offset[d] = o.offset()->Get(d);
      // The span the block's indices reach along d: dim 0 steps by the stride.
      const int64_t step = d == 0 ? stride : 1;
      if (offset[d] < 0 || global[d] < 1 || local[d] > global[d] || (local[d] - 1) > (global[d] - 1) / step ||
          offset[d] > global[d] - 1 - (local[d] - 1) * step)
        return OpError(args, "the block " + ShapeToString(local) + " at dim " + std::to_string(d) + " offset " +
                                 std::to_string(offset[d]) + (step != 1 ? " row_stride " + std::to_string(step) : "") +
                                 " lies outside global_shape " + ShapeToString(global));
    }
  }
  s->row_stride = stride;
  // The last dim where the block does not span the global tensor: the dims
  // after it are whole, so the block is rows of run elements there.
  int cut = -1;
  for (int d = rank - 1; d >= 0; --d)
    if (local[d] != global[d]) {
      cut = d;
      break;
    }
  // Interleaved rows are never contiguous: dim 0 is then an outer dim.
  s->outer_rank = std::max(cut, stride != 1 ? 1 : 0);
  s->run = 1;
  for (int d = s->outer_rank; d < rank; ++d) s->run *= local[d];
  uint64_t elements_after = 1;  // the global stride of dim d
  for (int d = rank - 1; d >= 0; --d) {
    if (d < s->outer_rank) {
      s->local_dims[d] = local[d];
      s->offsets[d] = offset[d];
      s->global_strides[d] = elements_after;
    } else {
      s->run_start += static_cast<uint64_t>(offset[d]) * elements_after;
    }
    elements_after *= static_cast<uint64_t>(global[d]);
  }
  return Status::Ok();
}

// x (or dy), step [] i64 -> y (or dx), of x's shape and float dtype.
Status DropoutPrepare(const KernelArgs& args, PrepareContext&, std::unique_ptr<KernelState>* state) {
  SINKRT_RETURN_IF_ERROR(CheckOperands(args, 2, 1));
  SINKRT_ASSIGN_OR_RETURN(const fb::DropoutOptions* o, GetOptions<fb::DropoutOptions>(args));
  SINKRT_ASSIGN_OR_RETURN(const DType dt, CheckFloatDType(args, {In(0), Out(0)}));
  (void)dt;
  SINKRT_RETURN_IF_ERROR(CheckSameShape(args, Out(0), In(0)));
  SINKRT_RETURN_IF_ERROR(CheckDType(args, In(1), DType::I64));
  if (args.inputs[1].numel != 1) return OpError(args, "input 1 (the step) must hold one i64");
  if (!(o->p() >= 0.0f && o->p() < 1.0f)) return OpError(args, "p is " + std::to_string(o->p()) + ", expected [0, 1)");
  auto s = std::make_unique<DropoutState>();
  s->key = {.seed = o->seed(), .step = 0, .op_id = o->op_id()};
  s->threshold = DropoutThreshold(o->p());
  s->isa = DropoutKeepIsaBest();
  s->scale = 1.0f / (1.0f - o->p());
  SINKRT_RETURN_IF_ERROR(CheckPlacement(args, *o, args.inputs[0].shape, s.get()));
  SINKRT_RETURN_IF_ERROR(CheckNoOverlap(args, /*allow_exact_alias=*/true));
  *state = std::move(s);
  return Status::Ok();
}

template <typename T>
void DropoutLoop(const KernelArgs& args, const DropoutState& s, RunContext& ctx) {
  const T* x = static_cast<const T*>(args.inputs[0].data);
  T* y = static_cast<T*>(args.outputs[0].data);
  ForRange(ctx, args.inputs[0].numel, [&](int64_t b, int64_t e) { ApplyRange(s, x, y, b, e); });
}

Status DropoutRun(const KernelArgs& args, KernelState* state, RunContext& ctx) {
  DropoutState s = *static_cast<DropoutState*>(state);
  s.key.step = static_cast<uint64_t>(*static_cast<const int64_t*>(args.inputs[1].data));
  if (args.inputs[0].dtype == DType::BF16)
    DropoutLoop<bf16_t>(args, s, ctx);
  else
    DropoutLoop<float>(args, s, ctx);
  return Status::Ok();
}

// step [] i64, advanced in place (no outputs).
Status DropoutStepPrepare(const KernelArgs& args, PrepareContext&, std::unique_ptr<KernelState>*) {
  SINKRT_RETURN_IF_ERROR(CheckOperands(args, 1, 0));
  SINKRT_RETURN_IF_ERROR(CheckNoOptions(args));
  SINKRT_RETURN_IF_ERROR(CheckDType(args, In(0), DType::I64));
  if (args.inputs[0].numel != 1) return OpError(args, "input 0 (the step) must hold one i64");
  return Status::Ok();
}

Status DropoutStepRun(const KernelArgs& args, KernelState*, RunContext&) {
  ++*static_cast<int64_t*>(args.inputs[0].data);
  return Status::Ok();
}

}  // namespace

const KernelImpl kDropoutKernel = {DropoutPrepare, DropoutRun};
const KernelImpl kDropoutStepKernel = {DropoutStepPrepare, DropoutStepRun};

}  // namespace sinkrt::device
