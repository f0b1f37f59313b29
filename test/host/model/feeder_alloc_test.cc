// The feeder's steady state allocates nothing per batch (issue 21): the
// fused pipeline writing batches (BatchWriter), and filling them into an
// in-process queue slot or a sinkd frame (DeviceLink::FillBatch). The unfused
// iterator path is held to the bound it reaches today, so a regression there
// shows too. Through sinkd, filled batches also train as pushed ones do.
//
// This binary replaces operator new with a counting one; a test arms it
// around the calls it measures, on its own thread (`Mine`) or on every
// thread (`All`, where the work runs on worker threads).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "device/src/executor.h"
#include "host/src/dataset/batch_builder.h"
#include "host/src/dataset/batch_writer.h"
#include "host/src/model/feeder.h"
#include "sinkrt/device/in_process_device.h"
#include "sinkrt/host/compiler.h"
#include "sinkrt/host/dataset.h"
#include "sinkrt/host/remote_device.h"
#include "support/sinkd_process.h"
#include "support/test_models.h"
#include "support/test_util.h"

// Every allocation of this binary counts.
#include "support/counting_new.h"

namespace sinkrt::host {
namespace {

using namespace std::chrono_literals;

struct Counts {
  int64_t mine = 0, all = 0;
};

// Allocations made while `fn` runs, on this thread and on all.
template <typename Fn>
Counts Count(Fn&& fn) {
  const int64_t mine = testing::t_news, all = testing::g_news.load();
  fn();
  return {testing::t_news - mine, testing::g_news.load() - all};
}

// The MLP recipe on Fashion-MNIST-shaped data (u8 [28, 28, 1], i32 labels).
Dataset MlpPipeline(const Dataset& raw, int64_t batch) {
  return raw.Map("image", {Transform::Rescale(1.0 / 255.0), Transform::Reshape({784})})
      .Shuffle(1)
      .Batch(batch, /*drop_remainder=*/true);
}

Dataset Fashion(int64_t n) {
  Tensor images{DType::U8, {n, 28, 28, 1}, {}};
  images.data.resize(static_cast<size_t>(n) * 784);
  for (size_t i = 0; i < images.data.size(); ++i) images.data[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
  Tensor labels{DType::I32, {n}, {}};
  labels.data.resize(static_cast<size_t>(n) * 4);
  for (int64_t i = 0; i < n; ++i) labels.as<int32_t>()[i] = static_cast<int32_t>(i % 10);
  return Dataset::FromArrays({{"image", std::move(images)}, {"label", std::move(labels)}});
}

// Where the hook's own test keeps what it allocates, so the compiler cannot
// drop the allocation.
std::vector<int>* g_sink = nullptr;

TEST(FeederAllocTest, TheHookCounts) {
  const Counts c = Count([] { g_sink = new std::vector<int>(100); });
  delete g_sink;
  EXPECT_EQ(c.mine, 2);  // the vector and its storage
  EXPECT_EQ(c.all, 2);
}

constexpr int64_t kBatch = 64;
constexpr int64_t kBatches = 40;  // measured, all inside pass 0 (the order is made once per pass)

TEST(FeederAllocTest, BatchWriterAllocatesNothingPerBatch) {
  auto writer = BatchWriter::Make(MlpPipeline(Fashion(kBatch * (kBatches + 8)), kBatch));
  ASSERT_TRUE(writer.ok() && *writer);
  std::vector<uint8_t> image(kBatch * 784 * 4), label(kBatch * 4);
  const std::span<uint8_t> dst[2] = {image, label};
  for (int64_t g = 0; g < 4; ++g) ASSERT_TRUE((*writer)->Write(g, dst).ok());  // the first pass order
  const Counts c = Count([&] {
    for (int64_t g = 4; g < 4 + kBatches; ++g) ASSERT_TRUE((*writer)->Write(g, dst).ok());
  });
  EXPECT_EQ(c.all, 0);
}

TEST(FeederAllocTest, FusedBuildsFromAGeneratorAllocateNothingPerBatch) {
  // What an iterator worker runs for SyntheticImages: the generator fills
  // the sample row it reuses, the fused columns go straight to the batch.
  const Dataset d = MlpPipeline(Dataset::SyntheticImages(kBatch * (kBatches + 8)), kBatch);
  const SamplePlan plan = MakeSamplePlan(DatasetAccess::node(d));
  ASSERT_TRUE(plan.all_fused);
  EXPECT_FALSE(plan.in_memory);
  BatchBuilder builder(plan);
  std::vector<int64_t> samples(kBatch);
  Row out;
  auto build = [&](int64_t g) {
    for (int64_t k = 0; k < kBatch; ++k) samples[k] = g * kBatch + k;
    return builder.Build(samples, &out);
  };
  for (int64_t g = 0; g < 4; ++g) ASSERT_TRUE(build(g).ok());
  const Counts c = Count([&] {
    for (int64_t g = 4; g < 4 + kBatches; ++g) ASSERT_TRUE(build(g).ok());
  });
  EXPECT_EQ(c.all, 0);
}

TEST(FeederAllocTest, IteratorsStayWithinTheirBound) {
  // The iterator's workers recycle the consumer's tensors; what is left
  // per batch fused and unfused, as measured when fusion came in: none.
  // One worker, so that the warm-up certainly grew its sample row and
  // scratch (with two, one may build nothing until the count is armed).
  for (bool fuse : {false, true}) {
    SCOPED_TRACE(fuse ? "fused" : "unfused");
    IteratorOptions o;
    o.num_workers = 1;
    o.prefetch = 4;
    auto it = IterateDataset(MlpPipeline(Fashion(kBatch * (kBatches + 16)), kBatch), o, fuse);
    ASSERT_TRUE(it.ok());
    Row row;
    for (int i = 0; i < 8; ++i) ASSERT_TRUE((*it)->Next(&row).ok());
    const Counts c = Count([&] {
      for (int64_t g = 0; g < kBatches; ++g) ASSERT_TRUE((*it)->Next(&row).ok());
    });
    EXPECT_LE(c.all, 0) << "per " << kBatches << " batches";
  }
}

Result<CompiledStream> Mlp(int64_t batch) {
  CompileOptions co;
  co.optimizer = OptimizerSpec::Momentum(0.01f, 0.9f);
  return Compile(testing::MakeMlp(batch), co);
}

// Fills kBatches batches into queue 0 of `dev`, clearing it every
// `capacity` fills outside the count; the fills' allocations on this thread.
int64_t FillAllocations(DeviceLink& dev, BatchWriter& writer, uint32_t capacity) {
  int64_t g = 0;
  const DeviceLink::BatchFiller filler = [&](std::span<const std::span<uint8_t>> slot) {
    return writer.Write(g, slot);
  };
  int64_t mine = 0;
  for (int64_t i = 0; i < kBatches + 4; ++i, ++g) {
    if (i % capacity == 0) {
      EXPECT_TRUE(dev.ClearQueue(0).ok());
    }
    if (i < 4) {  // the first fills size the remote payload buffer
      EXPECT_TRUE(dev.FillBatch(0, filler).ok());
      continue;
    }
    mine += Count([&] { EXPECT_TRUE(dev.FillBatch(0, filler).ok()); }).mine;
  }
  EXPECT_TRUE(dev.ClearQueue(0).ok());
  return mine;
}

TEST(FeederAllocTest, FillingAnInProcessSlotAllocatesNothing) {
  device::DeviceOptions o = device::DeviceOptions::FromEnvironment();
  o.threads = 1;
  device::InProcessDevice dev(o);
  auto cs = Mlp(kBatch);
  ASSERT_TRUE(cs.ok()) << cs.status().ToString();
  ASSERT_TRUE(dev.Load(cs->stream).ok());
  auto writer = BatchWriter::Make(MlpPipeline(Fashion(kBatch * (kBatches + 8)), kBatch));
  ASSERT_TRUE(writer.ok() && *writer);
  EXPECT_EQ(FillAllocations(dev, **writer, dev.executor()->queue_capacity(0)), 0);
}

TEST(FeederAllocTest, FillBatchWaitsForASlotAndClearQueueStopsIt) {
  device::DeviceOptions o = device::DeviceOptions::FromEnvironment();
  o.threads = 1;
  o.push_timeout = 200ms;
  device::InProcessDevice dev(o);
  auto cs = Mlp(kBatch);
  ASSERT_TRUE(cs.ok());
  ASSERT_TRUE(dev.Load(cs->stream).ok());
  const uint32_t capacity = dev.executor()->queue_capacity(0);
  const DeviceLink::BatchFiller zeros = [](std::span<const std::span<uint8_t>> slot) {
    for (auto s : slot) std::fill(s.begin(), s.end(), 0);
    return Status::Ok();
  };
  for (uint32_t i = 0; i < capacity; ++i) ASSERT_TRUE(dev.FillBatch(0, zeros).ok());
  // Full: times out as PushBatch does, and a failing filler queues nothing.
  EXPECT_EQ(dev.FillBatch(0, zeros).code(), StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(dev.ClearQueue(0).ok());
  const DeviceLink::BatchFiller failing = [](std::span<const std::span<uint8_t>>) { return PermissionDenied("no"); };
  EXPECT_EQ(dev.FillBatch(0, failing).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(dev.executor()->queued_batches(0), 0u);
  // A fill waiting on a full queue returns kAborted when the queue is
  // cleared (how Feeder::Stop frees it); the wait is bounded by the timeout.
  o.push_timeout = 60s;
  device::InProcessDevice slow(o);
  ASSERT_TRUE(slow.Load(cs->stream).ok());
  for (uint32_t i = 0; i < capacity; ++i) ASSERT_TRUE(slow.FillBatch(0, zeros).ok());
  std::atomic<bool> entered{false};
  Status waited;
  std::thread feeder([&] {
    entered = true;
    waited = slow.FillBatch(0, zeros);
  });
  while (!entered) std::this_thread::yield();
  // Cleared before or during the wait: either way no batch slips in after.
  ASSERT_TRUE(slow.ClearQueue(0).ok());
  feeder.join();
  if (waited.ok()) {
    // It filled a slot the clear had already freed: then it came after.
    EXPECT_EQ(slow.executor()->queued_batches(0), 1u);
  } else {
    EXPECT_EQ(waited.code(), StatusCode::kAborted) << waited.ToString();
    EXPECT_EQ(slow.executor()->queued_batches(0), 0u);
  }
}

class FeederSinkdTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(daemon_.Start(SINKD_PATH).ok()); }
  Result<std::unique_ptr<RemoteDevice>> Connect() {
    RemoteOptions o;
    o.connect_timeout = 20s;
    o.reply_timeout = 60s;
    o.push_timeout = 60s;
    return RemoteDevice::Connect(daemon_.address(), o);
  }
  testing::SinkdProcess daemon_;
};

TEST_F(FeederSinkdTest, FillingAFramePayloadAllocatesNothing) {
  auto remote = Connect();
  ASSERT_TRUE(remote.ok()) << remote.status().ToString();
  auto cs = Mlp(kBatch);
  ASSERT_TRUE(cs.ok());
  auto info = (*remote)->Load(cs->stream);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  auto writer = BatchWriter::Make(MlpPipeline(Fashion(kBatch * (kBatches + 8)), kBatch));
  ASSERT_TRUE(writer.ok() && *writer);
  // CompileOptions' default capacity: the credits this host starts with.
  EXPECT_EQ(FillAllocations(**remote, **writer, CompileOptions{}.queue_capacity), 0);
}

// The Feeder filling frames for sinkd trains bit for bit as the Feeder
// pushing unfused batches into an in-process device.
TEST_F(FeederSinkdTest, FilledFramesTrainAsPushedBatches) {
  constexpr int64_t kSmall = 32;
  constexpr uint32_t kSteps = 6;
  const Dataset d = MlpPipeline(Fashion(kSmall * 4), kSmall);
  auto cs = Mlp(kSmall);
  ASSERT_TRUE(cs.ok());
  auto train = [&](DeviceLink& dev, bool fuse) {
    std::vector<std::vector<uint8_t>> reports;
    EXPECT_TRUE(dev.Load(cs->stream).ok());
    FeedPlan plan;
    plan.columns = {{"image", DType::F32, {kSmall, 784}}, {"label", DType::I32, {kSmall}}};
    plan.source = {0, 1};
    plan.count = kSteps;
    plan.batches_per_epoch = kSteps;
    plan.fuse = fuse;
    for (int sink = 0; sink < 2; ++sink, plan.start_batch += kSteps) {
      auto feeder = Feeder::Start(dev, d, plan);
      EXPECT_TRUE(feeder.ok());
      if (!feeder.ok()) return reports;
      auto r = dev.RunSink(ProgramKind::TrainStep, kSteps);
      EXPECT_TRUE((*feeder)->Finish().ok());
      EXPECT_TRUE(r.ok()) << r.status().ToString();
      if (!r.ok()) return reports;
      for (const ReportedTensor& t : r->reports) reports.push_back(t.data);
    }
    return reports;
  };
  device::DeviceOptions o = device::DeviceOptions::FromEnvironment();
  o.threads = 1;
  device::InProcessDevice local(o);
  const auto pushed = train(local, /*fuse=*/false);
  auto remote = Connect();
  ASSERT_TRUE(remote.ok()) << remote.status().ToString();
  const auto filled = train(**remote, /*fuse=*/true);
  ASSERT_FALSE(pushed.empty());
  EXPECT_EQ(pushed, filled);
}

}  // namespace
}  // namespace sinkrt::host
