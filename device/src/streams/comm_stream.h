// CommStream: the thread that runs a program's second stream (collectives)
// beside the compute stream, one step at a time.
//
// The compute thread hands it a step (Start), runs its own stream, then
// joins it (Finish). Event record/wait tasks order the two inside the step:
// an AllReduce waits for the event recorded after its bucket's last gradient,
// and the optimizer waits for the event recorded after that AllReduce, so
// the reduction overlaps the rest of backward.
//
// streams/ holds the executor's stream loops: run_stream.cc (one stream's
// tasks for one step, on the compute thread or here) and this second thread.
// They see the loaded job and the public Communicator API, never comm/'s
// internals.
#pragma once

#include <condition_variable>
#include <mutex>
#include <thread>

#include "device/src/loaded_job.h"

namespace sinkrt::device {

class CommStream {
 public:
  explicit CommStream(LoadedJob& job);
  ~CommStream();

  void Start(PreparedProgram& prog, uint32_t step, uint32_t steps);
  // Waits for the step handed by Start; adds its counters into *counters.
  Status Finish(StreamCounters* counters);

 private:
  void Loop();

  LoadedJob& job_;
  std::mutex mu_;
  std::condition_variable cv_;
  PreparedProgram* prog_ = nullptr;
  uint32_t step_ = 0, steps_ = 0;
  bool pending_ = false, done_ = false, quit_ = false;
  Status result_;
  StreamCounters counters_;
  std::thread thread_;
};

}  // namespace sinkrt::device
