#include "device/src/comm/algorithms/reduce.h"

#include <cstring>
#include <type_traits>

#include "runtime/src/bf16.h"

namespace sinkrt::device {

float Bf16ToFloat(uint16_t v) { return ::sinkrt::Bf16ToFloat(v); }

uint16_t FloatToBf16(float f) { return ::sinkrt::FloatToBf16(f); }

namespace {

template <typename T>
struct Sum {
  static T Apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    } else {
      return a + b;
    }
  }
};
template <typename T>
struct Max {
  static T Apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>)
      return (a != a || a > b) ? a : b;
    else
      return a > b ? a : b;
  }
};
template <typename T>
struct Min {
  static T Apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>)
      return (a != a || a < b) ? a : b;
    else
      return a < b ? a : b;
  }
};

// Loads and stores through memcpy: segments of a byte buffer need not be
// aligned for T, and the compiler turns these into plain vector moves.
// kSrcFirst (which operand F sees first) is a template argument so that each
// loop is compiled for one order, with no branch inside it.
template <typename T, template <typename> class F, bool kSrcFirst>
void Loop(uint8_t* __restrict dst, const uint8_t* __restrict src, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    T d, s;
    std::memcpy(&d, dst + i * sizeof(T), sizeof(T));
    std::memcpy(&s, src + i * sizeof(T), sizeof(T));
    T r = kSrcFirst ? F<T>::Apply(s, d) : F<T>::Apply(d, s);
    std::memcpy(dst + i * sizeof(T), &r, sizeof(T));
  }
}

template <typename T, template <typename> class F>
void Kernel(uint8_t* dst, const uint8_t* src, size_t count, bool src_first) {
  if (src_first)
    Loop<T, F, true>(dst, src, count);
  else
    Loop<T, F, false>(dst, src, count);
}

void Bf16Kernel(uint8_t* __restrict dst, const uint8_t* __restrict src, size_t count, ReduceOp op, bool src_first) {
  for (size_t i = 0; i < count; ++i) {
    uint16_t x, y;
    std::memcpy(&x, dst + 2 * i, 2);
    std::memcpy(&y, src + 2 * i, 2);
    uint16_t a = src_first ? y : x, b = src_first ? x : y;
    float fa = Bf16ToFloat(a), fb = Bf16ToFloat(b);
    uint16_t r;
    switch (op) {
      // Max and min return one operand's exact bits: nothing to round.
      case ReduceOp::Max:
        r = (fa != fa || fa > fb) ? a : b;
        break;
      case ReduceOp::Min:
        r = (fa != fa || fa < fb) ? a : b;
        break;
      default:
        r = FloatToBf16(fa + fb);
        break;
    }
    std::memcpy(dst + 2 * i, &r, 2);
  }
}

template <typename T>
void Typed(uint8_t* dst, const uint8_t* src, size_t count, ReduceOp op, bool src_first) {
  switch (op) {
    case ReduceOp::Max:
      return Kernel<T, Max>(dst, src, count, src_first);
    case ReduceOp::Min:
      return Kernel<T, Min>(dst, src, count, src_first);
    default:
      return Kernel<T, Sum>(dst, src, count, src_first);
  }
}

template <typename T>
void DivideTyped(uint8_t* data, size_t count, uint32_t divisor) {
  for (size_t i = 0; i < count; ++i) {
    T v;
    std::memcpy(&v, data + i * sizeof(T), sizeof(T));
    if constexpr (std::is_floating_point_v<T>)
      v = v / static_cast<T>(divisor);
    else
      v = static_cast<T>(v / static_cast<T>(divisor));
    std::memcpy(data + i * sizeof(T), &v, sizeof(T));
  }
}

}  // namespace

bool ReducibleType(DType dtype) {
  switch (dtype) {
    case DType::F32:
    case DType::F64:
    case DType::I32:
    case DType::I64:
    case DType::U8:
    case DType::BF16:
      return true;
    default:
      return false;
  }
}

void ReduceRaw(uint8_t* dst, const uint8_t* src, size_t count, DType dtype, ReduceOp op, bool src_first) {
  switch (dtype) {
    case DType::F32:
      return Typed<float>(dst, src, count, op, src_first);
    case DType::F64:
      return Typed<double>(dst, src, count, op, src_first);
    case DType::I32:
      return Typed<int32_t>(dst, src, count, op, src_first);
    case DType::I64:
      return Typed<int64_t>(dst, src, count, op, src_first);
    case DType::U8:
      return Typed<uint8_t>(dst, src, count, op, src_first);
    case DType::BF16:
      return Bf16Kernel(dst, src, count, op, src_first);
    default:
      return;
  }
}

void DivideRaw(uint8_t* data, size_t count, DType dtype, uint32_t divisor) {
  if (divisor <= 1) return;
  switch (dtype) {
    case DType::F32:
      return DivideTyped<float>(data, count, divisor);
    case DType::F64:
      return DivideTyped<double>(data, count, divisor);
    case DType::I32:
      return DivideTyped<int32_t>(data, count, divisor);
    case DType::I64:
      return DivideTyped<int64_t>(data, count, divisor);
    case DType::U8:
      return DivideTyped<uint8_t>(data, count, divisor);
    case DType::BF16:
      for (size_t i = 0; i < count; ++i) {
        uint16_t v;
        std::memcpy(&v, data + 2 * i, 2);
        v = FloatToBf16(Bf16ToFloat(v) / static_cast<float>(divisor));
        std::memcpy(data + 2 * i, &v, 2);
      }
      return;
    default:
      return;
  }
}

Status ReduceInto(std::span<uint8_t> dst, std::span<const uint8_t> src, DType dtype, ReduceOp op) {
  if (!ReducibleType(dtype)) return InvalidArgument(std::string("cannot reduce dtype ") + DTypeName(dtype));
  const size_t elem = DTypeSize(dtype);
  if (dst.size() != src.size())
    return InvalidArgument("ReduceInto: " + std::to_string(dst.size()) + " destination bytes, " +
                           std::to_string(src.size()) + " source bytes");
  if (dst.size() % elem != 0)
    return InvalidArgument("ReduceInto: " + std::to_string(dst.size()) + " bytes is not a whole number of " +
                           DTypeName(dtype) + " elements");
  ReduceRaw(dst.data(), src.data(), dst.size() / elem, dtype, op, false);
  return Status::Ok();
}

}  // namespace sinkrt::device
