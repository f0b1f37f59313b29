// Mesh: everything a communicator holds of its peers, as the layers above
// the transports see it.
//
// Per peer a data Transport (shm or TCP, chosen at rendezvous) and, beside
// it, a control channel that every peer has whatever carries its data:
// failure notices, stall queries and their replies, end of file. The
// communicator and the algorithms hold a Mesh and never the concrete
// transports, so nothing above this folder includes tcp/ or shm/; the one
// implementation (SocketMesh) is built by rendezvous.
//
// Thread-safety: transport() and Close() from the op thread; the control
// calls from any thread, and they never block except AwaitReply.
#pragma once

#include <cstdint>
#include <string>

#include "device/src/comm/communicator.h"
#include "device/src/comm/transport/comm_signals.h"
#include "device/src/comm/transport/direct.h"
#include "device/src/comm/transport/transport.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::device {

class Mesh {
 public:
  virtual ~Mesh() = default;

  // The data path to world rank `rank`; null for this rank itself and for
  // a peer the rendezvous did not connect (its plan had no need). The
  // pointer stays valid for the mesh's life, so callers look it up once.
  virtual Transport* transport(uint32_t rank) = 0;
  // The flags for reading `rank`'s memory directly: null unless the pair
  // shares memory.
  virtual DirectPair* direct(uint32_t rank) = 0;
  // Creates this rank's shared block of `bytes` (zeroed, pre-faulted) and
  // tells every peer with a DirectPair its name, to be mapped on first
  // use; replaces the last one (which stays mapped while its `keep` lives).
  virtual Result<SharedMemory> ShareBlock(size_t bytes, uint64_t job, uint64_t generation) = 0;

  // Tells every connected peer that this rank failed, with `text` as the reason.
  virtual void SendNotice(const std::string& text) = 0;
  // Asks `rank` where it is; its answer comes to AwaitReply(generation).
  virtual uint64_t SendQuery(uint32_t rank) = 0;
  virtual Result<PeerProgress> AwaitReply(uint32_t rank, uint64_t generation, Deadline deadline) = 0;

  // Teardown, once: when `drain`, until everything queued has left; then
  // half-close every connection; when `await_eof`, until each peer's end of
  // file (so closing never resets data a peer has not read yet); then stop
  // the I/O thread. Each wait ends at `until`.
  virtual void Close(bool drain, bool await_eof, Deadline until) = 0;
};

}  // namespace sinkrt::device
