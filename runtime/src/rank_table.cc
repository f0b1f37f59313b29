#include "sinkrt/runtime/rank_table.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <utility>

#include "runtime/src/env.h"
#include "runtime/src/file_io.h"

namespace sinkrt {
namespace {

using nlohmann::json;

constexpr uint64_t kMaxRank = std::numeric_limits<uint32_t>::max();
constexpr uint64_t kMaxDeviceId = std::numeric_limits<int>::max();

// A rank as read, with the JSON path it came from, so that errors about two
// entries (a duplicated rank, a shared address) can point at both.
struct ReadEntry {
  RankEntry entry;
  std::string path;
};

// Decimal digits only: no sign, no blanks, no hex. Saturates instead of
// wrapping so that a huge value reads as out of range, not as garbage.
std::optional<uint64_t> ParseDecimal(std::string_view s) {
  if (s.empty()) return std::nullopt;
  uint64_t value = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    uint64_t digit = static_cast<uint64_t>(c - '0');
    if (value > (std::numeric_limits<uint64_t>::max() - digit) / 10) return std::numeric_limits<uint64_t>::max();
    value = value * 10 + digit;
  }
  return value;
}

std::string Join(const std::string& path, const char* key) { return path.empty() ? key : path + "." + key; }
std::string Index(const std::string& path, const char* key, size_t i) {
  return Join(path, key) + "[" + std::to_string(i) + "]";
}

// A value as it appears in the file, cut short: a misplaced object should not
// flood the message.
std::string Show(const json& v) {
  std::string text = v.dump(-1, ' ', false, json::error_handler_t::replace);
  return text.size() <= 60 ? text : text.substr(0, 57) + "...";
}

Result<uint64_t> ReadUint(const json& v, const std::string& path, uint64_t max) {
  std::optional<uint64_t> value;
  // MindSpore writes numbers as strings ("0"); hand-written tables use numbers.
  if (v.is_number_unsigned()) value = v.get<uint64_t>();
  if (v.is_string()) value = ParseDecimal(v.get_ref<const std::string&>());
  if (!value) return InvalidArgument(path + ": " + Show(v) + " is not a non-negative integer");
  if (*value > max) return InvalidArgument(path + ": " + Show(v) + " is out of range 0.." + std::to_string(max));
  return *value;
}

Status ExpectObject(const json& v, const std::string& path) {
  if (v.is_object()) return Status::Ok();
  return InvalidArgument(path + ": expected an object, got " + Show(v));
}

Result<const json*> Member(const json& obj, const char* key, const std::string& path) {
  auto it = obj.find(key);
  if (it == obj.end()) return InvalidArgument(Join(path, key) + " is missing");
  return &*it;
}

Result<const json*> ArrayMember(const json& obj, const char* key, const std::string& path) {
  SINKRT_ASSIGN_OR_RETURN(const json* v, Member(obj, key, path));
  if (!v->is_array()) return InvalidArgument(Join(path, key) + ": expected an array, got " + Show(*v));
  return v;
}

Result<std::string> StringMember(const json& obj, const char* key, const std::string& path) {
  SINKRT_ASSIGN_OR_RETURN(const json* v, Member(obj, key, path));
  if (!v->is_string()) return InvalidArgument(Join(path, key) + ": expected a string, got " + Show(*v));
  return v->get<std::string>();
}

Result<std::string> OptionalString(const json& obj, const char* key, const std::string& path) {
  if (!obj.contains(key)) return std::string();
  return StringMember(obj, key, path);
}

Result<uint64_t> UintMember(const json& obj, const char* key, const std::string& path, uint64_t max) {
  SINKRT_ASSIGN_OR_RETURN(const json* v, Member(obj, key, path));
  return ReadUint(*v, Join(path, key), max);
}

// MindSpore names a host and a device but no port: sinkd serves device d of
// host S at S:(base_port + d).
Result<Address> DeviceAddress(const std::string& host, const std::string& host_path, uint64_t device_id,
                              const std::string& device_path, uint16_t base_port) {
  if (host.empty()) return InvalidArgument(host_path + " is empty");
  // One colon is "host:port" (an IPv6 literal has at least two).
  if (std::count(host.begin(), host.end(), ':') == 1)
    return InvalidArgument(host_path + ": \"" + host +
                           "\" carries a port; give the host alone, the port is base_port + device_id");
  uint64_t port = base_port + device_id;
  if (port > 65535)
    return InvalidArgument(device_path + ": base port " + std::to_string(base_port) + " + device_id " +
                           std::to_string(device_id) + " = " + std::to_string(port) + " is above 65535");
  auto parsed = ParseAddress(Address{host, static_cast<uint16_t>(port)}.ToString());
  if (!parsed.ok()) return InvalidArgument(host_path + ": " + parsed.status().message());
  return parsed;
}

// The fields a MindSpore device entry carries: device_id (which gives the
// port), device_ip. The rank comes from the caller, as the layouts keep it in
// different places.
Result<RankEntry> DeviceEntry(const json& device, const std::string& device_path, const std::string& host,
                              const std::string& host_path, uint16_t base_port) {
  SINKRT_RETURN_IF_ERROR(ExpectObject(device, device_path));
  if (!device.contains("device_id"))
    return InvalidArgument(Join(device_path, "device_id") + " is missing: the rank's port is base_port + device_id");
  RankEntry entry;
  SINKRT_ASSIGN_OR_RETURN(uint64_t device_id, UintMember(device, "device_id", device_path, kMaxDeviceId));
  SINKRT_ASSIGN_OR_RETURN(entry.address, DeviceAddress(host, host_path, device_id, device_path, base_port));
  entry.device_id = static_cast<int>(device_id);
  SINKRT_ASSIGN_OR_RETURN(entry.device_ip, OptionalString(device, "device_ip", device_path));
  return entry;
}

Status ReadMinimal(const json& root, std::vector<ReadEntry>& out) {
  SINKRT_ASSIGN_OR_RETURN(const json* devices, ArrayMember(root, "devices", ""));
  for (size_t i = 0; i < devices->size(); ++i) {
    const json& d = (*devices)[i];
    std::string path = Index("", "devices", i);
    SINKRT_RETURN_IF_ERROR(ExpectObject(d, path));
    RankEntry entry;
    SINKRT_ASSIGN_OR_RETURN(uint64_t rank, UintMember(d, "rank", path, kMaxRank));
    entry.rank = static_cast<uint32_t>(rank);
    SINKRT_ASSIGN_OR_RETURN(std::string address, StringMember(d, "address", path));
    auto parsed = ParseAddress(address);
    if (!parsed.ok()) return InvalidArgument(Join(path, "address") + ": " + parsed.status().message());
    entry.address = *parsed;
    if (d.contains("device_id")) {
      SINKRT_ASSIGN_OR_RETURN(uint64_t device_id, UintMember(d, "device_id", path, kMaxDeviceId));
      entry.device_id = static_cast<int>(device_id);
    }
    SINKRT_ASSIGN_OR_RETURN(entry.device_ip, OptionalString(d, "device_ip", path));
    out.push_back({std::move(entry), path});
  }
  return Status::Ok();
}

Status CheckVersion(const json& root) {
  auto it = root.find("version");
  if (it == root.end() || (it->is_string() && *it == "1.0")) return Status::Ok();
  return InvalidArgument("version: " + Show(*it) + " is not \"1.0\", the only server_list version read");
}

Status ReadServerList(const json& root, uint16_t base_port, std::vector<ReadEntry>& out) {
  SINKRT_RETURN_IF_ERROR(CheckVersion(root));
  SINKRT_ASSIGN_OR_RETURN(const json* servers, ArrayMember(root, "server_list", ""));
  if (root.contains("server_count")) {
    SINKRT_ASSIGN_OR_RETURN(uint64_t count, UintMember(root, "server_count", "", kMaxRank));
    if (count != servers->size())
      return InvalidArgument("server_count is " + std::to_string(count) + " but server_list has " +
                             std::to_string(servers->size()) + " servers");
  }
  for (size_t i = 0; i < servers->size(); ++i) {
    const json& server = (*servers)[i];
    std::string server_path = Index("", "server_list", i);
    SINKRT_RETURN_IF_ERROR(ExpectObject(server, server_path));
    SINKRT_ASSIGN_OR_RETURN(std::string host, StringMember(server, "server_id", server_path));
    SINKRT_ASSIGN_OR_RETURN(const json* devices, ArrayMember(server, "device", server_path));
    for (size_t j = 0; j < devices->size(); ++j) {
      const json& device = (*devices)[j];
      std::string path = Index(server_path, "device", j);
      SINKRT_ASSIGN_OR_RETURN(RankEntry entry,
                              DeviceEntry(device, path, host, Join(server_path, "server_id"), base_port));
      SINKRT_ASSIGN_OR_RETURN(uint64_t rank, UintMember(device, "rank_id", path, kMaxRank));
      entry.rank = static_cast<uint32_t>(rank);
      out.push_back({std::move(entry), path});
    }
  }
  return Status::Ok();
}

Status ReadGroupList(const json& root, uint16_t base_port, std::vector<ReadEntry>& out) {
  SINKRT_ASSIGN_OR_RETURN(const json* groups, ArrayMember(root, "group_list", ""));
  for (size_t g = 0; g < groups->size(); ++g) {
    const json& group = (*groups)[g];
    std::string group_path = Index("", "group_list", g);
    SINKRT_RETURN_IF_ERROR(ExpectObject(group, group_path));
    SINKRT_ASSIGN_OR_RETURN(const json* instances, ArrayMember(group, "instance_list", group_path));
    for (size_t k = 0; k < instances->size(); ++k) {
      const json& instance = (*instances)[k];
      std::string path = Index(group_path, "instance_list", k);
      SINKRT_RETURN_IF_ERROR(ExpectObject(instance, path));
      SINKRT_ASSIGN_OR_RETURN(std::string host, StringMember(instance, "server_id", path));
      SINKRT_ASSIGN_OR_RETURN(const json* devices, ArrayMember(instance, "devices", path));
      // An instance is one process on one device; which of several would be its port is undefined.
      if (devices->size() != 1)
        return InvalidArgument(Join(path, "devices") + " has " + std::to_string(devices->size()) +
                               " entries: an instance serves exactly one device");
      SINKRT_ASSIGN_OR_RETURN(RankEntry entry, DeviceEntry((*devices)[0], Index(path, "devices", 0), host,
                                                           Join(path, "server_id"), base_port));
      SINKRT_ASSIGN_OR_RETURN(uint64_t rank, UintMember(instance, "rank_id", path, kMaxRank));
      entry.rank = static_cast<uint32_t>(rank);
      out.push_back({std::move(entry), path});
    }
  }
  return Status::Ok();
}

// Ranks index the collective's world, so every one of 0..n-1 must be served
// exactly once, and two ranks on one address would be one daemon answering
// for both.
Result<RankTable> Validate(std::string layout, std::vector<ReadEntry> entries) {
  if (entries.empty()) return InvalidArgument("the table lists no ranks");
  std::stable_sort(entries.begin(), entries.end(),
                   [](const ReadEntry& a, const ReadEntry& b) { return a.entry.rank < b.entry.rank; });
  for (size_t i = 1; i < entries.size(); ++i) {
    if (entries[i].entry.rank == entries[i - 1].entry.rank)
      return InvalidArgument("rank " + std::to_string(entries[i].entry.rank) + " appears twice, at " +
                             entries[i - 1].path + " and " + entries[i].path);
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    if (entries[i].entry.rank != i)
      return InvalidArgument("rank " + std::to_string(i) + " is missing: " +
                             (entries.size() == 1 ? std::string("a table of 1 rank must number it 0")
                                                  : std::to_string(entries.size()) + " ranks must be numbered 0.." +
                                                        std::to_string(entries.size() - 1)));
  }
  std::map<std::string, const ReadEntry*> by_address;
  for (const ReadEntry& e : entries) {
    auto [it, inserted] = by_address.emplace(e.entry.address.ToString(), &e);
    if (!inserted)
      return InvalidArgument("ranks " + std::to_string(it->second->entry.rank) + " and " +
                             std::to_string(e.entry.rank) + " share address " + it->first + " (" + it->second->path +
                             " and " + e.path + ")");
  }
  RankTable table;
  table.layout = std::move(layout);
  for (ReadEntry& e : entries) table.ranks.push_back(std::move(e.entry));
  return table;
}

// 1-based; columns count UTF-8 characters, as an editor shows them.
std::pair<size_t, size_t> LineColumn(std::string_view text, size_t pos) {
  size_t line = 1, column = 1;
  for (size_t i = 0; i < pos && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) {
      ++column;
    }
  }
  return {line, column};
}

