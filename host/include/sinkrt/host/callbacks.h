/// \file
/// MindSpore's built-in callbacks (mindspore.train.LossMonitor, TimeMonitor,
/// ModelCheckpoint + CheckpointConfig, a progress bar) and checkpoint files.
///
/// ~~~
///   LossMonitor loss;                               // prints to std::cout
///   TimeMonitor time(0, /*data_time=*/true);
///   auto ckpt = ModelCheckpoint::Create("mlp", "ckpt", {.save_checkpoint_steps = 100});
///   model->train(4, data, {&loss, &time, ckpt->get()}, /*dataset_sink_mode=*/true, 100);
/// ~~~
///
/// Printing goes to a std::ostream (default std::cout) so that a test can
/// capture it. In sink mode the step hooks run once per sink (callback.h), so
/// LossMonitor prints and ModelCheckpoint checks once per sink, as in
/// MindSpore.
///
/// Resuming. A checkpoint written at the end of epoch E (step == batch_num)
/// resumes exactly: a new Model of the same network, LoadCheckpoint, then
/// train(epoch, data, ..., initial_epoch = E) sees the batches an
/// uninterrupted run would have seen from there, because train() starts its
/// data at global batch initial_epoch x steps_per_epoch (model.h), and ends
/// with bitwise identical parameters and optimizer state.
#pragma once

#include <cstdint>
#include <iostream>
#include <memory>
#include <string>

#include "sinkrt/host/callback.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host {

class Model;

/// Prints `epoch: E step: S, loss is L` every `per_print_times` steps, S the
/// step within the epoch and L the loss as Python prints a float; in sink mode
/// at most once per sink (with S = batch_num). 0 never prints. A NaN or
/// infinite loss stops training with "In epoch: E step: S, loss is NAN or INF,
/// training process cannot continue, terminating training.". A negative
/// per_print_times fails on_train_begin with MindSpore's message.
class LossMonitor : public Callback {
 public:
  /// Prints every `per_print_times` steps to `out`.
  explicit LossMonitor(int per_print_times = 1, std::ostream& out = std::cout);
  Status on_train_begin(RunContext& run_context) override;
  Status on_train_step_end(RunContext& run_context) override;

 private:
  int per_print_times_;
  std::ostream& out_;
  int64_t last_print_step_ = 0;
};

/// Prints `Train epoch time: X ms, per step time: Y ms` at each epoch end
/// ("%5.3f"), Y = X / batch_num (sink_size in sink mode), or over `data_size`
/// steps when batch_num is unknown; with `data_time`, appends
/// ` (data time: Z ms)`, Z the host's wait on the dataset pipeline per step.
class TimeMonitor : public Callback {
 public:
  /// Times each epoch over `data_size` steps when batch_num is unknown; `data_time` adds the data
  /// wait; prints to `out`.
  explicit TimeMonitor(int64_t data_size = 0, bool data_time = false, std::ostream& out = std::cout);
  Status on_train_epoch_end(RunContext& run_context) override;

 private:
  int64_t data_size_;
  bool data_time_;
  std::ostream& out_;
};

/// Loss scaling (docs/guide/loss_scale.md): prints `epoch: E: N of S steps
/// overflowed, their updates skipped (loss scale X)` at the end of every
/// epoch in which a step's gradients overflowed, so that no update is
/// dropped without a word (MindSpore returns the overflow flag from
/// TrainOneStepWithLossScaleCell and leaves it to the user; a sunk run
/// has only this per-sink count). Silent without loss scaling.
class LossScaleMonitor : public Callback {
 public:
  /// Prints its lines to `out`.
  explicit LossScaleMonitor(std::ostream& out = std::cout);
  Status on_train_epoch_begin(RunContext& run_context) override;
  Status on_train_epoch_end(RunContext& run_context) override;

 private:
  std::ostream& out_;
  int64_t begin_overflows_ = 0, begin_step_ = 0;
};

/// MindSpore's CheckpointConfig, by steps or epochs. save_checkpoint_steps > 0
/// saves when cur_step_num has advanced that far since the last save
/// (checked once per sink in sink mode); else save_checkpoint_epochs > 0
/// saves at the end of every such epoch. keep_checkpoint_max keeps the
/// newest K files of this prefix (0 means 1, as in MindSpore). All three 0 is
/// an error.
struct CheckpointConfig {
  int save_checkpoint_steps = 1;   ///< save every this many steps (0: by epochs)
  int save_checkpoint_epochs = 0;  ///< else every this many epochs
  int keep_checkpoint_max = 5;     ///< newest files kept

