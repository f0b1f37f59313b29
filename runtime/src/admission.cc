#include "sinkrt/runtime/admission.h"

#include <sys/ioctl.h>

#include <algorithm>
#include <map>

namespace sinkrt {

RoomVerdict MakeRoom(std::span<const PendingView> pending, std::string_view source, const PendingQuotas& quotas) {
  std::map<std::string, int, std::less<>> per_source;
  for (const PendingView& p : pending) ++per_source[std::string(p.source)];
  const int total = static_cast<int>(pending.size());
  auto it = per_source.find(source);
  const int from_source = it == per_source.end() ? 0 : it->second;
  std::string victim_source;
  RoomVerdict out;
  if (from_source >= quotas.max_pending_per_address) {
    victim_source = std::string(source);
    out.why = std::to_string(from_source) + " connections from " + victim_source +
              " have not finished their Hello (the limit per address)";
  } else if (total >= quotas.max_pending) {
    victim_source = std::max_element(per_source.begin(), per_source.end(), [](const auto& a, const auto& b) {
                      return a.second < b.second;
                    })->first;
    out.why = std::to_string(total) + " connections have not finished their Hello (the limit), " +
              std::to_string(per_source[victim_source]) + " of them from " + victim_source;
  } else {
    return out;
  }
  // The list is in accept order, so the first candidate is the oldest.
  for (size_t i = 0; i < pending.size(); ++i) {
    if (pending[i].source != victim_source || pending[i].has_unread) continue;
    out.evict = i;
    return out;
  }
  // Every candidate has its Hello waiting to be read: a burst the listener
  // will clear at once. Over twice the total, though, it is not keeping up
  // and the newcomer is refused, so their number stays bounded.
  out.why.clear();
  out.admit = total < 2 * quotas.max_pending;
  return out;
}

int UnreadBytes(int fd) {
  int n = 0;
  return ::ioctl(fd, FIONREAD, &n) == 0 ? n : 0;
}

}  // namespace sinkrt
