// Communicator's public calls: check the arguments, number the call in its
// group, run the algorithm, and on failure break the communicator and tell
// every peer (so they fail now rather than at their own timeouts).
//
// The front of the comm layers: it sees State (the Mesh and Transport
// interfaces) and the algorithms (algorithms/op.h), never a concrete
// transport; Communicator::Create is in rendezvous/.
#include <algorithm>

#include "device/src/comm/algorithms/op.h"
#include "device/src/comm/algorithms/partners.h"
#include "device/src/comm/algorithms/reduce.h"
#include "device/src/comm/comm_state.h"

namespace sinkrt::device {
namespace {

// Position of `rank` in `group` after checking the group; -1 with `error` set.
Result<uint32_t> GroupPosition(const Communicator::State& s, const Group& group) {
  if (group.ranks.empty()) return InvalidArgument("empty group");
  int64_t pos = -1;
  for (size_t i = 0; i < group.ranks.size(); ++i) {
    uint32_t r = group.ranks[i];
    if (r >= s.size)
      return InvalidArgument("group member " + std::to_string(r) + " is outside the world of " +
                             std::to_string(s.size));
    if (i > 0 && r <= group.ranks[i - 1]) return InvalidArgument("group ranks must be ascending and distinct");
    if (r == s.rank) pos = static_cast<int64_t>(i);
  }
  if (pos < 0) return InvalidArgument("rank " + std::to_string(s.rank) + " is not in the group");
  return static_cast<uint32_t>(pos);
}

Status CheckReducible(DType dtype, size_t bytes, const char* what) {
  if (!ReducibleType(dtype)) return InvalidArgument(std::string(what) + ": cannot reduce dtype " + DTypeName(dtype));
  if (bytes % DTypeSize(dtype) != 0)
    return InvalidArgument(std::string(what) + ": " + std::to_string(bytes) + " bytes is not a whole number of " +
                           DTypeName(dtype) + " elements");
  return Status::Ok();
}

// A blocked collective's lists: as many `blocks` as `wholes`, each whole
// `members` times its block.
template <typename Blocks, typename Wholes>
Status CheckBlocked(const char* what, const Blocks& blocks, const Wholes& wholes, size_t members,
                    const char* whole_name, const char* block_name) {
  if (blocks.size() != wholes.size())
    return InvalidArgument(std::string(what) + ": " + std::to_string(wholes.size()) + " " + whole_name + "s for " +
                           std::to_string(blocks.size()) + " " + block_name + "s");
  for (size_t i = 0; i < blocks.size(); ++i)
    if (wholes[i].size() != blocks[i].size() * members)
      return InvalidArgument(std::string(what) + ": " + whole_name + " " + std::to_string(i) + " of " +
                             std::to_string(wholes[i].size()) + " bytes for " + std::to_string(members) +
                             " members of " + std::to_string(blocks[i].size()) + " bytes");
  return Status::Ok();
}

Status Usable(const Communicator::State& s) {
  if (!s.broken.ok())
    return Status(s.broken.code(), "the communicator is broken by an earlier failure: " + s.broken.message());
  if (s.signals.aborted()) return Aborted("the communicator was aborted");
  return Status::Ok();
}

// Numbers the call in its group and runs `body` as one op.
template <typename Body>
Status RunOp(Communicator::State& s, OpKind kind, const std::vector<uint32_t>& ranks, uint32_t pos, Body&& body) {
  SINKRT_RETURN_IF_ERROR(Usable(s));
  auto it = s.sequences.find(ranks);
  if (it == s.sequences.end()) it = s.sequences.emplace(ranks, 0).first;
  Op op(s, kind, it->first, pos, ++it->second);
  s.signals.Begin(kind == OpKind::kRecv ? OpKind::kSend : kind, op.group, op.seq);
  Status st = body(op);
  s.signals.End(!st.ok());
  if (!st.ok()) {
    s.broken = st;
    // To the connected peers only, which with a planned rendezvous are this
    // rank's schedules' partners; still every rank hears of it in bounded
    // time. A rank blocked in a collective waits on one of its partners
    // (a connected peer); that partner is either this rank (and gets the
    // notice), or failed too (and sent its own), or is blocked on a partner
    // in turn. The chain of waits ends at a failed rank, since without a
    // failure the schedules complete (no cycle of waits: ring.cc,
    // alltoall.cc), so notices travel back along it, one link per hop, each
    // receiver failing its wait and passing the notice on. A rank that is
    // not in a collective meets a notice, or a partner that will never
    // answer, at its next one; the peer timeout bounds every wait anyway.
    s.mesh->SendNotice(st.message());
  }
  return st;
}

// "{0, 2, 4}"; a long group as "of 64 ranks, 0..63".
std::string GroupText(const Group& g) {
  if (g.ranks.size() > 8)
    return "of " + std::to_string(g.ranks.size()) + " ranks, " + std::to_string(g.ranks.front()) + ".." +
           std::to_string(g.ranks.back());
  std::string out = "{";
  for (size_t i = 0; i < g.ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(g.ranks[i]);
  return out + "}";
}

const std::vector<uint32_t>& PairRanks(Communicator::State& s, uint32_t peer) {
  auto it = s.pairs.find(peer);
  if (it == s.pairs.end())
    it = s.pairs.emplace(peer, std::vector<uint32_t>{std::min(s.rank, peer), std::max(s.rank, peer)}).first;
  return it->second;
}

}  // namespace

Group Group::World(uint32_t size) {
  Group g;
  g.ranks.resize(size);
  for (uint32_t i = 0; i < size; ++i) g.ranks[i] = i;
  return g;
}

Communicator::Communicator(std::unique_ptr<State> state) : state_(std::move(state)) {}
Communicator::~Communicator() = default;

uint32_t Communicator::rank() const { return state_->rank; }
uint32_t Communicator::size() const { return state_->size; }
const CommOptions& Communicator::options() const { return state_->options; }

void Communicator::SetTaskPositions(const TaskPositions* positions) { state_->signals.SetPositions(positions); }
void Communicator::ClearTaskPositions(const TaskPositions* positions) { state_->signals.ClearPositions(positions); }

std::string Communicator::TransportName(uint32_t peer) const {
  if (peer == state_->rank) return "self";
  if (peer >= state_->size || !state_->transports[peer]) return "none";
  return state_->transports[peer]->kind();
}

uint32_t Communicator::connections() const {
  uint32_t count = 0;
  for (const Transport* t : state_->transports) count += t != nullptr;
  return count;
}

uint32_t Communicator::shm_connections() const {
  uint32_t count = 0;
  for (uint32_t p = 0; p < state_->size; ++p) count += TransportName(p) == "shm";
  return count;
}

Status Communicator::CheckLinks(const Group& group, uint32_t uses) const {
  const State& s = *state_;
  SINKRT_ASSIGN_OR_RETURN(uint32_t pos, GroupPosition(s, group));
  for (uint32_t peer : CallPartners(GroupView{group.ranks, pos, s.host_ids}, uses))
    if (!s.transports[peer])
      return FailedPrecondition("rank " + std::to_string(s.rank) + " has no connection to rank " +
                                std::to_string(peer) + ", which its collectives on the group " + GroupText(group) +
                                " need: the world was joined without them (JoinWorld's groups)");
  return Status::Ok();
}

void Communicator::Abort() { state_->signals.Abort(); }

Result<SharedMemory> Communicator::ShareMemory(size_t bytes) {
  State& s = *state_;
  if (!s.world_direct) return SharedMemory{};
  // The last block stays mapped while its user holds it; peers drop their
  // mapping of it when a note first names the new one.
  s.shared_own = {};
  SINKRT_ASSIGN_OR_RETURN(SharedMemory block, s.mesh->ShareBlock(bytes, s.job, s.shared_generation + 1));
  ++s.shared_generation;
  s.shared_own = block.data;
  return block;
}

uint64_t Communicator::direct_allreduces() const { return state_->direct_allreduces; }

Status Communicator::AllReduce(std::span<uint8_t> data, DType dtype, ReduceOp op, const Group& group) {
  SINKRT_RETURN_IF_ERROR(CheckReducible(dtype, data.size(), "AllReduce"));
  SINKRT_ASSIGN_OR_RETURN(uint32_t pos, GroupPosition(*state_, group));
  return RunOp(*state_, OpKind::kAllReduce, group.ranks, pos, [&](Op& o) { return AllReduceOp(o, data, dtype, op); });
}

std::string Communicator::AllReduceAlgorithm(size_t bytes, DType dtype, const Group& group, bool shared) const {
  if (!GroupPosition(*state_, group).ok() || !ReducibleType(dtype)) return "none";
  return DescribeAllReduce(*state_, group.ranks, bytes, DTypeSize(dtype), shared);
}

Status Communicator::AllGather(std::span<const uint8_t> in, std::span<uint8_t> out, const Group& group) {
  SINKRT_ASSIGN_OR_RETURN(uint32_t pos, GroupPosition(*state_, group));
  if (out.size() != in.size() * group.ranks.size())
    return InvalidArgument("AllGather: " + std::to_string(out.size()) + " output bytes for " +
                           std::to_string(group.ranks.size()) + " members of " + std::to_string(in.size()) + " bytes");
  return RunOp(*state_, OpKind::kAllGather, group.ranks, pos, [&](Op& o) { return AllGatherOp(o, in, out); });
}

Status Communicator::ReduceScatter(std::span<const uint8_t> in, std::span<uint8_t> out, DType dtype, ReduceOp op,
                                   const Group& group) {
  SINKRT_RETURN_IF_ERROR(CheckReducible(dtype, out.size(), "ReduceScatter"));
  SINKRT_ASSIGN_OR_RETURN(uint32_t pos, GroupPosition(*state_, group));
  if (in.size() != out.size() * group.ranks.size())
    return InvalidArgument("ReduceScatter: " + std::to_string(in.size()) + " input bytes for " +
                           std::to_string(group.ranks.size()) + " members of " + std::to_string(out.size()) + " bytes");
  return RunOp(*state_, OpKind::kReduceScatter, group.ranks, pos,
               [&](Op& o) { return ReduceScatterOp(o, in, out, dtype, op); });
}

Status Communicator::ReduceScatterBlocked(std::span<const std::span<const uint8_t>> in,
                                          std::span<const std::span<uint8_t>> out, DType dtype, ReduceOp op,
                                          const Group& group) {
  SINKRT_ASSIGN_OR_RETURN(uint32_t pos, GroupPosition(*state_, group));
  SINKRT_RETURN_IF_ERROR(CheckBlocked("ReduceScatterBlocked", out, in, group.ranks.size(), "input", "output"));
  for (const auto& o : out) SINKRT_RETURN_IF_ERROR(CheckReducible(dtype, o.size(), "ReduceScatterBlocked"));
  return RunOp(*state_, OpKind::kReduceScatter, group.ranks, pos,
               [&](Op& o) { return ReduceScatterBlockedOp(o, in, out, dtype, op); });
}

Status Communicator::AllGatherBlocked(std::span<const std::span<const uint8_t>> in,
                                      std::span<const std::span<uint8_t>> out, const Group& group) {
  SINKRT_ASSIGN_OR_RETURN(uint32_t pos, GroupPosition(*state_, group));
  SINKRT_RETURN_IF_ERROR(CheckBlocked("AllGatherBlocked", in, out, group.ranks.size(), "output", "input"));
  return RunOp(*state_, OpKind::kAllGather, group.ranks, pos, [&](Op& o) { return AllGatherBlockedOp(o, in, out); });
}

void Communicator::ReserveScratch(size_t bytes) {
  if (state_->scratch.size() < bytes) state_->scratch.resize(bytes);
}

Status Communicator::AllToAll(std::span<const uint8_t> in, std::span<uint8_t> out, const Group& group) {
  SINKRT_ASSIGN_OR_RETURN(uint32_t pos, GroupPosition(*state_, group));
  const size_t n = group.ranks.size();
  if (in.size() != out.size() || in.size() % n != 0)
    return InvalidArgument("AllToAll: " + std::to_string(in.size()) + " input and " + std::to_string(out.size()) +
                           " output bytes must be equal and divide into " + std::to_string(n) + " blocks");
  // Blocks land in `out` while others still leave from `in`.
  const uintptr_t a = reinterpret_cast<uintptr_t>(in.data());
  const uintptr_t b = reinterpret_cast<uintptr_t>(out.data());
  if (!in.empty() && a < b + out.size() && b < a + in.size())
    return InvalidArgument("AllToAll: the input and output buffers overlap");
  return RunOp(*state_, OpKind::kAllToAll, group.ranks, pos, [&](Op& o) { return AllToAllOp(o, in, out); });
}

Status Communicator::Broadcast(std::span<uint8_t> data, uint32_t root, const Group& group) {
  SINKRT_ASSIGN_OR_RETURN(uint32_t pos, GroupPosition(*state_, group));
  auto it = std::find(group.ranks.begin(), group.ranks.end(), root);
  if (it == group.ranks.end())
    return InvalidArgument("Broadcast: root " + std::to_string(root) + " is not in the group");
  const uint32_t root_pos = static_cast<uint32_t>(it - group.ranks.begin());
  return RunOp(*state_, OpKind::kBroadcast, group.ranks, pos, [&](Op& o) { return BroadcastOp(o, data, root_pos); });
}

Status Communicator::Send(std::span<const uint8_t> data, uint32_t peer) {
  const uint32_t self = state_->rank;
  if (peer >= state_->size || peer == self)
    return InvalidArgument("Send: rank " + std::to_string(self) + " cannot send to rank " + std::to_string(peer));
  const uint32_t pos = self < peer ? 0 : 1;
  return RunOp(*state_, OpKind::kSend, PairRanks(*state_, peer), pos, [&](Op& o) { return SendOp(o, data, 1 - pos); });
}

Status Communicator::Recv(std::span<uint8_t> data, uint32_t peer) {
  const uint32_t self = state_->rank;
  if (peer >= state_->size || peer == self)
    return InvalidArgument("Recv: rank " + std::to_string(self) + " cannot receive from rank " + std::to_string(peer));
  const uint32_t pos = self < peer ? 0 : 1;
  return RunOp(*state_, OpKind::kRecv, PairRanks(*state_, peer), pos, [&](Op& o) { return RecvOp(o, data, 1 - pos); });
}

Status Communicator::Barrier(const Group& group) {
  SINKRT_ASSIGN_OR_RETURN(uint32_t pos, GroupPosition(*state_, group));
  return RunOp(*state_, OpKind::kBarrier, group.ranks, pos, [&](Op& o) { return BarrierOp(o); });
}

Communicator::State::~State() {
  // Let what is queued leave (unless the communicator failed), half-close,
  // and wait (briefly) for the peers' end of file.
  if (mesh) {
    const Deadline until = DeadlineIn(std::min(options.peer_timeout, std::chrono::milliseconds(1000)));
    const bool aborted = signals.aborted();
    mesh->Close(/*drain=*/!aborted && broken.ok(), /*await_eof=*/!aborted, until);
  }
  transports.clear();
  mesh.reset();
}

}  // namespace sinkrt::device
