// Helpers the Graph's container (graph.cc) and its op builders (*_ops.cc)
// share: how ops are named and how axes are checked.
#pragma once

#include <cctype>
#include <cstddef>
#include <string>

#include "sinkrt/host/op_code.h"

namespace sinkrt::host::internal {

inline std::string OpLabel(OpCode op) {
  const char* n = sinkrt::OpCodeName(op);
  return (n && *n) ? n : "OpCode(" + std::to_string(static_cast<int>(op)) + ")";
}

// "matmul" for MatMul: the base of generated op names.
inline std::string LowerName(OpCode op) {
  std::string s = OpLabel(op);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

inline std::string AxisRange(size_t rank) {
  const int r = static_cast<int>(rank);
  std::string s = "[";
  s += std::to_string(-r);
  s += ", ";
  s += std::to_string(r);
  s += ")";
  return s;
}

// -1 when `axis` is outside [-rank, rank).
inline int NormalizeAxis(int axis, size_t rank) {
  const int r = static_cast<int>(rank);
  if (axis < -r || axis >= r) return -1;
  return axis < 0 ? axis + r : axis;
}

}  // namespace sinkrt::host::internal
