// ModelCheckpoint and CheckpointConfig (mindspore/train/callback/
// _checkpoint.py): when to save, how files are named, which are kept.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <climits>
#include <filesystem>
#include <string>
#include <system_error>
#include <tuple>
#include <vector>

#include "host/src/model/callbacks/prefix_claim.h"
#include "runtime/src/file_io.h"
#include "sinkrt/host/callbacks.h"
#include "sinkrt/host/model.h"

namespace sinkrt::host {
namespace fs = std::filesystem;
namespace {

Status CheckNonNegative(int v) {
  if (v >= 0) return Status::Ok();
  return InvalidArgument("The input value must be int and must >= 0, but got '" + std::to_string(v) +
                         "' with type 'int'.");
}

bool HasAlpha(const std::string& s) {
  return std::any_of(s.begin(), s.end(), [](unsigned char c) { return std::isalpha(c); });
}

// A decimal number that fits in a long long (file names are untrusted: no
// exception from std::stoll on 30 digits).
bool ParseNumber(const std::string& s, long long* out) {
  if (s.empty() || !std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); })) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size();
}

// Calls fn on every entry of `dir`, without throwing: an unreadable
// directory is an empty one here (writing into it reports the problem).
template <typename Fn>
void ForEachEntry(const fs::path& dir, Fn fn) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) fn(*it);
}

// _chg_ckpt_file_name_if_same_exist: a directory that already holds
// `{prefix}-*.ckpt` (or `{prefix}_{n}-*.ckpt`) files gets the next free
// `{prefix}_{n}`.
std::string UniquePrefix(const fs::path& dir, const std::string& prefix) {
  long long suffix = 0;
  ForEachEntry(dir, [&](const fs::directory_entry& e) {
    const std::string name = e.path().filename().string();
    if (e.path().extension() != ".ckpt" || name.ends_with("_breakpoint.ckpt")) return;
    if (!name.starts_with(prefix) || name.size() <= prefix.size() ||
        std::isalpha(static_cast<unsigned char>(name[prefix.size()])))
      return;
    const size_t dash = name.find('-', prefix.size());
    long long n = 0;
    if (dash == prefix.size()) {
      suffix = std::max(suffix, 1LL);
    } else if (dash != std::string::npos && ParseNumber(name.substr(prefix.size() + 1, dash - prefix.size() - 1), &n) &&
               n < LLONG_MAX) {
      suffix = std::max(suffix, n + 1);
    }
  });
  return suffix == 0 ? prefix : prefix + "_" + std::to_string(suffix);
}

// CheckpointManager.update_ckpoint_filelist: `{prefix}-*.ckpt` whose middle
// has no letters, oldest first (by modification time, then epoch and step,
// since a fast run can write two files within the clock's resolution).
std::vector<fs::path> CheckpointFiles(const fs::path& dir, const std::string& prefix) {
  struct Entry {
    fs::file_time_type mtime;
    long long epoch, step;
    fs::path path;
  };
  std::vector<Entry> entries;
  ForEachEntry(dir, [&](const fs::directory_entry& e) {
    const std::string name = e.path().filename().string();
    if (e.path().extension() != ".ckpt" || !name.starts_with(prefix + "-")) return;
    const std::string mid = name.substr(prefix.size(), name.size() - prefix.size() - 5);
    if (HasAlpha(mid)) return;
    std::error_code ec;
    Entry entry{e.last_write_time(ec), 0, 0, e.path()};
    const size_t us = mid.find('_');
    if (us != std::string::npos &&
        !(ParseNumber(mid.substr(1, us - 1), &entry.epoch) && ParseNumber(mid.substr(us + 1), &entry.step)))
      entry.epoch = entry.step = 0;
    entries.push_back(std::move(entry));
  });
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.mtime, a.epoch, a.step) < std::tie(b.mtime, b.epoch, b.step);
  });
  std::vector<fs::path> out;
  for (Entry& e : entries) out.push_back(std::move(e.path));
  return out;
}

// MindSpore's next free prefix (UniquePrefix), or, while another live run
// holds that one, the next `{prefix}_{n}` no one holds. A claim taken on a
// prefix that has files after all (written by a run that ended between the
// listing and the claim, or left by a dead one) is given up: only an empty
// prefix may be pruned by this run's rotation.
Result<std::string> ClaimPrefix(const fs::path& dir, const std::string& prefix, std::unique_ptr<PrefixClaim>* claim) {
  std::string candidate = UniquePrefix(dir, prefix);
  long long n = 0;  // candidate is prefix, or prefix_n
  if (candidate != prefix) ParseNumber(candidate.substr(prefix.size() + 1), &n);
  for (int tries = 0; tries < 100000; ++tries) {
    SINKRT_ASSIGN_OR_RETURN(std::unique_ptr<PrefixClaim> held, PrefixClaim::TryClaim(dir.string(), candidate));
    if (held && CheckpointFiles(dir, candidate).empty()) {
      *claim = std::move(held);
      return candidate;
    }
    if (held) held->Release();
    candidate = prefix + "_" + std::to_string(++n);
  }
  return ResourceExhausted("no free checkpoint prefix '" + prefix + "_N' in '" + dir.string() + "'");
}

}  // namespace

