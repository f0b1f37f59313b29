// A pipeline stage's comm stream (parallel/pipeline/pipeline_comm.h).
#include "host/src/parallel/pipeline/pipeline_comm.h"

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

// The stage graph's collectives (SEMI_AUTO_PARALLEL inside the stage),
// each placed among the transfers: after every transfer the compute
// stream has waited for by then, before every one it has not made ready
// yet, and after the collectives before it. The compute stream waits for
// a collective right away, so it then waits at most for transfers that
// precede it in the global order the replay proved deadlock-free; every
// rank of the stage runs the same sequence, so the stage's collectives
// meet. `collective_at`: compute position -> collective number;
// `collectives_before`: per comm slot, the positions placed before it.
Status PlaceCollectives(std::span<const ComputeTask> tasks, std::span<const PipelineTransfer> transfers,
                        const std::map<size_t, size_t>& transfer_at, const std::vector<size_t>& done_at,
                        const std::vector<size_t>& comm_index, std::map<size_t, uint32_t>* collective_at,
                        std::vector<std::vector<size_t>>* collectives_before) {
  size_t slot = 0;
  for (size_t i = 0; i < tasks.size(); ++i) {
    if (!tasks[i].collective || transfer_at.count(i)) continue;
    size_t lo = 0, hi = transfers.size();
    for (size_t j = 0; j < transfers.size(); ++j) {
      if (done_at[j] <= i) lo = std::max(lo, comm_index[j] + 1);
      if (transfers[j].task > i) hi = std::min(hi, comm_index[j]);
    }
    // After the step's last transfer (gradient clipping's AllReduce of the
    // norm across the stages), after every transfer: a rank of another
    // stage must not meet it while it still waits for one of this rank's
    // sends.
    if (hi == transfers.size()) lo = transfers.size();
    slot = std::max(slot, lo);
    if (slot > hi)
      return Internal("pipeline comm stream: the collective at compute task " + std::to_string(i) +
                      " must follow transfer " + std::to_string(lo) + " of the comm order but precede transfer " +
                      std::to_string(hi));
    collective_at->emplace(i, static_cast<uint32_t>(collective_at->size()));
    (*collectives_before)[slot].push_back(i);
  }
  return Status::Ok();
}

}  // namespace