std::string At(std::string_view text, size_t pos) {
  auto [line, column] = LineColumn(text, pos);
  return "line " + std::to_string(line) + ", column " + std::to_string(column);
}

// A trailing comma is the mistake people make most (MindSpore's own tutorial
// table has one), and nlohmann's "unexpected ']'" does not say so.
Status SyntaxError(std::string_view text, const json::parse_error& e) {
  // e.byte counts the characters read, the offending one included.
  size_t pos = std::min<size_t>(e.byte == 0 ? 0 : e.byte - 1, text.size());
  if (pos < text.size() && pos > 0 && (text[pos] == '}' || text[pos] == ']')) {
    size_t before = text.find_last_not_of(" \t\r\n", pos - 1);
    if (before != std::string_view::npos && text[before] == ',')
      return InvalidArgument("invalid JSON at " + At(text, pos) +
                             ": trailing comma after the last element (the ',' at " + At(text, before) +
                             "); JSON allows none");
  }
  std::string what = e.what();
  size_t detail = what.find("syntax error");
  if (detail != std::string::npos) what = what.substr(detail);
  return InvalidArgument("invalid JSON at " + At(text, pos) + ": " + what);
}

std::string TopLevelKeys(const json& root) {
  std::string keys;
  for (auto it = root.begin(); it != root.end(); ++it) keys += (keys.empty() ? "" : ", ") + it.key();
  return keys.empty() ? "none" : keys;
}

