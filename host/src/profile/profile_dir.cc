#include "profile/profile_dir.h"

#include <filesystem>
#include <span>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "profile/chrome_trace.h"
#include "profile/summarize.h"
#include "profile/summary_svg.h"
#include "sinkrt/runtime/file_io.h"

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

Result<ProfileSummary> ReadProfile(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    return NotFound("no profile directory '" + dir + "'" +
                    (std::filesystem::exists(dir, ec) ? " (it is not a directory)" : ""));
  std::string path = (std::filesystem::path(dir) / "trace.json").string();
  if (!std::filesystem::exists(path, ec))
    return NotFound("'" + dir + "' holds no trace.json: not a directory a Profiler wrote");
  SINKRT_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadFileBytes(path));
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
