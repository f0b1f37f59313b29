/// \file
/// DeviceLink: the one seam between host and device.
///
/// The host drives a device only through this interface: load a task stream,
/// push batches one way into a device queue, run a sink of N steps, read or
/// write a tensor, join a world of peer devices for collectives. Two
/// implementations exist: in-process (device/, the embedded default) and
/// remote over TCP to a sinkd daemon (host/remote/). Only applications,
/// tools and tests wire a concrete device to the host.
///
/// Threading. One control thread makes every call, except PushBatch: while
/// the control thread runs RunSink (or anything else but Load and
/// JoinWorld), a feeder thread may call PushBatch on a queue, one feeder per
/// queue (Model's feeder pushes the train queue this way). ClearQueue(q) from
/// the control thread is how a feeder blocked in PushBatch(q) on a full queue
/// is stopped: that PushBatch returns kAborted. Every feeder has returned (is
/// joined) before the control thread calls Load or JoinWorld, which replace
/// the job the queues belong to. Both implementations keep to this and
/// promise nothing wider.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "sinkrt/runtime/collective_use.h"
#include "sinkrt/runtime/dtype.h"
#include "sinkrt/runtime/profile_record.h"
#include "sinkrt/runtime/program_kind.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt {

class VerifiedStream;

/// Read-only bytes: a batch column, a tensor's contents.
using ConstBytes = std::span<const uint8_t>;

/// One AllReduce of a loaded program (a gradient bucket, in data parallel)
/// and the schedule the device will run it with: "direct", "doubling",
/// "ring", "two-level (shm reduce-scatter, tcp ring across 2 hosts, shm
/// all-gather)" (Communicator::AllReduceAlgorithm's words).
struct AllReduceBucket {
  uint64_t bytes = 0;     ///< the AllReduce's payload
  std::string algorithm;  ///< the schedule, as above
};

/// What a device reports after loading a job.
struct LoadInfo {
  uint64_t arena_bytes = 0;  ///< planned arena plus device-side kernel scratch
  uint64_t queue_bytes = 0;  ///< all queue slots
  double load_ms = 0;        ///< verify, allocate, pre-fault, prepare kernels, init
  /// train_step's AllReduces in task order (empty without collectives).
  std::vector<AllReduceBucket> allreduce_buckets;
};

/// Where a sink's wall time went on the device.
struct DeviceTiming {
  double compute_ms = 0;     ///< kernels
  double comm_ms = 0;        ///< inside collectives, on the communication stream
  double comm_wait_ms = 0;   ///< the compute stream waiting for collectives:
                             ///< the part of comm_ms not hidden behind compute
  double bubble_ms = 0;      ///< pipeline stages: the compute stream waiting for a
                             ///< neighbour stage's data, or for it to take ours
                             ///< (a Send/Recv's done event); not in comm_wait_ms
  double queue_wait_ms = 0;  ///< GetNext waiting for the host
  double other_ms = 0;       ///< dispatch and everything else
};

/// Where a device accepts connections from its peers, and which machine it
/// runs on: what the host tells every member of a world about each other.
struct PeerEndpoint {
  std::string address;  ///< "host:port"
  std::string host_id;  ///< devices with equal host ids exchange data through shared memory
};

/// One world of devices (a data-parallel job): every member gets the same
/// job id and member list, and its own rank.
struct WorldSpec {
  uint64_t job = 0;                   ///< equal on every member, fresh for every world
  uint32_t rank = 0;                  ///< the receiving device's rank
  std::vector<PeerEndpoint> members;  ///< indexed by rank, the receiver included
  /// The collectives the receiver's stream will run, per group
  /// (CollectiveUses of the stream it loads next): the rendezvous connects
  /// only the peers they need. Unset: every pair (a caller that does not
  /// know its stream yet).
  std::optional<std::vector<GroupUse>> groups{};
};

/// One tensor a program reports after a sink (the loss, metrics), with its contents.
struct ReportedTensor {
  uint32_t buffer = 0;  ///< its buffer index in the stream
  std::string name;     ///< its name in the stream
  /// Its element type and shape.
  /// @{
  DType dtype = DType::Invalid;
  Shape shape;
  /// @}
  std::vector<uint8_t> data;  ///< its bytes, as the device holds them

  /// The first element as float (loss, metric counts); NaN if empty.
  double scalar() const;
};

/// A sink's answer: what ran, the reported tensors, and where the time went.
struct SinkResult {
  uint32_t steps_run = 0;               ///< steps that ran (fewer than asked only on failure)
  std::vector<ReportedTensor> reports;  ///< the program's reports after the last step
  DeviceTiming timing;                  ///< where the sink's device time went
  /// Per queue of the job: the most batches it ever held at once since load.
  /// Never above the queue's capacity: the device's memory for data is bounded.
  std::vector<uint32_t> queue_high_water;
  /// With profiling on (SetProfiling): the sink's record, then the task
  /// records the device kept, each stream's oldest first. Empty otherwise.
  std::vector<ProfileRecord> profile;
};

