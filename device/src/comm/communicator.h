/// \file
/// Communicator: collectives between the devices of one job.
///
/// Gloo's split, kept: algorithms (allreduce.cc, allgather.cc, ...) are plain
/// functions over a Transport, which moves tagged segments between this rank
/// and each peer; transports know nothing of reductions. Two transports sit
/// behind one interface and are chosen per peer at rendezvous: shared memory
/// (POSIX shm rings) for a peer on the same host, TCP (Asio sockets) for the
/// rest.
///
/// Every message carries the op's sequence number and a segment index, so
/// ranks that disagree about which collective comes next fail at once with
/// both sides named, instead of hanging or reducing the wrong bytes. Every
/// wait has a deadline (the peer timeout); a missed one names the op, the
/// phase and the ranks that did not answer.
///
/// Sequence numbers count per group (the same ranks list), from #1; the
/// rendezvous barrier is Barrier #0 of the world. A subgroup's calls are
/// made by its members only, so one counter per communicator would drift
/// apart between members and non-members; per group, every member counts
/// the same calls. Send/Recv between two ranks count in the group of that
/// pair, and messages also carry a hash of the group, so equal numbers in
/// two groups never match.
///
/// A failed collective breaks the communicator (every later call returns
/// that failure) and sends a failure notice to every peer, whose current or
/// next wait then fails at once naming this rank: after a failure the ranks'
/// message streams are out of step and the job is torn down.
///
/// All members of a group call the same collectives in the same order with
/// the same sizes, from one thread each (the device's communication stream).
/// Results are bitwise identical on every rank: each element is reduced in
/// one fixed order, chosen by the algorithm, never by arrival time.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "device/src/task_positions.h"
#include "runtime/src/wire_socket.h"
#include "sinkrt/fb/task_stream_generated.h"
#include "sinkrt/runtime/address.h"
#include "sinkrt/runtime/collective_use.h"
#include "sinkrt/runtime/dtype.h"
#include "sinkrt/runtime/status.h"
#include "sinkrt/runtime/tls.h"

