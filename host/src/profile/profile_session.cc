#include "host/src/profile/profile_session.h"

#include <algorithm>
#include <set>
#include <utility>

#include "runtime/src/clock.h"
#include "sinkrt/fb/task_stream_generated.h"

namespace sinkrt::host {

Result<ClockSample> MeasureClock(DeviceLink& device, int probes) {
  ClockSample best;
  int64_t best_rtt = -1;
  for (int i = 0; i < probes; ++i) {
    const int64_t t0 = NowNs();
    SINKRT_ASSIGN_OR_RETURN(const int64_t device_ns, device.ReadClock());
    const int64_t t1 = NowNs();
    const int64_t rtt = t1 - t0;
    if (best_rtt < 0 || rtt < best_rtt) {
      best_rtt = rtt;
      best.host_ns = t0 + rtt / 2;
      best.offset_ns = device_ns - best.host_ns;
      best.uncertainty_ns = (rtt + 1) / 2;
    }
  }
  return best;
}

namespace {

// The device's window for this Attach: the host's window [start0, stop0)
// in steps since the first Attach, seen from a device that restarts at 0
// after `base` steps, keeping the phase of `every`.
ProfileConfig DeviceWindow(const ProfilerOptions& o, uint64_t base) {
  ProfileConfig c;
  c.enabled = true;
  c.every = std::max<uint32_t>(1, o.every);
  c.keep_steps = std::max<uint32_t>(1, o.keep_steps);
  const uint64_t start0 = o.start_step > 0 ? o.start_step - 1 : 0;
  const uint64_t stop0 = o.stop_step;  // inclusive 1-based = exclusive 0-based
  if (stop0 <= base || stop0 <= start0) {
    c.enabled = false;  // the window is over (or empty)
    return c;
  }
  if (base < start0) {
    c.start_step = start0 - base;
  } else {
    const uint64_t past = (base - start0) % c.every;
    c.start_step = past == 0 ? 0 : c.every - past;
  }
  c.stop_step = stop0 == UINT64_MAX ? UINT64_MAX : stop0 - base;
  if (c.stop_step <= c.start_step) c.enabled = false;
  return c;
}

// Drops the train records of all but the last `keep` recorded train steps
// once more than keep + slack are held, counting them as dropped.
void KeepLastSteps(RankData& rd, size_t keep, size_t slack) {
  const uint8_t train = static_cast<uint8_t>(ProgramKind::TrainStep);
  std::set<uint32_t> steps;
  for (const ProfileRecord& r : rd.records)
    if (r.kind == ProfileRecordKind::kTask && r.program == train) steps.insert(r.step);
  if (steps.size() <= keep + slack) return;
  const uint32_t threshold = *std::next(steps.begin(), static_cast<std::ptrdiff_t>(steps.size() - keep));
  rd.dropped_steps += steps.size() - keep;
  std::erase_if(rd.records, [&](const ProfileRecord& r) {
    return r.program == train && r.step < threshold &&
           (r.kind == ProfileRecordKind::kTask || r.step + r.depth <= threshold);
  });
}

}  // namespace

Status ProfileSession::Attach(std::span<DeviceLink* const> devices, std::span<const VerifiedStream* const> streams,
                              const std::string& network) {
  const size_t n = devices.size();
  std::vector<RankData> described;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!data_.ranks.empty() && (data_.ranks.size() != n || data_.network != network))
      return FailedPrecondition("the Profiler records network '" + data_.network + "' on " +
                                std::to_string(data_.ranks.size()) + " devices; call analyse() before profiling '" +
                                network + "' on " + std::to_string(n));
    if (data_.ranks.empty()) {
      data_.network = network;
      data_.origin_ns = NowNs();
      for (size_t r = 0; r < n; ++r) data_.ranks.push_back(DescribeRankStream(*streams[r], static_cast<int>(r)));
      base_.assign(n, std::vector<uint64_t>(kProfilePrograms, 0));
      seen_ = base_;
    }
    devices_.assign(devices.begin(), devices.end());
    base_ = seen_;
  }
  for (size_t r = 0; r < n; ++r) {
    // Train steps are what the window counts.
    const ProfileConfig config = DeviceWindow(options, base_[r][static_cast<int>(ProgramKind::TrainStep)]);
    SINKRT_RETURN_IF_ERROR(devices[r]->SetProfiling(config), "Profiler: rank " + std::to_string(r));
    devices[r]->SetCreditObserver([this, r](uint32_t queue, uint32_t slots) {
      HostEvent e;
      e.kind = HostEvent::Kind::kCredit;
      e.rank = static_cast<int>(r);
      e.queue = queue;
      e.begin_ns = e.end_ns = NowNs();
      e.arg = slots;
      AddHost(e);
    });
    SINKRT_ASSIGN_OR_RETURN(ClockSample s, MeasureClock(*devices[r]),
                            "Profiler: rank " + std::to_string(r) + "'s clock");
    std::lock_guard<std::mutex> lk(mu_);
    if (data_.ranks[r].clock_start.host_ns == 0) data_.ranks[r].clock_start = s;
  }
  return Status::Ok();
}

void ProfileSession::AddSink(int rank, SinkResult& result) {
  if (result.profile.empty()) return;
  std::lock_guard<std::mutex> lk(mu_);
  if (rank < 0 || static_cast<size_t>(rank) >= data_.ranks.size()) return;
  RankData& rd = data_.ranks[static_cast<size_t>(rank)];
  const ProfileRecord& sink = result.profile.front();
  const uint8_t program = sink.program < kProfilePrograms ? sink.program : 0;
  const uint64_t base = base_[static_cast<size_t>(rank)][program];
  std::set<uint32_t> steps;
  for (ProfileRecord r : result.profile) {
    r.step = static_cast<uint32_t>(r.step + base);
    if (r.kind == ProfileRecordKind::kTask) steps.insert(r.step);
    rd.records.push_back(r);
  }
  uint64_t& seen = seen_[static_cast<size_t>(rank)][program];
  seen = std::max<uint64_t>(seen, base + sink.step + sink.depth);
  if (sink.task > steps.size()) rd.dropped_steps += sink.task - steps.size();
  result.profile.clear();
  PruneLocked(rd);
}

void ProfileSession::PruneLocked(RankData& rd) {
  // In batches (half the kept steps again): a prune walks every record.
  const size_t keep = std::max<uint32_t>(1, options.keep_steps);
  KeepLastSteps(rd, keep, keep / 2);
}

void ProfileSession::AddHost(const HostEvent& event) {
  std::lock_guard<std::mutex> lk(mu_);
  data_.host.push_back(event);
}

Status ProfileSession::Detach() {
  std::vector<DeviceLink*> devices;
  {
    std::lock_guard<std::mutex> lk(mu_);
    devices.swap(devices_);
  }
  Status first;
  for (size_t r = 0; r < devices.size(); ++r) {
    devices[r]->SetCreditObserver({});
    auto s = MeasureClock(*devices[r]);
    if (s.ok()) {
      std::lock_guard<std::mutex> lk(mu_);
      data_.ranks[r].clock_end = *s;
    }
    Status off = devices[r]->SetProfiling(ProfileConfig{});
    if (first.ok() && !s.ok()) first = s.status();
    if (first.ok() && !off.ok()) first = off;
  }
  return first;
}

ProfileData ProfileSession::Snapshot() {
  std::lock_guard<std::mutex> lk(mu_);
  ProfileData out = data_;
  for (RankData& rd : out.ranks) KeepLastSteps(rd, std::max<uint32_t>(1, options.keep_steps), 0);
  return out;
}

}  // namespace sinkrt::host
