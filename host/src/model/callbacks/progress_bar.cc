#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "sinkrt/host/callbacks.h"

namespace sinkrt::host {
namespace {

constexpr int kWidth = 30;

}  // namespace

ProgressBar::ProgressBar(std::ostream& out) : ProgressBar(out, &out == &std::cout && isatty(STDOUT_FILENO)) {}

ProgressBar::ProgressBar(std::ostream& out, bool interactive) : out_(out), interactive_(interactive) {}

void ProgressBar::Draw(const CallbackParams& p) {
  const int64_t total = p.batch_num > 0 ? p.batch_num : 1;
  const int64_t done = std::clamp<int64_t>(p.cur_step_num - epoch_start_step_, 0, total);
  const int filled = static_cast<int>(done * kWidth / total);
  std::string bar(static_cast<size_t>(filled), '#');
  bar.append(static_cast<size_t>(kWidth - filled), '.');
  // global_batch = initial_epoch x batch_num + cur_step_num.
  const int64_t initial_epoch = (p.global_batch - p.cur_step_num) / total;
  char loss[32];
  std::snprintf(loss, sizeof loss, "%.4f", p.net_outputs);
  out_ << "\r\x1b[2Kepoch " << p.cur_epoch_num << "/" << initial_epoch + p.epoch_num << " [" << bar << "] " << done
       << "/" << total << (done > 0 ? std::string(" loss ") + loss : std::string()) << std::flush;
  drawn_ = true;
}

Status ProgressBar::on_train_epoch_begin(RunContext& run_context) {
  if (!interactive_) return Status::Ok();
  if (drawn_) out_ << "\n";
  epoch_start_step_ = run_context.original_args().cur_step_num;
  Draw(run_context.original_args());
  return Status::Ok();
}

Status ProgressBar::on_train_step_end(RunContext& run_context) {
  if (interactive_) Draw(run_context.original_args());
  return Status::Ok();
}

Status ProgressBar::on_train_end(RunContext&) {
  if (interactive_ && drawn_) out_ << std::endl;
  drawn_ = false;
  return Status::Ok();
}

}  // namespace sinkrt::host
