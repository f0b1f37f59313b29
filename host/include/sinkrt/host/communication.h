/// \file
/// One host process per rank: MindSpore's mindspore.communication for sinkrt.
///
/// ~~~
///   host::init();                                   // from the launcher's variables
///   ParallelContext pc{.mode = ParallelMode::DataParallel,
///                      .device_num = static_cast<int>(host::get_group_size()),
///                      .global_rank = static_cast<int>(host::get_rank())};
///   InProcessDevice device(...);                    // or a RemoteDevice: this rank's sinkd
///   auto model = Model::Create(net, loss, opt, device, {.context = pc});
///   model->train(epochs, dataset, ...);             // feeds this rank's shard only
/// ~~~
///
/// A cluster launcher starts one process per rank and tells each which it
/// is. init() reads, in this order: RANK_ID/RANK_SIZE (MindSpore, with
/// RANK_TABLE_FILE), OMPI_COMM_WORLD_RANK/_SIZE (Open MPI's mpirun),
/// PMI_RANK/PMI_SIZE (MPICH), SLURM_PROCID/SLURM_NTASKS (srun): the first
/// that names a rank (rank_table.h, LaunchRankFromEnvironment).
///
/// The processes then meet at one master: rank 0's process listens at
/// MS_SCHED_HOST:MS_SCHED_PORT (MindSpore's msrun), else
/// MASTER_ADDR:MASTER_PORT (torchrun's), else 127.0.0.1:8118 (msrun's
/// default), and every other rank connects to it. init() returns once all
/// of them have (a barrier), or fails naming the ranks that did not come
/// within the rendezvous timeout (HCCL_CONNECT_TIMEOUT, SINKRT_PEER_TIMEOUT_MS).
/// The master keeps one connection per rank; the devices' own links (the
/// collectives) are made later, device to device, and never pass through it.
///
/// Every Model::Create and Model::train of a per-rank Model is one more
/// round at the master: each rank sends what must be equal everywhere (the
/// world, the network's hash, the batch, the options, the sink size, ...)
/// and rank 0 refuses a mismatch on every rank at once, naming the rank and
/// the field: "rank 2 differs from rank 0 in batch: 32 on rank 2, 64 on
/// rank 0". The device endpoints travel in the same round, so the devices
/// then join one world.
///
/// A non-loopback master needs a token (InitOptions::token, else
/// SINKRT_TOKEN), as sinkd's non-loopback binds do. The token never
/// travels: the master and each rank prove it to each other over fresh
/// nonces (HMAC-SHA256, runtime/src/auth.h), so a captured join cannot be
/// replayed. The master serves connections concurrently, with sinkd's
/// admission rules: a short deadline (SINKRT_HELLO_TIMEOUT_MS) and quotas for
/// connections that have not proven themselves, so strangers neither delay
/// nor end a forming world.
///
/// With TLS (InitOptions::tls, else SINKRT_TLS_CERT, SINKRT_TLS_KEY and
/// SINKRT_TLS_CA, the same files on every rank) every connection to the
/// master is encrypted: rank 0 serves with the certificate and key, the
/// other ranks verify it against the CA, and a master given a CA asks each
/// rank for a certificate the CA signed (mutual authentication). A rank
/// without TLS is refused by a TLS master, naming the variables.
///
/// A world has a job id (InitOptions::job_id, else SINKRT_JOB_ID, which
/// `sinkrun launch` sets; else rank 0 makes one up). Every rank carries it,
/// and the master refuses a rank of another job, naming both: two jobs
/// given one master port fail with that, not with a mismatch.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sinkrt/runtime/address.h"
#include "sinkrt/runtime/admission.h"
#include "sinkrt/runtime/device_link.h"
#include "sinkrt/runtime/status.h"
#include "sinkrt/runtime/tls.h"