Status CheckpointConfig::Validate() const {
  SINKRT_RETURN_IF_ERROR(CheckNonNegative(save_checkpoint_steps));
  SINKRT_RETURN_IF_ERROR(CheckNonNegative(save_checkpoint_epochs));
  SINKRT_RETURN_IF_ERROR(CheckNonNegative(keep_checkpoint_max));
  if (save_checkpoint_steps == 0 && save_checkpoint_epochs == 0 && keep_checkpoint_max == 0)
    return InvalidArgument(
        "For 'CheckpointConfig', the input arguments 'save_checkpoint_steps', "
        "'save_checkpoint_epochs' and 'keep_checkpoint_max' can't be all None or 0.");
  return Status::Ok();
}

Result<std::unique_ptr<ModelCheckpoint>> ModelCheckpoint::Create(std::string prefix, std::string directory,
                                                                 CheckpointConfig config) {
  if (prefix.find('/') != std::string::npos)
    return InvalidArgument(
        "For 'ModelCheckpoint', the argument 'prefix' for checkpoint file name is invalid, "
        "it must be string and does not contain '/', but got " +
        prefix + ".");
  SINKRT_RETURN_IF_ERROR(config.Validate());
  if (config.keep_checkpoint_max == 0) config.keep_checkpoint_max = 1;
  if (directory.empty()) directory.push_back('.');
  std::error_code ec;
  fs::create_directories(directory, ec);
  if (ec || !fs::is_directory(directory, ec))
    return Unavailable("For 'ModelCheckpoint', cannot create the directory '" + directory + "'" +
                       (ec ? ": " + ec.message() : std::string()));
  // Found now, not when the first epoch's save fails.
  SINKRT_RETURN_IF_ERROR(CheckDirectoryWritable(directory), "For 'ModelCheckpoint'");
  RemoveStaleTemporaries(directory, ".ckpt");
  std::unique_ptr<PrefixClaim> claim;
  SINKRT_ASSIGN_OR_RETURN(std::string unique, ClaimPrefix(directory, prefix, &claim), "For 'ModelCheckpoint'");
  return std::unique_ptr<ModelCheckpoint>(
      new ModelCheckpoint(std::move(unique), std::move(directory), config, std::move(claim)));
}

ModelCheckpoint::ModelCheckpoint(std::string prefix, std::string directory, CheckpointConfig config,
                                 std::unique_ptr<PrefixClaim> claim)
    : claim_(std::move(claim)), prefix_(std::move(prefix)), directory_(std::move(directory)), config_(config) {}

ModelCheckpoint::~ModelCheckpoint() = default;

Status ModelCheckpoint::Save(const CallbackParams& p) {
  if (!p.model) return FailedPrecondition("ModelCheckpoint: the callback parameters carry no model");
  const int64_t step = p.batch_num > 0 ? (p.cur_step_num - 1) % p.batch_num + 1 : p.cur_step_num;
  const std::string file = prefix_ + "-" + std::to_string(p.cur_epoch_num) + "_" + std::to_string(step) + ".ckpt";
  // Keep the newest keep_checkpoint_max files, this one included.
  std::vector<fs::path> existing = CheckpointFiles(directory_, prefix_);
  if (static_cast<int64_t>(existing.size()) >= config_.keep_checkpoint_max) {
    std::error_code ec;
    fs::remove(existing.front(), ec);
  }
  const std::string path = (fs::path(directory_) / file).string();
  last_triggered_step_ = p.cur_step_num;
  CheckpointInfo info;
  info.epoch = p.cur_epoch_num;
  info.step = step;
  info.batch_num = p.batch_num;
  info.global_batch = p.global_batch;
  SINKRT_RETURN_IF_ERROR(SaveCheckpoint(path, *p.model, info), "ModelCheckpoint");
  latest_ = path;
  return Status::Ok();
}

// _save_ckpt: nothing twice for one step; by steps when save_checkpoint_steps
// is set (`force` only when it is, as in MindSpore), else at the epochs
// asked for.
Status ModelCheckpoint::on_train_step_end(RunContext& run_context) {
  const CallbackParams& p = run_context.original_args();
  if (p.cur_step_num == last_triggered_step_ || config_.save_checkpoint_steps <= 0) return Status::Ok();
  if (p.cur_step_num >= last_triggered_step_ + config_.save_checkpoint_steps) return Save(p);
  return Status::Ok();
}

Status ModelCheckpoint::on_train_epoch_end(RunContext& run_context) {
  const CallbackParams& p = run_context.original_args();
  if (p.cur_step_num == last_triggered_step_ || config_.save_checkpoint_steps > 0 ||
      config_.save_checkpoint_epochs <= 0)
    return Status::Ok();
  if (p.cur_epoch_num % config_.save_checkpoint_epochs == 0) return Save(p);
  return Status::Ok();
}

Status ModelCheckpoint::on_train_end(RunContext& run_context) {
  const CallbackParams& p = run_context.original_args();
  if (p.cur_step_num == last_triggered_step_) return Status::Ok();
  if (config_.save_checkpoint_steps <= 0 && config_.save_checkpoint_epochs <= 0) return Status::Ok();
  return Save(p);
}

}  // namespace sinkrt::host
