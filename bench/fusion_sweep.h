// "Fusion must never lose" (issue 21): one AllReduce over S bytes against
// the same S bytes cut into P tensors, one AllReduce each, at every size.
//
// Fused and unfused are timed alternately (barrier, fused, barrier,
// unfused, then unfused first, ...) so that a load change on a shared
// machine hits both alike;
// each rank takes the median of its own samples per case, and the line
// reports the mean over ranks of those medians (allreduce_harness.h's
// protocol). Tensors are cut as the gradients of a layer stack are:
// `parts` near-equal pieces (the worst case for fusion: every piece is
// smallest, so each may fall under an algorithm threshold the whole is
// over), plus the MLP 784-512-256-10's six gradients.
//
// One JSON line per case from rank 0:
//   {"case":"fusion","transport":"shm","ranks":2,"bytes":1048576,"parts":4,
//    "iters":100,"fused_us":..,"unfused_us":..,"ratio":..}
// ratio = fused / unfused: at most 1 is the goal.
#pragma once

#include <cstdio>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "allreduce_harness.h"

namespace fusion_sweep {

namespace ah = allreduce_harness;

inline const std::vector<size_t> kSizes = {4 << 10, 16 << 10, 64 << 10, 256 << 10,
                                           1 << 20, 4 << 20,  16 << 20, 64 << 20};
inline const std::vector<int> kParts = {2, 3, 4, 8};

// `count` floats cut into `parts` near-equal tensors (element counts).
inline std::vector<size_t> EqualParts(size_t count, int parts) {
  std::vector<size_t> out;
  for (int i = 0; i < parts; ++i) out.push_back(count / parts + (static_cast<size_t>(i) < count % parts ? 1 : 0));
  return out;
}

// Times one AllReduce of sum(pieces) floats against one per piece, interleaved.
// Every rank passes the same pieces; `report(fused_us, unfused_us)` gathers
// the ranks' medians. Returns 1 if a checked result was wrong. `alloc`
// places the buffers, as in allreduce_harness.h's Sweep.
template <typename Alloc = std::allocator<float>, typename AllReduce, typename Barrier, typename ReportFn>
int TimeCase(const std::vector<size_t>& pieces, int r, int n, double iters_scale, AllReduce allreduce, Barrier barrier,
             ReportFn report, const Alloc& alloc = Alloc()) {
  using Buffer = std::vector<float, Alloc>;
  const size_t total = std::accumulate(pieces.begin(), pieces.end(), size_t{0});
  Buffer fused(total, static_cast<float>(r + 1), alloc);
  std::vector<Buffer> tensors;
  for (size_t c : pieces) tensors.emplace_back(c, static_cast<float>(r + 1), alloc);
  int rc = 0;
  barrier();
  allreduce(fused.data(), total);
  for (auto& t : tensors) allreduce(t.data(), t.size());
  if (!ah::CheckSum(fused.data(), total, n)) rc = 1;
  for (auto& t : tensors)
    if (!ah::CheckSum(t.data(), t.size(), n)) rc = 1;
  const ah::Plan plan = ah::PlanFor(total * sizeof(float), iters_scale);
  for (int i = 0; i < plan.warmup; ++i) {
    allreduce(fused.data(), total);
    for (auto& t : tensors) allreduce(t.data(), t.size());
  }
  std::vector<double> f_us, u_us;
  auto time_fused = [&] {
    barrier();
    auto t0 = ah::Clock::now();
    allreduce(fused.data(), total);
    f_us.push_back(ah::MicrosSince(t0));
  };
  auto time_unfused = [&] {
    barrier();
    auto t0 = ah::Clock::now();
    for (auto& t : tensors) allreduce(t.data(), t.size());
    u_us.push_back(ah::MicrosSince(t0));
  };
  // Each goes first in every other iteration: neither always finds the
  // cache as the other left it.
  for (int i = 0; i < plan.iters; ++i) {
    if (i % 2 == 0) {
      time_fused();
      time_unfused();
    } else {
      time_unfused();
      time_fused();
    }
  }
  report(plan.iters, ah::Median(f_us), ah::Median(u_us));
  return rc;
}

inline void Print(const std::string& transport, int n, size_t bytes, const std::string& parts, int iters,
                  double fused_us, double unfused_us) {
  std::printf(
      "{\"case\":\"fusion\",\"transport\":\"%s\",\"ranks\":%d,\"bytes\":%zu,\"parts\":\"%s\",\"iters\":%d,"
      "\"fused_us\":%.3f,\"unfused_us\":%.3f,\"ratio\":%.3f}\n",
      transport.c_str(), n, bytes, parts.c_str(), iters, fused_us, unfused_us,
      unfused_us > 0 ? fused_us / unfused_us : 0.0);
  std::fflush(stdout);
}

}  // namespace fusion_sweep