namespace sinkrt::device {

/// How AllReduce and ReduceScatter combine elements (sum, mean, max, ...).
using ReduceOp = fb::ReduceOp;

/// What a Communicator waits for and whom it lets in.
struct CommOptions {
  /// Every receive, send-window wait and flush of a collective
  /// (DeviceOptions::peer_timeout).
  std::chrono::milliseconds peer_timeout{std::chrono::seconds(300)};
  /// Every rendezvous phase, Barrier #0 included; 0: peer_timeout
  /// (DeviceOptions::rendezvous_timeout).
  std::chrono::milliseconds rendezvous_timeout{0};
  /// Large messages move in segments of this size, several in flight, so
  /// sending, receiving and reducing overlap.
  size_t segment_bytes = 512 << 10;
  int segments_in_flight = 4;  ///< per peer and direction (Gloo keeps 2)
  /// AllReduce below this many bytes uses recursive doubling (latency),
  /// above it the ring (bandwidth). Calibrated by bench/allreduce_bench on
  /// the 2-core VMs: the two cross at ~128-256 KiB for 4 ranks over shm,
  /// ~512 KiB-1 MiB for 4 ranks over TCP and ~1-4 MiB for 2 ranks (where a
  /// swap moves no more bytes than the ring); 256 KiB stays within ~1.5x of
  /// the faster one everywhere measured.
  size_t small_allreduce_bytes = 256 << 10;
  /// A group of two switches at this size instead, when it is larger (0
  /// above still means the ring everywhere). Default: never, a pair always
  /// doubles. With two members the ring moves no more bytes than a swap,
  /// waits on the peer once per phase instead of once, and was never
  /// faster by more than the loaded VM's noise from 64 KiB to 64 MiB (over
  /// TCP at 1 MiB the two overlapped: 355-449 µs ring, 411-496 doubling),
  /// while any lower switch lets a fused AllReduce lose to its pieces (comm/algorithms/allreduce_choice.h;
  /// calibrated by `allreduce_bench --compare --algos rd,ring --ranks 2`).
  size_t pair_allreduce_bytes = SIZE_MAX;
  /// An AllReduce of at least this many bytes whose buffer lies, on every
  /// member, in the memory ShareMemory gave out reduces straight out of the
  /// peers' buffers (about 2.5 S of memory traffic for 2 ranks instead of
  /// the rings' 4.5 S); below it, or when any member's buffer lies
  /// elsewhere, it takes the schedules above. 0: whenever the buffers allow.
  /// Why 1 MiB: the direct path waits on its peers three times per op
  /// (arrived, reduced, done) where a pair's doubling waits once, so small
  /// ones lose: on the loaded 2-core VM (`allreduce_bench --compare --algos
  /// auto,direct --direct-bytes 0`, 2 runs) direct/doubling was 2.2-2.5x at
  /// 16-64 KiB, 1.2 at 512 KiB, 0.71-0.89 at 1 MiB, 0.63-0.66 at 2 MiB for 2
  /// ranks; for 4 ranks (against doubling, then the ring from 256 KiB) 2.0x
  /// at 16 KiB, 0.96-1.34 at 256 KiB, 0.67-0.82 at 512 KiB-1 MiB. A fused
  /// buffer of at least 1 MiB that reads directly is then never slower than
  /// its smaller pieces through the rings.
  size_t direct_allreduce_bytes = 1 << 20;
  /// An AllReduce over a group whose members span several hosts, the same
  /// number (more than one) on each, runs in two levels as NCCL's and
  /// Horovod's hierarchical AllReduce: a reduce-scatter inside each host,
  /// an AllReduce of each share across the hosts, an all-gather inside each
  /// host, so that only 1/L of the data per rank crosses the slower link
  /// (comm/algorithms/allreduce_hierarchical.cc). false: the flat schedules
  /// above whatever the hosts (A/B comparisons).
  bool hierarchical_allreduce = true;
  /// Let peers on this host use shared memory (tests turn it off to exercise TCP).
  bool use_shared_memory = true;
  /// Sent in the Hello of every dial: a daemon with a --token checks peers
  /// as it checks hosts, so the daemons of one world share it.
  std::string token;
  /// When set, every dial to a peer runs a TLS handshake as this client
  /// context (MakeTlsContext(..., TlsRole::kClient)) before its Hello: the
  /// peer's certificate must chain to the context's CA, and the context's
  /// certificate is presented for the peer to verify. Every byte of the
  /// link then travels encrypted, the collectives' data included; peers on
  /// one host that share memory move their data through it, not the link.
  /// The accepting side's TLS is its inbox's (a daemon's port). Null: plain.
  std::shared_ptr<const TlsContext> tls;
  /// The groups this rank will call collectives on and which calls
  /// (WorldSpec::groups): the rendezvous then connects only the peers those
  /// calls' schedules talk to, plus the world's own partners
  /// (rendezvous/connection_plan.h). Unset: every pair, the full mesh, for
  /// a caller that does not know its streams when it joins. Not compared
  /// between ranks: each lists its own calls, and a pair that disagrees
  /// fails the rendezvous naming both ranks.
  std::optional<std::vector<GroupUse>> groups;
};

/// One member of the world as the rendezvous sees it.
struct PeerAddress {
  uint32_t rank = 0;    ///< its world rank
  Address address;      ///< where its daemon accepts peer connections
  std::string host_id;  ///< equal host_ids share memory (LocalHostId: boot id, hostname, network namespace)
};

/// The ranks of one collective group, ascending; the world is 0..size-1.
struct Group {
  std::vector<uint32_t> ranks;  ///< world ranks, ascending
  /// The whole world: ranks 0..size-1.
  static Group World(uint32_t size);
};

/// Stand-in for the daemon's accept loop during rendezvous: peers with a
/// lower rank than ours connect to us, and their sockets (Hello already
/// read, rank known) are handed over here.
class PeerInbox {
 public:
  virtual ~PeerInbox() = default;
  /// The next peer connection, or an error at the deadline.
  virtual Result<std::pair<uint32_t, std::unique_ptr<FrameSocket>>> Accept(Deadline deadline) = 0;
  /// True once whoever asked for the world has given up on it (a daemon's
  /// host hung up): the rendezvous stops dialing peers that are not there
  /// yet instead of retrying until the peer timeout.
  virtual bool Abandoned() { return false; }
};

class Transport;

/// Memory from Communicator::ShareMemory: `data` stays mapped while `keep`
/// (or the communicator's hold on it) lives.
struct SharedMemory {
  std::span<uint8_t> data;     ///< the mapped bytes
  std::shared_ptr<void> keep;  ///< holds the mapping
};

/// One rank's end of the collectives of a job; see the file's description.
class Communicator {
 public:
  ~Communicator();

