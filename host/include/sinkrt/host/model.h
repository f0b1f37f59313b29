// Model: MindSpore's mindspore.train.Model for sinkrt.
//
//   Model::Create(network, LossSpec::SparseSoftmaxCrossEntropy(),
//                 OptimizerSpec::Momentum(0.01, 0.9), device)
//   model->train(epoch, dataset, callbacks, dataset_sink_mode, sink_size, initial_epoch)
//
// train() follows MindSpore's sink semantics exactly (reference/
// mindspore-semantics.md §1–§2): sink_size = -1 sinks a full dataset pass per
// epoch; sink_size = N runs N steps per epoch and continues through the data
// across epochs and pass boundaries; the host sends exactly
// (epoch - initial_epoch) x steps batches; callbacks run once per sink with
// cur_step_num advanced by the sink's steps. Non-sink mode runs the same
// compiled program one step per request, with per-step callbacks, so the
// two modes give bitwise identical parameters.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "sinkrt/host/callback.h"
#include "sinkrt/host/compiler.h"
#include "sinkrt/host/dataset.h"
#include "sinkrt/host/graph.h"
#include "sinkrt/host/optimizer.h"
#include "sinkrt/host/parallel_context.h"
#include "sinkrt/host/tensor.h"
#include "sinkrt/runtime/device_link.h"

namespace sinkrt::host {

struct LossSpec {
  enum class Kind { NetworkComputesLoss, SparseSoftmaxCrossEntropy };
  Kind kind = Kind::SparseSoftmaxCrossEntropy;
  std::string label_column = "label";  // the i32 input the loss reads

  static LossSpec SparseSoftmaxCrossEntropy(std::string label_column = "label") {
    return {Kind::SparseSoftmaxCrossEntropy, std::move(label_column)};
  }
  // The network already called SetLoss().
  static LossSpec None() { return {Kind::NetworkComputesLoss, ""}; }
};

struct ModelOptions {
  ParallelContext context;
  uint32_t queue_capacity = 16;  // MS_DATASET_SINK_QUEUE overrides (1..128)
};

struct EvalResult {
  double accuracy = 0;   // correct / samples
  double loss = 0;       // mean over samples
  int64_t samples = 0;
  uint64_t round_trips = 0;
};

class Model {
 public:
  // `network`: a forward graph whose Input tensors are named after dataset
  // columns and whose outputs()[0] are the logits. The device must outlive
  // the Model. Compiles and loads the task stream.
  static Result<std::unique_ptr<Model>> Create(Graph network, LossSpec loss, OptimizerSpec optimizer,
                                               DeviceLink& device, ModelOptions options = {});
  ~Model();

  // MindSpore 2.x defaults: dataset_sink_mode = false, sink_size = -1.
  Status train(int epoch, const Dataset& train_dataset, const std::vector<Callback*>& callbacks = {},
               bool dataset_sink_mode = false, int sink_size = -1, int initial_epoch = 0);
  // Loss and accuracy over every sample of `dataset` (a partial last batch
  // included, padded on the device and masked on the host).
  Result<EvalResult> eval(const Dataset& dataset, bool dataset_sink_mode = false);
  // Logits for one batch of network inputs (Input order, batch may be short).
  Result<Tensor> predict(const Row& inputs);

  // Parameters and optimizer state, by buffer name (checkpoints).
  Result<std::vector<std::pair<std::string, Tensor>>> ReadState();
  Status WriteState(const std::vector<std::pair<std::string, Tensor>>& state);

  uint64_t host_round_trips() const;
  const CompiledStream& compiled() const;
  const ParallelContext& context() const;

  struct Impl;

 private:
  explicit Model(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sinkrt::host
