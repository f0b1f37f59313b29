#include "host/src/parallel/data_parallel/gradient_reduction.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

namespace sinkrt::host::parallel {
namespace {

bool Touches(const ComputeTask& task, const std::set<uint32_t>& buffers) {
  return std::any_of(task.touched.begin(), task.touched.end(), [&](uint32_t b) { return buffers.count(b) > 0; });
}

// The optimizer updates end the step in parameter order, which is roughly
// the reverse of the order backward finishes the gradients: the first
// update would wait for the last bucket. Runs them bucket by bucket instead,
// so that bucket 0's updates overlap the later buckets' reductions. Only the
// trailing run of kernels at positions >= `after` (past every gradient's
// last write) that each touch one bucket's gradients is reordered, and only
// if no buffer one of them writes is touched by another (true of the
// updates: each owns its parameter and state; Adam's shared powers are only
// read there). `order` holds indices into `tasks`.
void OrderUpdatesByBucket(std::vector<size_t>& order, std::span<const ComputeTask> tasks,
                          const std::map<uint32_t, size_t>& bucket_of, size_t after) {
  auto bucket = [&](size_t i) -> int64_t {
    const ComputeTask& t = tasks[i];
    if (!t.kernel) return -1;
    int64_t found = -1;
    for (uint32_t b : t.operands)
      if (auto it = bucket_of.find(b); it != bucket_of.end()) {
        if (found >= 0 && found != static_cast<int64_t>(it->second)) return -1;
        found = static_cast<int64_t>(it->second);
      }
    return found;
  };
  size_t start = order.size();
  while (start > after && bucket(order[start - 1]) >= 0) --start;
  std::map<uint32_t, int> writers, touchers;
  for (size_t i = start; i < order.size(); ++i) {
    const ComputeTask& t = tasks[order[i]];
    for (uint32_t b : std::set<uint32_t>(t.touched.begin(), t.touched.end())) ++touchers[b];
    for (uint32_t b : t.written) ++writers[b];
  }
  for (const auto& [b, n] : writers)
    if (touchers[b] > 1) return;
  std::stable_sort(order.begin() + static_cast<std::ptrdiff_t>(start), order.end(),
                   [&](size_t a, size_t b) { return bucket(a) < bucket(b); });
}

}  // namespace

Result<std::vector<FusionBucket>> PlanGradientBuckets(std::span<const FusionGradient> gradients,
                                                      const CommFusion& fusion) {
  SINKRT_ASSIGN_OR_RETURN(std::vector<FusionBucket> buckets, PlanFusionBuckets(gradients, fusion));
  if (2 * buckets.size() > kMaxEvents)
    return InvalidArgument("data parallel: " + std::to_string(buckets.size()) +
                           " gradient AllReduces need more than the " + std::to_string(kMaxEvents) +
                           " events a program may have: turn comm_fusion's openstate on");
  return buckets;
}

ReductionSchedule ScheduleGradientReduction(std::span<const ComputeTask> tasks, std::span<const CommBucket> buckets) {
  const size_t n = tasks.size();
  const size_t count = buckets.size();
  std::map<uint32_t, size_t> bucket_of;  // the buckets that order the updates
  for (size_t k = 0; k < count; ++k)
    if (buckets[k].ready_at >= 0)
      for (uint32_t b : buckets[k].buffers) bucket_of[b] = k;
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  int64_t last_ready = -1;
  for (const CommBucket& b : buckets) last_ready = std::max(last_ready, b.ready_at);
  if (last_ready >= 0) OrderUpdatesByBucket(order, tasks, bucket_of, static_cast<size_t>(last_ready) + 1);
  // An AllGather of updated blocks is ready once the last task writing one
  // of them has run, in the order the updates now have.
  std::vector<int64_t> ready_at(count);
  for (size_t k = 0; k < count; ++k) {
    ready_at[k] = buckets[k].ready_at;
    if (ready_at[k] >= 0) continue;
    const std::set<uint32_t> mine(buckets[k].buffers.begin(), buckets[k].buffers.end());
    for (size_t i = 0; i < n; ++i)
      for (uint32_t b : tasks[order[i]].written)
        if (mine.count(b)) ready_at[k] = static_cast<int64_t>(i);
    if (ready_at[k] < 0) ready_at[k] = n == 0 ? 0 : static_cast<int64_t>(n - 1);
  }
  // A bucket's gradients may not be touched between "ready" and "done": the
  // AllReduce rewrites them in place. Waiting at the first toucher, not
  // earlier, lets everything before it overlap the reduction.
  std::vector<size_t> consumer(count, n);
  for (size_t k = 0; k < count; ++k) {
    const std::set<uint32_t> mine(buckets[k].buffers.begin(), buckets[k].buffers.end());
    for (size_t i = static_cast<size_t>(ready_at[k]) + 1; i < n; ++i)
      if (Touches(tasks[order[i]], mine)) {
        consumer[k] = i;
        break;
      }
  }
  using Kind = ScheduledTask::Kind;
  auto event = [](Kind kind, size_t k, const char* what, uint32_t id) {
    return ScheduledTask{.kind = kind, .event = id, .name = "bucket" + std::to_string(k) + "/" + what};
  };
  auto ready = [](size_t k) { return static_cast<uint32_t>(2 * k); };
  auto done = [](size_t k) { return static_cast<uint32_t>(2 * k + 1); };

  // The graph's own collectives, in compute order, with their event pairs.
  std::map<size_t, uint32_t> collective_at;  // compute position -> j
  for (size_t i = 0; i < n; ++i)
    if (tasks[order[i]].collective) collective_at.emplace(i, static_cast<uint32_t>(collective_at.size()));
  auto c_ready = [&](uint32_t j) { return static_cast<uint32_t>(2 * count + 2 * j); };
  auto c_done = [&](uint32_t j) { return static_cast<uint32_t>(2 * count + 2 * j + 1); };
  auto c_event = [](Kind kind, uint32_t j, const char* what, uint32_t id) {
    return ScheduledTask{.kind = kind, .event = id, .name = "collective" + std::to_string(j) + "/" + what};
  };

  ReductionSchedule s;
  s.compute.reserve(n + 2 * count + 2 * collective_at.size());
  for (size_t i = 0; i <= n; ++i) {
    for (size_t k = 0; k < count; ++k)
      if (consumer[k] == i) s.compute.push_back(event(Kind::WaitEvent, k, "done", done(k)));
    if (i == n) break;
    if (auto c = collective_at.find(i); c != collective_at.end()) {
      s.compute.push_back(c_event(Kind::RecordEvent, c->second, "ready", c_ready(c->second)));
      s.compute.push_back(c_event(Kind::WaitEvent, c->second, "done", c_done(c->second)));
    } else {
      s.compute.push_back({.kind = Kind::Compute, .index = order[i], .event = 0, .name = {}});
    }
    for (size_t k = 0; k < count; ++k)
      if (ready_at[k] == static_cast<int64_t>(i)) s.compute.push_back(event(Kind::RecordEvent, k, "ready", ready(k)));
  }
  // The comm stream takes buckets and collectives in the order they become
  // ready on the compute stream (a bucket ready at the collective's own
  // position goes first: its ready event is recorded before).
  std::vector<std::pair<int64_t, int64_t>> comm_order;  // (position, bucket k or -1 - j)
  for (size_t k = 0; k < count; ++k) comm_order.emplace_back(ready_at[k], static_cast<int64_t>(k));
  for (const auto& [i, j] : collective_at)
    comm_order.emplace_back(static_cast<int64_t>(i), -1 - static_cast<int64_t>(j));
  std::stable_sort(comm_order.begin(), comm_order.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : a.second > b.second;  // buckets (>= 0) before a collective
  });
  for (const auto& [pos, who] : comm_order) {
    if (who >= 0) {
      const size_t k = static_cast<size_t>(who);
      s.comm.push_back(event(Kind::WaitEvent, k, "ready", ready(k)));
      s.comm.push_back(
          {.kind = Kind::Bucket, .index = k, .name = "bucket" + std::to_string(k) + "/" + buckets[k].collective});
      s.comm.push_back(event(Kind::RecordEvent, k, "done", done(k)));
    } else {
      const uint32_t j = static_cast<uint32_t>(-1 - who);
      s.comm.push_back(c_event(Kind::WaitEvent, j, "ready", c_ready(j)));
      s.comm.push_back({.kind = Kind::Compute, .index = order[static_cast<size_t>(pos)], .event = 0, .name = {}});
      s.comm.push_back(c_event(Kind::RecordEvent, j, "done", c_done(j)));
    }
  }
  s.num_events = static_cast<uint32_t>(2 * count + 2 * collective_at.size());
  return s;
}

}  // namespace sinkrt::host::parallel
