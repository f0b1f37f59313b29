#include "device/src/profile/profile_state.h"

#include <algorithm>
#include <string>

namespace sinkrt::device {

void ProfileRing::Kept(std::span<const ProfileRecord> out[2]) const {
  const uint64_t cap = slots.size();
  if (written <= cap) {
    out[0] = std::span<const ProfileRecord>(slots.data(), written);
    out[1] = {};
    return;
  }
  const size_t head = written % cap;  // the oldest kept record
  out[0] = std::span<const ProfileRecord>(slots.data() + head, cap - head);
  out[1] = std::span<const ProfileRecord>(slots.data(), head);
}

Status EnableProfiling(ProfileState& state, const ProfileConfig& config, const uint32_t tasks_per_stream[2]) {
  if (config.enabled && config.every == 0) return InvalidArgument("profiling: 'every' must be at least 1");
  if (config.enabled && config.keep_steps == 0) return InvalidArgument("profiling: 'keep_steps' must be at least 1");
  if (config.enabled && config.stop_step <= config.start_step)
    return InvalidArgument("profiling: the step window [" + std::to_string(config.start_step) + ", " +
                           std::to_string(config.stop_step) + ") is empty");
  constexpr uint64_t kMaxRingBytes = uint64_t{256} << 20;
  uint64_t bytes = 0;
  for (int s = 0; s < kProfileStreams; ++s)
    bytes += uint64_t{config.keep_steps} * tasks_per_stream[s] * sizeof(ProfileRecord);
  if (config.enabled && bytes > kMaxRingBytes)
    return ResourceExhausted("profiling: keeping " + std::to_string(config.keep_steps) + " steps of " +
                             std::to_string(tasks_per_stream[0] + tasks_per_stream[1]) + " tasks needs " +
                             std::to_string(bytes >> 20) +
                             " MiB of records, above the 256 MiB limit; keep fewer steps");
  state.config = config;
  state.enabled = config.enabled;
  for (uint64_t& s : state.steps) s = 0;
  state.recorded_steps = 0;
  state.sink = {};
  for (int s = 0; s < kProfileStreams; ++s) {
    ProfileRing& ring = state.rings[s];
    ring.written = 0;
    const size_t n = config.enabled ? std::max<size_t>(1, size_t{config.keep_steps} * tasks_per_stream[s]) : 0;
    std::vector<ProfileRecord>(n).swap(ring.slots);  // first touch now, not in a step
  }
  return Status::Ok();
}

}  // namespace sinkrt::device
