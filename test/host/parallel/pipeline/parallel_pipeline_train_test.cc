// Pipeline stages end to end on worlds of in-process devices
// (docs/design/pipeline.md): each rank compiles its stage (host::Compile with
// CompileOptions::pipeline), activations and gradients cross stages through
// Send/Recv on the comm stream, and the pipelined step trains like one
// device with the same global batch, loss for loss.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "sinkrt/device/in_process_device.h"
#include "sinkrt/host/compiler.h"
#include "support/in_process_world.h"
#include "support/test_models.h"

namespace sinkrt {
namespace {

using host::Graph;

const std::vector<int64_t> kSixLayers = {32, 48, 48, 48, 48, 48, 10};

struct Data {
  int64_t width = 32;
  std::vector<float> images;    // [steps * rows, width]
  std::vector<int32_t> labels;  // [steps * rows]
};

Data MakeData(int steps, int64_t rows, int64_t width = 32) {
  testing::SyntheticData d = testing::MakeSyntheticData(steps * rows, width, 10, 5);
  return {width, d.images, d.labels};
}

host::CompileOptions Options(host::ParallelMode mode, uint32_t world, uint32_t rank, host::OptimizerSpec opt) {
  host::CompileOptions o;
  o.optimizer = opt;
  o.parallel_mode = mode;
  o.world_size = world;
  o.rank = rank;
  o.eval_program = false;
  o.gradients_mean = true;
  return o;
}

ConstBytes Rows(const float* p, int64_t rows, int64_t width) {
  return ConstBytes(reinterpret_cast<const uint8_t*>(p), rows * width * sizeof(float));
}
ConstBytes Rows(const int32_t* p, int64_t rows) {
  return ConstBytes(reinterpret_cast<const uint8_t*>(p), rows * sizeof(int32_t));
}

// One device on the whole global batch of `rows`, one step per sink.
std::vector<double> SingleDevice(const Graph& g, const Data& data, int steps, int64_t rows, host::OptimizerSpec opt) {
  device::InProcessDevice dev(testing::OneThreadOptions());
  auto cs = host::Compile(g, Options(host::ParallelMode::StandAlone, 1, 0, opt));
  EXPECT_TRUE(cs.ok()) << cs.status().ToString();
  if (!cs.ok()) return {};
  EXPECT_TRUE(dev.Load(cs->stream).ok());
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    ConstBytes cols[2] = {Rows(data.images.data() + s * rows * data.width, rows, data.width),
                          Rows(data.labels.data() + s * rows, rows)};
    EXPECT_TRUE(dev.PushBatch(0, cols).ok());
    auto r = dev.RunSink(ProgramKind::TrainStep, 1);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    losses.push_back(r.ok() ? r->reports.at(0).scalar() : NAN);
  }
  return losses;
}

struct PipelineRun {
  std::vector<double> losses;                     // per step: the mean over the last stage's ranks
  std::vector<host::CompileReport> reports;       // per rank
  std::vector<std::vector<std::string>> columns;  // per rank: its queue's columns
};

// `world` ranks, `config.stages` stages; the replica at place j of its stage
// reads rows [j * rows, (j + 1) * rows) of every global batch.
PipelineRun Pipelined(const Graph& net, int world, const host::PipelineConfig& config, const Data& data, int steps,
                      int64_t rows, host::OptimizerSpec opt) {
  const int steps_per_sink = 1;  // a sink reports its last step's loss
  std::vector<std::unique_ptr<device::InProcessDevice>> devices;
  std::vector<PeerEndpoint> members;
  for (int r = 0; r < world; ++r) {
    devices.push_back(std::make_unique<device::InProcessDevice>(testing::OneThreadOptions()));
    auto e = devices.back()->Endpoint();
    EXPECT_TRUE(e.ok());
    members.push_back(*e);
  }
  const int per_stage = world / config.stages;
  PipelineRun out;
  out.reports.resize(world);
  out.columns.resize(world);
  std::vector<std::vector<double>> losses(world);
  std::vector<Status> status(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      device::InProcessDevice& dev = *devices[r];
      status[r] = dev.JoinWorld({11, static_cast<uint32_t>(r), members});
      if (!status[r].ok()) return;
      host::CompileOptions o = Options(host::ParallelMode::DataParallel, world, r, opt);
      o.pipeline = config;
      auto cs = host::Compile(net, o);
      if (!cs.ok()) {
        status[r] = cs.status();
        return;
      }
      out.reports[r] = cs->report;
      if (const char* dir = std::getenv("SINKRT_TEST_DUMP")) {
        FILE* f = std::fopen((std::string(dir) + "/stage_rank" + std::to_string(r) + ".tstream").c_str(), "wb");
        if (f) {
          std::fwrite(cs->stream.bytes().data(), 1, cs->stream.bytes().size(), f);
          std::fclose(f);
        }
      }
      out.columns[r] = cs->input_columns;
      auto loaded = dev.Load(cs->stream);
      if (!loaded.ok()) {
        status[r] = loaded.status();
        return;
      }
      const int64_t first = (r % per_stage) * rows;
      const int64_t global = rows * per_stage;
      for (int s = 0; s < steps; s += steps_per_sink) {
        for (int k = s; k < s + steps_per_sink; ++k) {
          std::vector<ConstBytes> cols;
          for (const std::string& c : cs->input_columns) {
            if (c == "image")
              cols.push_back(Rows(data.images.data() + (k * global + first) * data.width, rows, data.width));
            if (c == "label") cols.push_back(Rows(data.labels.data() + k * global + first, rows));
          }
          if (cols.empty()) continue;  // a middle stage has no queue
          status[r] = dev.PushBatch(0, cols);
          if (!status[r].ok()) return;
        }
        auto res = dev.RunSink(ProgramKind::TrainStep, steps_per_sink);
        if (!res.ok()) {
          status[r] = res.status();
          return;
        }
        if (!res->reports.empty()) losses[r].push_back(res->reports.at(0).scalar());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < world; ++r) EXPECT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r].ToString();
  const int last = world - per_stage;
  for (int s = 0; s < steps; ++s) {
    double sum = 0;
    for (int r = last; r < world; ++r) sum += s < static_cast<int>(losses[r].size()) ? losses[r][s] : NAN;
    out.losses.push_back(sum / per_stage);
  }
  return out;
}

void ExpectTracks(const std::vector<double>& want, const std::vector<double>& got, double tolerance = 1e-5) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t s = 0; s < want.size(); ++s) {
    EXPECT_NEAR(got[s], want[s], tolerance * std::abs(want[s])) << "step " << s;
    if (std::getenv("SINKRT_TEST_VERBOSE")) std::printf("step %zu: %.7f %.7f\n", s, got[s], want[s]);
  }
}

