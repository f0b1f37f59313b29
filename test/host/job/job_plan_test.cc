// host::PlanJob without a tool (docs/guide/job_plan.md): each parallel mode's
// batch arithmetic, the options Compile and Model get, each refusal with the
// message sinkc and sinkrun print, and a sharded and a pipelined job
// trained from a JobSpec on in-process devices.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "sinkrt/host/dataset.h"
#include "sinkrt/host/job_plan.h"
#include "sinkrt/host/model.h"
#include "sinkrt/host/model_zoo.h"
#include "support/in_process_world.h"
#include "support/model_fixtures.h"
#include "support/test_models.h"
#include "support/test_util.h"

namespace sinkrt {
namespace {

using host::JobPlan;
using host::JobSpec;
using host::ParallelMode;
using ::testing::HasSubstr;

constexpr int64_t kFeatures = 32;

// The zoo MLP (32-64-32-10: two hidden layers, which the "model" preset splits as a pair) with MindSpore's loss against
// "label", as sinkrun builds it for a sharded run: a strategy covers the loss too.
Result<host::Graph> MlpWithLoss(int64_t batch) {
  host::Graph g = host::MakeMlpNetwork(batch, {kFeatures, 64, 32, 10}, 7);
  g.SetLoss(g.SparseSoftmaxCrossEntropy(g.outputs().front(), g.Input("label", {batch}, DType::I32)));
  if (!g.status().ok()) return g.status();
  return g;
}

// `devices` ranks under `mode`, batch 8 per replica, Momentum.
JobSpec Spec(ParallelMode mode, int devices) {
  JobSpec s;
  s.network = MlpWithLoss;
  s.batch = 8;
  s.devices = devices;
  s.mode = mode;
  s.optimizer = host::OptimizerSpec::Momentum(0.01f, 0.9f);
  return s;
}

// The leading dim of the network's first Input.
int64_t InputBatch(const host::Graph& g) {
  for (const host::TensorInfo& t : g.tensors())
    if (t.kind == host::TensorKind::Input) return t.shape.at(0);
  return 0;
}

TEST(JobPlan, StandAloneIsOneDeviceAtTheBatch) {
  auto plan = host::PlanJob(Spec(ParallelMode::StandAlone, 1));
  SINKRT_ASSERT_OK(plan);
  EXPECT_EQ(plan->graph_batch, 8);
  EXPECT_EQ(plan->device_batch, 8);
  EXPECT_EQ(plan->data_groups, 1);
  EXPECT_EQ(plan->global_batch, 8);
  ASSERT_TRUE(plan->network);
  EXPECT_EQ(InputBatch(*plan->network), 8);
  EXPECT_EQ(plan->compile_options.world_size, 1u);
  EXPECT_TRUE(plan->compile_options.predict_program);
  EXPECT_FALSE(plan->searched);
}

TEST(JobPlan, DataParallelBatchIsPerRankAndAccumulationMultipliesTheStep) {
  JobSpec spec = Spec(ParallelMode::DataParallel, 4);
  spec.gradients_mean = true;
  spec.grad_accumulation = 2;
  auto plan = host::PlanJob(spec);
  SINKRT_ASSERT_OK(plan);
  EXPECT_EQ(plan->graph_batch, 8);
  EXPECT_EQ(plan->device_batch, 8);
  EXPECT_EQ(plan->data_groups, 4);
  EXPECT_EQ(plan->global_batch, 32);
  EXPECT_EQ(plan->step_samples, 64);
  EXPECT_EQ(plan->context.mode, ParallelMode::DataParallel);
  EXPECT_TRUE(plan->context.gradients_mean);
  EXPECT_EQ(plan->compile_options.parallel_mode, ParallelMode::DataParallel);
  EXPECT_TRUE(plan->compile_options.gradients_mean);
  EXPECT_EQ(plan->compile_options.world_size, 4u);
  EXPECT_EQ(plan->compile_options.grad_accumulation, 2);
  EXPECT_EQ(plan->model_options.context.device_num, 4);
}

TEST(JobPlan, DataParallelPipelineStagesShareTheRanksOfAStage) {
  JobSpec spec = Spec(ParallelMode::DataParallel, 4);
  spec.pipeline_stages = 2;
  spec.micro_size = 4;
  spec.pipeline_scheduler = "gpipe";
  auto plan = host::PlanJob(spec);
  SINKRT_ASSERT_OK(plan);
  // Two stages of two replicas: the replicas of a stage share the data.
  EXPECT_EQ(plan->data_groups, 2);
  EXPECT_EQ(plan->global_batch, 16);
  EXPECT_EQ(plan->strategy_devices, 2);
  EXPECT_EQ(plan->compile_options.pipeline.stages, 2);
  EXPECT_EQ(plan->compile_options.pipeline.micro_size, 4);
  EXPECT_EQ(plan->compile_options.pipeline.scheduler, "gpipe");
  EXPECT_FALSE(plan->compile_options.predict_program);  // not built for pipelines
  EXPECT_EQ(plan->model_options.micro_size, 4);
  EXPECT_EQ(plan->model_options.context.pipeline_scheduler, "gpipe");
}

// --strategy's presets: the graph's batch is the replica's times the
// preset's data-parallel degree, and as many groups share the dataset.
TEST(JobPlan, SemiAutoPresetsSetTheGraphBatchAndTheDataGroups) {
  struct Case {
    std::string strategy;
    bool full_batch;
    int64_t graph_batch, data_groups;
  };
  for (const Case& c : {Case{"data", false, 32, 4}, Case{"2x2", false, 16, 2}, Case{"model", false, 8, 1},
                        Case{"data", true, 8, 1}, Case{"", false, 32, 4}}) {
    SCOPED_TRACE(c.strategy + (c.full_batch ? " full_batch" : ""));
    JobSpec spec = Spec(ParallelMode::SemiAutoParallel, 4);
    spec.strategy = c.strategy;
    spec.full_batch = c.full_batch;
    auto plan = host::PlanJob(spec);
    SINKRT_ASSERT_OK(plan);
    EXPECT_EQ(plan->graph_batch, c.graph_batch);
    EXPECT_EQ(plan->data_groups, c.data_groups);
    EXPECT_EQ(plan->device_batch, 8);
    EXPECT_EQ(plan->global_batch, c.graph_batch);
    ASSERT_TRUE(plan->network);
    EXPECT_EQ(InputBatch(*plan->network), c.graph_batch);
    EXPECT_EQ(plan->compile_options.parallel_mode, ParallelMode::SemiAutoParallel);
    EXPECT_EQ(plan->compile_options.full_batch, c.full_batch);
    // The strategy is on the network: its first op is split.
    if (!c.strategy.empty()) {
      EXPECT_FALSE(plan->network->ops().front().strategy.empty());
    }
  }
}

// A strategy file written by one plan (--strategy-save) plans the same job.
TEST(JobPlan, SemiAutoStrategyFileGivesWhatItsPresetGave) {
  const std::string file = (std::filesystem::path(::testing::TempDir()) / "job_plan_2x2.json").string();
  JobSpec saving = Spec(ParallelMode::SemiAutoParallel, 4);
  saving.strategy = "2x2";
  saving.strategy_save = file;
  auto first = host::PlanJob(saving);
  SINKRT_ASSERT_OK(first);
  SINKRT_ASSERT_OK(host::SaveJobStrategies(saving, *first));
  JobSpec reading = Spec(ParallelMode::SemiAutoParallel, 4);
  reading.strategy = file;
  auto second = host::PlanJob(reading);
  SINKRT_ASSERT_OK(second);
  EXPECT_EQ(second->graph_batch, 16);
  EXPECT_EQ(second->data_groups, 2);
  ASSERT_EQ(second->network->ops().size(), first->network->ops().size());
  for (size_t i = 0; i < first->network->ops().size(); ++i)
    EXPECT_EQ(second->network->ops()[i].strategy, first->network->ops()[i].strategy) << first->network->ops()[i].name;
  std::filesystem::remove(file);
}

// Pipeline stages under semi_auto_parallel: the strategy spans one stage's
// ranks and every rank reads the whole batch.
TEST(JobPlan, SemiAutoPipelineStagesReadTheWholeBatch) {
  JobSpec spec = Spec(ParallelMode::SemiAutoParallel, 4);
  spec.strategy = "data";
  spec.pipeline_stages = 2;
  spec.micro_size = 2;
  auto plan = host::PlanJob(spec);
  SINKRT_ASSERT_OK(plan);
  EXPECT_EQ(plan->strategy_devices, 2);
  EXPECT_EQ(plan->graph_batch, 8);
  EXPECT_EQ(plan->data_groups, 1);
  EXPECT_EQ(plan->compile_options.pipeline.stages, 2);
}

// auto_parallel: the graph at batch x devices (full_batch: the batch),
// searched and compiled for every rank; the search decides the groups.
TEST(JobPlan, AutoParallelSearchesAtBatchTimesDevices) {
  for (bool full_batch : {false, true}) {
    SCOPED_TRACE(full_batch ? "full_batch" : "sharded batch");
    JobSpec spec = Spec(ParallelMode::AutoParallel, 2);
    spec.full_batch = full_batch;
    spec.device_memory = uint64_t{1} << 30;
    auto plan = host::PlanJob(spec);
    SINKRT_ASSERT_OK(plan);
    EXPECT_EQ(plan->graph_batch, full_batch ? 8 : 16);
    ASSERT_TRUE(plan->searched);
    ASSERT_TRUE(plan->searched->auto_parallel);
    EXPECT_EQ(plan->searched->world_size(), 2u);
    EXPECT_EQ(plan->data_groups, plan->searched->train_batch_shards());
    EXPECT_EQ(plan->device_batch * plan->data_groups, plan->graph_batch);
    EXPECT_EQ(plan->global_batch, plan->graph_batch);
    EXPECT_EQ(plan->compile_options.device_memory, uint64_t{1} << 30);
    EXPECT_EQ(plan->context.device_memory_capacity, uint64_t{1} << 30);
  }
}

struct Refusal {
  std::string name;
  std::function<void(JobSpec&)> change;
  std::string message;
};

// Each refusal, with the message the tools print (a JobSpec field is named
// by its flag).
TEST(JobPlan, RefusalsNameWhatIsWrong) {
  const std::string missing = (std::filesystem::path(::testing::TempDir()) / "no_such_file.json").string();
  const std::vector<Refusal> refusals = {
      {"strategy under auto_parallel",
       [](JobSpec& s) {
         s.mode = ParallelMode::AutoParallel;
         s.strategy = "data";
       },
       "--strategy data does not apply to --parallel auto_parallel, which searches every op's strategy"},
      {"strategy under data_parallel", [](JobSpec& s) { s.strategy = "data"; },
       "--strategy, --strategy-save and --full-batch apply to --parallel semi_auto_parallel"},
      {"full_batch under data_parallel", [](JobSpec& s) { s.full_batch = true; },
       "--strategy, --strategy-save and --full-batch apply to --parallel semi_auto_parallel"},
      {"device memory under data_parallel", [](JobSpec& s) { s.device_memory = 1024; },
       "--search-mode, --device-memory, --calibration and --fully-use-devices apply to --parallel auto_parallel"},
      {"optimizer config without the optimizer parallel",
       [](JobSpec& s) { s.parallel_optimizer_config = host::ParallelOptimizerConfig{}; },
       "--parallel-optimizer-config applies with --enable-parallel-optimizer"},
      {"micro size without stages", [](JobSpec& s) { s.micro_size = 2; },
       "--micro-size, --pipeline-scheduler and --stage-of apply with --pipeline-stages above 1"},
      {"stand_alone on 4 devices", [](JobSpec& s) { s.mode = ParallelMode::StandAlone; },
       "--devices 4, --parallel stand_alone: "},
      {"the devices named as the launcher named them",
       [](JobSpec& s) {
         s.mode = ParallelMode::StandAlone;
         s.devices_text = "RANK_SIZE (a world of 4 ranks)";
       },
       "RANK_SIZE (a world of 4 ranks), --parallel stand_alone: "},
      {"3 stages on 4 devices",
       [](JobSpec& s) {
         s.pipeline_stages = 3;
         s.micro_size = 4;
       },
       "--devices 4, --parallel data_parallel: device_num 4 is not divisible by pipeline_stages 3"},
      {"fewer micro-batches than stages",
       [](JobSpec& s) {
         s.pipeline_stages = 2;
         s.micro_size = 1;
       },
       "--pipeline-stages 2, --micro-size 1: micro_size must be greater than or equal to pipeline_stages"},
      {"gradients_mean under semi_auto_parallel",
       [](JobSpec& s) {
         s.mode = ParallelMode::SemiAutoParallel;
         s.gradients_mean = true;
       },
       "--gradients-mean, --parameter-broadcast and --comm-fusion apply to --parallel data_parallel"},
      {"an unknown strategy",
       [](JobSpec& s) {
         s.mode = ParallelMode::SemiAutoParallel;
         s.strategy = "nosuch";
       },
       "--strategy nosuch: neither a preset (data, model, or DPxMP such as 2x2) nor a strategy file"},
      {"a preset for other devices",
       [](JobSpec& s) {
         s.mode = ParallelMode::SemiAutoParallel;
         s.strategy = "3x3";
       },
       "--strategy 3x3: "},
      {"recompute under semi_auto_parallel",
       [](JobSpec& s) {
         s.mode = ParallelMode::SemiAutoParallel;
         s.recompute = {"all"};
       },
       "--recompute runs under stand_alone and data_parallel without --pipeline-stages, not with "
       "semi_auto_parallel"},
      {"recompute with stages",
       [](JobSpec& s) {
         s.pipeline_stages = 2;
         s.micro_size = 2;
         s.recompute = {"all"};
       },
       "--recompute runs under stand_alone and data_parallel without --pipeline-stages, not with pipeline stages"},
      {"recursive programming",
       [](JobSpec& s) {
         s.mode = ParallelMode::AutoParallel;
         s.search_mode = "recursive_programming";
       },
       "(MindSpore's recursive_programming is not implemented)"},
      {"a missing calibration file",
       [missing](JobSpec& s) {
         s.mode = ParallelMode::AutoParallel;
         s.calibration = missing;
       },
       "(write one with sinkrun calibrate)"},
      {"a loss appended to a sharded network",
       [](JobSpec& s) {
         s.mode = ParallelMode::SemiAutoParallel;
         s.loss = host::LossSpec::SparseSoftmaxCrossEntropy();
       },
       "semi_auto_parallel shards the loss with the network"},
      {"a sharded network without a batch",
       [](JobSpec& s) {
         s.mode = ParallelMode::SemiAutoParallel;
         s.batch = 0;
       },
       "semi_auto_parallel needs a batched Input to split"},
      {"no network", [](JobSpec& s) { s.network = nullptr; }, "the job names no network"},
      {"a layer to recompute that is not there", [](JobSpec& s) { s.recompute = {"block7"}; }, "--recompute block7: "},
  };
  for (const Refusal& r : refusals) {
    SCOPED_TRACE(r.name);
    JobSpec spec = Spec(ParallelMode::DataParallel, 4);
    r.change(spec);
    auto plan = host::PlanJob(spec);
    ASSERT_FALSE(plan.ok());
    EXPECT_THAT(plan.status().message(), HasSubstr(r.message));
  }
}

// CheckJobSpec refuses what needs no network before the network is built.
TEST(JobPlan, CheckJobSpecNeedsNoNetwork) {
  JobSpec spec = Spec(ParallelMode::SemiAutoParallel, 4);
  spec.network = nullptr;
  spec.strategy = "2x2";
  auto context = host::CheckJobSpec(spec);
  SINKRT_ASSERT_OK(context);
  EXPECT_EQ(context->mode, ParallelMode::SemiAutoParallel);
  EXPECT_EQ(host::StrategyDevices(*context), 4);
  spec.strategy = "2x3";
  EXPECT_THAT(host::CheckJobSpec(spec).status().message(), HasSubstr("--strategy 2x3"));
}

TEST(JobPlan, ByteSizesTakeDecimalAndBinarySuffixes) {
  auto mib = host::ParseByteSize("512MiB", "--device-memory");
  SINKRT_ASSERT_OK(mib);
  EXPECT_EQ(*mib, uint64_t{512} << 20);
  auto gb = host::ParseByteSize("1.5gb", "--device-memory");
  SINKRT_ASSERT_OK(gb);
  EXPECT_EQ(*gb, 1500000000u);
  for (const char* bad : {"1.5", "0", "12XB", "", "1..2GB"})
    EXPECT_THAT(host::ParseByteSize(bad, "--device-memory").status().message(),
                HasSubstr(std::string("--device-memory '") + bad + "': expected a positive number of bytes"))
        << bad;
}

TEST(JobPlan, BatchArithmeticHelpers) {
  EXPECT_EQ(host::SemiAutoGraphBatch(8, 2, false), 16);
  EXPECT_EQ(host::SemiAutoGraphBatch(8, 2, true), 8);
  EXPECT_EQ(host::AutoParallelGraphBatch(8, 4, false), 32);
  EXPECT_EQ(host::AutoParallelGraphBatch(8, 4, true), 8);
  host::ParallelContext c;
  c.device_num = 8;
  c.pipeline_stages = 2;
  EXPECT_EQ(host::StrategyDevices(c), 4);
}

// The C++ API offers what sinkrun does: a JobSpec, planned, trains on a
// world of in-process devices with no tool in between.
host::Dataset Images(int64_t rows, int64_t batch) {
  testing::SyntheticData d = testing::MakeSyntheticData(rows, kFeatures, 10, 5);
  return host::Dataset::FromArrays({{"image", testing::ImagesTensor(d)}, {"label", testing::LabelsTensor(d)}})
      .Batch(batch, true);
}

void TrainPlanned(const JobSpec& spec) {
  auto plan = host::PlanJob(spec);
  SINKRT_ASSERT_OK(plan);
  testing::InProcessWorld world(spec.devices);
  auto model =
      host::Model::Create(std::move(*plan->network), plan->loss, spec.optimizer, world.links, plan->model_options);
  SINKRT_ASSERT_OK(model);
  testing::LossRecorder losses;
  // Each rank's pipeline makes batches of device_batch; Model shards them
  // over the data-parallel groups.
  SINKRT_ASSERT_OK((*model)->train(1, Images(64, plan->device_batch), {&losses}, /*dataset_sink_mode=*/false));
  ASSERT_FALSE(losses.losses.empty());
  for (double loss : losses.losses) EXPECT_TRUE(std::isfinite(loss)) << loss;
}

TEST(JobPlan, ASemiAutoJobTrainsFromItsSpec) {
  JobSpec spec = Spec(ParallelMode::SemiAutoParallel, 4);
  spec.strategy = "2x2";
  TrainPlanned(spec);
}

TEST(JobPlan, APipelinedJobTrainsFromItsSpec) {
  JobSpec spec = Spec(ParallelMode::DataParallel, 2);
  spec.network = [](int64_t batch) -> Result<host::Graph> {
    return host::MakeMlpNetwork(batch, {kFeatures, 64, 32, 10}, 7);
  };
  spec.loss = host::LossSpec::SparseSoftmaxCrossEntropy();
  spec.pipeline_stages = 2;
  spec.micro_size = 2;
  TrainPlanned(spec);
}

}  // namespace
}  // namespace sinkrt
