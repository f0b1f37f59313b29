// The executor's profiler: one ring of records per stream, sized when
// profiling is enabled (between sinks), so that recording a task is a copy
// into a slot and never allocates. A ring is written by its stream's thread
// only, and read by the front end after the sink (the sink's end orders
// both). runtime/profile_record.h has the record and its clock.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sinkrt/runtime/profile_record.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::device {

struct ProfileRing {
  std::vector<ProfileRecord> slots;  // capacity fixed by Enable
  uint64_t written = 0;              // this sink; beyond slots.size() the oldest are overwritten

  void Push(const ProfileRecord& r) {
    slots[written % slots.size()] = r;
    ++written;
  }
  // The records kept, oldest first, as at most two runs of the ring.
  void Kept(std::span<const ProfileRecord> out[2]) const;
};

inline constexpr int kProfileStreams = 2;   // compute, comm
inline constexpr int kProfilePrograms = 4;  // fb::ProgramKind

struct ProfileState {
  bool enabled = false;
  ProfileConfig config;
  int64_t clock_offset_ns = 0;            // DeviceOptions::profile_clock_offset_ns
  uint64_t steps[kProfilePrograms] = {};  // steps run per program since enabled
  ProfileRing rings[kProfileStreams];
  ProfileRecord sink;           // the last sink's record
  uint32_t recorded_steps = 0;  // steps of the last sink recorded

  // Whether step `step` (0-based, of its program since enabled) is recorded.
  bool Records(uint64_t step) const {
    if (!enabled || step < config.start_step || step >= config.stop_step) return false;
    return (step - config.start_step) % config.every == 0;
  }
};

// Sizes the rings for `config.keep_steps` steps of the program with the
// most tasks per stream (`tasks_per_stream`), or frees them when disabled.
// Refuses rings above 256 MiB, naming the size and keep_steps.
Status EnableProfiling(ProfileState& state, const ProfileConfig& config, const uint32_t tasks_per_stream[2]);

}  // namespace sinkrt::device
