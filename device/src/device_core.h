// DeviceCore: one device's world and loaded job, whatever drives it.
//
// Two front ends drive a device: InProcessDevice (DeviceLink calls in the
// host's process) and the daemon's JobSession (frames from the host's
// connection). Each only translates its transport to these calls and back:
// the world's member list, the teardown order, running a sink and what a
// sink leaves (its counters, queue high-water marks, reported buffers, and
// on failure where it failed) live here, once.
//
// Ownership. The core owns the world (a Communicator) and the job (an
// Executor). The job runs its collectives in the world, so the world
// outlives it. Teardown runs in one order: abort the world (a sink blocked
// in a collective wakes), stop the sink, free the executor, then the world.
//
// Threading. One control thread calls everything, except AbortWorld(),
// CancelJob() and Abort(), which may come from any thread. A mutex guards
// only the two pointers against those; it is never held while anything
// waits, is freed or calls back, so a front end may call in under a lock of
// its own (the daemon's session does). A front end whose sink runs on
// another thread says how to stop it and wait for it (StopSink below);
// job() and world() are for the control thread and for a sink it started.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "device/src/comm/communicator.h"
#include "device/src/executor.h"
#include "runtime/src/wire.h"
#include "sinkrt/device/device_options.h"
#include "sinkrt/fb/task_stream_generated.h"
#include "sinkrt/runtime/device_link.h"

namespace sinkrt::device {

// The rendezvous' member list for `world`, or why it is wrong (no members,
// the rank outside them, a member's address that does not parse). Both
// front ends refuse a world with these words.
Result<std::vector<PeerAddress>> PeersOf(const WorldSpec& world);
// "JoinWorld of job J as rank R of N": the context of every JoinWorld error.
std::string JoinWorldLabel(const WorldSpec& world);
// The communicator's options from the device's (timeouts, shared memory).
CommOptions CommOptionsOf(const DeviceOptions& options);

// A buffer the program reports, as the sink left it: its table entry (name,
// dtype, shape) and its bytes in the arena, valid until the job runs again
// or is unloaded. The front end copies them or sends them as they are.
struct ReportView {
  uint32_t buffer = 0;
  const fb::Buffer* def = nullptr;
  std::span<const uint8_t> bytes;
};

// What one sink left.
struct SinkOutcome {
  Status status;
  uint32_t steps_run = 0;
  DeviceTiming timing;
  std::vector<uint32_t> queue_high_water;  // per queue, since load
  std::vector<ReportView> reports;         // on success, in the program's order
  Executor::ProfileView profile;           // on success with profiling on: what the sink recorded
  ErrorContext failure;                    // on failure: rank, program, failed task and its name
};

class DeviceCore {
 public:
  // Called (on the control thread) after the world is aborted and before
  // the executor is freed: stops a sink running on another thread and waits
  // until nothing uses the executor. Empty: the sink runs on the control
  // thread, so none runs now.
  using StopSink = std::function<void()>;

  explicit DeviceCore(const DeviceOptions& options) : options_(options) {}
  ~DeviceCore() { End(); }
  DeviceCore(const DeviceCore&) = delete;
  DeviceCore& operator=(const DeviceCore&) = delete;

  const DeviceOptions& options() const { return options_; }
  Executor* job() const { return job_.get(); }
  Communicator* world() const { return world_.get(); }

  // Loads `stream` into the current world (nullptr: none; a stream with
  // collectives is then refused), replacing the job after `stop_sink`.
  Result<LoadInfo> Load(VerifiedStream stream, const StopSink& stop_sink = {});
  // Makes `world` the device's world (End() the old one first: a
  // rendezvous runs with no world held).
  void SetWorld(std::unique_ptr<Communicator> world);

  // Runs `steps` of `program` on the loaded job (there is one) on the
  // calling thread. `rank` names this device in the failure context.
  SinkOutcome RunSink(ProgramKind program, uint32_t steps, int rank);

  // Stops a running sink and frees the job; the world stays.
  void Unload(const StopSink& stop_sink = {});
  // Aborts the world, Unload(), then frees the world.
  void End(const StopSink& stop_sink = {});
  // From any thread: a collective waiting on a peer fails now; the world
  // cannot be used again.
  void AbortWorld();
  // From any thread: the job's running sink stops after its current step
  // and queue waits end; the job cannot run again.
  void CancelJob();
  // From any thread: AbortWorld() and CancelJob().
  void Abort();

 private:
  const DeviceOptions options_;
  std::mutex mu_;                        // guards the two pointers' swaps against Abort()
  std::unique_ptr<Communicator> world_;  // declared before job_, which runs collectives in it
  std::unique_ptr<Executor> job_;
};

}  // namespace sinkrt::device
