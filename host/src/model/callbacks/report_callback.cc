#include "sinkrt/host/report_callback.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <utility>

namespace sinkrt::host {
namespace {

// JSON has no NaN or infinity; nlohmann would write them as null anyway,
// but saying so here keeps the choice visible.
nlohmann::ordered_json Number(double v) {
  return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr);
}

nlohmann::ordered_json RankLosses(const CallbackParams& p) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (double l : p.rank_losses) out.push_back(Number(l));
  return out;
}

}  // namespace

Result<std::unique_ptr<ReportCallback>> ReportCallback::Create(const std::string& path) {
  auto file = std::make_unique<std::ofstream>(path, std::ios::out | std::ios::trunc);
  if (!file->is_open()) return NotFound("report file '" + path + "': cannot create it: " + std::strerror(errno));
  return std::unique_ptr<ReportCallback>(new ReportCallback(std::move(file), path));
}

ReportCallback::ReportCallback(std::ostream& out) : out_(out) {}

ReportCallback::ReportCallback(std::unique_ptr<std::ofstream> file, std::string path)
    : file_(std::move(file)), out_(*file_), path_(std::move(path)) {}

Status ReportCallback::on_train_begin(RunContext& run_context) {
  train_begin_round_trips_ = run_context.original_args().host_round_trips;
  return Status::Ok();
}

Status ReportCallback::on_train_epoch_begin(RunContext& run_context) {
  const CallbackParams& p = run_context.original_args();
  epoch_begin_round_trips_ = p.host_round_trips;
  epoch_begin_step_ = p.cur_step_num;
  epoch_begin_overflows_ = p.total_overflow_steps;
  return Status::Ok();
}

Status ReportCallback::on_train_epoch_end(RunContext& run_context) {
  const CallbackParams& p = run_context.original_args();
  // Counted from cur_step_num rather than batch_num: a non-sink epoch that
  // request_stop() cut short ran fewer steps than batch_num.
  const int64_t steps = p.cur_step_num - epoch_begin_step_;
  // Data parallel: every rank ran `steps` steps of its own batch.
  const int64_t global_batch = p.global_batch_size > 0 ? p.global_batch_size : p.batch_size * p.device_num;
  const double samples = static_cast<double>(steps) * static_cast<double>(global_batch);
  nlohmann::ordered_json record = {
      {"event", "epoch"},
      {"epoch", p.cur_epoch_num},
      {"epoch_num", p.epoch_num},
      {"cur_step_num", p.cur_step_num},
      {"steps", steps},
      {"batch_size", p.batch_size},
      {"sink_mode", p.dataset_sink_mode},
      {"loss", Number(p.net_outputs)},
      {"rank_losses", RankLosses(p)},
      {"devices", p.device_num},
      {"global_batch_size", global_batch},
      {"epoch_ms", p.epoch_ms},
      {"samples_per_s", Number(samples / (p.epoch_ms / 1e3))},
      {"data_wait_ms", p.data_wait_ms},
      {"host_round_trips", p.host_round_trips - epoch_begin_round_trips_},
      {"total_host_round_trips", p.host_round_trips - train_begin_round_trips_},
      {"device_ms",
       {{"compute", p.device.compute_ms},
        {"comm", p.device.comm_ms},
        {"comm_wait", p.device.comm_wait_ms},
        {"bubble", p.device.bubble_ms},
        {"queue_wait", p.device.queue_wait_ms},
        {"other", p.device.other_ms}}},
      // The share of collective time the compute stream did not wait for:
      // AllReduce hidden behind backward. The wait also holds the comm
      // thread's wake-ups and the slowest rank's lag, so it can exceed the
      // collective's own time (nothing hidden, 0).
      {"comm_hidden", p.device.comm_ms > 0 ? Number(std::max(0.0, 1.0 - p.device.comm_wait_ms / p.device.comm_ms))
                                           : nlohmann::ordered_json(nullptr)},
  };
  // Loss scaling (docs/guide/loss_scale.md): the scale after the epoch's last
  // step, and its steps whose update was skipped.
  if (p.loss_scale > 0) {
    record["loss_scale"] = p.loss_scale;
    record["overflow_steps"] = p.total_overflow_steps - epoch_begin_overflows_;
  }
  // A learning-rate schedule (docs/guide/lr_schedules.md): the rate the
  // epoch's last step used, as the device reported it with the loss.
  if (p.lr_scheduled) record["learning_rate"] = p.learning_rate;
  return Write(record);
}

Status ReportCallback::WriteLine(std::string_view json) {
  // A stream keeps no errno of its own: the failed write(2) under the
  // flush leaves it (ENOSPC on a full disk), cleared first so that a stale
  // one is not reported.
  errno = 0;
  out_ << json << '\n';
  out_.flush();
  if (!out_.good()) {
    const std::string why = errno != 0 ? std::string(": ") + std::strerror(errno) : std::string();
    return Unavailable((path_.empty() ? std::string("report: writing a record failed")
                                      : "report file '" + path_ + "': writing a record failed") +
                       why);
  }
  return Status::Ok();
}

}  // namespace sinkrt::host
