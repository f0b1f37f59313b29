// JobSession: the protocol state machine of one job, on the connection of
// the host that owns the device (schemas/wire.fbs has the conversation).
//
// States: no stream loaded -> loaded (idle) <-> sink running. Requests that
// fail on their own merits (a corrupt task stream, a bad buffer index, a
// sink whose GetNext timed out) get an Error and the job goes on; frames
// that break the protocol (wrong type for the state, a push without a free
// slot, a sequence gap, a payload of the wrong size) get an Error and end
// the job. Either way the daemon lives on.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "sink_worker.h"
#include "sinkrt/device/daemon.h"
#include "sinkrt/device/executor.h"
#include "sinkrt/runtime/wire_socket.h"

namespace sinkrt::device {

struct SessionCounters {
  std::atomic<uint64_t> protocol_errors{0};
};

class JobSession {
 public:
  JobSession(const DaemonOptions& options, SinkWorker& worker, FrameSocket& socket, uint64_t job_id,
             SessionCounters& counters);
  ~JobSession();  // EndJob()

  // Serves frames until the host sends Shutdown, leaves or breaks the
  // protocol. Returns how the job ended (ok for Shutdown).
  Status Serve();

  // From another thread (daemon stopping): tell the host, stop the sink,
  // wake Serve.
  void Abort(const Status& why);

  void set_job_id(uint64_t id) { job_id_ = id; }
  // Stops a running sink and frees the executor and its stream.
  void Unload();

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
  void RunSinkOnWorker(fb::ProgramKind program, uint32_t steps);
  bool SinkRunning();

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

  std::vector<uint8_t> stream_;          // the executor points into it
  std::unique_ptr<Executor> executor_;
  std::vector<uint64_t> next_sequence_;  // per queue

  std::mutex mu_;
  std::condition_variable sink_done_cv_;
  bool sink_running_ = false;   // protocol state: a RunSink awaits its answer
  int worker_tasks_ = 0;        // posted sink tasks not yet finished (they use the arena and socket)
  bool ending_ = false;         // the job is being torn down: a cancelled sink answers nobody

  uint64_t sinks_ = 0;
  uint64_t steps_ = 0;
};

}  // namespace sinkrt::device
