// Replaces the global operator new of the binary whose one translation unit
// includes it: every allocation counts, on its thread (t_news) and in all
// (g_news). A test or benchmark reads the counters before and after what it
// measures (the feeder's no-allocation test and feeder_bench).
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>

namespace sinkrt::testing {

inline std::atomic<int64_t> g_news{0};
inline thread_local int64_t t_news = 0;

inline void* CountedNew(size_t n) {
  ++t_news;
  g_news.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}

}  // namespace sinkrt::testing

// Replacement functions may not be inline: hence one including file per binary.
void* operator new(size_t n) { return sinkrt::testing::CountedNew(n); }
void* operator new[](size_t n) { return sinkrt::testing::CountedNew(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
