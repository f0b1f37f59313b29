// Text checks the tests share. In an assertion, prefer gmock's matcher
// (EXPECT_THAT(message, HasSubstr("..."))), which prints the text on
// failure; HasText is for conditions that combine several checks.
#pragma once

#include <string_view>

namespace sinkrt::testing {

inline bool HasText(std::string_view text, std::string_view part) { return text.find(part) != std::string_view::npos; }

}  // namespace sinkrt::testing
