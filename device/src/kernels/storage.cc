#include "device/src/kernels/storage.h"

#include "device/src/kernels/vector_math.h"

namespace sinkrt::device {

SINKRT_VECTOR_CLONES void Widen(const bf16_t* __restrict x, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = Bf16ToFloat(x[i]);
}

SINKRT_VECTOR_CLONES void Narrow(const float* __restrict x, bf16_t* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = FloatToBf16(x[i]);
}

}  // namespace sinkrt::device