Result<RankTable> ParseUnprefixed(std::string_view text, uint16_t base_port) {
  json root;
  try {
    root = json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    return SyntaxError(text, e);
  }
  if (!root.is_object()) return InvalidArgument("a rank table is a JSON object, got " + Show(root));
  if (auto it = root.find("status"); it != root.end() && !(it->is_string() && *it == "completed"))
    return InvalidArgument("status is " + Show(*it) + ", not \"completed\": the table is not finished");
  std::vector<ReadEntry> entries;
  if (root.contains("devices")) {
    SINKRT_RETURN_IF_ERROR(ReadMinimal(root, entries));
    return Validate("minimal", std::move(entries));
  }
  if (root.contains("server_list")) {
    SINKRT_RETURN_IF_ERROR(ReadServerList(root, base_port, entries));
    return Validate("server_list", std::move(entries));
  }
  if (root.contains("group_list")) {
    SINKRT_RETURN_IF_ERROR(ReadGroupList(root, base_port, entries));
    return Validate("group_list", std::move(entries));
  }
  return InvalidArgument(
      "not a rank table: expected \"devices\" (minimal layout), \"server_list\" (version 1.0 layout) or "
      "\"group_list\" (older layout) at the top level; found keys: " +
      TopLevelKeys(root));
}

