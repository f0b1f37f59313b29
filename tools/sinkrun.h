// sinkrun's parts: the flags its subcommands share (parsed in
// sinkrun_main.cc), `train` (sinkrun_train.cc), `launch`
// (sinkrun_launch.cc), and the devices a training run opens
// (open_devices.cc).
#pragma once

#include <chrono>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "parallel_flags.h"
#include "sinkrt/host/local_cluster.h"
#include "sinkrt/host/parallel_context.h"
#include "sinkrt/host/profiler.h"
#include "sinkrt/runtime/device_link.h"
#include "sinkrt/runtime/rank_table.h"
#include "sinkrt/runtime/status.h"
#include "sinkrt/runtime/tls.h"

namespace sinkrt::device {
class InProcessDevice;
}

namespace sinkrt::tools {

using Clock = std::chrono::steady_clock;

constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";  // Debian's dataset-fashion-mnist

struct TrainFlags {
  std::string model = "mlp";
  std::string graph;    // --graph: a graph file instead of --model
  std::string streams;  // --streams: a sinkc directory instead of --model
  std::string save_checkpoint;
  // --resume FILE: the checkpoint to start from (its epoch is the
  // initial_epoch); --checkpoint-dir DIR [--checkpoint-epochs K]: a
  // checkpoint every K epochs while training (MindSpore's ModelCheckpoint).
  std::string resume;
  std::string checkpoint_dir;
  int checkpoint_epochs = 1;
  std::string data;
  int epochs = 5;
  int64_t batch = 64;
  double lr = 0.01;
  double momentum = 0.9;
  std::string optimizer = "momentum";
  double weight_decay = 0;    // --weight-decay
  std::string no_decay;       // --no-decay: comma-separated name filters of the no-decay group
  double clip_grad_norm = 0;  // --clip-grad-norm: clip by global norm (docs/guide/clipping.md); 0: off
  uint64_t seed = 1;
  double dropout = 0;  // --dropout P: the ViT's drop probability (docs/guide/dropout.md)
  int sink_size = -1;
  bool no_sink = false;
  int threads = 0;       // 0: every core the process may use
  bool no_bind = false;  // --no-bind: local daemons are not bound to cores of their own
  std::string report;
  int devices = 1;  // given explicitly: on sinkd daemons started for the run
  std::string rank_table;
  std::string token;
  // --tls-cert/--tls-key/--tls-ca (SINKRT_TLS_*): TLS to the daemons, and
  // the daemons' own certificate when --devices starts them.
  TlsConfig tls = TlsConfig::FromEnvironment();
  bool tls_plain_peers = false;  // --tls-plain-peers: passed to the daemons --devices starts
  std::string sinkd;
  // --parallel and the settings of each parallel mode (parallel_flags.h).
  ParallelFlags par;
  std::string recompute;            // --recompute all|LAYER,...
  bool sync_bn = false;             // --sync-bn
  std::string amp_level;            // --amp-level O0..O3
  std::string loss_scale = "none";  // --loss-scale-manager
  std::string lr_schedule;          // --lr-schedule KIND[:KEY=VALUE,...] (docs/guide/lr_schedules.md)
  // --profile DIR [--profile-steps A:B] [--profile-every K] [--profile-keep N]
  std::string profile;
  std::string profile_steps;
  uint32_t profile_every = 1;
  uint32_t profile_keep = host::ProfilerOptions{}.keep_steps;
  // How the rank table was named, for messages: "--rank-table FILE", or
  // "RANK_TABLE_FILE=FILE" when MindSpore's variable named it.
  std::string rank_table_source;
  // Set by Train when a launcher started this process as one rank of
  // several (mpirun, srun, sinkrun launch -- ..., RANK_ID/RANK_SIZE).
  std::optional<LaunchRank> per_rank;
};

// sinkrun profile DIR [--json]: the summary of a recorded run (sinkprof's).
int Profile(const std::string& dir, bool json);
// "A:B" (1-based, inclusive; either side may be left out) into `options`.
Status ParseProfileSteps(const std::string& text, host::ProfilerOptions* options);

struct LaunchFlags {
  int devices = 0;
  int base_port = 0;  // 0: the kernel picks each daemon's port
  std::string rank_table_out = "rank_table.json";
  std::string token;
  // The daemons' --tls-cert/--tls-key/--tls-ca; with a COMMAND every rank's
  // SINKRT_TLS_CERT/KEY/CA (TLS to the master).
  TlsConfig tls;
  std::string sinkd;
  int threads = 0;
  bool no_bind = false;
  bool quiet = false;
  // launch -n N [...] -- COMMAND: one process per rank instead of daemons
  // (msrun's --worker_num, --local_worker_num, --node_rank, --master_addr,
  // --master_port, --log_dir).
  std::vector<std::string> command;
  int local_workers = 0;  // 0: all N on this host
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: a free port on one host, 8118 across hosts
  std::string log_dir;
};

// `sinkrun calibrate` (sinkrun_calibrate.cc).
struct CalibrateFlags {
  std::string out = "calibration.json";
  int threads = 1;                                  // kernel threads per rank
  std::vector<int64_t> grid = {16, 64, 256, 1024};  // M, N and K of the GEMM grid
  bool no_collectives = false;
};

// "1 step", "2 steps": a count with its noun, singular for one.
inline std::string Counted(int64_t n, const std::string& noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

// "rank 2: " in a process that is one rank of several (their errors
// interleave on one terminal under mpirun), else empty.
inline std::string& RankPrefix() {
  static std::string prefix;
  return prefix;
}

// A bad command line: exit 2.
inline int Usage(const std::string& message) {
  std::cerr << "sinkrun: " << RankPrefix() << message << '\n';
  return 2;
}

// Anything that fails after the command line: exit 1.
inline int Failure(const std::string& message) {
  std::cerr << "sinkrun: " << RankPrefix() << message << '\n';
  return 1;
}

// The devices a run trains on, one per rank. Members are destroyed in
// reverse order: the connections close before the daemons they talk to are
// stopped.
struct TrainDevices {
  std::unique_ptr<host::LocalCluster> cluster;  // --devices: the daemons started for this run
  std::vector<std::unique_ptr<DeviceLink>> links;
  std::string kind;                               // "in-process" or "sinkd"
  std::string describe;                           // for the header line
  device::InProcessDevice* in_process = nullptr;  // links[0], when in-process
  int sinkd_threads = 0;                          // from rank 0's Hello

  // An in-process device knows its threads once a job is loaded.
  int threads() const;
  // After the world is joined: "rendezvous: 7 connections per rank (3
  // shm)" (a range when ranks differ) from the daemons' Joined answers;
  // empty for in-process devices, which do not say.
  std::string RendezvousText() const;
  std::vector<DeviceLink*> pointers() const {
    std::vector<DeviceLink*> out;
    for (const auto& l : links) out.push_back(l.get());
    return out;
  }
};

// A progress line of a long wait (daemons starting, a daemon not
// answering), on stderr: stdout carries the training lines.
void PrintProgress(const std::string& line);

// Whether this machine can host `devices` local sinkd daemons
// (host::CheckLocalDeviceCount with its cores and MemAvailable);
// `arena_bytes`: each daemon's job arena when known before launch, else 0.
// Called before anything is forked; a refusal is a usage error.
Status CheckLocalDevices(int devices, uint64_t arena_bytes = 0);
// Whether `devices` local daemons of `threads` kernel threads each (0: their
// share) are bound to cores of their own: unless --no-bind, when there are
// several and each share holds its threads.
bool BindLocalDaemons(bool no_bind, int devices, int threads);

// The sinkd binary: `flag` (--sinkd), else SINKRT_SINKD or the one beside
// sinkrun.
Result<std::string> SinkdPath(const std::string& flag, const char* argv0);

// `table`: the loaded rank table, if any; `launch`: start `devices` local
// daemons; else one in-process device.
Result<TrainDevices> OpenDevices(const TrainFlags& f, bool launch, int devices, const std::optional<RankTable>& table,
                                 const char* argv0);

// `sinkrun train`; `cmd` tells which flags were given. Returns the exit code.
int Train(const TrainFlags& flags, const CLI::App& cmd, const char* argv0, Clock::time_point start);

// `sinkrun calibrate`: measures, writes f.out; returns the exit code.
int Calibrate(const CalibrateFlags& f);

// `sinkrun launch`: returns the exit code once the daemons are stopped.
int Launch(const LaunchFlags& f, const char* argv0);
// `sinkrun launch ... -- COMMAND`: one process per rank; returns the first
// failing rank's exit code, or 0 once every rank has succeeded.
int LaunchRanks(const LaunchFlags& f, const char* argv0);

}  // namespace sinkrt::tools