Result<ReductionSchedule> SchedulePipelineComm(std::span<const ComputeTask> tasks,
                                               std::span<const PipelineTransfer> transfers,
                                               std::span<const std::vector<uint32_t>> bucket_buffers,
                                               std::span<const int64_t> ready_at) {
  const size_t n = tasks.size();
  const size_t count = bucket_buffers.size();
  const uint32_t nt = static_cast<uint32_t>(transfers.size());
  using Kind = ScheduledTask::Kind;
  auto name_of = [&](size_t j) { return std::string(transfers[j].send ? "send" : "recv") + std::to_string(j); };

  std::map<size_t, size_t> transfer_at;                   // compute position -> j
  std::vector<std::vector<ScheduledTask>> before(n + 1);  // waits spliced in before position i
  std::vector<size_t> done_at(transfers.size(), n);       // where the compute stream waits for j's "done"
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
    done_at[j] = at;
    before[at].push_back(
        {.kind = Kind::WaitEvent, .index = 0, .event = 2 * static_cast<uint32_t>(j) + 1, .name = name_of(j) + "/done"});
  }
  std::vector<size_t> order(transfers.size());  // the comm stream's transfers
  for (size_t j = 0; j < order.size(); ++j) order[j] = j;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return transfers[a].order < transfers[b].order; });
  std::vector<size_t> comm_index(transfers.size());
  for (size_t q = 0; q < order.size(); ++q) comm_index[order[q]] = q;

  std::map<size_t, uint32_t> collective_at;                                   // compute position -> c
  std::vector<std::vector<size_t>> collectives_before(transfers.size() + 1);  // comm slot -> positions
  SINKRT_RETURN_IF_ERROR(
      PlaceCollectives(tasks, transfers, transfer_at, done_at, comm_index, &collective_at, &collectives_before));
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
  const uint32_t c_base = 2 * nt + 2 * static_cast<uint32_t>(count);
  auto c_event = [&](Kind kind, uint32_t c, const char* what, uint32_t id) {
    return ScheduledTask{.kind = kind, .index = 0, .event = id, .name = "collective" + std::to_string(c) + "/" + what};
  };
  for (size_t k = 0; k < count; ++k) before[consumer[k]].push_back(bucket_event(Kind::WaitEvent, k, "done", b_done(k)));

  ReductionSchedule s;
  for (size_t i = 0; i <= n; ++i) {
    for (ScheduledTask& w : before[i]) s.compute.push_back(std::move(w));
    if (i == n) break;
    if (auto it = transfer_at.find(i); it != transfer_at.end()) {
      const size_t j = it->second;
      s.compute.push_back({.kind = Kind::RecordEvent,
                           .index = 0,
                           .event = 2 * static_cast<uint32_t>(j),
                           .name = name_of(j) + (transfers[j].send ? "/ready" : "/armed")});
    } else if (auto c = collective_at.find(i); c != collective_at.end()) {
      s.compute.push_back(c_event(Kind::RecordEvent, c->second, "ready", c_base + 2 * c->second));
      s.compute.push_back(c_event(Kind::WaitEvent, c->second, "done", c_base + 2 * c->second + 1));
    } else {
      s.compute.push_back({.kind = Kind::Compute, .index = i, .event = 0, .name = {}});
    }
    for (size_t k = 0; k < count; ++k)
      if (ready_at[k] == static_cast<int64_t>(i))
        s.compute.push_back(bucket_event(Kind::RecordEvent, k, "ready", b_ready(k)));
  }

  auto add_collective = [&](size_t i) {
    const uint32_t c = collective_at.at(i);
    s.comm.push_back(c_event(Kind::WaitEvent, c, "ready", c_base + 2 * c));
    s.comm.push_back({.kind = Kind::Compute, .index = i, .event = 0, .name = {}});
    s.comm.push_back(c_event(Kind::RecordEvent, c, "done", c_base + 2 * c + 1));
  };
  for (size_t q = 0; q < order.size(); ++q) {
    for (size_t i : collectives_before[q]) add_collective(i);
    const size_t j = order[q];
    const uint32_t e = 2 * static_cast<uint32_t>(j);
    s.comm.push_back({.kind = Kind::WaitEvent,
                      .index = 0,
                      .event = e,
                      .name = name_of(j) + (transfers[j].send ? "/ready" : "/armed")});
    s.comm.push_back({.kind = Kind::Compute, .index = transfers[j].task, .event = 0, .name = {}});
    s.comm.push_back({.kind = Kind::RecordEvent, .index = 0, .event = e + 1, .name = name_of(j) + "/done"});
  }
  // After the last transfer: the buckets and the collectives that follow
  // every transfer, in the compute order of what makes each ready (a
  // collective that reads reduced gradients, gradient clipping's norm,
  // after their buckets).
  std::vector<std::pair<int64_t, int64_t>> tail;  // (compute position, bucket k or -1 - collective position)
  for (size_t k = 0; k < count; ++k) tail.emplace_back(ready_at[k], static_cast<int64_t>(k));
  for (size_t i : collectives_before[order.size()])
    tail.emplace_back(static_cast<int64_t>(i), -1 - static_cast<int64_t>(i));
  std::stable_sort(tail.begin(), tail.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [at, what] : tail) {
    if (what < 0) {
      add_collective(static_cast<size_t>(-1 - what));
      continue;
    }
    const size_t k = static_cast<size_t>(what);
    s.comm.push_back(bucket_event(Kind::WaitEvent, k, "ready", b_ready(k)));
    s.comm.push_back(
        {.kind = Kind::Bucket, .index = k, .event = 0, .name = "bucket" + std::to_string(k) + "/allreduce"});
    s.comm.push_back(bucket_event(Kind::RecordEvent, k, "done", b_done(k)));
  }
  s.num_events = c_base + 2 * static_cast<uint32_t>(collective_at.size());
  return s;
}

}  // namespace sinkrt::host::parallel
