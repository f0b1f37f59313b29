// ScopedEnv: sets (or, with nullptr, unsets) environment variables for one
// scope and restores what was there before, so a test that reads the
// environment leaves none of its settings to the next.
//
//   ScopedEnv one("SINKRT_CONNECT_TIMEOUT_MS", "abc");
//   ScopedEnv many{{"HCCL_EXEC_TIMEOUT", "7"}, {"SINKRT_PEER_TIMEOUT_MS", nullptr}};
#pragma once

#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace sinkrt::testing {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : ScopedEnv({{name, value}}) {}
  ScopedEnv(const char* name, const std::string& value) : ScopedEnv({{name, value.c_str()}}) {}
  ScopedEnv(std::initializer_list<std::pair<const char*, const char*>> vars) {
    for (auto [name, value] : vars) {
      const char* old = std::getenv(name);
      saved_.push_back({name, old ? std::optional<std::string>(old) : std::nullopt});
      if (value)
        ::setenv(name, value, 1);
      else
        ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    // Last set, first restored: a variable named twice ends as it began.
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      if (it->second)
        ::setenv(it->first, it->second->c_str(), 1);
      else
        ::unsetenv(it->first);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::vector<std::pair<const char*, std::optional<std::string>>> saved_;
};

}  // namespace sinkrt::testing
