#include "host/src/model/fan_out.h"

#include <thread>

namespace sinkrt::host {

std::vector<Status> OnEveryRank(uint32_t n, const std::function<Status(uint32_t rank)>& fn) {
  std::vector<Status> out(n);
  std::vector<std::thread> threads;
  threads.reserve(n > 0 ? n - 1 : 0);
  for (uint32_t r = 1; r < n; ++r) threads.emplace_back([&, r] { out[r] = fn(r); });
  if (n > 0) out[0] = fn(0);
  for (std::thread& t : threads) t.join();
  return out;
}

Status CombineRankStatuses(const std::vector<Status>& statuses, const std::string& what) {
  const size_t n = statuses.size();
  int lead = -1;
  for (size_t r = 0; r < n; ++r) {
    if (statuses[r].ok()) continue;
    if (lead < 0 || (statuses[lead].code() == StatusCode::kAborted && statuses[r].code() != StatusCode::kAborted))
      lead = static_cast<int>(r);
  }
  if (lead < 0) return Status::Ok();
  if (n == 1) return statuses[0];
  std::string msg =
      what + " failed on rank " + std::to_string(lead) + " of " + std::to_string(n) + ": " + statuses[lead].message();
  std::string also;
  for (size_t r = 0; r < n; ++r)
    if (!statuses[r].ok() && static_cast<int>(r) != lead)
      also += (also.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + ": " + statuses[r].message();
  if (!also.empty()) msg += " (also " + also + ")";
  return Status(statuses[lead].code(), msg);
}

}  // namespace sinkrt::host
