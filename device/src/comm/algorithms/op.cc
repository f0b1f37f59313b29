// Op's helpers: transport calls worded as this op's errors (the stall
// report a timeout adds is in stall_report.cc).
#include "device/src/comm/algorithms/op.h"

#include <algorithm>

namespace sinkrt::device {

uint32_t GroupHash(std::span<const uint32_t> ranks) {
  uint32_t h = 2166136261u;  // FNV-1a over the ranks' bytes
  for (uint32_t r : ranks) {
    for (int i = 0; i < 4; ++i) {
      h ^= (r >> (8 * i)) & 0xffu;
      h *= 16777619u;
    }
  }
  return h;
}

// A schedule reached a member the rendezvous did not connect: the plan
// (rendezvous/connection_plan.h) and the schedules disagree, or the stream
// runs a collective its JoinWorld did not list. The load checks for this
// (Communicator::CheckLinks); this keeps any miss an error, not a crash.
Status Op::NotConnected(uint32_t position) {
  return Fail(FailedPrecondition("rank " + std::to_string(state.rank) + " has no connection to rank " +
                                 std::to_string(ranks[position]) +
                                 " (the rendezvous planned none: the world was joined without this collective)"));
}

Op SubOp(Op& parent, OpKind kind, const std::vector<uint32_t>& ranks, uint32_t pos) {
  Communicator::State& s = parent.state;
  auto it = s.sequences.find(ranks);
  if (it == s.sequences.end()) it = s.sequences.emplace(ranks, 0).first;
  Op op(s, kind, it->first, pos, ++it->second);
  s.signals.Begin(kind, op.group, op.seq);
  return op;
}

Result<uint64_t> Op::Post(uint32_t position, uint32_t segment, std::span<const uint8_t> bytes) {
  Transport* t = transport(position);
  if (!t) return NotConnected(position);
  auto r = t->PostSend(tag(segment), bytes, deadline());
  if (!r.ok()) return Fail(r.status());
  return r;
}

Result<std::span<const uint8_t>> Op::Receive(uint32_t position, uint32_t segment, size_t bytes) {
  Transport* t = transport(position);
  if (!t) return NotConnected(position);
  auto r = t->Receive(tag(segment), bytes, deadline());
  if (!r.ok()) return Fail(r.status());
  return r;
}

Status Op::WaitSent(uint32_t position, uint64_t ticket) {
  Transport* t = transport(position);
  if (!t) return NotConnected(position);
  Status st = t->WaitSent(ticket, deadline());
  return st.ok() ? st : Fail(st);
}

Status Op::FlushAll() {
  for (uint32_t q = 0; q < n(); ++q) {
    if (q == pos) continue;
    uint64_t last = Posted(q);
    if (last > 0) SINKRT_RETURN_IF_ERROR(WaitSent(q, last));
  }
  return Status::Ok();
}

Status Op::Fail(const Status& st) {
  std::string where = Name();
  if (*phase) where += std::string(" (") + phase + ")";
  switch (st.code()) {
    case StatusCode::kDeadlineExceeded: {
      std::string m =
          where + ": " + st.message() + " within " + std::to_string(state.options.peer_timeout.count()) + " ms";
      std::string report = StallReport();
      if (!report.empty()) m += "; " + report;
      return DeadlineExceeded(m);
    }
    case StatusCode::kUnavailable:
      return Unavailable(st.message() + " during " + where);
    default:
      return Status(st.code(), where + ": " + st.message());
  }
}

}  // namespace sinkrt::device
