// The measurement shared by the AllReduce comparison programs
// (allreduce_bench --compare, gloo_allreduce, mpi_allreduce), so that
// sinkrt, Gloo and OpenMPI are timed the same way and print the same line.
//
// Protocol (OSU-style, per size): one checked op (its time, the slowest
// rank's, caps the iterations: Budget), `warmup` untimed ops, then `iters` timed
// ones, each preceded by the library's own barrier so that every rank
// starts together; every rank times each op by itself (steady_clock around
// the call) and takes the median of its samples. The line reports the mean
// over ranks of those medians (latency_us) and their maximum (max_us).
// algbw = bytes / latency, busbw = algbw * 2(n-1)/n (nccl-tests), in GB/s
// (1e9 bytes per second).
//
// Buffers are float32 and filled by the caller; each program checks one
// AllReduce's result before timing (every element must equal the sum over
// ranks of rank+1) and exits non-zero if it is wrong.
//
// One JSON object per line on stdout (rank 0 prints), e.g.
//   {"impl":"mpi","transport":"shm","algo":"tuned","case":"size","ranks":2,
//    "bytes":4096,"iters":300,"latency_us":3.1,"max_us":3.3,
//    "algbw_gbs":1.32,"busbw_gbs":1.32}
// "case" is "size" for the size sweep, "mlp_fused" / "mlp_unfused" for the
// MLP's gradients (bytes = all of them; latency = the whole set).
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

