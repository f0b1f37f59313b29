#include "sinkrt/runtime/dtype.h"

namespace sinkrt {

size_t DTypeSize(DType t) {
  switch (t) {
    case DType::F32:
      return 4;
    case DType::F64:
      return 8;
    case DType::I32:
      return 4;
    case DType::I64:
      return 8;
    case DType::U8:
      return 1;
    case DType::BF16:
      return 2;
    case DType::Invalid:
      return 0;
  }
  return 0;  // a value from outside the enum (untrusted bytes)
}

const char* DTypeName(DType t) {
  switch (t) {
    case DType::F32:
      return "f32";
    case DType::F64:
      return "f64";
    case DType::I32:
      return "i32";
    case DType::I64:
      return "i64";
    case DType::U8:
      return "u8";
    case DType::BF16:
      return "bf16";
    case DType::Invalid:
      return "invalid";
  }
  return "invalid";  // a value from outside the enum (untrusted bytes)
}

int64_t NumElements(std::span<const int64_t> shape) {
  constexpr int64_t kLimit = int64_t{1} << 62;
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return -1;
    if (d != 0 && n > kLimit / d) return -1;
    n *= d;
  }
  return n;
}

std::string ShapeToString(std::span<const int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

}  // namespace sinkrt
