// Dropout under pipeline stages tracks one device (docs/guide/dropout.md):
// micro-batch m of M holds rows m·b.. of the batch, so each of its Dropout
// and DropoutGrad ops is placed at those rows of the global tensor, and the
// M micro-batches draw exactly the masks one device draws for the whole
// batch; a stage's data-parallel replicas are interleaved as Model feeds
// them (Dataset::ShardBelowBatch). Worlds of in-process devices, each rank
// compiling its stage; losses within 1e-5 relative of one device's over
// 100 steps. Without the placement every micro-batch would draw micro-batch
// 0's masks and the losses would part at the first step.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "sinkrt/host/compiler.h"
#include "support/dropout_models.h"
#include "support/interleaved_world.h"

namespace sinkrt {
namespace {

using host::Graph;

constexpr int kSteps = 100;

host::CompileOptions Options(host::ParallelMode mode, uint32_t world, uint32_t rank, const host::OptimizerSpec& opt) {
  host::CompileOptions o;
  o.optimizer = opt;
  o.parallel_mode = mode;
  o.world_size = world;
  o.rank = rank;
  o.eval_program = false;
  o.gradients_mean = true;
  return o;
}

std::vector<double> OneDevice(const Graph& net, const testing::StepData& data, const host::OptimizerSpec& opt) {
  return testing::TrainInterleaved(net, 1, 1, data, kSteps,
                                   [&](int) { return Options(host::ParallelMode::StandAlone, 1, 0, opt); });
}

// `world` ranks in `stages` stages of `micro` micro-batches, a stage's
// replicas fed interleaved rows (testing::TrainInterleaved).
std::vector<double> Pipelined(const Graph& net, int world, int stages, int micro, const testing::StepData& data,
                              const host::OptimizerSpec& opt) {
  return testing::TrainInterleaved(net, world, world / stages, data, kSteps, [&](int r) {
    host::CompileOptions o = Options(host::ParallelMode::DataParallel, world, r, opt);
    o.pipeline.stages = stages;
    o.pipeline.micro_size = micro;
    return o;
  });
}

const host::OptimizerSpec kSgd = host::OptimizerSpec::Momentum(0.05f, 0.9f);

TEST(PipelineDropout, TwoStagesFourMicroBatchesTrackOneDevice) {
  const testing::StepData data = testing::MakeStepData(kSteps, 16);
  const std::vector<double> want = OneDevice(testing::MakeDropoutMlp(16, 0.3f), data, kSgd);
  // Dropout matters: without it the first loss is elsewhere.
  const std::vector<double> without = OneDevice(testing::MakeDropoutMlp(16, 0.0f), data, kSgd);
  EXPECT_GT(std::abs(without[1] - want[1]), 1e-3 * std::abs(want[1]));
  testing::ExpectLossesTrack(want, Pipelined(testing::MakeDropoutMlp(16, 0.3f), 2, 2, 4, data, kSgd));
}

TEST(PipelineDropout, FourStagesEightMicroBatchesTrackOneDevice) {
  const testing::StepData data = testing::MakeStepData(kSteps, 16);
  const std::vector<double> want = OneDevice(testing::MakeDropoutMlp(16, 0.3f), data, kSgd);
  testing::ExpectLossesTrack(want, Pipelined(testing::MakeDropoutMlp(16, 0.3f), 4, 4, 8, data, kSgd));
}

// The middle dropout reads [B·4, 12]: a micro-batch's samples keep their
// 4 rows each.
TEST(PipelineDropout, SeveralRowsPerSampleTrackOneDevice) {
  const testing::StepData data = testing::MakeStepData(kSteps, 16);
  const std::vector<double> want = OneDevice(testing::MakeDropoutMlp(16, 0.3f, 4), data, kSgd);
  testing::ExpectLossesTrack(want, Pipelined(testing::MakeDropoutMlp(16, 0.3f, 4), 2, 2, 4, data, kSgd));
}

// 2 data-parallel replicas x 2 stages on 4 ranks: replica j reads rows j,
// j + 2, ... (as Model feeds them) in 4 micro-batches, one device the
// whole batch of 16.
TEST(PipelineDropout, TwoReplicasTimesTwoStagesTrackOneDevice) {
  const testing::StepData data = testing::MakeStepData(kSteps, 16);
  const std::vector<double> want = OneDevice(testing::MakeDropoutMlp(16, 0.3f, 4), data, kSgd);
  testing::ExpectLossesTrack(want, Pipelined(testing::MakeDropoutMlp(8, 0.3f, 4), 4, 2, 4, data, kSgd));
}

// A stage split over several ranks under SEMI_AUTO_PARALLEL is refused by
// name, rather than draw masks one device would not.
TEST(PipelineDropout, SemiAutoStagesOfSeveralRanksRefuseDropout) {
  host::CompileOptions o = Options(host::ParallelMode::SemiAutoParallel, 4, 0, kSgd);
  o.pipeline.stages = 2;
  o.pipeline.micro_size = 2;
  auto cs = host::Compile(testing::MakeDropoutMlp(16, 0.3f), o);
  ASSERT_FALSE(cs.ok());
  EXPECT_NE(cs.status().message().find("Dropout"), std::string::npos) << cs.status().ToString();
  EXPECT_NE(cs.status().message().find("semi_auto_parallel"), std::string::npos) << cs.status().ToString();
}

}  // namespace
}  // namespace sinkrt
