// The host input pipeline's cost (issue 21): CPU time and heap allocations
// per batch of the MLP recipe's pipeline (sinkrun --model mlp on
// Fashion-MNIST: u8 [28, 28, 1] images -> Rescale(1/255), Reshape([784]);
// i32 labels; Shuffle; Batch with drop_remainder), at batch 64 and 256,
// against the training step's time at the same batch.
//
//   BM_Stage       one stage at a time on this thread, unfused as before
//                  fusion (0 read, 1 read + transforms, 2 read + transforms
//                  + batching) and fused (3 into batch tensors, 4 into a
//                  buffer as FillBatch does);
//   BM_Push        pushing a built batch (PushBatch) vs building it in the
//                  device's memory (FillBatch with the fused writer), into
//                  an in-process device and a real sinkd on 127.0.0.1;
//   BM_Feeder      the whole host side as the Feeder runs it: iterator
//                  (worker threads) + CheckBatch + PushBatch, vs FillBatch
//                  from the feeder thread; process CPU, so the workers' and
//                  the remote reader's time count;
//   BM_Step        the MLP training step at the same batch, 2 threads, fed
//                  by the real Feeder in either mode: step_ms is the
//                  denominator of the fraction.
//
// CPU is thread (or process) CPU time from clock_gettime, not wall time:
// on a loaded 2-core machine it still counts only the work done. Every
// stage is timed around the work alone; slots are freed with ClearQueue
// outside the timed part (BM_Feeder includes it, once per 16 batches).
#include <benchmark/benchmark.h>
#include <time.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <new>
#include <span>
#include <vector>

#include "device/src/executor.h"
#include "fed_sink.h"
#include "host/src/dataset/batch_builder.h"
#include "host/src/dataset/batch_writer.h"
#include "host/src/dataset/pass_order.h"
#include "host/src/model/feeder.h"
#include "load_mlp.h"
#include "local_daemons.h"
#include "sinkrt/device/in_process_device.h"
#include "sinkrt/host/dataset.h"

// Every operator new of this binary counts: per thread (the stage
// benchmarks run on one) and in all (BM_Feeder's workers).
#include "support/counting_new.h"

using sinkrt::testing::g_news;
using sinkrt::testing::t_news;

