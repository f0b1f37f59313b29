// MindSpore's argument checks for learning-rate schedules and dynamic_lr
// lists, with mindspore/_checkparam.py's check_number wording:
//   "For 'C', the 'x' must be float and must >= 0, but got '-1.0' with type 'float'."
//   "The 'x' must be int and must > 0, but got '0' with type 'int'." (no class: dynamic_lr)
// and, for a non-finite value, "... must be a legal value, but got 'inf'.".
#pragma once

#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>

#include "sinkrt/runtime/status.h"

namespace sinkrt::host {

// Python's repr of a float, near enough for messages: the shortest text
// that reads back to the same double, with ".0" on whole numbers.
inline std::string Repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::string s;
  for (int p = 1; p <= 17; ++p) {
    std::ostringstream t;
    t.precision(p);
    t << v;
    s = t.str();
    if (std::stod(s) == v) break;
  }
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

// "For 'cls', the 'name'" or, without a class, "The 'name'".
inline std::string Who(const char* cls, const char* name) {
  return (cls ? std::string("For '") + cls + "', the '" : std::string("The '")) + name + "'";
}

inline Status CheckFloat(const char* cls, const char* name, double v, bool strictly_positive) {
  if (!std::isfinite(v)) return InvalidArgument(Who(cls, name) + " must be a legal value, but got '" + Repr(v) + "'.");
  if (strictly_positive ? v > 0 : v >= 0) return Status::Ok();
  return InvalidArgument(Who(cls, name) + " must be float and must " + (strictly_positive ? "> 0" : ">= 0") +
                         ", but got '" + Repr(v) + "' with type 'float'.");
}

inline Status CheckPositiveInt(const char* cls, const char* name, int64_t v) {
  if (v > 0) return Status::Ok();
  return InvalidArgument(Who(cls, name) + " must be int and must > 0, but got '" + std::to_string(v) +
                         "' with type 'int'.");
}

}  // namespace sinkrt::host