// A launcher variable: unset is empty, set but not a number is an error.
Result<std::optional<uint32_t>> EnvUint(const char* name) {
  const char* value = name ? std::getenv(name) : nullptr;
  if (!value) return std::optional<uint32_t>();
  // The environment's one parser (runtime/src/env.h); digits that do not
  // fit it are a number too large, not garbage.
  const std::optional<long long> parsed = ParseNonNegativeInteger(value);
  const bool digits =
      *value && std::all_of(value, value + std::strlen(value), [](char c) { return c >= '0' && c <= '9'; });
  if (!parsed && !digits)
    return InvalidArgument(std::string(name) + "=\"" + value + "\" is not a non-negative integer");
  if (!parsed || static_cast<uint64_t>(*parsed) > kMaxRank)
    return InvalidArgument(std::string(name) + "=\"" + value +
                           "\" is out of range (a rank or a world size is at most " + std::to_string(kMaxRank) + ")");
  return std::optional<uint32_t>(static_cast<uint32_t>(*parsed));
}

struct LauncherVariables {
  const char* rank;
  const char* size;
  const char* local_rank;  // nullptr where the launcher sets none
  const char* local_size;  // ranks on this host; nullptr where the launcher sets none
  // The launcher sets the size only together with the rank, so a size
  // alone is a half-configured rank. Not so for Slurm: sbatch and salloc
  // shells carry SLURM_NTASKS for the srun steps they will start.
  bool size_needs_rank;
};