TEST(PipelineTrain, SixLayerMlpTwoStagesTracksOneDevice) {
  constexpr int kSteps = 20;
  constexpr int64_t kRows = 16;
  const Data data = MakeData(kSteps, kRows);
  const host::OptimizerSpec opt = host::OptimizerSpec::Momentum(0.05f, 0.9f);
  const std::vector<double> want = SingleDevice(testing::MakeMlp(kRows, kSixLayers), data, kSteps, kRows, opt);
  host::PipelineConfig config;
  config.stages = 2;
  config.micro_size = 4;
  const PipelineRun got = Pipelined(testing::MakeMlp(kRows, kSixLayers), 2, config, data, kSteps, kRows, opt);
  ExpectTracks(want, got.losses);
  EXPECT_EQ(got.columns[0], std::vector<std::string>{"image"});
  EXPECT_EQ(got.columns[1], std::vector<std::string>{"label"});
  EXPECT_EQ(got.reports[0].pipeline_stage, 0);
  EXPECT_EQ(got.reports[1].pipeline_stage, 1);
}

}  // namespace
}  // namespace sinkrt

namespace sinkrt {
namespace {

host::PipelineConfig Config(int stages, int micro, const std::string& scheduler = "1f1b") {
  host::PipelineConfig c;
  c.stages = stages;
  c.micro_size = micro;
  c.scheduler = scheduler;
  return c;
}

TEST(PipelineTrain, SixLayerMlpFourStagesEightMicroBatches) {
  constexpr int kSteps = 12;
  constexpr int64_t kRows = 16;
  const Data data = MakeData(kSteps, kRows);
  const host::OptimizerSpec opt = host::OptimizerSpec::Momentum(0.05f, 0.9f);
  const std::vector<double> want = SingleDevice(testing::MakeMlp(kRows, kSixLayers), data, kSteps, kRows, opt);
  const PipelineRun got = Pipelined(testing::MakeMlp(kRows, kSixLayers), 4, Config(4, 8), data, kSteps, kRows, opt);
  ExpectTracks(want, got.losses);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(got.reports[r].pipeline_stage, r);
}

// A learning-rate schedule (docs/guide/lr_schedules.md): every stage counts
// the pipeline's optimizer steps (one per step, whatever the micro-batches)
// and computes the same rate, so four stages track one device, whose loss
// would drift from the first decayed step on if any stage were off by one.
TEST(PipelineTrain, ScheduledFourStagesTrackOneDevice) {
  constexpr int kSteps = 12;
  constexpr int64_t kRows = 16;
  const Data data = MakeData(kSteps, kRows);
  host::OptimizerSpec opt = host::OptimizerSpec::Momentum(0.0f, 0.9f);
  opt.schedule = host::LrSchedule::WarmupCosine(0.08, 1e-3, 3, 8);
  const std::vector<double> want = SingleDevice(testing::MakeMlp(kRows, kSixLayers), data, kSteps, kRows, opt);
  const PipelineRun got = Pipelined(testing::MakeMlp(kRows, kSixLayers), 4, Config(4, 8), data, kSteps, kRows, opt);
  ExpectTracks(want, got.losses);
}

// Gradient clipping by global norm (docs/guide/clipping.md): each stage's
// sum of squares is all-reduced over one rank of every stage, so every
// stage clips by the whole network's norm and the pipeline tracks one
// device, on one replica per stage and on two (the norm taken after the
// stage's gradient AllReduce). At clip_norm 0.3 most steps clip; a stage
// clipping by its own norm drifts from the first step.
TEST(PipelineTrain, ClippedStagesTrackOneDevice) {
  constexpr int kSteps = 12;
  constexpr int64_t kRows = 16;
  const Data data = MakeData(kSteps, kRows);
  host::OptimizerSpec opt = host::OptimizerSpec::Momentum(0.05f, 0.9f);
  opt.clip_grad_norm = 0.3f;
  const std::vector<double> want = SingleDevice(testing::MakeMlp(kRows, kSixLayers), data, kSteps, kRows, opt);
  const PipelineRun four = Pipelined(testing::MakeMlp(kRows, kSixLayers), 4, Config(4, 8), data, kSteps, kRows, opt);
  ExpectTracks(want, four.losses);
  const PipelineRun replicas =
      Pipelined(testing::MakeMlp(kRows / 2, kSixLayers), 4, Config(2, 4), data, kSteps, kRows / 2, opt);
  ExpectTracks(want, replicas.losses);
  host::OptimizerSpec plain = opt;
  plain.clip_grad_norm = 0;
  const std::vector<double> unclipped = SingleDevice(testing::MakeMlp(kRows, kSixLayers), data, kSteps, kRows, plain);
  double moved = 0;
  for (size_t s = 0; s < want.size() && s < unclipped.size(); ++s)
    moved = std::max(moved, std::abs(want[s] - unclipped[s]) / std::abs(unclipped[s]));
  EXPECT_GT(moved, 1e-3) << "clip_norm 0.3 does not clip this run";
}

// GPipe and 1F1B run the same arithmetic in another order: the same losses.
TEST(PipelineTrain, GpipeAndOneFOneBGiveTheSameLosses) {
  constexpr int kSteps = 8;
  constexpr int64_t kRows = 16;
  const Data data = MakeData(kSteps, kRows);
  const host::OptimizerSpec opt = host::OptimizerSpec::Sgd(0.1f);
  const PipelineRun a =
      Pipelined(testing::MakeMlp(kRows, kSixLayers), 2, Config(2, 4, "1f1b"), data, kSteps, kRows, opt);
  const PipelineRun b =
      Pipelined(testing::MakeMlp(kRows, kSixLayers), 2, Config(2, 4, "gpipe"), data, kSteps, kRows, opt);
  ExpectTracks(a.losses, b.losses, 1e-6);
}

// 2 data-parallel replicas x 2 stages on 4 ranks: ranks 0-1 hold stage 0,
// 2-3 stage 1; each replica reads half of the global batch, and the
// gradients are averaged over the stage's two ranks.
TEST(PipelineTrain, TwoReplicasTimesTwoStagesTracksOneDevice) {
  constexpr int kSteps = 12;
  constexpr int64_t kRows = 8;  // per replica
  const Data data = MakeData(kSteps, 2 * kRows);
  const host::OptimizerSpec opt = host::OptimizerSpec::Momentum(0.05f, 0.9f);
  const std::vector<double> want = SingleDevice(testing::MakeMlp(2 * kRows, kSixLayers), data, kSteps, 2 * kRows, opt);
  const PipelineRun got = Pipelined(testing::MakeMlp(kRows, kSixLayers), 4, Config(2, 4), data, kSteps, kRows, opt);
  ExpectTracks(want, got.losses);
  EXPECT_EQ(got.reports[1].pipeline_stage, 0);
  EXPECT_EQ(got.reports[2].pipeline_stage, 1);
  EXPECT_FALSE(got.reports[0].buckets.empty());  // the stage's gradients are reduced
}

TEST(PipelineTrain, VitTwoStagesTracksOneDevice) {
  constexpr int kSteps = 6;
  constexpr int64_t kRows = 8;
  const Data data = MakeData(kSteps, kRows, 784);
  const host::OptimizerSpec opt = host::OptimizerSpec::Adam(1e-3f);
  const std::vector<double> want = SingleDevice(testing::MakeVit(kRows), data, kSteps, kRows, opt);
  const PipelineRun got = Pipelined(testing::MakeVit(kRows), 2, Config(2, 4), data, kSteps, kRows, opt);
  ExpectTracks(want, got.losses);
}

}  // namespace
}  // namespace sinkrt
