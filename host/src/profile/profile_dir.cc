#include "host/src/profile/profile_dir.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <span>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "host/src/profile/chrome_trace.h"
#include "host/src/profile/summarize.h"
#include "host/src/profile/summary_svg.h"
#include "runtime/src/file_io.h"
#include "sinkrt/runtime/stream_format.h"
#include "sinkrt/runtime/task_stream_verifier.h"

namespace sinkrt::host {
namespace {

Status WriteText(const std::filesystem::path& path, std::string_view text) {
  return WriteFileBytes(path.string(),
                        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

}  // namespace

Status WriteProfileDir(const ProfileData& data, const std::string& dir, ProfileSummary* summary) {
  std::filesystem::path root(dir);
  std::error_code ec;
  std::filesystem::create_directories(root, ec);
  if (ec) return NotFound("cannot create the profile directory '" + dir + "': " + ec.message());
  if (!std::filesystem::is_directory(root, ec))
    return FailedPrecondition("the profile directory '" + dir + "' exists and is not a directory");
  ProfileSummary s = Summarize(data);
  SINKRT_RETURN_IF_ERROR(WriteText(root / "trace.json", ChromeTrace(data).dump()));
  SINKRT_RETURN_IF_ERROR(WriteText(root / "summary.txt", SummaryText(s)));
  SINKRT_RETURN_IF_ERROR(WriteText(root / "summary.json", SummaryJsonText(s)));
  SINKRT_RETURN_IF_ERROR(WriteText(root / "steps.svg", SummarySvg(s)));
  if (summary) *summary = std::move(s);
  return Status::Ok();
}

namespace {

// sinkd --profile DIR leaves rank<R>-job<J>.tstream and .records per job:
// per rank, its latest job's, as one run on the devices' own clocks (not
// aligned to any host's). Empty when the directory holds none.
Result<ProfileData> ReadDaemonProfile(const std::string& dir) {
  std::map<int, std::pair<uint64_t, std::string>> latest;  // rank -> (job, base path)
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    int rank = -1;
    unsigned long long job = 0;
    char tail[16] = {};
    if (std::sscanf(name.c_str(), "rank%d-job%llu.%15s", &rank, &job, tail) != 3 || std::string(tail) != "records" ||
        rank < 0)
      continue;
    auto& best = latest[rank];
    if (best.second.empty() || job >= best.first)
      best = {job,
              (std::filesystem::path(dir) / ("rank" + std::to_string(rank) + "-job" + std::to_string(job))).string()};
  }
  ProfileData data;
  if (latest.empty()) return data;
  data.network = "(sinkd --profile " + dir + ")";
  for (const auto& [rank, job_base] : latest) {
    const std::string& base = job_base.second;
    SINKRT_ASSIGN_OR_RETURN(std::vector<uint8_t> stream_bytes,
                            ReadFileBytes(base + ".tstream", {kMaxStreamBytes, "a task stream"}));
    SINKRT_ASSIGN_OR_RETURN(VerifiedStream stream, VerifyTaskStream(std::move(stream_bytes)), base + ".tstream");
    SINKRT_ASSIGN_OR_RETURN(std::vector<uint8_t> raw,
                            ReadFileBytes(base + ".records", {kMaxStreamBytes, "a profile record file"}));
    if (raw.size() % sizeof(ProfileRecord) != 0)
      return InvalidArgument(base + ".records holds " + std::to_string(raw.size()) +
                             " bytes, not a whole number of 40-byte records (truncated?)");
    RankData rd = DescribeRankStream(stream, rank);
    rd.records.resize(raw.size() / sizeof(ProfileRecord));
    std::memcpy(rd.records.data(), raw.data(), raw.size());
    for (const ProfileRecord& r : rd.records)
      if (r.kind == ProfileRecordKind::kSink && (data.origin_ns == 0 || r.begin_ns < data.origin_ns))
        data.origin_ns = r.begin_ns;
    data.ranks.push_back(std::move(rd));
  }
  return data;
}

}  // namespace

Result<ProfileSummary> ReadProfile(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    return NotFound("no profile directory '" + dir + "'" +
                    (std::filesystem::exists(dir, ec) ? " (it is not a directory)" : ""));
  // A daemon's directory: summarised from its records, and the timeline
  // and summary files written beside them.
  SINKRT_ASSIGN_OR_RETURN(ProfileData daemon, ReadDaemonProfile(dir));
  if (!daemon.ranks.empty()) {
    ProfileSummary summary;
    SINKRT_RETURN_IF_ERROR(WriteProfileDir(daemon, dir, &summary));
    return summary;
  }
  std::string path = (std::filesystem::path(dir) / "trace.json").string();
  if (!std::filesystem::exists(path, ec))
    return NotFound("'" + dir +
                    "' holds no trace.json and no rank<R>-job<J>.records: not a directory a Profiler or "
                    "sinkd --profile wrote");
  SINKRT_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadFileBytes(path, {uint64_t{4} << 30, "a trace.json"}));
  nlohmann::json trace;
  try {
    trace = nlohmann::json::parse(bytes.begin(), bytes.end());
  } catch (const nlohmann::json::parse_error& e) {
    // e.what() says where: "[json.exception.parse_error.101] parse error at line 1, column 80: ..."
    return InvalidArgument(path + " is not valid JSON (truncated or damaged?): " + e.what());
  }
  SINKRT_ASSIGN_OR_RETURN(ProfileData data, ProfileDataFromTrace(trace), path);
  return Summarize(data);
}

}  // namespace sinkrt::host
