// LossMonitor and TimeMonitor (mindspore/train/callback/_loss_monitor.py,
// _time_monitor.py): the same conditions and the same lines; and
// LossScaleMonitor, which says when overflowed steps were skipped.
#include <cmath>
#include <cstdio>
#include <string>

#include "host/src/util/py_repr.h"
#include "sinkrt/host/callbacks.h"

namespace sinkrt::host {
namespace {

int64_t StepInEpoch(const CallbackParams& p) {
  return p.batch_num > 0 ? (p.cur_step_num - 1) % p.batch_num + 1 : p.cur_step_num;
}

std::string Ms(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%5.3f", v);
  return buf;
}

}  // namespace

LossMonitor::LossMonitor(int per_print_times, std::ostream& out) : per_print_times_(per_print_times), out_(out) {}

Status LossMonitor::on_train_begin(RunContext&) {
  if (per_print_times_ < 0)
    return InvalidArgument("The input value must be int and must >= 0, but got '" + std::to_string(per_print_times_) +
                           "' with type 'int'.");
  // cur_step_num restarts at 0 with every train(); so does the print clock.
  last_print_step_ = 0;
  return Status::Ok();
}

Status LossMonitor::on_train_step_end(RunContext& run_context) {
  const CallbackParams& p = run_context.original_args();
  const double loss = p.net_outputs;
  const int64_t step = StepInEpoch(p);
  if (std::isnan(loss) || std::isinf(loss))
    return InvalidArgument("In epoch: " + std::to_string(p.cur_epoch_num) + " step: " + std::to_string(step) +
                           ", loss is NAN or INF, training process cannot continue, terminating training.");
  if (per_print_times_ != 0 && p.cur_step_num - last_print_step_ >= per_print_times_) {
    last_print_step_ = p.cur_step_num;
    out_ << "epoch: " << p.cur_epoch_num << " step: " << step << ", loss is " << PyFloatRepr(loss) << std::endl;
  }
  return Status::Ok();
}

TimeMonitor::TimeMonitor(int64_t data_size, bool data_time, std::ostream& out)
    : data_size_(data_size), data_time_(data_time), out_(out) {}

Status TimeMonitor::on_train_epoch_end(RunContext& run_context) {
  const CallbackParams& p = run_context.original_args();
  const int64_t step_size = p.batch_num > 0 ? p.batch_num : data_size_;
  if (step_size < 1)
    return InvalidArgument("The input value must be int and must > 0, but got '" + std::to_string(step_size) +
                           "' with type 'int'.");
  std::string line = "Train epoch time: " + Ms(p.epoch_ms) +
                     " ms, per step time: " + Ms(p.epoch_ms / static_cast<double>(step_size)) + " ms";
  if (data_time_) line += " (data time: " + Ms(p.data_wait_ms / static_cast<double>(step_size)) + " ms)";
  out_ << line << std::endl;
  return Status::Ok();
}

LossScaleMonitor::LossScaleMonitor(std::ostream& out) : out_(out) {}

Status LossScaleMonitor::on_train_epoch_begin(RunContext& run_context) {
  const CallbackParams& p = run_context.original_args();
  begin_overflows_ = p.total_overflow_steps;
  begin_step_ = p.cur_step_num;
  return Status::Ok();
}

Status LossScaleMonitor::on_train_epoch_end(RunContext& run_context) {
  const CallbackParams& p = run_context.original_args();
  const int64_t overflowed = p.total_overflow_steps - begin_overflows_;
  if (p.loss_scale <= 0 || overflowed <= 0) return Status::Ok();
  const int64_t steps = p.cur_step_num - begin_step_;
  out_ << "epoch: " << p.cur_epoch_num << ": " << overflowed << " of " << steps << (steps == 1 ? " step" : " steps")
       << " overflowed, " << (overflowed == 1 ? "its update" : "their updates") << " skipped (loss scale "
       << PyFloatRepr(p.loss_scale) << ")" << std::endl;
  return Status::Ok();
}

}  // namespace sinkrt::host
