// Op's helpers: transport calls worded as this op's errors, and the stall
// report a timeout asks the group for (over the mesh's control channel).
#include "comm/algorithms/op.h"

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

Result<uint64_t> Op::Post(uint32_t position, uint32_t segment, std::span<const uint8_t> bytes) {
  auto r = transport(position).PostSend(tag(segment), bytes, deadline());
  if (!r.ok()) return Fail(r.status());
  return r;
}

Result<std::span<const uint8_t>> Op::Receive(uint32_t position, uint32_t segment, size_t bytes) {
  auto r = transport(position).Receive(tag(segment), bytes, deadline());
  if (!r.ok()) return Fail(r.status());
  return r;
}

Status Op::WaitSent(uint32_t position, uint64_t ticket) {
  Status st = transport(position).WaitSent(ticket, deadline());
  return st.ok() ? st : Fail(st);
}

Status Op::FlushAll() {
  for (uint32_t q = 0; q < n(); ++q) {
    if (q == pos) continue;
    uint64_t last = transport(q).posted();
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

namespace {

std::string OpText(OpKind op, uint64_t seq) { return std::string(OpName(op)) + " #" + std::to_string(seq); }

}  // namespace

std::string Op::StallReport() {
  // Ask every member at once; their I/O threads answer whatever they do.
  std::vector<std::pair<uint32_t, uint64_t>> asked;
  for (uint32_t q = 0; q < n(); ++q) {
    if (q == pos) continue;
    asked.emplace_back(ranks[q], state.mesh->SendQuery(ranks[q]));
  }
  const Deadline until = DeadlineIn(std::min(state.options.peer_timeout, std::chrono::milliseconds(1000)));
  std::vector<std::string> culprits, chain;
  for (auto [r, generation] : asked) {
    const std::string who = "rank " + std::to_string(r);
    auto reply = state.mesh->AwaitReply(r, generation, until);
    if (!reply.ok()) {
      if (reply.status().code() != StatusCode::kAborted) culprits.push_back(reply.status().message());
      continue;
    }
    const PeerProgress& p = *reply;
    const bool same_group = p.group == group;
    if (p.op == OpKind::kNone) {
      culprits.push_back(who + " has not called any collective yet");
    } else if (p.failed) {
      culprits.push_back(who + " failed " + OpText(p.op, p.seq));
    } else if (same_group && p.seq == seq && p.active) {
      if (p.waiting_on >= 0) chain.push_back(who + " waits for rank " + std::to_string(p.waiting_on));
    } else if (same_group && p.seq < seq) {
      culprits.push_back(p.active ? who + " is still in " + OpText(p.op, p.seq)
                                  : who + " has not called " + Name() + " (its last was " + OpText(p.op, p.seq) + ")");
    } else if (!same_group) {
      culprits.push_back(p.active ? who + " is in " + OpText(p.op, p.seq) + " of another group"
                                  : who + " is idle (its last was " + OpText(p.op, p.seq) + " of another group)");
    } else if (p.seq > seq) {
      chain.push_back(who + " has moved on to " + OpText(p.op, p.seq));
    } else {
      chain.push_back(who + " has finished it");
    }
  }
  std::string out;
  for (auto* list : {&culprits, &chain}) {
    for (auto& s : *list) {
      if (!out.empty()) out += "; ";
      out += s;
    }
  }
  return out;
}

}  // namespace sinkrt::device
