// Cat: joins strings by appending, for test names, host ids and command lines.
//
//   hosts[r] = Cat("h", std::to_string(r));
//
// Chaining operator+ onto a literal ("h" + std::to_string(r)) makes GCC 12
// warn falsely (-Wrestrict, GCC PR 105329) once inlined at -O3, and the
// Release build treats warnings as errors.
#pragma once

#include <string>

namespace sinkrt::testing {

template <typename... Parts>
std::string Cat(const Parts&... parts) {
  std::string s;
  ((s += parts), ...);
  return s;
}

}  // namespace sinkrt::testing
