// Profiler: the process's one active recorder (MindSpore's Profiler is
// process-wide too), and analyse().
#include "sinkrt/host/profiler.h"

#include <mutex>

#include "host/src/profile/profile_dir.h"
#include "host/src/profile/profile_session.h"

namespace sinkrt::host {
namespace {

std::mutex g_active_mu;
Profiler* g_active = nullptr;

}  // namespace

Profiler::Profiler(std::string output_path) : Profiler(ProfilerOptions{.output_path = std::move(output_path)}) {}

Profiler::Profiler(ProfilerOptions options)
    : options_(std::move(options)), session_(std::make_unique<ProfileSession>(options_)) {
  if (options_.output_path.empty()) {
    status_ = InvalidArgument("Profiler: output_path is empty; give the directory analyse() writes to");
    return;
  }
  if (options_.every == 0 || options_.keep_steps == 0) {
    status_ = InvalidArgument("Profiler: every and keep_steps must be at least 1");
    return;
  }
  if (options_.start_step == 0 || options_.stop_step < options_.start_step) {
    status_ = InvalidArgument("Profiler: the steps to profile [" + std::to_string(options_.start_step) + ", " +
                              std::to_string(options_.stop_step) + "] are not a range of steps counted from 1");
    return;
  }
  std::lock_guard<std::mutex> lk(g_active_mu);
  if (g_active) {
    status_ = FailedPrecondition("Profiler: another Profiler (writing to '" + g_active->options_.output_path +
                                 "') is recording; one at a time");
    return;
  }
  g_active = this;
}

Profiler::~Profiler() {
  std::lock_guard<std::mutex> lk(g_active_mu);
  if (g_active == this) g_active = nullptr;
}

Status Profiler::status() const { return status_; }

Profiler* Profiler::Active() {
  std::lock_guard<std::mutex> lk(g_active_mu);
  return g_active;
}

Result<ProfileSummary> Profiler::analyse() {
  SINKRT_RETURN_IF_ERROR(status_);
  {
    std::lock_guard<std::mutex> lk(g_active_mu);
    if (g_active == this) g_active = nullptr;  // recording stops here
  }
  SINKRT_RETURN_IF_ERROR(session_->Detach(), "Profiler.analyse");
  ProfileData data = session_->Snapshot();
  if (data.ranks.empty())
    return FailedPrecondition(
        "Profiler.analyse: nothing was recorded (no Model.train ran while the Profiler was "
        "active)");
  ProfileSummary summary;
  SINKRT_RETURN_IF_ERROR(WriteProfileDir(data, options_.output_path, &summary), "Profiler.analyse");
  return summary;
}

}  // namespace sinkrt::host
