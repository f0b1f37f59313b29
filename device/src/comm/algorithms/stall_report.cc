// The stall report a timed-out collective adds to its error: it asks every
// other member of the group it is connected to where it is (over the
// mesh's control channel, which every connected peer has, shm or TCP),
// names the members it has no link to as not asked, and says, in one line, which members
// have arrived at this op and which have not, where each missing one is
// (its executor's task, step and state, when it has one loaded), and who
// waits for whom.
//
//   ranks 0 and 2 have arrived, rank 1 has not; rank 1 has not arrived (its
//   last collective was Barrier #0): it is in train_step compute stream task
//   0 'get_next' (GetNextTask) at step 1, waiting for a batch for 2.0 s, no
//   task of this step completed yet; rank 2 waits for rank 1
//
// A member "has arrived" when it is in this op (same group and sequence
// number), finished it or failed in it, or moved on to a later one.
#include <algorithm>
#include <string>
#include <vector>

#include "device/src/comm/algorithms/op.h"

namespace sinkrt::device {
namespace {

std::string OpText(OpKind op, uint64_t seq) { return std::string(OpName(op)) + " #" + std::to_string(seq); }

// "rank 1", "ranks 0 and 2", "ranks 0, 2 and 3"; past 16, a count.
std::string Ranks(const std::vector<uint32_t>& rs, size_t group_size) {
  if (rs.size() == 1) return "rank " + std::to_string(rs[0]);
  if (rs.size() > 16) return std::to_string(rs.size()) + " of " + std::to_string(group_size) + " ranks";
  std::string out = "ranks ";
  for (size_t i = 0; i < rs.size(); ++i) {
    if (i > 0) out += i + 1 == rs.size() ? " and " : ", ";
    out += std::to_string(rs[i]);
  }
  return out;
}

// Where a member's executor is, ": it is in ..." or "" when it has no job
// loaded. The comm stream is named only when it is not just waiting for
// the compute stream (an event) or done with its part of the step.
std::string WhereItIs(const TaskPositionReport& r) {
  const std::string compute = DescribeStreamPosition(r.streams[0], 0);
  const StreamState comm_state = r.streams[1].state;
  std::string comm;
  if (comm_state != StreamState::kEventWait && comm_state != StreamState::kDone && comm_state != StreamState::kIdle)
    comm = DescribeStreamPosition(r.streams[1], 1);
  if (compute.empty() && comm.empty()) return "";
  std::string out = ": it " + (compute.empty() ? comm : compute);
  if (!compute.empty() && !comm.empty()) out += ", while it " + comm;
  return out;
}

}  // namespace

std::string Op::StallReport() {
  // Ask every member at once; their I/O threads answer whatever they do.
  // Only connected members can be asked: with a planned rendezvous a rank
  // holds links to its schedules' partners alone, and the report says whom
  // it could not ask. The partner it waits for is always among those asked.
  std::vector<std::pair<uint32_t, uint64_t>> asked;
  std::vector<uint32_t> unasked;
  for (uint32_t q = 0; q < n(); ++q) {
    if (q == pos) continue;
    if (!state.transports[ranks[q]]) {
      unasked.push_back(ranks[q]);
      continue;
    }
    asked.emplace_back(ranks[q], state.mesh->SendQuery(ranks[q]));
  }
  const Deadline until = DeadlineIn(std::min(state.options.peer_timeout, std::chrono::milliseconds(1000)));
  std::vector<uint32_t> arrived{ranks[pos]}, missing;
  // silent: members that gave no answer; missing_where: where the missing
  // (and failed) ones are; chain: what the arrived ones do.
  std::vector<std::string> silent, missing_where, chain;
  for (auto [r, generation] : asked) {
    const std::string who = "rank " + std::to_string(r);
    auto reply = state.mesh->AwaitReply(r, generation, until);
    if (!reply.ok()) {
      // "rank 2 does not answer", "rank 2 closed its connection"; nothing
      // when this rank itself was aborted meanwhile.
      if (reply.status().code() != StatusCode::kAborted) silent.push_back(reply.status().message());
      continue;
    }
    const PeerProgress& p = *reply;
    const bool same_group = p.group == group && p.op != OpKind::kNone;
    if (same_group && p.seq >= seq) {
      arrived.push_back(r);
      if (p.seq > seq) {
        chain.push_back(who + " has moved on to " + OpText(p.op, p.seq) + (p.failed ? " and failed it" : ""));
      } else if (p.failed) {
        chain.push_back(who + " failed it");
      } else if (p.active && p.waiting_on >= 0) {
        chain.push_back(who + " waits for rank " + std::to_string(p.waiting_on));
      } else if (!p.active) {
        chain.push_back(who + " has finished it");
      }
      continue;
    }
    missing.push_back(r);
    std::string why;
    if (p.op == OpKind::kNone) {
      why = "it has called no collective yet";
    } else if (p.failed) {
      why = "it failed " + OpText(p.op, p.seq) + (same_group ? "" : " of another group");
    } else if (p.active) {
      why = (same_group ? "it is still in " : "it is in ") + OpText(p.op, p.seq) +
            (same_group ? "" : " of another group");
      if (p.waiting_on >= 0) why += ", waiting for rank " + std::to_string(p.waiting_on);
    } else {
      why = "its last collective was " + OpText(p.op, p.seq) + (same_group ? "" : " of another group");
    }
    missing_where.push_back(who + " has not arrived (" + why + ")" + WhereItIs(p.positions));
  }
  std::sort(arrived.begin(), arrived.end());
  std::string out = Ranks(arrived, n()) + (arrived.size() == 1 ? " has" : " have") + " arrived";
  if (!missing.empty()) out += ", " + Ranks(missing, n()) + (missing.size() == 1 ? " has not" : " have not");
  for (auto* list : {&silent, &missing_where, &chain})
    for (auto& s : *list) out += "; " + s;
  if (!unasked.empty())
    out += "; " + Ranks(unasked, n()) + " not asked (no connection from rank " + std::to_string(ranks[pos]) + ")";
  return out;
}

}  // namespace sinkrt::device
