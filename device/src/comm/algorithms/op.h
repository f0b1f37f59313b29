// Op: one collective call as one rank sees it, and the algorithms that run
// it (one .cc file each in this folder).
//
// Layer contract: an algorithm sees the group (positions, not sockets), its
// buffers and the Op's helpers, which post, receive and wait through the
// members' Transport interfaces and word their errors (naming the op, the
// phase and the rank at fault, with a stall report on timeouts). It never
// includes transport/tcp or transport/shm, opens no connection and
// allocates nothing per call (test/device/no_alloc_test.cc); the arithmetic is in
// reduce.h.
//
// An Op holds the group, this rank's position in it, the sequence number
// that tags its messages, and the phase it is in.
#pragma once

#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include "device/src/comm/algorithms/allreduce_choice.h"
#include "device/src/comm/comm_state.h"

namespace sinkrt::device {

uint32_t GroupHash(std::span<const uint32_t> ranks);

class Op {
 public:
  Op(Communicator::State& s, OpKind kind, std::span<const uint32_t> ranks, uint32_t pos, uint64_t seq)
      : state(s), kind(kind), ranks(ranks), pos(pos), seq(seq), group(GroupHash(ranks)) {}

  Communicator::State& state;
  OpKind kind;                      // as errors name it (Recv for the receiving side)
  std::span<const uint32_t> ranks;  // the group, ascending
  uint32_t pos;                     // this rank's position in it
  uint64_t seq;
  uint32_t group;
  const char* phase = "";

  uint32_t n() const { return static_cast<uint32_t>(ranks.size()); }
  uint32_t rank_at(uint32_t position) const { return ranks[position]; }
  size_t segment_bytes() const { return state.options.segment_bytes; }
  uint32_t window() const { return static_cast<uint32_t>(state.options.segments_in_flight); }
  Tag tag(uint32_t segment) const { return Tag{kind == OpKind::kRecv ? OpKind::kSend : kind, group, seq, segment}; }
  // "AllReduce #7"
  std::string Name() const { return std::string(OpName(kind)) + " #" + std::to_string(seq); }

  // Transport calls on the member at `position`, errors worded for this op.
  Result<uint64_t> Post(uint32_t position, uint32_t segment, std::span<const uint8_t> bytes);
  Result<std::span<const uint8_t>> Receive(uint32_t position, uint32_t segment, size_t bytes);
  void Release(uint32_t position) { transport(position)->Release(); }  // after a Receive: connected
  Status WaitSent(uint32_t position, uint64_t ticket);
  uint64_t Posted(uint32_t position) {
    Transport* t = transport(position);
    return t ? t->posted() : 0;  // none to a member not connected (a Post to it fails)
  }
  // Until everything this rank posted to the group has left its buffers.
  Status FlushAll();

  // A transport's error as this op's: names the op, the phase and the rank;
  // a timeout also reports where the rest of the group is.
  Status Fail(const Status& st);

 private:
  // Null for a member this rank has no connection to.
  Transport* transport(uint32_t position) { return state.transports[ranks[position]]; }
  Status NotConnected(uint32_t position);
  Deadline deadline() const { return DeadlineIn(state.options.peer_timeout); }
  std::string StallReport();
};

// A step of a composite collective (the two-level AllReduce's) as an op of
// its own on a sub-group whose members all run the same steps: numbered in
// that group's sequence, so its messages carry the sub-group's hash and
// number and cannot match another op's, and reported as this rank's
// progress (a stall report on it asks the sub-group). `ranks` must outlive
// the op (State::group_topologies holds them). Allocates only the first
// time a sub-group is numbered.
Op SubOp(Op& parent, OpKind kind, const std::vector<uint32_t>& ranks, uint32_t pos);

// Cuts `count` elements into `parts` runs whose sizes differ by at most one.
struct Split {
  size_t count = 0;
  size_t parts = 1;
  size_t begin(size_t i) const { return i * (count / parts) + std::min(i, count % parts); }
  size_t size(size_t i) const { return count / parts + (i < count % parts ? 1 : 0); }
};

// Segments per piece so that no segment of `max_elements` elements of
// `elem` bytes exceeds `segment_bytes` (a multiple of 8, so whole elements fit).
inline size_t SegmentsFor(size_t max_elements, size_t elem, size_t segment_bytes) {
  size_t bytes = max_elements * elem;
  return bytes == 0 ? 1 : (bytes + segment_bytes - 1) / segment_bytes;
}

// Algorithms (one file each).
Status RingPass(Op& op, std::span<uint8_t> data, size_t elem, DType dtype, ReduceOp rop, uint32_t first_step,
                uint32_t end_step);
Status RecursiveDoubling(Op& op, std::span<uint8_t> data, size_t elem, DType dtype, ReduceOp rop);
Status AllReduceOp(Op& op, std::span<uint8_t> data, DType dtype, ReduceOp rop);
// Communicator::AllReduceAlgorithm's answer, from the plan AllReduceOp runs.
std::string DescribeAllReduce(const Communicator::State& s, std::span<const uint32_t> ranks, size_t bytes, size_t elem,
                              bool shared);
// How `ranks` splits over the hosts as this rank sees it, made on the
// group's first AllReduce and kept in the state.
const GroupTopology& TopologyFor(Communicator::State& s, std::span<const uint32_t> ranks);
// allreduce_hierarchical.cc: reduce-scatter on `t.local`, AllReduce of this
// member's share on `t.cross` by `cross_schedule`, all-gather on
// `t.local`; no Mean division (the caller's).
Status TwoLevelAllReduce(Op& op, const GroupTopology& t, AllReduceSchedule cross_schedule, std::span<uint8_t> data,
                         size_t elem, DType dtype, ReduceOp rop);
// Whether an AllReduce of `bytes` in `count` elements over `n` members
// tries the direct schedule (the same answer on every member).
bool DirectAllReduceApplies(const Communicator::State& s, size_t bytes, size_t count, uint32_t n);
// allreduce_direct.cc: true when it ran (Mean divided too); false when a
// member's buffer is not in shared memory and only the arrival happened.
Result<bool> DirectAllReduce(Op& op, std::span<uint8_t> data, size_t elem, DType dtype, ReduceOp rop);
Status AllGatherOp(Op& op, std::span<const uint8_t> in, std::span<uint8_t> out);
Status ReduceScatterOp(Op& op, std::span<const uint8_t> in, std::span<uint8_t> out, DType dtype, ReduceOp rop);
Status ReduceScatterBlockedOp(Op& op, std::span<const std::span<const uint8_t>> in,
                              std::span<const std::span<uint8_t>> out, DType dtype, ReduceOp rop);
Status AllGatherBlockedOp(Op& op, std::span<const std::span<const uint8_t>> in,
                          std::span<const std::span<uint8_t>> out);
Status AllToAllOp(Op& op, std::span<const uint8_t> in, std::span<uint8_t> out);
Status BroadcastOp(Op& op, std::span<uint8_t> data, uint32_t root_pos);
Status SendOp(Op& op, std::span<const uint8_t> data, uint32_t peer_pos);
Status RecvOp(Op& op, std::span<uint8_t> data, uint32_t peer_pos);
Status BarrierOp(Op& op);

}  // namespace sinkrt::device
