// Command-line checks shared by the tools, with messages a person can read.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace sinkrt::tools {

// CLI::PositiveNumber's message prints the range up to DBL_MAX in full.
inline CLI::Validator PositiveInteger() {
  return CLI::Validator(
      [](std::string& input) -> std::string {
        long long v = 0;
        if (!CLI::detail::lexical_cast(input, v) || v < 1) return "must be a positive integer, got '" + input + "'";
        return {};
      },
      "POSITIVE");
}

}  // namespace sinkrt::tools