  /// Errors, in MindSpore's words: a negative field, or all three 0.
  Status Validate() const;
};

class PrefixClaim;

/// Writes `{prefix}-{cur_epoch_num}_{step_in_epoch}.ckpt` into `directory`
/// (created if missing), and a last one at the end of training unless the
/// last step was just saved. Like MindSpore, if the directory already holds
/// checkpoints of `prefix`, the prefix becomes `{prefix}_{n}` so a second run
/// never overwrites or prunes the first run's files.
///
/// Runs at the same time (threads or processes) into one directory never
/// share a prefix either: each ModelCheckpoint holds a claim on its prefix
/// for its life (the file `.{prefix}.lock`, locked with flock and removed by
/// the destructor; a dead process's claim is free), and a prefix another
/// live ModelCheckpoint holds is skipped for the next `{prefix}_{n}`.
class ModelCheckpoint : public Callback {
 public:
  /// A checkpoint callback; fails on a prefix with a '/', a bad `config`, or
  /// a directory it cannot create or write in ("": the current one), naming
  /// the directory. Removes the temporaries of writers that died mid-save.
  static Result<std::unique_ptr<ModelCheckpoint>> Create(std::string prefix = "CKP", std::string directory = "",
                                                         CheckpointConfig config = {});
  ~ModelCheckpoint() override;
  Status on_train_step_end(RunContext& run_context) override;
  Status on_train_epoch_end(RunContext& run_context) override;
  Status on_train_end(RunContext& run_context) override;

  const std::string& prefix() const { return prefix_; }                 ///< after renaming
  const std::string& directory() const { return directory_; }           ///< where it writes
  const std::string& latest_ckpt_file_name() const { return latest_; }  ///< the last file written; "" before the first

 private:
  ModelCheckpoint(std::string prefix, std::string directory, CheckpointConfig config,
                  std::unique_ptr<PrefixClaim> claim);
  Status Save(const CallbackParams& p);

  std::unique_ptr<PrefixClaim> claim_;
  std::string prefix_;
  std::string directory_;
  CheckpointConfig config_;
  int64_t last_triggered_step_ = 0;
  std::string latest_;
};

/// A one-line progress display (`epoch 2/4 [#####.....] 48/96 loss 0.31`),
/// redrawn after every step or sink, when the output is an interactive
/// terminal: by default when `out` is std::cout and stdout is a tty, silent
/// otherwise (logs and pipes stay clean).
class ProgressBar : public Callback {
 public:
  /// Draws on `out` when it is std::cout and stdout is a tty.
  explicit ProgressBar(std::ostream& out = std::cout);
  /// Draws on `out` when `interactive`, whatever it is.
  ProgressBar(std::ostream& out, bool interactive);
  Status on_train_epoch_begin(RunContext& run_context) override;
  Status on_train_step_end(RunContext& run_context) override;
  Status on_train_end(RunContext& run_context) override;

 private:
  void Draw(const CallbackParams& p);
  std::ostream& out_;
  bool interactive_;
  bool drawn_ = false;
  int64_t epoch_start_step_ = 0;
};

/// Where training stood when a checkpoint was written.
struct CheckpointInfo {
  int epoch = 0;             ///< cur_epoch_num when saved (1-based; 0: before training)
  int64_t step = 0;          ///< step within that epoch
  int64_t batch_num = 0;     ///< steps per epoch of the run that saved it
  int64_t global_batch = 0;  ///< batches consumed since the data's start
  /// Filled by LoadCheckpoint: the saved graph hash, and the initial_epoch to
  /// resume with — `epoch` when the save closed its epoch (step == batch_num),
  /// else epoch - 1 (a mid-epoch checkpoint re-runs that epoch from its
  /// start on the saved weights, so it is not a bitwise-exact resume).
  /// @{
  uint64_t graph_hash = 0;
  int initial_epoch = 0;
  /// @}
};

/// Writes every Param and OptState tensor of `model` and `info` (atomically:
/// a reader never sees a half-written file).
Status SaveCheckpoint(const std::string& path, Model& model, const CheckpointInfo& info = {});

/// Verifies `path` (FlatBuffers Verifier, identifier, format version), that it
/// was saved from the same network (graph hash) and that it holds every Param
/// and OptState tensor of `model` with the model's dtype and shape — errors
/// name the file and the tensor — and only then writes the state into the
/// model's device. Tensors the model does not have are ignored. `info`
/// (optional) receives where training stood.
Status LoadCheckpoint(const std::string& path, Model& model, CheckpointInfo* info = nullptr);

}  // namespace sinkrt::host