  /// Rendezvous: connects the peers that options.groups' collectives need
  /// (every peer when unset; rank r dials the planned peers above it and
  /// takes those below it from `inbox`), sets up shared memory with the
  /// planned peers on this host, then runs a barrier. `job` must be equal on every
  /// rank (a stale daemon from another job cannot join).
  static Result<std::unique_ptr<Communicator>> Create(uint32_t rank, std::vector<PeerAddress> world, uint64_t job,
                                                      PeerInbox& inbox, CommOptions options);

  uint32_t rank() const;               ///< this rank in the world
  uint32_t size() const;               ///< ranks in the world
  const CommOptions& options() const;  ///< the options it was created with
  /// "shm" or "tcp" for each peer, "none" for one not connected (tools and logs).
  std::string TransportName(uint32_t peer) const;
  /// Peers this rank holds a connection to, and how many of them share
  /// memory (n - 1 and the same-host count for a full mesh).
  /// @{
  uint32_t connections() const;
  uint32_t shm_connections() const;
  /// @}
  /// Ok when this rank is connected to every member of `group` that the
  /// schedules of `uses` (CollectiveUse bits) talk to from its position;
  /// else the error names both ranks. The executor asks at load, so a
  /// stream that needs a link the rendezvous did not plan is refused then,
  /// not in the middle of a sink.
  Status CheckLinks(const Group& group, uint32_t uses) const;