namespace sinkrt {
namespace {

using host::Dataset;
using host::Transform;

int64_t CpuNs(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}
int64_t ThreadCpuNs() { return CpuNs(CLOCK_THREAD_CPUTIME_ID); }
int64_t ProcessCpuNs() { return CpuNs(CLOCK_PROCESS_CPUTIME_ID); }

constexpr int64_t kSamples = 60000;  // Fashion-MNIST's train split

// Fashion-MNIST's shape and types, fixed pseudo-random contents.
Dataset RawFashion() {
  static const Dataset raw = [] {
    host::Tensor images{DType::U8, {kSamples, 28, 28, 1}, {}};
    images.data.resize(static_cast<size_t>(kSamples) * 784);
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (uint8_t& b : images.data) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      b = static_cast<uint8_t>(x >> 56);
    }
    host::Tensor labels{DType::I32, {kSamples}, {}};
    labels.data.resize(kSamples * sizeof(int32_t));
    for (int64_t i = 0; i < kSamples; ++i) labels.as<int32_t>()[i] = static_cast<int32_t>(i * 7 % 10);
    return Dataset::FromArrays({{"image", std::move(images)}, {"label", std::move(labels)}});
  }();
  return raw;
}

// tools/sinkrun_train.cc's Pipeline for the MLP (flat images).
Dataset MlpPipeline(int64_t batch) {
  return RawFashion()
      .Map("image", {Transform::Rescale(1.0 / 255.0), Transform::Reshape({784})})
      .Shuffle(1)
      .Batch(batch, /*drop_remainder=*/true);
}

void Report(benchmark::State& state, int64_t cpu_ns, int64_t news, int64_t batches) {
  if (batches == 0) return;
  state.counters["cpu_us"] = cpu_ns / 1e3 / batches;
  state.counters["allocs"] = static_cast<double>(news) / batches;
}

// -- stages, on this thread ---------------------------------------------------

enum Stage { kRead, kReadMap, kBuild, kBuildFused, kWriteFused };

void BM_Stage(benchmark::State& state) {
  const int64_t batch = state.range(0);
  const auto stage = static_cast<Stage>(state.range(1));
  const Dataset d = MlpPipeline(batch);
  const auto& root = host::DatasetAccess::node(d);
  const host::SamplePlan plan = host::MakeSamplePlan(root, /*fuse=*/stage >= kBuildFused);
  const host::Dataset::Node* order_root = root.get();
  const host::PassOrder order = host::ComputePassOrder(*order_root, 0);
  host::BatchBuilder builder(plan);
  host::Row sample, out;
  std::vector<uint8_t> image(batch * 784 * 4), label(batch * 4);
  const std::span<uint8_t> dst[2] = {image, label};
  auto one = [&](int64_t g) -> Status {
    std::span<const int64_t> unit = order.unit(g % order.units());
    // Reads prefetch two samples ahead as Build does, so that differences
    // between stages are the stages' work, not cache misses.
    auto each = [&](auto&& read) -> Status {
      for (size_t k = 0; k < unit.size(); ++k) {
        if (k + 2 < unit.size()) plan.source->Prefetch(unit[k + 2]);
        SINKRT_RETURN_IF_ERROR(read(unit[k]));
      }
      return Status::Ok();
    };
    switch (stage) {
      case kRead:
        sample.resize(2);
        return each([&](int64_t s) { return plan.source->Read(s, &sample); });
      case kReadMap:
        return each([&](int64_t s) { return builder.ReadSample(s, &sample); });
      case kBuild:
      case kBuildFused:
        return builder.Build(unit, &out);
      case kWriteFused:
        return builder.Write(unit, dst);
    }
    return Status::Ok();
  };
  for (int64_t g = 0; g < 4; ++g) (void)one(g);  // grow every reused buffer first
  int64_t g = 4, cpu = 0, news = 0;
  for (auto _ : state) {
    const int64_t n0 = t_news, t0 = ThreadCpuNs();
    Status st = one(g++);
    cpu += ThreadCpuNs() - t0;
    news += t_news - n0;
    if (!st.ok()) {
      state.SkipWithError(st.ToString().c_str());
      return;
    }
  }
  Report(state, cpu, news, g - 4);
}
BENCHMARK(BM_Stage)
    ->ArgNames({"batch", "stage"})
    ->ArgsProduct({{64, 256}, {kRead, kReadMap, kBuild, kBuildFused, kWriteFused}})
    ->MinTime(1.0);

// -- push into a device ----------------------------------------------------------

// A device with the MLP loaded at `batch`: in-process (remote 0) or the one
// sinkd of bench/local_daemons.h.
Result<DeviceLink*> MlpDevice(int64_t batch, bool remote) {
  static std::unique_ptr<device::InProcessDevice> local;
  static std::vector<std::unique_ptr<DeviceLink>> links;
  DeviceLink* dev;
  if (remote) {
    if (links.empty()) {
      SINKRT_ASSIGN_OR_RETURN(links, bench::Connect(1));
    }
    dev = links[0].get();
  } else {
    if (!local) {
      device::DeviceOptions o = device::DeviceOptions::FromEnvironment();
      o.threads = 2;
      local = std::make_unique<device::InProcessDevice>(o);
    }
    dev = local.get();
  }
  SINKRT_RETURN_IF_ERROR(LoadMlp(*dev, batch));
  return dev;
}

constexpr uint32_t kCapacity = 16;  // CompileOptions' default queue capacity

void BM_Push(benchmark::State& state) {
  const int64_t batch = state.range(0);
  const bool fill = state.range(1) != 0;
  const bool remote = state.range(2) != 0;
  auto dev = MlpDevice(batch, remote);
  if (!dev.ok()) {
    state.SkipWithError(dev.status().ToString().c_str());
    return;
  }
  const Dataset d = MlpPipeline(batch);
  auto writer = host::BatchWriter::Make(d);
  if (!writer.ok() || !*writer) {
    state.SkipWithError("the MLP pipeline does not fuse");
    return;
  }
  auto it = d.Iterate();
  host::Row row;
  if (!it.ok() || !(*it)->Next(&row).ok()) {
    state.SkipWithError("cannot build a batch");
    return;
  }
  const ConstBytes built[2] = {row[0].bytes(), row[1].bytes()};
  int64_t g = 0;
  const DeviceLink::BatchFiller filler = [&](std::span<const std::span<uint8_t>> slot) {
    return (*writer)->Write(g, slot);
  };
  int64_t cpu = 0, news = 0, n = 0;
  for (auto _ : state) {
    if (n % kCapacity == 0) (void)(*dev)->ClearQueue(0);
    const int64_t n0 = t_news, t0 = ThreadCpuNs();
    Status st = fill ? (*dev)->FillBatch(0, filler) : (*dev)->PushBatch(0, built);
    cpu += ThreadCpuNs() - t0;
    news += t_news - n0;
    ++g, ++n;
    if (!st.ok()) {
      state.SkipWithError(st.ToString().c_str());
      return;
    }
  }
  (void)(*dev)->ClearQueue(0);
  Report(state, cpu, news, n);
}
BENCHMARK(BM_Push)->ArgNames({"batch", "fill", "sinkd"})->ArgsProduct({{64, 256}, {0, 1}, {0, 1}})->MinTime(1.0);

// -- the whole host side ---------------------------------------------------------

void BM_Feeder(benchmark::State& state) {
  const int64_t batch = state.range(0);
  const bool fill = state.range(1) != 0;
  const bool remote = state.range(2) != 0;
  auto dev = MlpDevice(batch, remote);
  if (!dev.ok()) {
    state.SkipWithError(dev.status().ToString().c_str());
    return;
  }
  const Dataset d = MlpPipeline(batch);
  host::FeedPlan plan;
  plan.columns = {{"image", DType::F32, {batch, 784}}, {"label", DType::I32, {batch}}};
  plan.source = {0, 1};
  std::unique_ptr<host::BatchWriter> writer;
  std::unique_ptr<host::BatchIterator> it;
  if (fill) {
    auto w = host::BatchWriter::Make(d);
    if (w.ok()) writer = std::move(w).value();
  } else {
    auto i = host::IterateDataset(d, {}, /*fuse=*/false);
    if (i.ok()) it = std::move(i).value();
  }
  if (!writer && !it) {
    state.SkipWithError("cannot start the pipeline");
    return;
  }
  host::Row row;
  ConstBytes spans[2];
  int64_t g = 0;
  const DeviceLink::BatchFiller filler = [&](std::span<const std::span<uint8_t>> slot) {
    return writer->Write(g, slot);
  };
  auto one = [&]() -> Status {
    if (g % kCapacity == 0) SINKRT_RETURN_IF_ERROR((*dev)->ClearQueue(0));
    if (fill) return (*dev)->FillBatch(0, filler);
    SINKRT_RETURN_IF_ERROR(it->Next(&row));
    SINKRT_RETURN_IF_ERROR(host::CheckBatch(plan, row, g));
    spans[0] = row[0].bytes();
    spans[1] = row[1].bytes();
    return (*dev)->PushBatch(0, spans);
  };
  for (int i = 0; i < 32; ++i, ++g) (void)one();  // workers started, buffers grown
  const int64_t n0 = g_news.load(), t0 = ProcessCpuNs(), g0 = g;
  for (auto _ : state) {
    Status st = one();
    ++g;
    if (!st.ok()) {
      state.SkipWithError(st.ToString().c_str());
      return;
    }
  }
  Report(state, ProcessCpuNs() - t0, g_news.load() - n0, g - g0);
  it.reset();  // stop the workers before the queue is cleared
  (void)(*dev)->ClearQueue(0);
}
BENCHMARK(BM_Feeder)->ArgNames({"batch", "fill", "sinkd"})->ArgsProduct({{64, 256}, {0, 1}, {0, 1}})->MinTime(1.0);

// -- the step it feeds ------------------------------------------------------------

// The MLP trained in 32-step sinks at `batch` on 2 threads, fed by the real
// Feeder: fill 0 runs it as before fusion (FeedPlan::fuse off).
void BM_Step(benchmark::State& state) {
  const int64_t batch = state.range(0);
  const bool fill = state.range(1) != 0;
  auto dev = MlpDevice(batch, /*remote=*/false);
  if (!dev.ok()) {
    state.SkipWithError(dev.status().ToString().c_str());
    return;
  }
  const Dataset d = MlpPipeline(batch);
  constexpr uint32_t kSteps = 32;
  host::FeedPlan plan;
  plan.columns = {{"image", DType::F32, {batch, 784}}, {"label", DType::I32, {batch}}};
  plan.source = {0, 1};
  plan.count = kSteps;
  plan.batches_per_epoch = kSteps;
  plan.fuse = fill;
  SinkTotals t;
  auto sink = [&](SinkTotals* totals) -> Status {
    SINKRT_ASSIGN_OR_RETURN(auto feeder, host::Feeder::Start(**dev, d, plan));
    auto r = (*dev)->RunSink(ProgramKind::TrainStep, kSteps);
    SINKRT_RETURN_IF_ERROR(feeder->Finish());
    if (!r.ok()) return r.status();
    plan.start_batch += kSteps;
    totals->compute_ms += r->timing.compute_ms;
    totals->queue_wait_ms += r->timing.queue_wait_ms;
    totals->other_ms += r->timing.other_ms;
    totals->steps += kSteps;
    return Status::Ok();
  };
  SinkTotals warmup;
  if (Status st = sink(&warmup); !st.ok()) {
    state.SkipWithError(st.ToString().c_str());
    return;
  }
  for (auto _ : state) {
    if (Status st = sink(&t); !st.ok()) {
      state.SkipWithError(st.ToString().c_str());
      return;
    }
  }
  ReportStepCounters(state, t, batch);
}
BENCHMARK(BM_Step)
    ->ArgNames({"batch", "fill"})
    ->ArgsProduct({{64, 256}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(2.0);

}  // namespace
}  // namespace sinkrt

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  sinkrt::bench::StopDaemons();
  return 0;
}
