// Python's repr() of a float: what MindSpore's messages show when they
// format a value with %s or {} ("2.0", "0.1", "1e-05", "nan").
#pragma once

#include <string>

namespace sinkrt::host {

// The shortest digits that round-trip the double, laid out as CPython's
// float_repr_style 'short' does: positional for decimal exponents in
// [-4, 16), scientific ("1e-05", "1.5e+16") outside; integral values keep
// ".0"; "nan", "inf", "-inf".
std::string PyFloatRepr(double v);

}  // namespace sinkrt::host
