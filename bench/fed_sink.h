// One training sink as the training benches time it: a feeder thread pushes
// `steps` batches of [batch, features] images and labels (cycling over 8
// batches of `data`) beside RunSink, as a host does in training, and the
// sink's timing is added to a running total. Queue waits are kept apart so
// a slow feeder cannot hide in the step time.
#pragma once

#include <benchmark/benchmark.h>

#include <cstdint>
#include <thread>

#include "device/src/executor.h"
#include "sinkrt/device/in_process_device.h"
#include "sinkrt/fb/task_stream_generated.h"  // ProgramKind
#include "sinkrt/runtime/status.h"
#include "support/test_models.h"

namespace sinkrt {

struct SinkTotals {
  double compute_ms = 0, queue_wait_ms = 0, other_ms = 0;
  double steps = 0;
};

inline Status RunFedSink(device::InProcessDevice& dev, const testing::SyntheticData& data, int64_t batch,
                         uint32_t steps, SinkTotals* totals) {
  const int64_t features = data.features;
  std::thread feeder([&] {
    for (uint32_t i = 0; i < steps; ++i) {
      const int64_t b = i % 8;
      ConstBytes cols[2] = {
          ConstBytes(reinterpret_cast<const uint8_t*>(&data.images[b * batch * features]), batch * features * 4),
          ConstBytes(reinterpret_cast<const uint8_t*>(&data.labels[b * batch]), batch * 4)};
      (void)dev.PushBatch(0, cols);
    }
  });
  auto r = dev.RunSink(ProgramKind::TrainStep, steps);
  feeder.join();
  if (!r.ok()) return r.status();
  totals->compute_ms += r->timing.compute_ms;
  totals->queue_wait_ms += r->timing.queue_wait_ms;
  totals->other_ms += r->timing.other_ms;
  totals->steps += steps;
  return Status::Ok();
}

// step_ms, queue_wait_ms and samples/s over every timed sink.
inline void ReportStepCounters(benchmark::State& state, const SinkTotals& t, int64_t batch) {
  if (t.steps == 0) return;
  state.counters["step_ms"] = (t.compute_ms + t.queue_wait_ms + t.other_ms) / t.steps;
  state.counters["queue_wait_ms"] = t.queue_wait_ms / t.steps;
  state.SetItemsProcessed(static_cast<int64_t>(t.steps) * batch);
}

// One untimed sink (first touches and oneDNN's first calls stay out of the
// figures) unless `warm_up` is false, then `steps`-step sinks for as long as
// `state` runs them, their counters reported. Per-task times start after
// the warm-up. Returns the timed sinks' totals.
inline SinkTotals RunTimedSinks(benchmark::State& state, device::InProcessDevice& dev,
                                const testing::SyntheticData& data, int64_t batch, uint32_t steps,
                                bool warm_up = true) {
  if (warm_up) {
    SinkTotals warmup;
    if (Status st = RunFedSink(dev, data, batch, steps, &warmup); !st.ok()) {
      state.SkipWithError(st.ToString().c_str());
      return {};
    }
    dev.executor()->ResetTaskTimes();
  }
  SinkTotals totals;
  for (auto _ : state) {
    if (Status st = RunFedSink(dev, data, batch, steps, &totals); !st.ok()) {
      state.SkipWithError(st.ToString().c_str());
      break;
    }
  }
  ReportStepCounters(state, totals, batch);
  return totals;
}

}  // namespace sinkrt