/// A device the host trains on: in this process (InProcessDevice) or behind a daemon (RemoteDevice).
class DeviceLink {
 public:
  virtual ~DeviceLink() = default;

  /// Makes `stream` the device's job; replaces any earlier one. The device
  /// refuses a stream that needs what it lacks (features, a world). A remote
  /// device sends the bytes, and its daemon verifies them again: bytes from
  /// the network are untrusted.
  virtual Result<LoadInfo> Load(const VerifiedStream& stream) = 0;

  /// Copies one batch into the next free slot of `queue`: one span per queue
  /// column, in column order, each exactly the column's bytes. Waits while the
  /// queue is full (bounded by the device's timeout). Never a round trip.
  virtual Status PushBatch(uint32_t queue, std::span<const ConstBytes> columns) = 0;

  /// What FillBatch calls to write a batch where the device will read it.
  using BatchFiller = std::function<Status(std::span<const std::span<uint8_t>> columns)>;
  /// PushBatch with the caller writing the batch where the device will read
  /// it: `fill` gets one writable span per queue column, each exactly the
  /// column's bytes (in-process: the queue slot itself; remote: the frame's
  /// payload), and the batch is queued only if it returns Ok. A feeder that
  /// builds its batch this way writes it once instead of building it and
  /// having PushBatch copy it. Waits, and is stopped by ClearQueue, as
  /// PushBatch is; same threading. Unimplemented (the default, for links
  /// with nowhere to lend): the caller pushes.
  virtual Status FillBatch(uint32_t queue, const BatchFiller& fill) {
    (void)queue;
    (void)fill;
    return Unimplemented("this device has no FillBatch; push built batches");
  }

  /// Runs `steps` iterations of `program` and answers once: one control round trip.
  virtual Result<SinkResult> RunSink(ProgramKind program, uint32_t steps) = 0;

  /// Drops every batch waiting in `queue` and makes a PushBatch that is
  /// waiting for a free slot of it return kAborted instead of pushing. The
  /// host calls it when training stops early, so that batches fed for steps
  /// that never ran cannot leak into the next train() or eval(). Call it only
  /// while no sink runs on that queue. Like ReadTensor, not counted as a
  /// control round trip.
  virtual Status ClearQueue(uint32_t queue) = 0;

  /// The bytes of buffer `buffer` (a parameter, say). A maintenance request, not a control round trip.
  virtual Result<std::vector<uint8_t>> ReadTensor(uint32_t buffer) = 0;
  /// Overwrites buffer `buffer` with `bytes` (exactly its size). A maintenance request.
  virtual Status WriteTensor(uint32_t buffer, ConstBytes bytes) = 0;

  /// Where this device accepts its peers; the host collects every member's
  /// endpoint into the WorldSpec it then gives them all.
  virtual Result<PeerEndpoint> Endpoint() { return Unimplemented("this device cannot join a world of devices"); }

  /// Connects this device to every other member of `world` (shared memory
  /// with members on the same host, TCP with the rest) and runs a barrier:
  /// returns once every member has joined, or fails naming the members that
  /// did not within the device's peer timeout. Every member blocks until
  /// all have joined, so the host calls it on all of them at once (one
  /// thread each). A stream with collectives loaded afterwards runs them in
  /// this world; a new JoinWorld replaces it. A maintenance request, not a
  /// control round trip of training.
  virtual Status JoinWorld(const WorldSpec& world) {
    (void)world;
    return Unimplemented("this device cannot join a world of devices");
  }

  /// Starts or stops the device's profiler (runtime/profile_record.h): with
  /// it on, every RunSink's answer carries the records of the steps it
  /// recorded. The device sizes its record rings here, so a sink never
  /// allocates for them. Call while no sink runs; a maintenance request.
  virtual Status SetProfiling(const ProfileConfig& config) {
    (void)config;
    return Unimplemented("this device has no profiler");
  }
  /// Calls `observer(queue, slots)` whenever the device hands the host
  /// credits for freed queue slots (a remote device's Credit frames), on the
  /// thread that receives them; it must not call into this device. Empty:
  /// none. Devices without credits (in-process: PushBatch waits on the
  /// queue itself) ignore it. The profiler records credits this way.
  virtual void SetCreditObserver(std::function<void(uint32_t queue, uint32_t slots)> observer) { (void)observer; }
  /// The device's profile clock now (ns), to measure its offset to the
  /// host's: a maintenance request, allowed whenever no other control
  /// request is out.
  virtual Result<int64_t> ReadClock() { return Unimplemented("this device has no profiler clock"); }

  /// RunSink requests that waited for an answer since construction: the
  /// control round trips of training. PushBatch is one way; ReadTensor,
  /// WriteTensor and ClearQueue are maintenance requests and not counted.
  virtual uint64_t control_round_trips() const = 0;
};

}  // namespace sinkrt