  /// In place over `data` (count elements of `dtype`). Mean divides the sum
  /// by the group's size.
  Status AllReduce(std::span<uint8_t> data, DType dtype, ReduceOp op, const Group& group);
  /// The schedule an AllReduce of `bytes` of `dtype` over `group` runs on
  /// this rank, in words for reports: "direct", "doubling", "ring" or
  /// "two-level (shm reduce-scatter, tcp ring across 2 hosts, shm
  /// all-gather)"; "none" for a group of one or no elements. The op's own
  /// choice code decides, so the two cannot drift apart. `shared`: the
  /// buffer lies in ShareMemory's block on every member (the direct
  /// schedule's other condition, which only the caller knows).
  std::string AllReduceAlgorithm(size_t bytes, DType dtype, const Group& group, bool shared) const;
  /// `out` = every member's `in`, in group order (out.size() == in.size() * members).
  Status AllGather(std::span<const uint8_t> in, std::span<uint8_t> out, const Group& group);
  /// `out` = this member's 1/members share of the reduction of every `in`.
  Status ReduceScatter(std::span<const uint8_t> in, std::span<uint8_t> out, DType dtype, ReduceOp op,
                       const Group& group);
  /// Fused, blocked ReduceScatter (optimizer parallel's buckets): for every
  /// i, `out[i]` = this member's 1/members block of the reduction of every
  /// member's `in[i]` (in[i].size() == out[i].size() * members, all of
  /// `dtype`), in one ring. Each element is reduced in the order
  /// ReduceScatter(in[i], out[i], ...) alone would reduce it, so the results
  /// are bitwise those of the unfused calls. out[i] may lie inside in[i].
  Status ReduceScatterBlocked(std::span<const std::span<const uint8_t>> in, std::span<const std::span<uint8_t>> out,
                              DType dtype, ReduceOp op, const Group& group);
  /// Fused, blocked AllGather: for every i, `out[i]` = every member's
  /// `in[i]` in group order (out[i].size() == in[i].size() * members), in
  /// one ring. in[i] may be this member's block of out[i] (in place).
  Status AllGatherBlocked(std::span<const std::span<const uint8_t>> in, std::span<const std::span<uint8_t>> out,
                          const Group& group);
  /// Grows the working copy that ReduceScatter and the blocked collectives
  /// use to at least `bytes`, so that a loaded program's collectives
  /// allocate nothing when they run. Not while a collective runs.
  void ReserveScratch(size_t bytes);
  /// MPI_Alltoall with equal blocks: `in` is one block per member, block j
  /// for the member at position j; `out` receives the block that the member
  /// at position i holds for this rank at block i. in.size() == out.size(),
  /// a multiple of the member count. `in` and `out` must not overlap.
  Status AllToAll(std::span<const uint8_t> in, std::span<uint8_t> out, const Group& group);
  /// `data` on `root` (a world rank in the group) copied to every member.
  Status Broadcast(std::span<uint8_t> data, uint32_t root, const Group& group);
  /// `data` to world rank `peer` (counted in the pair's group).
  Status Send(std::span<const uint8_t> data, uint32_t peer);
  /// Fills `data` from world rank `peer`: the matching Send.
  Status Recv(std::span<uint8_t> data, uint32_t peer);
  /// Returns once every member of `group` has called it.
  Status Barrier(const Group& group);

  /// Memory that every other member of the world may map, so that an
  /// AllReduce on a buffer inside it reads the peers' buffers in place
  /// instead of copying them through rings (NCCL's P2P/IPC, Open MPI's
  /// XPMEM single copy). Local: no peer takes part now; each maps the block
  /// when an AllReduce first points it there. Returns `bytes` of zeroed,
  /// pre-faulted memory, or an empty one when the world cannot share (a
  /// member on another host or over TCP, agreed at rendezvous); then the
  /// caller allocates its own. AllReduces read it in place until the next
  /// ShareMemory; it stays mapped while the caller holds `keep`. The
  /// object is created with mode 0600; its name goes once every peer maps
  /// it (or with the next block, or the communicator).
  Result<SharedMemory> ShareMemory(size_t bytes);
  /// AllReduces so far that reduced straight out of the peers' memory
  /// (tests and benchmarks).
  uint64_t direct_allreduces() const;

  /// Wakes every wait with kAborted (the job is being torn down).
  void Abort();

  /// Where this device's streams are: every answer to a peer's stall query
  /// carries it from now on (none set: the answer says only which
  /// collective this rank is in). `positions` must stay valid until
  /// ClearTaskPositions(positions); both are safe while the I/O thread
  /// answers a query (it reads the pointer under a lock). The executor sets
  /// it at load and clears it before it goes.
  void SetTaskPositions(const TaskPositions* positions);
  /// Forgets `positions` if it is the one set.
  void ClearTaskPositions(const TaskPositions* positions);

  struct State;

 private:
  explicit Communicator(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

/// dst[i] = dst[i] (op) src[i] over `count` elements; Mean reduces as Sum
/// (the division happens once, at the end of the collective).
Status ReduceInto(std::span<uint8_t> dst, std::span<const uint8_t> src, DType dtype, ReduceOp op);

/// This host's identity for "same host" decisions: one kernel and one network
/// namespace (host_id.cc says why).
std::string LocalHostId();

}  // namespace sinkrt::device
