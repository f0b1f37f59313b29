// DeviceTiming::bubble_ms on worlds of in-process devices: a pipeline
// stage's compute stream waiting for a Send/Recv (a neighbour stage) counts
// as bubble, waiting for a gradient bucket as comm_wait; a data-parallel run
// has no neighbours and no bubble.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "sinkrt/device/in_process_device.h"
#include "sinkrt/host/compiler.h"
#include "support/in_process_world.h"
#include "support/test_models.h"

namespace sinkrt {
namespace {

constexpr int kSteps = 3;
constexpr int64_t kRows = 8;  // per rank (data parallel) or per replica (pipeline)
const std::vector<int64_t> kWidths = {32, 48, 48, 48, 10};

ConstBytes Bytes(const std::vector<float>& v, int64_t first, int64_t n) {
  return ConstBytes(reinterpret_cast<const uint8_t*>(v.data() + first), n * sizeof(float));
}
ConstBytes Bytes(const std::vector<int32_t>& v, int64_t first, int64_t n) {
  return ConstBytes(reinterpret_cast<const uint8_t*>(v.data() + first), n * sizeof(int32_t));
}

// Runs kSteps one-step sinks of train_step on `world` ranks (data parallel,
// or `pipeline` stages of world / stages ranks each) and returns each rank's
// timing summed over its sinks. Every rank reads the same rows: only where
// the time goes matters here.
std::vector<DeviceTiming> RunWorld(uint64_t job, int world, std::optional<host::PipelineConfig> pipeline) {
  const testing::SyntheticData data = testing::MakeSyntheticData(kRows, kWidths.front(), 10, 7);
  testing::InProcessWorld ranks(world);
  std::vector<PeerEndpoint> members;
  for (int r = 0; r < world; ++r) {
    auto e = ranks.devices[r]->Endpoint();
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    if (!e.ok()) return {};
    members.push_back(*e);
  }
  std::vector<DeviceTiming> timing(world);
  std::vector<Status> status(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      device::InProcessDevice& dev = *ranks.devices[r];
      status[r] = dev.JoinWorld({job, static_cast<uint32_t>(r), members});
      if (!status[r].ok()) return;
      host::CompileOptions o;
      o.optimizer = host::OptimizerSpec::Sgd(0.1f);
      o.parallel_mode = host::ParallelMode::DataParallel;
      o.world_size = static_cast<uint32_t>(world);
      o.rank = static_cast<uint32_t>(r);
      o.eval_program = false;
      o.gradients_mean = true;
      if (pipeline) o.pipeline = *pipeline;
      auto cs = host::Compile(testing::MakeMlp(kRows, kWidths), o);
      if (!cs.ok()) {
        status[r] = cs.status();
        return;
      }
      if (auto loaded = dev.Load(cs->stream); !loaded.ok()) {
        status[r] = loaded.status();
        return;
      }
      for (int s = 0; s < kSteps; ++s) {
        std::vector<ConstBytes> cols;
        for (const std::string& c : cs->input_columns) {
          if (c == "image") cols.push_back(Bytes(data.images, 0, kRows * kWidths.front()));
          if (c == "label") cols.push_back(Bytes(data.labels, 0, kRows));
        }
        if (!cols.empty()) {  // a middle stage has no queue
          status[r] = dev.PushBatch(0, cols);
          if (!status[r].ok()) return;
        }
        auto res = dev.RunSink(ProgramKind::TrainStep, 1);
        if (!res.ok()) {
          status[r] = res.status();
          return;
        }
        timing[r].compute_ms += res->timing.compute_ms;
        timing[r].comm_wait_ms += res->timing.comm_wait_ms;
        timing[r].bubble_ms += res->timing.bubble_ms;
        timing[r].other_ms += res->timing.other_ms;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < world; ++r) EXPECT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r].ToString();
  return timing;
}

host::PipelineConfig Stages(int stages) {
  host::PipelineConfig c;
  c.stages = stages;
  c.micro_size = 4;
  return c;
}

// Each stage's compute stream waits for a Recv's data (stage 1: the
// activations, stage 0: their gradients) and for its Sends to be taken.
// With one rank per stage nothing is reduced, so every wait is a bubble.
TEST(PipelineBubble, TwoStagesWaitOnlyOnTheirNeighbour) {
  const std::vector<DeviceTiming> t = RunWorld(31, 2, Stages(2));
  ASSERT_EQ(t.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE("stage " + std::to_string(r));
    EXPECT_GT(t[r].bubble_ms, 0);
    EXPECT_EQ(t[r].comm_wait_ms, 0);
    EXPECT_GE(t[r].other_ms, 0);  // bubble is taken out of other, not counted twice
  }
}

// 2 replicas x 2 stages: the neighbour waits are bubble, the stage group's
// gradient buckets are comm wait.
TEST(PipelineBubble, ReplicatedStagesSplitBubbleFromCommWait) {
  const std::vector<DeviceTiming> t = RunWorld(32, 4, Stages(2));
  ASSERT_EQ(t.size(), 4u);
  for (int r = 0; r < 4; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_GT(t[r].bubble_ms, 0);
    EXPECT_GT(t[r].comm_wait_ms, 0);
  }
}

TEST(PipelineBubble, DataParallelHasNone) {
  const std::vector<DeviceTiming> t = RunWorld(33, 2, std::nullopt);
  ASSERT_EQ(t.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(t[r].bubble_ms, 0);
    EXPECT_GT(t[r].comm_wait_ms, 0);  // the gradient buckets
  }
}

}  // namespace
}  // namespace sinkrt
