// Communicator::State: one communicator's world as the layers above the
// transports see it (communicator.cc, algorithms/).
//
// It holds the peers only as a Mesh and their Transport interfaces, never
// the concrete shm or TCP classes: rendezvous/ builds those and hands the
// Mesh over, so the algorithms compile against the interfaces alone.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "device/src/comm/communicator.h"
#include "device/src/comm/topology.h"
#include "device/src/comm/transport/comm_signals.h"
#include "device/src/comm/transport/direct.h"
#include "device/src/comm/transport/mesh.h"
#include "device/src/comm/transport/transport.h"

namespace sinkrt::device {

struct Communicator::State {
  uint32_t rank = 0;
  uint32_t size = 0;
  uint64_t job = 0;
  CommOptions options;
  CommSignals signals;         // declared before mesh: the mesh's links hold a reference
  std::unique_ptr<Mesh> mesh;  // every peer's connection; closed by ~State
  // By world rank, looked up once from the mesh (null for this rank): the
  // hot path reads a pointer, no virtual call.
  std::vector<Transport*> transports;                   // null too for a peer the rendezvous did not connect
  std::vector<std::string> host_ids;                    // by world rank, as the rendezvous saw them
  std::map<std::vector<uint32_t>, uint64_t> sequences;  // per group: the last sequence number used
  // Per peer: the pair {this rank, peer} in rank order, the group of its
  // Send/Recv, made on first use so that later ones allocate nothing.
  std::map<uint32_t, std::vector<uint32_t>> pairs;
  Status broken;  // the first failure; every later call returns it
  // Which ranks share a host (from the host ids at rendezvous), and how
  // each group that ran an AllReduce splits over the hosts: the world's
  // made at rendezvous, any other group's at its first AllReduce, so that
  // later ones allocate nothing.
  WorldTopology topology;
  std::map<std::vector<uint32_t>, GroupTopology, RanksLess> group_topologies;
  // The working copy of ReduceScatter and the blocked collectives, kept
  // between calls (Communicator::ReserveScratch sizes it at load).
  std::vector<uint8_t> scratch;
  // Every pair of the world shares memory (agreed at rendezvous): then an
  // AllReduce may read its peers' buffers, through `direct` (by world
  // rank), when every member's lies in its shared block.
  bool world_direct = false;
  std::vector<DirectPair*> direct;
  std::vector<const uint8_t*> direct_sources;  // the direct AllReduce's, per position: sized once
  // Communicator::ShareMemory's last block (empty: none) and its number.
  std::span<uint8_t> shared_own;
  uint64_t shared_generation = 0;
  uint64_t direct_allreduces = 0;

  ~State();
};

}  // namespace sinkrt::device
