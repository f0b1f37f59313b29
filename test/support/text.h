// Text the tests share: checks, and reading a file whole. In an assertion,
// prefer gmock's matcher (EXPECT_THAT(message, HasSubstr("..."))), which
// prints the text on failure; HasText is for conditions that combine
// several checks.
#pragma once

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>

namespace sinkrt::testing {

inline bool HasText(std::string_view text, std::string_view part) { return text.find(part) != std::string_view::npos; }

// The file's bytes as a string; empty if it cannot be read.
inline std::string Slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace sinkrt::testing
