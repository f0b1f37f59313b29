// SummaryText: summary.txt, laid out like a profiler's report: one header
// line, then one table per question (where did the step go, which ops,
// how fast were the buckets, who was slow, how is memory laid out, how
// were the clocks aligned).
#include <cstdarg>
#include <cstdio>
#include <string>

#include "sinkrt/host/profiler.h"

namespace sinkrt::host {
namespace {

void Appendf(std::string* out, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void Appendf(std::string* out, const char* fmt, ...) {
  char buf[512];
  va_list args;
  va_start(args, fmt);
  int n = std::vsnprintf(buf, sizeof buf, fmt, args);
  va_end(args);
  if (n < 0) return;
  if (static_cast<size_t>(n) < sizeof buf) {
    out->append(buf, static_cast<size_t>(n));
    return;
  }
  std::string big(static_cast<size_t>(n) + 1, '\0');
  va_start(args, fmt);
  std::vsnprintf(big.data(), big.size(), fmt, args);
  va_end(args);
  big.resize(static_cast<size_t>(n));
  *out += big;
}

double MiB(uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

}  // namespace

std::string SummaryText(const ProfileSummary& s) {
  std::string out;
  Appendf(&out, "sinkrt profile: %s, %d rank%s, %lld profiled train step%s",
          s.network.empty() ? "(unnamed)" : s.network.c_str(), s.world_size, s.world_size == 1 ? "" : "s",
          static_cast<long long>(s.steps), s.steps == 1 ? "" : "s");
  if (s.host_step_ms > 0) Appendf(&out, ", host %.3f ms/step", s.host_step_ms);
  if (s.dropped_steps > 0)
    Appendf(&out, ", %llu recorded steps dropped", static_cast<unsigned long long>(s.dropped_steps));
  out += "\n";

  out += "\nMean train step per rank (ms)\n";
  Appendf(&out, "%5s %6s %9s %9s %9s %9s %9s %9s %9s %8s\n", "rank", "steps", "step", "compute", "exp.comm", "bubble",
          "queue", "other", "comm", "overlap");
  for (const RankStepSplit& r : s.ranks)
    Appendf(&out, "%5d %6lld %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %7.1f%%\n", r.rank,
            static_cast<long long>(r.steps), r.step_ms, r.compute_ms, r.exposed_comm_ms, r.bubble_ms, r.queue_ms,
            r.other_ms, r.comm_ms, r.overlap_pct);

  if (!s.top_ops.empty()) {
    out += "\nTop ops (every program and rank)\n";
    Appendf(&out, "%-24s %8s %12s %7s\n", "op", "count", "total ms", "share");
    for (const OpTotal& o : s.top_ops)
      Appendf(&out, "%-24s %8lld %12.3f %6.1f%%\n", o.op.c_str(), static_cast<long long>(o.count), o.total_ms,
              o.share_pct);
  }

  if (!s.buckets.empty()) {
    out += "\nAllReduce buckets\n";
    Appendf(&out, "%5s %-24s %12s %5s %6s %9s %10s %10s %10s\n", "rank", "task", "bytes", "group", "count", "mean ms",
            "algbw GB/s", "busbw GB/s", "peer wait");
    for (const BucketBandwidth& b : s.buckets)
      Appendf(&out, "%5d %-24s %12llu %5d %6lld %9.3f %10.3f %10.3f %7.3f ms\n", b.rank, b.task.c_str(),
              static_cast<unsigned long long>(b.bytes), b.group_size, static_cast<long long>(b.count), b.mean_ms,
              b.algbw_gbps, b.busbw_gbps, b.peer_wait_ms);
  }

  if (!s.slowest.empty()) {
    out += "\nSlowest rank per step (steps recorded on every rank)\n";
    Appendf(&out, "%5s %14s %12s\n", "rank", "steps slowest", "mean gap ms");
    for (const SlowestRank& r : s.slowest)
      Appendf(&out, "%5d %14lld %12.3f\n", r.rank, static_cast<long long>(r.steps_slowest), r.mean_gap_ms);
  }

  if (!s.memory.empty()) {
    out += "\nMemory plan (MiB)\n";
    for (const MemoryPlan& m : s.memory) {
      Appendf(&out, "rank %d: arena %.3f, queues %.3f", m.rank, MiB(m.arena_bytes), MiB(m.queue_bytes));
      if (!m.by_role.empty()) {
        out += "; buffers by role (activations share the arena):";
        for (const auto& [role, bytes] : m.by_role) Appendf(&out, " %s %.3f", role.c_str(), MiB(bytes));
      }
      out += "\n";
    }
  }

  if (!s.clocks.empty()) {
    out += "\nClocks (device minus host, at the start of recording)\n";
    Appendf(&out, "%5s %14s %14s %10s\n", "rank", "offset us", "+/- us", "drift ppm");
    for (const ClockAlignment& c : s.clocks)
      Appendf(&out, "%5d %14.3f %14.3f %10.3f\n", c.rank, c.offset_us, c.uncertainty_us, c.drift_ppm);
  }
  return out;
}

}  // namespace sinkrt::host
