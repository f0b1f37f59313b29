// The devices a sinkrun training run opens: an in-process device, sinkd
// daemons it starts, or the running daemons of a rank table.
#include <algorithm>
#include <iostream>
#include <memory>
#include <string>
#include <utility>

#include "sinkrt/device/device_options.h"
#include "sinkrt/device/in_process_device.h"
#include "sinkrt/device/openmp_policy.h"
#include "sinkrt/host/communication.h"
#include "sinkrt/host/local_device_limit.h"
#include "sinkrt/host/remote_device.h"
#include "sinkrun.h"

namespace sinkrt::tools {
namespace {

// Connects to every rank of `table`, rank r expecting to find rank r.
// `from_file`: the table was read from a file (not the daemons this run
// started), so messages name its entry too.
Status ConnectSinkd(const RankTable& table, const std::string& token, const TlsConfig& tls, bool from_file,
                    TrainDevices* d) {
  d->kind = "sinkd";
  for (size_t r = 0; r < table.ranks.size(); ++r) {
    host::RemoteOptions options = host::RemoteOptions::FromEnvironment();
    options.rank = static_cast<int>(r);
    options.token = token;
    options.tls = tls;
    if (from_file) options.origin = "rank table entry " + std::to_string(r);
    options.progress = PrintProgress;
    const Address& address = table.ranks[r].address;
    SINKRT_ASSIGN_OR_RETURN(std::unique_ptr<host::RemoteDevice> remote, host::RemoteDevice::Connect(address, options));
    if (r == 0) {
      d->describe = "sinkd rank 0 at " + address.ToString() + " (pid " + std::to_string(remote->hello().pid) + ")";
      d->sinkd_threads = static_cast<int>(remote->hello().cores);
    }
    d->links.push_back(std::move(remote));
  }
  if (table.ranks.size() > 1)
    d->describe = std::to_string(table.ranks.size()) + " sinkd daemons, ranks 0-" +
                  std::to_string(table.ranks.size() - 1) + " (" + d->describe + ")";
  return Status::Ok();
}

}  // namespace

void PrintProgress(const std::string& line) { std::cerr << "sinkrun: " << line << std::endl; }

Status CheckLocalDevices(int devices, uint64_t arena_bytes) {
  const host::LocalMachine machine{.cores = device::AvailableCores(), .mem_available_bytes = host::MemAvailableBytes()};
  return host::CheckLocalDeviceCount(devices, machine, arena_bytes);
}

bool BindLocalDaemons(bool no_bind, int devices, int threads) {
  const int cores = device::AvailableCores();
  return !no_bind && devices > 1 && devices <= cores && (threads <= 0 || threads <= cores / devices);
}

// An in-process device knows its threads once a job is loaded.
int TrainDevices::threads() const { return in_process ? in_process->threads() : sinkd_threads; }

std::string TrainDevices::RendezvousText() const {
  size_t least = SIZE_MAX, most = 0, least_shm = SIZE_MAX, most_shm = 0;
  for (const auto& l : links) {
    const auto* remote = dynamic_cast<const host::RemoteDevice*>(l.get());
    if (!remote) return "";
    const std::vector<std::string> kinds = remote->transports();
    const size_t shm = std::count(kinds.begin(), kinds.end(), "shm");
    const size_t all = shm + std::count(kinds.begin(), kinds.end(), "tcp");
    least = std::min(least, all);
    most = std::max(most, all);
    least_shm = std::min(least_shm, shm);
    most_shm = std::max(most_shm, shm);
  }
  if (most == 0) return "";
  auto span = [](size_t a, size_t b) {
    return a == b ? std::to_string(a) : std::to_string(a) + "-" + std::to_string(b);
  };
  return "rendezvous: " + span(least, most) + " connections per rank (" + span(least_shm, most_shm) + " shm)";
}

Result<std::string> SinkdPath(const std::string& flag, const char* argv0) {
  if (!flag.empty()) return flag;
  auto found = host::FindSinkd(argv0);
  if (!found.ok()) return found.status().WithContext("--sinkd PATH or SINKRT_SINKD");
  return found;
}

// One process per rank: this rank's device only. The rank table's entry
// for this rank when there is a table (its sinkd), else an in-process
// device that accepts its peers where this process reaches the master.
Result<TrainDevices> OpenRankDevice(const TrainFlags& f, const std::optional<RankTable>& table) {
  TrainDevices d;
  host::ProcessGroup& pg = *host::process_group();
  const uint32_t rank = pg.rank();
  const std::string of = "rank " + std::to_string(rank) + " of " + std::to_string(pg.world_size());
  if (table) {
    host::RemoteOptions options = host::RemoteOptions::FromEnvironment();
    options.rank = static_cast<int>(rank);
    options.token = f.token;
    options.tls = f.tls;
    options.origin = "rank table entry " + std::to_string(rank);
    options.progress = PrintProgress;
    const Address& address = table->ranks[rank].address;
    SINKRT_ASSIGN_OR_RETURN(std::unique_ptr<host::RemoteDevice> remote, host::RemoteDevice::Connect(address, options));
    d.kind = "sinkd";
    d.describe = "sinkd at " + address.ToString() + " (pid " + std::to_string(remote->hello().pid) + "), " + of + " (" +
                 pg.options().source + ", " + f.rank_table_source + ")";
    d.sinkd_threads = static_cast<int>(remote->hello().cores);
    d.links.push_back(std::move(remote));
    return d;
  }
  device::DeviceOptions options = device::DeviceOptions::FromEnvironment();
  // The ranks on this host share its cores.
  options.threads =
      f.threads > 0 ? f.threads : std::max(1, device::AvailableCores() / static_cast<int>(pg.local_world_size()));
  options.listen_host = pg.local_host();
  options.token = pg.options().token;
  // The links to its peers take the master's TLS files (flags or SINKRT_TLS_*).
  options.tls = pg.options().tls;
  options.tls_plain_peers = options.tls_plain_peers || f.tls_plain_peers;
  auto in_process = std::make_unique<device::InProcessDevice>(options);
  d.kind = "in-process";
  d.describe = "in-process, " + of + " (" + pg.options().source + "; master " + pg.options().master.ToString() + ")";
  d.in_process = in_process.get();
  d.links.push_back(std::move(in_process));
  return d;
}

Result<TrainDevices> OpenDevices(const TrainFlags& f, bool launch, int devices, const std::optional<RankTable>& table,
                                 const char* argv0) {
  if (f.per_rank) return OpenRankDevice(f, table);
  TrainDevices d;
  if (table) {
    SINKRT_RETURN_IF_ERROR(ConnectSinkd(*table, f.token, f.tls, /*from_file=*/true, &d));
    if (f.rank_table_source.starts_with("RANK_TABLE_FILE")) d.describe += ", from " + f.rank_table_source;
    return d;
  }
  if (launch) {
    host::LocalClusterOptions options;
    options.devices = devices;
    SINKRT_ASSIGN_OR_RETURN(options.sinkd_path, SinkdPath(f.sinkd, argv0));
    options.token = f.token;
    options.tls = f.tls;
    // Failures come back over the connection; the job log would only
    // interleave with the training lines.
    options.sinkd_args = {"--quiet"};
    if (f.tls_plain_peers) options.sinkd_args.push_back("--tls-plain-peers");
    options.progress = PrintProgress;
    // Daemons on one machine share its cores: without --threads each gets
    // its share, so their thread teams do not oversubscribe the machine.
    const int threads = f.threads > 0 ? f.threads : std::max(1, device::AvailableCores() / devices);
    if (f.threads > 0 || devices > 1)
      options.sinkd_args.insert(options.sinkd_args.end(), {"--threads", std::to_string(threads)});
    options.bind_cores = BindLocalDaemons(f.no_bind, devices, f.threads);
    SINKRT_ASSIGN_OR_RETURN(d.cluster, host::LocalCluster::Start(options));
    SINKRT_RETURN_IF_ERROR(ConnectSinkd(d.cluster->rank_table(), f.token, f.tls, /*from_file=*/false, &d));
    return d;
  }
  device::DeviceOptions options = device::DeviceOptions::FromEnvironment();
  if (f.threads > 0) options.threads = f.threads;
  auto in_process = std::make_unique<device::InProcessDevice>(options);
  d.kind = "in-process";
  d.describe = "in-process";
  d.in_process = in_process.get();
  d.links.push_back(std::move(in_process));
  return d;
}

}  // namespace sinkrt::tools
