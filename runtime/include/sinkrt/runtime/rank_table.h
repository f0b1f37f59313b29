/// \file
/// Rank tables: which sinkd serves which rank.
///
/// Three layouts are read (reference/rank_tables/):
///  - minimal:    {"devices": [{"rank": 0, "address": "127.0.0.1:7100"}, ...]}
///  - 1.0:        {"version": "1.0", "server_list": [{"server_id": IP,
///                  "device": [{"device_id", "device_ip", "rank_id"}]}], ...}
///  - group_list: {"group_list": [{"instance_list": [{"rank_id", "server_id",
///                  "devices": [{"device_id", "device_ip"}]}]}], ...}
/// MindSpore's layouts name a host and a device number but no port: device
/// d on host S is served at S:(base_port + d), the port `sinkd --base-port`
/// listens on for that device. MindSpore writes numbers as strings ("0");
/// both strings and numbers are accepted. Validation: ranks are unique and
/// exactly 0..n-1, addresses parse, no two ranks share an address, and
/// "status", when present, is "completed".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sinkrt/runtime/address.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt {

/// The port of device 0 on a host when the table gives none (`sinkd --base-port`).
inline constexpr uint16_t kDefaultBasePort = 7100;

/// One rank of a table: where its device is served.
struct RankEntry {
  uint32_t rank = 0;      ///< the rank, 0..n-1
  Address address;        ///< host:port of the device's daemon
  int device_id = -1;     ///< the physical device number on its host, when the table says
  std::string device_ip;  ///< Ascend's device NIC; kept for tools, unused by sinkrt
};

/// A validated rank table: every rank's device, ranks 0..n-1.
struct RankTable {
  std::string layout;            ///< "minimal", "server_list" or "group_list"
  std::vector<RankEntry> ranks;  ///< sorted by rank: ranks[i].rank == i

  /// The world size.
  size_t size() const { return ranks.size(); }
};

/// Parses and validates a rank table's text; `source` (a path) prefixes errors.
/// JSON syntax errors give the line and column, and point at a trailing comma
/// when that is the cause.
Result<RankTable> ParseRankTable(std::string_view json, std::string_view source, uint16_t base_port = kDefaultBasePort);
/// Reads the file at `path` and parses it (ParseRankTable).
Result<RankTable> LoadRankTable(const std::string& path, uint16_t base_port = kDefaultBasePort);

/// The minimal layout, for launchers to write.
std::string RankTableToJson(const RankTable& table);

/// This process's rank and world size as a cluster launcher set them:
/// RANK_ID/RANK_SIZE/DEVICE_ID/LOCAL_WORLD_SIZE (MindSpore; the last is
/// torchrun's, set by sinkrun launch), OMPI_COMM_WORLD_RANK/_SIZE/
/// _LOCAL_RANK/_LOCAL_SIZE (Open MPI), PMI_RANK/PMI_SIZE/MPI_LOCALNRANKS
/// (MPICH), SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID (Slurm), in that order. Unset fields stay
/// empty; a variable
/// that is set but not a non-negative integer (or above 2^32 - 1) is an error
/// naming it, and so is a world size without its rank (RANK_SIZE without
/// RANK_ID; Open MPI's and MPICH's likewise; Slurm's SLURM_NTASKS alone is
/// an allocation's shell, not a rank). A rank without a size is returned as
/// such: init() may take the size from InitOptions, and a tool that needs
/// it names `size_source`.
struct LaunchRank {
  std::optional<uint32_t> rank;        ///< the process's rank, when a launcher set it
  std::optional<uint32_t> world_size;  ///< the world size, when a launcher set it
  std::optional<uint32_t> local_rank;  ///< device index on this host
  std::optional<uint32_t> local_size;  ///< ranks on this host
  std::string source;                  ///< the variable the rank came from
  std::string size_source;             ///< the variable the world size is read from (set or not)
};
/// This process's LaunchRank, from the launchers' variables named above.
Result<LaunchRank> LaunchRankFromEnvironment();

}  // namespace sinkrt
