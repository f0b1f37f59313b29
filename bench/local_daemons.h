// What the training benchmarks on local sinkd daemons share: one
// LocalCluster per device count, started on first use and stopped at exit,
// RemoteDevice links to its ranks, and a callback that sums the devices'
// own per-epoch timing (CallbackParams::device) while armed.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "device/src/executor.h"
#include "sinkrt/host/callback.h"
#include "sinkrt/host/local_cluster.h"
#include "sinkrt/host/remote_device.h"

#ifndef SINKD_PATH
#error "local_daemons.h needs SINKD_PATH (bench/CMakeLists.txt sets it to the built sinkd)"
#endif

namespace sinkrt::bench {

// As `sinkrun train --devices N` starts them: the cores shared out.
inline int ThreadsPerDaemon(int devices) { return std::max(1, device::AvailableCores() / devices); }

// Keyed by (devices, threads per daemon).
inline std::map<std::pair<int, int>, std::unique_ptr<host::LocalCluster>>& Clusters() {
  static auto* clusters = new std::map<std::pair<int, int>, std::unique_ptr<host::LocalCluster>>();
  return *clusters;
}

// N daemons of `threads` kernel threads each (0: ThreadsPerDaemon), started
// on first use (from the main thread, which outlives them: LocalCluster's
// PR_SET_PDEATHSIG is per thread).
inline Result<host::LocalCluster*> Cluster(int devices, int threads = 0) {
  using namespace std::chrono_literals;
  if (threads <= 0) threads = ThreadsPerDaemon(devices);
  auto& clusters = Clusters();
  auto it = clusters.find({devices, threads});
  if (it == clusters.end()) {
    host::LocalClusterOptions options;
    options.devices = devices;
    options.sinkd_path = SINKD_PATH;
    options.sinkd_args = {"--quiet", "--threads", std::to_string(threads)};
    // As `sinkrun train --devices N` binds them (BindLocalDaemons);
    // SINKRT_BENCH_NO_BIND=1 leaves them unbound, for the A/B.
    const int cores = device::AvailableCores();
    options.bind_cores =
        devices > 1 && devices <= cores && threads <= cores / devices && std::getenv("SINKRT_BENCH_NO_BIND") == nullptr;
    SINKRT_ASSIGN_OR_RETURN(std::unique_ptr<host::LocalCluster> cluster, host::LocalCluster::Start(options));
    it = clusters.emplace(std::make_pair(devices, threads), std::move(cluster)).first;
  }
  return it->second.get();
}

inline void StopDaemons() {
  for (auto& [n, cluster] : Clusters()) cluster->Stop();
  Clusters().clear();
}

inline Result<std::vector<std::unique_ptr<DeviceLink>>> Connect(int devices, int threads = 0) {
  using namespace std::chrono_literals;
  SINKRT_ASSIGN_OR_RETURN(host::LocalCluster * cluster, Cluster(devices, threads));
  std::vector<std::unique_ptr<DeviceLink>> links;
  const RankTable& table = cluster->rank_table();
  for (size_t r = 0; r < table.ranks.size(); ++r) {
    host::RemoteOptions o;
    o.rank = static_cast<int>(r);
    o.connect_timeout = 30s;
    o.reply_timeout = 120s;
    o.push_timeout = 120s;
    o.peer_timeout = 60s;
    SINKRT_ASSIGN_OR_RETURN(auto remote, host::RemoteDevice::Connect(table.ranks[r].address, o));
    links.push_back(std::move(remote));
  }
  return links;
}

// Sums the device's per-epoch breakdown and the steps over the epochs it
// saw while `armed`.
class TimingCallback : public host::Callback {
 public:
  bool armed = false;
  DeviceTiming sum;
  int64_t steps = 0;
  double epoch_ms = 0;
  std::vector<double> losses;

  Status on_train_epoch_begin(host::RunContext& rc) override {
    begin_step_ = rc.original_args().cur_step_num;
    return Status::Ok();
  }
  Status on_train_epoch_end(host::RunContext& rc) override {
    const host::CallbackParams& p = rc.original_args();
    losses.push_back(p.net_outputs);
    if (!armed) return Status::Ok();
    sum.compute_ms += p.device.compute_ms;
    sum.comm_ms += p.device.comm_ms;
    sum.comm_wait_ms += p.device.comm_wait_ms;
    sum.queue_wait_ms += p.device.queue_wait_ms;
    sum.other_ms += p.device.other_ms;
    epoch_ms += p.epoch_ms;
    steps += p.cur_step_num - begin_step_;
    return Status::Ok();
  }

 private:
  int64_t begin_step_ = 0;
};

}  // namespace sinkrt::bench
