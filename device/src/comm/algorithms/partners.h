// Partners: which members of a group each schedule talks to, from one
// position, so that the rendezvous connects those and no others (issue 22:
// a full mesh is n(n-1)/2 connections, infeasible at 1,000 ranks).
//
// Each algorithm's file defines its partner function next to its schedule,
// from the same arithmetic, so the two change together; the rule table in
// partners.cc maps each call (a CollectiveUse bit) to the schedules it may
// run. A new schedule adds a row there and a partner function beside its
// code, as the two-level AllReduce did (TwoLevelPartners). Every function is symmetric: q is a partner of p iff p is
// one of q's, so the dialing and the accepting side of each pair agree.
//
// Pure functions of the group, positions and host ids: no state, no I/O.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace sinkrt::device {

// A group as the plan sees it: its ranks, this rank's position, and every
// world rank's host id (equal ids share memory).
struct GroupView {
  std::span<const uint32_t> ranks;
  uint32_t pos = 0;
  std::span<const std::string> host_ids;
  uint32_t n() const { return static_cast<uint32_t>(ranks.size()); }
};

// Appends the positions `g.pos` talks to (duplicates allowed).
using PartnerFn = void (*)(const GroupView& g, std::vector<uint32_t>& positions);

void RingPartners(const GroupView& g, std::vector<uint32_t>& positions);      // ring.cc; the broadcast chain too
void DoublingPartners(const GroupView& g, std::vector<uint32_t>& positions);  // recursive_doubling.cc
void BarrierPartners(const GroupView& g, std::vector<uint32_t>& positions);   // barrier.cc
void DirectPartners(const GroupView& g, std::vector<uint32_t>& positions);    // allreduce_direct.cc
void TwoLevelPartners(const GroupView& g, std::vector<uint32_t>& positions);  // allreduce_hierarchical.cc
void EveryMember(const GroupView& g, std::vector<uint32_t>& positions);       // partners.cc: AllToAll, a Send/Recv pair

// The world ranks that the calls `uses` (CollectiveUse bits) on `g` talk
// to from g.pos, sorted and distinct, without this rank.
std::vector<uint32_t> CallPartners(const GroupView& g, uint32_t uses);

}  // namespace sinkrt::device