// In the order the header documents: MindSpore first, as its RANK_ID is the
// one a MindSpore user set deliberately, then Open MPI, MPICH and Slurm
// (srun under mpirun sets both, and the MPI rank is the job's).
constexpr LauncherVariables kLaunchers[] = {
    {"RANK_ID", "RANK_SIZE", "DEVICE_ID", "LOCAL_WORLD_SIZE", true},
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", true},
    {"PMI_RANK", "PMI_SIZE", nullptr, "MPI_LOCALNRANKS", true},
    {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr, false},
};

}  // namespace

Result<RankTable> ParseRankTable(std::string_view json, std::string_view source, uint16_t base_port) {
  Result<RankTable> table = ParseUnprefixed(json, base_port);
  if (table.ok() || source.empty()) return table;
  return table.status().WithContext(std::string(source));
}

Result<RankTable> LoadRankTable(const std::string& path, uint16_t base_port) {
  SINKRT_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadFileBytes(path, {kJsonFileLimit.max_bytes, "a rank table"}));
  std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  return ParseRankTable(text, path, base_port);
}

std::string RankTableToJson(const RankTable& table) {
  // ordered_json keeps "rank" first, as people read the table by rank.
  nlohmann::ordered_json devices = nlohmann::ordered_json::array();
  for (const RankEntry& r : table.ranks) {
    nlohmann::ordered_json d;
    d["rank"] = r.rank;
    d["address"] = r.address.ToString();
    if (r.device_id >= 0) d["device_id"] = r.device_id;
    if (!r.device_ip.empty()) d["device_ip"] = r.device_ip;
    devices.push_back(std::move(d));
  }
  nlohmann::ordered_json root;
  root["devices"] = std::move(devices);
  return root.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

Result<LaunchRank> LaunchRankFromEnvironment() {
  for (const LauncherVariables& vars : kLaunchers) {
    SINKRT_ASSIGN_OR_RETURN(std::optional<uint32_t> rank, EnvUint(vars.rank));
    if (!rank) {
      // A world size without this process's place in it would train as a
      // single process, silently.
      if (const char* size = std::getenv(vars.size); size && vars.size_needs_rank)
        return InvalidArgument(std::string(vars.size) + "=\"" + size + "\" is set but " + vars.rank + " is not: set " +
                               vars.rank + " to this process's rank, or unset " + vars.size);
      continue;
    }
    LaunchRank launch;
    launch.rank = rank;
    launch.source = vars.rank;
    launch.size_source = vars.size;
    SINKRT_ASSIGN_OR_RETURN(launch.world_size, EnvUint(vars.size));
    SINKRT_ASSIGN_OR_RETURN(launch.local_rank, EnvUint(vars.local_rank));
    SINKRT_ASSIGN_OR_RETURN(launch.local_size, EnvUint(vars.local_size));
    if (launch.local_size && *launch.local_size == 0)
      return InvalidArgument(std::string(vars.local_size) + "=\"0\": a host of the job has at least one rank");
    if (launch.world_size && *launch.world_size == 0)
      return InvalidArgument(std::string(vars.size) + "=\"0\": a job has at least one rank");
    if (launch.world_size && *launch.rank >= *launch.world_size)
      return InvalidArgument(std::string(vars.rank) + "=\"" + std::to_string(*launch.rank) + "\" is not below " +
                             vars.size + "=\"" + std::to_string(*launch.world_size) + "\"");
    return launch;
  }
  return LaunchRank{};
}

}  // namespace sinkrt
