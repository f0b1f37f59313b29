// A sharded or pipelined job from C++, as `sinkrun train --parallel ...`
// runs it, without the tool: a host::JobSpec, planned by host::PlanJob
// (docs/guide/job_plan.md), trained on a world of in-process devices.
//
//   train_sharded [--devices 4] [--strategy 2x2] [--pipeline-stages 1] [--batch 16]
//
// With --pipeline-stages S > 1 the job is data_parallel with S stages (S
// micro-batches); otherwise semi_auto_parallel with --strategy.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <vector>

#include <sinkrt/sinkrt.h>

using namespace sinkrt;

namespace {

// The zoo MLP with MindSpore's loss: a shard strategy covers the loss too.
Result<host::Graph> MlpWithLoss(int64_t batch) {
  host::Graph g = host::MakeMlpNetwork(batch, {784, 256, 128, 10}, 1);
  g.SetLoss(g.SparseSoftmaxCrossEntropy(g.outputs().front(), g.Input("label", {batch}, DType::I32)));
  if (!g.status().ok()) return g.status();
  return g;
}

// Synthetic 28x28 images as [batch, 784] f32, labels i32.
host::Dataset Images(int64_t samples, uint32_t split, int64_t batch) {
  using host::Transform;
  return host::Dataset::SyntheticImages(samples, split)
      .Map("image", {Transform::Rescale(1.0 / 255.0), Transform::Reshape({784})})
      .Map("label", {Transform::TypeCast(DType::I32)})
      .Batch(batch, true);
}

int Fail(const Status& st) {
  std::fprintf(stderr, "train_sharded: %s\n", st.message().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  device::EnsurePassiveOpenMp(argv);
  CLI::App app{"Train a sharded or pipelined MLP on in-process devices from a host::JobSpec"};
  host::JobSpec spec;
  spec.devices = 4;
  spec.batch = 16;
  spec.strategy = "2x2";
  app.add_option("--devices", spec.devices, "ranks (in-process devices)");
  app.add_option("--strategy", spec.strategy, "semi_auto_parallel: data, model, DPxMP or a strategy file");
  app.add_option("--pipeline-stages", spec.pipeline_stages, "above 1: data_parallel with this many stages");
  app.add_option("--batch", spec.batch, "one data-parallel replica's batch");
  CLI11_PARSE(app, argc, argv);

  spec.network = MlpWithLoss;
  spec.optimizer = host::OptimizerSpec::Momentum(0.01f, 0.9f);
  if (spec.pipeline_stages > 1) {
    spec.mode = host::ParallelMode::DataParallel;
    spec.strategy.clear();
    spec.micro_size = spec.pipeline_stages;
  } else {
    spec.mode = host::ParallelMode::SemiAutoParallel;
  }
  auto plan = host::PlanJob(spec);
  if (!plan.ok()) return Fail(plan.status());
  std::printf("%s on %d devices: graph batch %lld, %lld data-parallel group(s) of batch %lld, global batch %lld\n",
              host::ParallelModeName(plan->context.mode), spec.devices, static_cast<long long>(plan->graph_batch),
              static_cast<long long>(plan->data_groups), static_cast<long long>(plan->device_batch),
              static_cast<long long>(plan->global_batch));

  std::vector<std::unique_ptr<device::InProcessDevice>> devices;
  std::vector<DeviceLink*> links;
  for (int r = 0; r < spec.devices; ++r) {
    devices.push_back(std::make_unique<device::InProcessDevice>());
    links.push_back(devices.back().get());
  }
  auto model = host::Model::Create(std::move(*plan->network), plan->loss, spec.optimizer, links, plan->model_options);
  if (!model.ok()) return Fail(model.status());
  host::LossMonitor loss_monitor(1);
  // Each rank's dataset makes batches of device_batch; Model gives each
  // data-parallel group its shard.
  if (Status trained = (*model)->train(2, Images(4096, 0, plan->device_batch), {&loss_monitor}, true); !trained.ok())
    return Fail(trained);
  auto eval = (*model)->eval(Images(1024, 1, plan->device_batch));
  if (!eval.ok()) return Fail(eval.status());
  std::printf("Eval result: accuracy %.4f, loss %.4f over %lld samples\n", eval->accuracy, eval->loss,
              static_cast<long long>(eval->samples));
  return 0;
}