namespace allreduce_harness {

inline const std::vector<size_t> kDefaultSizes = {4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20, size_t{256} << 20};

// The MLP 784-512-256-10's gradients, float32 elements per tensor:
// fc1 W, fc1 b, fc2 W, fc2 b, fc3 W, fc3 b.
inline const std::vector<size_t> kMlpGradients = {784 * 512, 512, 512 * 256, 256, 256 * 10, 10};

struct Args {
  std::vector<size_t> sizes = kDefaultSizes;
  std::string transport = "shm";  // a label for the output (and the choice, where the program makes it)
  int ranks = 2;
  bool mlp = false;                // also time the MLP's gradients, fused and unfused
  double iters_scale = 1.0;        // multiplies every iteration count
  std::vector<std::string> algos;  // programs with several algorithms: which to run (empty = all)
};

inline std::vector<std::string> SplitList(const char* s) {
  std::vector<std::string> out;
  std::string cur;
  for (const char* p = s; *p; ++p) {
    if (*p == ',') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += *p;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

// "4096", "4K", "64KiB", "16M", "1G" (powers of two).
inline size_t ParseBytes(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  switch (end && *end ? *end : ' ') {
    case 'K':
    case 'k':
      v *= 1024;
      break;
    case 'M':
    case 'm':
      v *= 1024 * 1024;
      break;
    case 'G':
    case 'g':
      v *= 1024.0 * 1024 * 1024;
      break;
    default:
      break;
  }
  return static_cast<size_t>(v);
}

inline void Usage(const char* prog, const char* extra) {
  std::fprintf(stderr,
               "usage: %s [--ranks N] [--transport shm|tcp] [--sizes 4K,64K,1M,...] [--mlp] [--iters-scale X] "
               "[--algos a,b]%s\n",
               prog, extra);
}

// Parses the common flags; unknown ones are left for the caller (returns false on a bad value).
inline bool ParseArgs(int argc, char** argv, Args& a, std::vector<std::string>* rest = nullptr) {
  for (int i = 1; i < argc; ++i) {
    std::string f = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (f == "--ranks" && (v = value())) {
      a.ranks = std::atoi(v);
    } else if (f == "--transport" && (v = value())) {
      a.transport = v;
    } else if (f == "--sizes" && (v = value())) {
      a.sizes.clear();
      for (auto& s : SplitList(v)) a.sizes.push_back(ParseBytes(s));
    } else if (f == "--mlp") {
      a.mlp = true;
    } else if (f == "--iters-scale" && (v = value())) {
      a.iters_scale = std::atof(v);
    } else if (f == "--algos" && (v = value())) {
      a.algos = SplitList(v);
    } else if (rest) {
      rest->push_back(f);
    } else {
      return false;
    }
  }
  return a.ranks >= 1;
}

inline bool Wants(const Args& a, const std::string& algo) {
  return a.algos.empty() || std::find(a.algos.begin(), a.algos.end(), algo) != a.algos.end();
}

struct Plan {
  int warmup;
  int iters;
};

// Fewer iterations for large sizes: the whole comparison stays within minutes.
inline Plan PlanFor(size_t bytes, double scale) {
  Plan p;
  if (bytes <= (64 << 10))
    p = {50, 400};
  else if (bytes <= (1 << 20))
    p = {10, 100};
  else if (bytes <= (4 << 20))
    p = {5, 40};
  else if (bytes <= (16 << 20))
    p = {3, 15};
  else if (bytes <= (64 << 20))
    p = {2, 7};
  else
    p = {1, 5};
  p.iters = std::max(3, static_cast<int>(p.iters * scale));
  p.warmup = std::max(1, static_cast<int>(p.warmup * std::min(1.0, scale)));
  return p;
}

using Clock = std::chrono::steady_clock;

// At most ~`budget_s` seconds of timed ops per size and algorithm: an
// algorithm whose first op took `first_us` (the slowest rank's; every rank
// must pass the same value) gets fewer iterations, down to 1 (Gloo's new
// ring takes seconds per op at 4 ranks here).
inline Plan Budget(Plan p, double first_us, double budget_s = 4.0) {
  if (first_us <= 0) return p;
  const double fit = budget_s * 1e6 / first_us;
  if (fit < p.iters) {
    p.iters = std::max(1, static_cast<int>(fit));
    p.warmup = fit < 3 ? 0 : std::min(p.warmup, 1);
  }
  return p;
}

inline double MicrosSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

inline double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

// This rank's median time per op in microseconds.
inline double TimeOp(const Plan& plan, const std::function<void()>& op, const std::function<void()>& barrier) {
  for (int i = 0; i < plan.warmup; ++i) op();
  std::vector<double> us;
  us.reserve(plan.iters);
  for (int i = 0; i < plan.iters; ++i) {
    barrier();
    auto t0 = Clock::now();
    op();
    auto t1 = Clock::now();
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  return Median(us);
}

struct Line {
  std::string impl, transport, algo, kind = "size";
  int ranks = 0;
  size_t bytes = 0;
  int iters = 0;
  double latency_us = 0, max_us = 0;
};

inline void Print(const Line& l) {
  const double algbw = l.latency_us > 0 ? static_cast<double>(l.bytes) / (l.latency_us * 1e3) : 0;  // GB/s
  const double busbw = l.ranks > 1 ? algbw * 2.0 * (l.ranks - 1) / l.ranks : algbw;
  std::printf(
      "{\"impl\":\"%s\",\"transport\":\"%s\",\"algo\":\"%s\",\"case\":\"%s\",\"ranks\":%d,\"bytes\":%zu,"
      "\"iters\":%d,\"latency_us\":%.3f,\"max_us\":%.3f,\"algbw_gbs\":%.4f,\"busbw_gbs\":%.4f}\n",
      l.impl.c_str(), l.transport.c_str(), l.algo.c_str(), l.kind.c_str(), l.ranks, l.bytes, l.iters, l.latency_us,
      l.max_us, algbw, busbw);
  std::fflush(stdout);
}

// The line's figures from every rank's median (`all`, in rank order):
// their mean and maximum. Rank 0 prints it.
inline void Report(Line line, const std::vector<double>& all, int rank) {
  line.latency_us = std::accumulate(all.begin(), all.end(), 0.0) / static_cast<double>(all.size());
  line.max_us = *std::max_element(all.begin(), all.end());
  if (rank == 0) Print(line);
}

// Every element of the first `count` floats must be n(n+1)/2 after an
// AllReduce of (rank+1)-filled buffers.
inline bool CheckSum(const float* data, size_t count, int n) {
  const float want = static_cast<float>(n * (n + 1) / 2);
  for (size_t i = 0; i < count; ++i)
    if (data[i] != want) {
      std::fprintf(stderr, "wrong result at element %zu: %g, want %g\n", i, data[i], want);
      return false;
    }
  return true;
}

// The protocol above for one library and algorithm, on rank `r` of `n`:
// the size sweep, then with --mlp the MLP's gradients fused (one buffer)
// and unfused (one AllReduce per tensor, last layer first, as backward
// produces them). The library's operations: allreduce(float*, count) in
// place, barrier(), slowest(mine) (the maximum over ranks) and
// report(Line, my_us) (gathers every rank's median, then Report).
// Returns 1 if a checked result was wrong.
//
// `alloc` places the buffers (a program whose library reads peers' memory
// in place hands out memory it shared; the default is the heap).
template <typename Alloc = std::allocator<float>, typename AllReduce, typename Barrier, typename Slowest,
          typename ReportFn>
int Sweep(const Args& args, int r, int n, const std::string& impl, const std::string& algo, AllReduce allreduce,
          Barrier barrier, Slowest slowest, ReportFn report, const Alloc& alloc = Alloc()) {
  using Buffer = std::vector<float, Alloc>;
  int rc = 0;
  for (size_t bytes : args.sizes) {
    const size_t count = bytes / sizeof(float);
    Buffer buf(count, static_cast<float>(r + 1), alloc);
    barrier();
    auto t0 = Clock::now();
    allreduce(buf.data(), count);
    if (!CheckSum(buf.data(), count, n)) rc = 1;
    const Plan plan = Budget(PlanFor(bytes, args.iters_scale), slowest(MicrosSince(t0)));
    double us = TimeOp(
        plan, [&] { allreduce(buf.data(), count); }, barrier);
    report(Line{impl, args.transport, algo, "size", n, bytes, plan.iters}, us);
  }
  if (args.mlp) {
    const auto& sizes = kMlpGradients;
    const size_t total = std::accumulate(sizes.begin(), sizes.end(), size_t{0});
    const Plan plan = PlanFor(total * sizeof(float), args.iters_scale);
    Buffer fused(total, 1.0f, alloc);
    double us = TimeOp(
        plan, [&] { allreduce(fused.data(), total); }, barrier);
    report(Line{impl, args.transport, algo, "mlp_fused", n, total * sizeof(float), plan.iters}, us);
    std::vector<Buffer> tensors;
    for (auto it = sizes.rbegin(); it != sizes.rend(); ++it) tensors.emplace_back(*it, 1.0f, alloc);
    us = TimeOp(
        plan,
        [&] {
          for (auto& t : tensors) allreduce(t.data(), t.size());
        },
        barrier);
    report(Line{impl, args.transport, algo, "mlp_unfused", n, total * sizeof(float), plan.iters}, us);
  }
  return rc;
}

// Runs `rank(r, dir)` in `ranks` forked processes sharing a fresh temporary
// directory (their rendezvous), waits for all, removes the directory.
// Returns 0 when every rank exited 0.
inline int ForkRanks(int ranks, const char* prefix, const std::function<int(int, const char*)>& rank) {
  std::string tmpl = std::string("/tmp/") + prefix + "-XXXXXX";
  const char* dir = ::mkdtemp(tmpl.data());
  if (!dir) return 1;
  std::fflush(stdout);
  std::vector<pid_t> pids;
  for (int r = 0; r < ranks; ++r) {
    pid_t pid = ::fork();
    if (pid == 0) {
      int rc = 1;
      try {
        rc = rank(r, dir);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "%s rank %d: %s\n", prefix, r, e.what());
      }
      std::fflush(stdout);
      std::_Exit(rc);
    }
    pids.push_back(pid);
  }
  int rc = 0;
  for (pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = 1;
  }
  std::string cmd = std::string("rm -rf '") + dir + "'";
  if (std::system(cmd.c_str()) != 0) rc = 1;
  return rc;
}

}  // namespace allreduce_harness
