// A pipeline stage's comm stream (parallel/pipeline_comm.h).
#include "parallel/pipeline_comm.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>

namespace sinkrt::host::parallel {
namespace {

bool Touches(const ComputeTask& t, const std::set<uint32_t>& buffers) {
  for (uint32_t b : t.touched)
    if (buffers.count(b)) return true;
  return false;
}

}  // namespace

ReductionSchedule SchedulePipelineComm(std::span<const ComputeTask> tasks, std::span<const PipelineTransfer> transfers,
                                       std::span<const std::vector<uint32_t>> bucket_buffers,
                                       std::span<const int64_t> ready_at) {
  const size_t n = tasks.size();
  const size_t count = bucket_buffers.size();
  const uint32_t nt = static_cast<uint32_t>(transfers.size());
  using Kind = ScheduledTask::Kind;
  auto name_of = [&](size_t j) {
    return std::string(transfers[j].send ? "send" : "recv") + std::to_string(j);
  };

  std::map<size_t, size_t> transfer_at;                  // compute position -> j
  std::vector<std::vector<ScheduledTask>> before(n + 1);  // waits spliced in before position i
  for (size_t j = 0; j < transfers.size(); ++j) transfer_at[transfers[j].task] = j;
  for (size_t j = 0; j < transfers.size(); ++j) {
    const PipelineTransfer& t = transfers[j];
    size_t at = n;
    if (t.send) {
      for (size_t i = t.task + 1; i < n; ++i)
        if (auto it = transfer_at.find(i);
            it != transfer_at.end() && transfers[it->second].send && transfers[it->second].channel == t.channel) {
          at = i;
          break;
        }
    } else {
      const std::set<uint32_t> mine(tasks[t.task].touched.begin(), tasks[t.task].touched.end());
      for (size_t i = t.task + 1; i < n; ++i)
        if (Touches(tasks[i], mine)) {
          at = i;
          break;
        }
    }
    before[at].push_back({.kind = Kind::WaitEvent, .index = 0, .event = 2 * static_cast<uint32_t>(j) + 1,
                          .name = name_of(j) + "/done"});
  }
  std::vector<size_t> consumer(count, n);
  for (size_t k = 0; k < count; ++k) {
    const std::set<uint32_t> mine(bucket_buffers[k].begin(), bucket_buffers[k].end());
    for (size_t i = static_cast<size_t>(ready_at[k]) + 1; i < n; ++i)
      if (Touches(tasks[i], mine)) {
        consumer[k] = i;
        break;
      }
  }
  auto bucket_event = [&](Kind kind, size_t k, const char* what, uint32_t id) {
    return ScheduledTask{.kind = kind, .index = 0, .event = id, .name = "bucket" + std::to_string(k) + "/" + what};
  };
  auto b_ready = [&](size_t k) { return 2 * nt + 2 * static_cast<uint32_t>(k); };
  auto b_done = [&](size_t k) { return 2 * nt + 2 * static_cast<uint32_t>(k) + 1; };
  for (size_t k = 0; k < count; ++k) before[consumer[k]].push_back(bucket_event(Kind::WaitEvent, k, "done", b_done(k)));

  ReductionSchedule s;
  for (size_t i = 0; i <= n; ++i) {
    for (ScheduledTask& w : before[i]) s.compute.push_back(std::move(w));
    if (i == n) break;
    if (auto it = transfer_at.find(i); it != transfer_at.end()) {
      const size_t j = it->second;
      s.compute.push_back({.kind = Kind::RecordEvent, .index = 0, .event = 2 * static_cast<uint32_t>(j),
                           .name = name_of(j) + (transfers[j].send ? "/ready" : "/armed")});
    } else {
      s.compute.push_back({.kind = Kind::Compute, .index = i, .event = 0, .name = {}});
    }
    for (size_t k = 0; k < count; ++k)
      if (ready_at[k] == static_cast<int64_t>(i)) s.compute.push_back(bucket_event(Kind::RecordEvent, k, "ready", b_ready(k)));
  }

  std::vector<size_t> order(transfers.size());
  for (size_t j = 0; j < order.size(); ++j) order[j] = j;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return transfers[a].order < transfers[b].order; });
  for (size_t j : order) {
    const uint32_t e = 2 * static_cast<uint32_t>(j);
    s.comm.push_back({.kind = Kind::WaitEvent, .index = 0, .event = e,
                      .name = name_of(j) + (transfers[j].send ? "/ready" : "/armed")});
    s.comm.push_back({.kind = Kind::Compute, .index = transfers[j].task, .event = 0, .name = {}});
    s.comm.push_back({.kind = Kind::RecordEvent, .index = 0, .event = e + 1, .name = name_of(j) + "/done"});
  }
  std::vector<size_t> by_ready(count);
  for (size_t k = 0; k < count; ++k) by_ready[k] = k;
  std::stable_sort(by_ready.begin(), by_ready.end(), [&](size_t a, size_t b) { return ready_at[a] < ready_at[b]; });
  for (size_t k : by_ready) {
    s.comm.push_back(bucket_event(Kind::WaitEvent, k, "ready", b_ready(k)));
    s.comm.push_back({.kind = Kind::AllReduce, .index = k, .event = 0, .name = "bucket" + std::to_string(k) + "/allreduce"});
    s.comm.push_back(bucket_event(Kind::RecordEvent, k, "done", b_done(k)));
  }
  s.num_events = 2 * nt + 2 * static_cast<uint32_t>(count);
  return s;
}

}  // namespace sinkrt::host::parallel
