// JobSession: the protocol state machine of one job, on the connection of
// the host that owns the device (schemas/wire.fbs has the conversation).
//
// States: no stream loaded -> loaded (idle) <-> sink running. Requests that
// fail on their own merits (a corrupt task stream, a bad buffer index, a
// sink whose GetNext timed out) get an Error and the job goes on; frames
// that break the protocol (wrong type for the state, a push without a free
// slot, a sequence gap, a payload of the wrong size) get an Error and end
// the job. Either way the daemon lives on.
//
// A session may join a world of peer daemons (JoinWorld). The world and the
// loaded job live in a DeviceCore (device_core.h has their ownership and
// teardown order); this session translates frames to it and back, runs its
// sinks on the SinkWorker's thread and tells the core how to stop them.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "device/src/daemon/daemon.h"
#include "device/src/daemon/peer_hub.h"
#include "device/src/daemon/sink_worker.h"
#include "device/src/device_core.h"
#include "runtime/src/wire_socket.h"

namespace sinkrt::device {

struct SessionCounters {
  std::atomic<uint64_t> protocol_errors{0};
};

class JobSession {
 public:
  // `port` and `host_id`: where this daemon listens and which machine it is,
  // to check a JoinWorld's entry for this rank. `peer_tls`: the client
  // context this daemon dials its peers with (null: plain dials).
  JobSession(const DaemonOptions& options, SinkWorker& worker, FrameSocket& socket, uint64_t job_id,
             SessionCounters& counters, PeerHub& hub, uint16_t port, std::string host_id,
             std::shared_ptr<const TlsContext> peer_tls);
  ~JobSession();  // End()

  // Serves frames until the host sends Shutdown, leaves or breaks the
  // protocol. Returns how the job ended (ok for Shutdown).
  Status Serve();

  // From another thread (daemon stopping): tell the host, abort the world,
  // stop the sink, wake Serve.
  void Abort(const Status& why);

  void set_job_id(uint64_t id) { job_id_ = id; }
  // Stops a running sink and frees the executor and its stream; the world stays.
  void Unload();
  // Aborts the world, Unload(), then frees the world: the job is over, or a
  // JoinWorld replaces the world.
  void End();

  // Sinks run and steps run, for the end-of-job log line.
  uint64_t sinks() const { return sinks_; }
  uint64_t steps() const { return steps_; }

 private:
  Status Handle(InFrame& frame);
  Status OnLoadProgram(InFrame& frame);
  Status OnPushBatch(InFrame& frame);
  Status OnRunSink(const fb::RunSink& request);
  Status OnReadTensor(const fb::ReadTensor& request);
  Status OnWriteTensor(InFrame& frame);
  Status OnClearQueue(const fb::ClearQueue& request);
  Status OnJoinWorld(const fb::JoinWorld& request);
  Status OnSetProfiling(const fb::SetProfiling& request);
  Status OnReadClock();
  // sinkd --profile: keep the stream, record from the load, append each
  // sink's records (a write error stops it, logged; the job goes on).
  void StartOwnProfile(Executor& ex);
  void AppendOwnProfile(const Executor::ProfileView& view);
  // The members as the rendezvous wants them, or why the world is wrong.
  Result<std::vector<PeerAddress>> WorldOf(const WorldSpec& world) const;
  void RunSinkOnWorker(fb::ProgramKind program, uint32_t steps);
  bool SinkRunning();
  // The core's StopSink: cancels a running sink and waits until no posted
  // sink task uses the executor.
  void StopSink();

  // A request failed on its own merits: answer with an Error, keep going.
  Status ReplyError(const Status& status, const ErrorContext& context = {});
  // The host broke the protocol: answer with an Error; the caller ends the job.
  Status ProtocolError(const Status& status);
  void SendCredit(uint32_t queue, uint32_t slots);

  const DaemonOptions& options_;
  SinkWorker& worker_;
  FrameSocket& socket_;
  uint64_t job_id_;
  SessionCounters& counters_;
  PeerHub& hub_;
  const uint16_t port_;
  const std::string host_id_;
  const std::shared_ptr<const TlsContext> peer_tls_;

  DeviceCore core_;                      // the world and the loaded job
  std::vector<uint64_t> next_sequence_;  // per queue

  std::mutex mu_;                      // taken before the core's own lock, never after
  PeerHub::Claim* joining_ = nullptr;  // the JoinWorld in progress, if any
  bool aborted_ = false;               // Abort ran: no new world is joined
  std::condition_variable sink_done_cv_;
  bool sink_running_ = false;  // protocol state: a RunSink awaits its answer
  int worker_tasks_ = 0;       // posted sink tasks not yet finished (they use the arena and socket)
  bool ending_ = false;        // the job is being torn down: a cancelled sink answers nobody

  std::string profile_path_;  // sinkd --profile: this job's .records file, "" when not recording

  uint64_t sinks_ = 0;
  uint64_t steps_ = 0;
};

}  // namespace sinkrt::device
