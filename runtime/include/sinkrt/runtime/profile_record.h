/// \file
/// What a device's profiler records, as the device writes it and as it
/// travels to the host (the payload of SinkDone after the reported
/// buffers): fixed-size records, no strings. Names, ops, bytes and groups
/// are the task stream's; the host looks them up by (program, stream, task)
/// in the stream it loaded.
///
/// Clocks. A record's times are the device's NowNs (clock.h). The host
/// measures each device's offset to its own clock (ReadClock round trips,
/// the sample with the smallest round trip wins) when profiling starts and
/// again when it ends, and maps device times onto its clock between them.
#pragma once

#include <cstdint>
#include <limits>

namespace sinkrt {

/// What a ProfileRecord times.
enum class ProfileRecordKind : uint8_t {
  kTask = 0,  ///< one task of one step: begin..end
  /// One RunSink: begin..end; `step` is its first step, `depth` the steps it
  /// ran, `task` how many of them were recorded.
  kSink = 1,
};

/// One timed interval on a device: a task of a step, or a whole sink. 40 bytes, sent as is.
struct ProfileRecord {
  int64_t begin_ns = 0;  ///< start, on the device's profile clock
  int64_t end_ns = 0;    ///< end, on the device's profile clock
  /// GetNext: the part of begin..end spent waiting for a batch (the rest
  /// copies it into the arena). Other tasks: 0.
  int64_t wait_ns = 0;
  /// The program's step, counted from 0 since profiling was enabled on this
  /// device (every step run counts, profiled or not).
  uint32_t step = 0;
  uint32_t task = 0;                                  ///< index of the task in its stream
  uint32_t depth = 0;                                 ///< GetNext: batches in its queue when it began
  uint8_t stream = 0;                                 ///< 0 compute, 1 comm
  uint8_t program = 0;                                ///< a ProgramKind
  ProfileRecordKind kind = ProfileRecordKind::kTask;  ///< a task or a sink
  uint8_t reserved = 0;                               ///< 0
};
static_assert(sizeof(ProfileRecord) == 40, "ProfileRecord is a wire format");

/// What a device records (DeviceLink::SetProfiling). Steps count per
/// program from 0 at the SetProfiling call; a step is recorded when it lies
/// in [start_step, stop_step) and (step - start_step) is a multiple of
/// `every`. The device keeps at most `keep_steps` recorded steps per sink
/// (the last ones: its ring is sized for that many steps of its largest
/// program when profiling is enabled, so recording never allocates).
struct ProfileConfig {
  bool enabled = false;                                       ///< record at all
  uint64_t start_step = 0;                                    ///< first step recorded
  uint64_t stop_step = std::numeric_limits<uint64_t>::max();  ///< first step not recorded
  uint32_t every = 1;                                         ///< record one step in this many
  uint32_t keep_steps = 200;                                  ///< recorded steps a device keeps per sink
};

/// Where a device's clock stood against the host's: device_ns - host_ns at
/// the host's midpoint of the round trip, and half that round trip (the
/// offset's uncertainty).
struct ClockSample {
  int64_t offset_ns = 0;       ///< device_ns - host_ns
  int64_t uncertainty_ns = 0;  ///< half the round trip
  int64_t host_ns = 0;         ///< when (host clock)
};

}  // namespace sinkrt