namespace sinkrt::host {

inline constexpr uint16_t kDefaultMasterPort = 8118;  ///< msrun's --master_port

/// What init() is given; every field may come from the launcher instead.
struct InitOptions {
  /// Unset: from the launcher's variables (above). Set: these win, so a
  /// program may form a world without a launcher (tests do).
  /// @{
  std::optional<uint32_t> rank;
  std::optional<uint32_t> world_size;
  std::optional<Address> master;
  /// @}
  std::string token;   ///< empty: SINKRT_TOKEN
  std::string job_id;  ///< empty: SINKRT_JOB_ID, else rank 0 chooses one (CheckJobId)
  /// TLS to the master; all empty: SINKRT_TLS_CERT, SINKRT_TLS_KEY, SINKRT_TLS_CA.
  TlsConfig tls;
  /// Joining and every later round; zero: the rendezvous timeout from the
  /// environment (PeerTimeoutsFromEnvironment).
  std::chrono::milliseconds timeout{0};
};

/// A field every rank must hold equal, checked at a round.
struct JoinField {
  std::string name;   ///< what it is ("epochs", "sink_size")
  std::string value;  ///< this rank's value
};

/// The world a round formed: a fresh id and every rank's device endpoint.
struct FormedWorld {
  uint64_t job = 0;                   ///< the world's fresh id
  std::vector<PeerEndpoint> members;  ///< by rank
};

/// The processes of one job and their connections to the master. init()
/// keeps one for the process; tests make several in one process.
class ProcessGroup {
 public:
  /// Who this process is in the job, and how to reach the master.
  struct Options {
    uint32_t rank = 0;                                             ///< this process's rank
    uint32_t world_size = 1;                                       ///< ranks in the job
    uint32_t local_rank = 0;                                       ///< this rank's index on its host
    uint32_t local_world_size = 1;                                 ///< ranks on this host
    Address master{"127.0.0.1", kDefaultMasterPort};               ///< rank 0's listening address
    std::string token;                                             ///< what every rank must send the master
    std::chrono::milliseconds timeout{std::chrono::seconds(300)};  ///< joining and every later round
    std::string source;  ///< where the rank came from ("OMPI_COMM_WORLD_RANK"), for messages
    /// The job this rank belongs to; empty: the master's (on rank 0: a fresh one).
    std::string job_id;
    /// TLS on the connections to the master (none when empty): rank 0
    /// serves with the certificate and key, the others verify it with the
    /// CA and present theirs (see the file's description).
    TlsConfig tls;
    /// The master: each connection must say Hello and prove the token within
    /// this (SINKRT_HELLO_TIMEOUT_MS), and the quotas of such pending
    /// connections (sinkd's rules, sinkrt/runtime/admission.h).
    /// @{
    std::chrono::milliseconds hello_timeout{std::chrono::seconds(5)};
    PendingQuotas pending;
    /// @}
  };
  /// Joins the world: rank 0 listens at `master` and waits for every other
  /// rank; the others connect (retrying while rank 0 is not up yet). Returns
  /// once every rank has joined, or fails naming the ranks that did not.
  static Result<std::unique_ptr<ProcessGroup>> Join(const Options& options);
  ~ProcessGroup();

  /// Options::rank and the like, as joined.
  /// @{
  uint32_t rank() const;
  uint32_t world_size() const;
  uint32_t local_rank() const;
  uint32_t local_world_size() const;
  const Options& options() const;
  /// @}
  /// The address this process reaches the master from (rank 0: the
  /// master's own host): where its device should accept its peers, so that
  /// they reach it the way they reach the master.
  const std::string& local_host() const;
  /// The world's job id: the launcher's, or the one rank 0 chose.
  const std::string& job_id() const;

  /// One round (all ranks call it with the same fields, in the same
  /// order): returns every rank's endpoint and a fresh job id, or the
  /// first mismatch, naming the rank and the field, on every rank.
  /// `what` names the round in messages ("Model.train").
  Result<FormedWorld> Round(const std::string& what, const std::vector<JoinField>& fields,
                            const PeerEndpoint& endpoint = {});

  struct Impl;

 private:
  explicit ProcessGroup(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// MindSpore's init(): joins this process's world (above). Once per
/// process; a second call is an error. Without any launcher variable this
/// process is the whole world (rank 0 of 1) and nothing listens.
Status init(const InitOptions& options = {});
/// Whether init() has succeeded (and release() not been called since).
bool initialized();
/// This process's rank and the world's size; 0 and 1 before init().
/// @{
uint32_t get_rank();
uint32_t get_group_size();
/// @}
/// This rank's index on its host and the ranks on it (OMPI_COMM_WORLD_LOCAL_RANK,
/// SLURM_LOCALID, LOCAL_RANK / ..._LOCAL_SIZE, LOCAL_WORLD_SIZE).
/// @{
uint32_t get_local_rank();
uint32_t get_local_rank_size();
/// @}
/// The group init() formed; null before it.
ProcessGroup* process_group();
/// Closes the connections to the master; init() may be called again.
void release();

/// Ok when `id` is a job id: 1 to 64 letters, digits, '.', '_', ':' or '-'
/// (it is printed in messages); else the error naming `what` ("SINKRT_JOB_ID").
Status CheckJobId(const std::string& id, const std::string& what);

/// The launcher's rank, world and master from the environment, as init()
/// reads them (`options` wins where set).
Result<ProcessGroup::Options> ProcessGroupOptionsFromEnvironment(const InitOptions& options = {});

}  // namespace sinkrt::host
