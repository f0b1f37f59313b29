// SocketMesh: the Mesh a rendezvous builds: a TCP link to every peer (the
// control channel, and the data path unless the pair shares memory), a
// shared-memory transport for pairs on one host, and the one I/O thread
// (TcpEngine) that drives the links.
//
// The only place that knows both concrete transports; rendezvous/ includes
// it, nothing above does (they see mesh.h).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "device/src/comm/transport/mesh.h"
#include "device/src/comm/transport/shm/shm_transport.h"
#include "device/src/comm/transport/tcp/tcp_engine.h"
#include "device/src/comm/transport/tcp/tcp_link.h"

namespace sinkrt::device {

class SocketMesh final : public Mesh {
 public:
  // `signals` must outlive the mesh: every link and shm transport checks it.
  SocketMesh(uint32_t rank, uint32_t size, int window, size_t slot_bytes, CommSignals& signals);
  ~SocketMesh() override;

  // Before Start, once per peer: its connection (non-blocking) and, when
  // the pair shares memory, the mapping its data goes through.
  void AddPeer(uint32_t peer, std::unique_ptr<FrameSocket> socket, std::unique_ptr<ShmRegion> region);
  // Starts the I/O thread.
  Status Start();

  Transport* transport(uint32_t rank) override { return peers_[rank].transport; }
  DirectPair* direct(uint32_t rank) override { return peers_[rank].shm.get(); }
  Result<SharedMemory> ShareBlock(size_t bytes, uint64_t job, uint64_t generation) override;
  void SendNotice(const std::string& text) override;
  // A peer the rendezvous did not connect cannot be asked (the stall
  // report skips it; this keeps a miss an error).
  uint64_t SendQuery(uint32_t rank) override { return peers_[rank].link ? peers_[rank].link->SendQuery() : 0; }
  Result<PeerProgress> AwaitReply(uint32_t rank, uint64_t generation, Deadline deadline) override {
    if (!peers_[rank].link) return FailedPrecondition("rank " + std::to_string(rank) + " is not connected");
    return peers_[rank].link->AwaitReply(generation, deadline);
  }
  void Close(bool drain, bool await_eof, Deadline until) override;

 private:
  struct Peer {
    std::unique_ptr<TcpLink> link;      // every peer has one
    std::unique_ptr<ShmRegion> region;  // peers on this host with shared memory
    std::unique_ptr<ShmTransport> shm;
    std::unique_ptr<Transport> tcp;
    Transport* transport = nullptr;  // shm or tcp
  };

  uint32_t rank_;
  int window_;
  size_t slot_bytes_;
  CommSignals& signals_;
  std::vector<Peer> peers_;  // by world rank; this rank's entry is empty
  std::unique_ptr<TcpEngine> engine_;
  std::shared_ptr<ShmBlock> block_;  // this rank's shared block (ShareBlock)
};

}  // namespace sinkrt::device
