/// \file
/// ReportCallback: a training run as JSON lines, for scripts and benchmarks.
///
/// ~~~
///   auto report = ReportCallback::Create("run.jsonl");
///   model->train(5, data, {&loss, report->get()}, /*dataset_sink_mode=*/true);
///   (*report)->Write(nlohmann::ordered_json{{"event", "end"}, {"test_accuracy", acc}});
/// ~~~
///
/// One object per line, flushed as it is written, so a run that dies leaves
/// every epoch it finished. At each epoch end (in sink mode, after the
/// epoch's sink):
///
/// ~~~
///   {"event":"epoch", "epoch":E, "epoch_num":N, "cur_step_num":S,
///    "steps":K, "batch_size":B, "sink_mode":true, "loss":L,
///    "epoch_ms":T, "samples_per_s":K*B/T, "data_wait_ms":W,
///    "host_round_trips":R, "total_host_round_trips":RT,
///    "device_ms":{"compute":..,"comm":..,"comm_wait":..,"bubble":..,
///                 "queue_wait":..,"other":..}}
/// ~~~
///
/// epoch is absolute (it continues after initial_epoch), cur_step_num is
/// MindSpore's (the steps of this train() call so far), steps are the steps
/// this epoch ran, loss is the last step's. host_round_trips counts the
/// control round trips of this epoch — 1 per sink epoch, K without sinking —
/// and total_host_round_trips those since train() began; device_ms is the
/// device's own account of the epoch's sinks (DeviceTiming: comm_wait is the
/// compute stream waiting for collectives, bubble a pipeline stage waiting
/// for a neighbour stage). A NaN loss is written as null. Under loss scaling
/// (docs/guide/loss_scale.md) the record also has "loss_scale" (after the epoch's
/// last step) and "overflow_steps" (its steps whose update was skipped).
/// With a learning-rate schedule (docs/guide/lr_schedules.md) it has
/// "learning_rate": the rate of the epoch's last step (a sink's end).
/// Whatever comes after training (an end record with the test accuracy) the
/// caller adds with Write() (any JSON value with nlohmann's dump(), which
/// this header does not include) or WriteLine().
#pragma once

#include <cstdint>
#include <fstream>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>

#include "sinkrt/host/callback.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host {

/// Writes a training run as JSON lines; see the file's description.
class ReportCallback : public Callback {
 public:
  /// Creates (or truncates) `path`; the error names it.
  static Result<std::unique_ptr<ReportCallback>> Create(const std::string& path);
  /// Writes to `out`, which must outlive the callback.
  explicit ReportCallback(std::ostream& out);

  Status on_train_begin(RunContext& run_context) override;
  Status on_train_epoch_begin(RunContext& run_context) override;
  Status on_train_epoch_end(RunContext& run_context) override;

  /// Appends `record`, a JSON value such as nlohmann::ordered_json (the
  /// header names no JSON library), as one line; invalid UTF-8 in its
  /// strings is replaced. Fails (naming the file) when the line cannot be
  /// written.
  template <class Json>
  Status Write(const Json& record) {
    return WriteLine(record.dump(-1, ' ', false, Json::error_handler_t::replace));
  }
  /// Appends `json`, one record already serialised without newlines, as
  /// one line. Fails (naming the file) when the line cannot be written.
  Status WriteLine(std::string_view json);

 private:
  ReportCallback(std::unique_ptr<std::ofstream> file, std::string path);

  std::unique_ptr<std::ofstream> file_;  ///< set when the callback owns its file
  std::ostream& out_;
  std::string path_;
  uint64_t train_begin_round_trips_ = 0;
  uint64_t epoch_begin_round_trips_ = 0;
  int64_t epoch_begin_step_ = 0;
  int64_t epoch_begin_overflows_ = 0;
};

}  // namespace sinkrt::host
