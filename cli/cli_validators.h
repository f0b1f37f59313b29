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

// An unsigned 64-bit value: CLI11 would wrap "-1" to 2^64 - 1.
inline CLI::Validator UnsignedInteger() {
  return CLI::Validator(
      [](std::string& input) -> std::string {
        unsigned long long v = 0;
        if (input.find('-') != std::string::npos || !CLI::detail::lexical_cast(input, v))
          return "must be an integer in [0, 18446744073709551615], got '" + input + "'";
        return {};
      },
      "UINT64");
}

// CLI::NonNegativeNumber's message has the same flaw.
inline CLI::Validator NonNegativeInteger() {
  return CLI::Validator(
      [](std::string& input) -> std::string {
        long long v = 0;
        if (!CLI::detail::lexical_cast(input, v) || v < 0) return "must be a non-negative integer, got '" + input + "'";
        return {};
      },
      "NON-NEGATIVE");
}

// A value that must not be empty: `--strategy ''` was taken as no
// --strategy at all (CLI11 prefixes the flag's name).
inline CLI::Validator NonEmpty() {
  return CLI::Validator(
      [](std::string& input) -> std::string { return input.empty() ? "needs a value, got ''" : std::string(); },
      "NON-EMPTY");
}

// A comma-separated list with no empty item: `--recompute ','` named no
// layer and was taken as none.
inline CLI::Validator NonEmptyList() {
  return CLI::Validator(
      [](std::string& input) -> std::string {
        bool empty_item =
            input.empty() || input.front() == ',' || input.back() == ',' || input.find(",,") != std::string::npos;
        return empty_item ? "is a comma-separated list with an empty item, got '" + input + "'" : std::string();
      },
      "LIST");
}

// The exit status of a command line CLI11 refused, the same in every tool:
// 0 after --help (printed), 2 for any usage error (CLI11's own codes, 105
// to 115, differ by error kind and are no contract). Prints as app.exit does.
inline int UsageExit(const CLI::App& app, const CLI::ParseError& e) { return app.exit(e) == 0 ? 0 : 2; }

}  // namespace sinkrt::tools
