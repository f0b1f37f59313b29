// ProfileSession: what one Profiler records while Model::train runs, and
// the calls training makes into it.
//
// A train() attaches its devices (SetProfiling on each, clock samples,
// the streams' task tables), adds each sink's records and the host's own
// events as they happen, and detaches at its end (a last clock sample,
// profiling off), so the Profiler never holds a device past the train()
// that lent it. Steps keep counting across train() calls: each rank's
// device restarts its count at SetProfiling, the session adds what it has
// already seen.
//
// Threading: Attach, AddSink and Detach on the training thread; AddHost
// from any thread (feeders).
#pragma once

#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "host/src/profile/profile_data.h"
#include "sinkrt/host/profiler.h"
#include "sinkrt/runtime/device_link.h"

namespace sinkrt::host {

struct ProfileSession {
  explicit ProfileSession(ProfilerOptions o) : options(std::move(o)) {}

  // Turns recording on for `devices` (rank r runs streams[r]).
  Status Attach(std::span<DeviceLink* const> devices, std::span<const VerifiedStream* const> streams,
                const std::string& network);
  // Takes rank `rank`'s records of one finished sink (moves them out).
  void AddSink(int rank, SinkResult& result);
  void AddHost(const HostEvent& event);
  // Last clock samples, recording off. Safe to call when not attached.
  Status Detach();

  // The recorded run so far (analyse() calls it after Detach).
  ProfileData Snapshot();

  const ProfilerOptions options;

 private:
  // Keeps at most options.keep_steps train steps per rank: the last ones.
  void PruneLocked(RankData& rank);

  std::mutex mu_;
  ProfileData data_;
  std::vector<DeviceLink*> devices_;         // attached now
  std::vector<std::vector<uint64_t>> base_;  // per rank, per program: steps before this Attach
  std::vector<std::vector<uint64_t>> seen_;  // per rank, per program: steps run since the first Attach
};

// Measures `device`'s clock against the host's: the sample with the
// smallest of `probes` round trips.
Result<ClockSample> MeasureClock(DeviceLink& device, int probes = 9);

}  // namespace sinkrt::host
