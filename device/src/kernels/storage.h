// Float tensors as stored: f32 as float, bf16 as its uint16_t bits.
//
// Kernels that take both template their loops on the storage type T, read
// with Load and write with Store<T>: the float instantiation is the plain
// float loop it always was (Load and Store are the identity), and the bf16
// one computes in f32 and rounds once per stored element (round to nearest
// even, runtime/src/bf16.h). Both convert without branches, so the loops
// still vectorise.
#pragma once

#include <cstdint>

#include "device/src/kernels/kernel.h"
#include "runtime/src/bf16.h"

namespace sinkrt::device {

using bf16_t = uint16_t;  // bf16 bits

inline float Load(float v) { return v; }
inline float Load(bf16_t v) { return Bf16ToFloat(v); }

template <typename T>
inline T Store(float v);
template <>
inline float Store<float>(float v) {
  return v;
}
template <>
inline bf16_t Store<bf16_t>(float v) {
  return FloatToBf16(v);
}

// A float tensor's storage as T (the caller checked the dtype at prepare).
template <typename T>
inline T* Data(const TensorRef& t) {
  return static_cast<T*>(t.data);
}

// Whole arrays, compiled per ISA (SINKRT_VECTOR_CLONES, storage.cc):
// baseline SSE2 has no unsigned 32-to-16-bit pack, and narrowing runs 2-3x
// slower there than with AVX2. Callers' own bf16 loops are cloned for the
// same reason.
void Widen(const bf16_t* __restrict x, float* __restrict y, int64_t n);
void Narrow(const float* __restrict x, bf16_t* __restrict y, int64_t n);

// Calls f(T{}) with T the storage type of `dtype` (F32 or BF16, checked at
// prepare), so that run() picks an instantiation with one branch.
template <typename F>
inline decltype(auto) WithStorage(DType dtype, F&& f) {
  if (dtype == DType::BF16) return f(bf16_t{});
  return f(float{});
}

}  // namespace sinkrt::device
