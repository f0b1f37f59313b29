#include "runtime/src/cpu_set.h"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

namespace sinkrt {
namespace {

Result<int> ParseCore(std::string_view text, std::string_view list) {
  int v = -1;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || v < 0 || v >= CPU_SETSIZE)
    return InvalidArgument("core list '" + std::string(list) + "': '" + std::string(text) +
                           "' is not a core number (0.." + std::to_string(CPU_SETSIZE - 1) + ")");
  return v;
}

}  // namespace

Result<std::vector<int>> ParseCpuList(std::string_view list) {
  if (list.empty()) return InvalidArgument("core list is empty (expected e.g. 0-3,6)");
  std::vector<int> cpus;
  size_t start = 0;
  for (;;) {
    const size_t comma = list.find(',', start);
    const std::string_view item = list.substr(start, comma == std::string_view::npos ? list.npos : comma - start);
    const size_t dash = item.find('-');
    if (dash == std::string_view::npos) {
      SINKRT_ASSIGN_OR_RETURN(int core, ParseCore(item, list));
      cpus.push_back(core);
    } else {
      SINKRT_ASSIGN_OR_RETURN(int first, ParseCore(item.substr(0, dash), list));
      SINKRT_ASSIGN_OR_RETURN(int last, ParseCore(item.substr(dash + 1), list));
      if (last < first)
        return InvalidArgument("core list '" + std::string(list) + "': range '" + std::string(item) +
                               "' runs backwards");
      for (int c = first; c <= last; ++c) cpus.push_back(c);
    }
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

std::string FormatCpuList(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(cpus[i]);
    if (j > i) out += '-' + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

std::vector<int> AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

Status BindProcessTo(const std::vector<int>& cpus) {
  const std::vector<int> allowed = AllowedCpus();
  std::vector<int> outside;
  for (int c : cpus)
    if (!std::binary_search(allowed.begin(), allowed.end(), c)) outside.push_back(c);
  if (cpus.empty()) return InvalidArgument("no cores to bind to");
  if (!outside.empty())
    return InvalidArgument("cores " + FormatCpuList(outside) + " are not among those this process may use (" +
                           FormatCpuList(allowed) + ")");
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) CPU_SET(c, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0)
    return Internal("binding to cores " + FormatCpuList(cpus) + ": " + std::strerror(errno));
  return Status::Ok();
}

std::vector<std::vector<int>> ShareCpus(const std::vector<int>& cpus, int parts) {
  std::vector<std::vector<int>> out(parts > 0 ? parts : 0);
  if (cpus.empty() || parts <= 0) return out;
  const size_t n = cpus.size(), p = static_cast<size_t>(parts);
  if (p >= n) {
    for (size_t k = 0; k < p; ++k) out[k] = {cpus[k % n]};
    return out;
  }
  size_t next = 0;
  for (size_t k = 0; k < p; ++k) {
    const size_t take = n / p + (k < n % p ? 1 : 0);
    out[k].assign(cpus.begin() + next, cpus.begin() + next + take);
    next += take;
  }
  return out;
}

}  // namespace sinkrt
