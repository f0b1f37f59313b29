/// \file
/// Callbacks with MindSpore's semantics (mindspore.train.Callback).
///
/// In sink mode the step hooks run once per sink, cur_step_num advances by the
/// sink's steps and net_outputs is the last step's loss; in non-sink mode they
/// run every step. request_stop() takes effect at the next check: after every
/// step and epoch in non-sink mode, after the epoch (the sink boundary) in
/// sink mode. A hook that returns an error stops training with that error.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sinkrt/runtime/device_link.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host {

class Model;

/// MindSpore's cb_params.
struct CallbackParams {
  int epoch_num = 0;         ///< epoch - initial_epoch
  int64_t batch_num = 0;     ///< steps per epoch: sink_size, or dataset size
  int cur_epoch_num = 0;     ///< 1-based, absolute (continues after initial_epoch)
  int64_t cur_step_num = 0;  ///< global step count of this train() call
  /// Batches consumed since the data's start: initial_epoch x batch_num +
  /// cur_step_num. A run resumed with initial_epoch = E starts its data at
  /// E x batch_num, so this is the data position a checkpoint records.
  int64_t global_batch = 0;
  int64_t sink_steps = 0;           ///< steps in the sink that just ran (1 in non-sink mode)
  bool dataset_sink_mode = false;   ///< whether train() runs sunk
  double net_outputs = 0;           ///< last step's loss (data parallel: the mean of rank_losses)
  std::vector<double> rank_losses;  ///< last step's loss on each rank (one entry stand-alone)
  int device_num = 1;               ///< devices training together
  int64_t batch_size = 0;           ///< samples per step on one rank
  /// Samples one step trains on over every rank: batch_size x device_num
  /// under data parallel, batch_size x the replicas of a pipeline (whose
  /// stages pass the same samples along).
  int64_t global_batch_size = 0;
  /// This epoch so far, for monitors.
  double epoch_ms = 0;            ///< wall time since epoch begin
  double data_wait_ms = 0;        ///< host time waiting for the pipeline
  DeviceTiming device;            ///< summed over the epoch's sinks (data parallel: averaged over ranks)
  uint64_t host_round_trips = 0;  ///< control round trips so far, per device
  /// Loss scaling (docs/guide/loss_scale.md; the scale and the overflow flag of
  /// MindSpore's TrainOneStepWithLossScaleCell): the scale after the last
  /// step, the steps of the sink that just ran whose gradients overflowed
  /// (their updates were skipped), and all such steps the device has
  /// counted (a resumed checkpoint's included). 0 without.
  /// @{
  double loss_scale = 0;
  int64_t overflow_steps = 0;
  int64_t total_overflow_steps = 0;
  /// @}
  /// With a learning-rate schedule (docs/guide/lr_schedules.md): the rate
  /// the sink's last step used, read with the sink's outputs (no extra
  /// round trip); 0 without a schedule.
  double learning_rate = 0;
  bool lr_scheduled = false;  ///< whether learning_rate comes from a schedule
  Model* model = nullptr;     ///< the Model training
};

/// What every hook gets: the params, and a way to stop training.
class RunContext {
 public:
  /// A context over `params` (not owned).
  explicit RunContext(CallbackParams* params) : params_(params) {}
  /// The params (MindSpore's original_args()).
  CallbackParams& original_args() { return *params_; }
  /// Stops training at the next check (see the file's description).
  void request_stop() { stop_ = true; }
  /// Whether a hook asked to stop.
  bool get_stop_requested() const { return stop_; }

 private:
  CallbackParams* params_;
  bool stop_ = false;
};

/// A training hook, MindSpore's Callback: override the hooks you need; each default does nothing.
class Callback {
 public:
  virtual ~Callback() = default;
  /// Before the first epoch.
  virtual Status on_train_begin(RunContext&) { return Status::Ok(); }
  /// Before each epoch.
  virtual Status on_train_epoch_begin(RunContext&) { return Status::Ok(); }
  /// Before each step (sink mode: each sink).
  virtual Status on_train_step_begin(RunContext&) { return Status::Ok(); }
  /// After each step (sink mode: each sink).
  virtual Status on_train_step_end(RunContext&) { return Status::Ok(); }
  /// After each epoch.
  virtual Status on_train_epoch_end(RunContext&) { return Status::Ok(); }
  /// After the last epoch, or after a requested stop; not when training fails.
  virtual Status on_train_end(RunContext&) { return Status::Ok(); }
};

}  // namespace sinkrt::host
