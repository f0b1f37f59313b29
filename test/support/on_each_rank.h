// Ranks as threads of the test process: a world's members, each on a thread
// of its own, started together and joined before the test goes on.
#pragma once

#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace sinkrt::testing {

// Runs fn(rank) on one thread per rank and joins them.
inline void OnEachRank(uint32_t n, const std::function<void(uint32_t)>& fn) {
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < n; ++r) threads.emplace_back([&fn, r] { fn(r); });
  for (auto& t : threads) t.join();
}

}  // namespace sinkrt::testing
