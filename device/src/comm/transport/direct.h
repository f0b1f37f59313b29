// DirectPair: the flags of a pair of ranks that read each other's memory.
//
// When every member of a group maps every other member's buffer
// (Communicator::ShareMemory), an AllReduce needs no data messages at all,
// only points at which each rank knows its peers have reached a phase:
// arrived (their input is complete), reduced (their chunk is final), done
// (they have stopped reading ours). A DirectPair is those points for one
// peer: Signal publishes this rank's next one, Await waits for the peer's.
// Both sides count the same signals in the same order (collectives between
// two ranks come in one order on both), so no reset is needed between ops.
//
// The first signal of an op carries a note: where the buffer lies in the
// sender's shared block, its size and the op's tag, so ranks whose buffers
// sit at different offsets (sharded streams) still find each other's, and
// ranks that disagree about the op fail at once instead of reading the
// wrong bytes.
//
// The peer's buffer itself is in a block it shared (Mesh::ShareBlock):
// the note names the block by generation, and the first op that reads a
// new generation maps it (once per block: the executor shares its arena
// at load, so that is the first AllReduce of the first sink).
//
// Waits end early like the Transport's: Abort, a peer's failure notice,
// the peer's connection closing (kUnavailable), the deadline.
//
// Layer: an interface beside transport.h, implemented by shm/ (the flags
// live in the pair's mapping); the algorithms see only this.
#pragma once

#include <cstdint>
#include <span>

#include "device/src/comm/transport/transport.h"

namespace sinkrt::device {

struct DirectNote {
  static constexpr uint64_t kNotShared = ~uint64_t{0};
  uint64_t offset = kNotShared;  // of the buffer in the sender's shared block
  uint64_t bytes = 0;
  uint64_t generation = 0;  // of the sender's shared block
  Tag tag;
};

class DirectPair {
 public:
  virtual ~DirectPair() = default;
  // Publishes this rank's next point, with `note` when not null.
  virtual void Signal(const DirectNote* note) = 0;
  // Until the peer has published as many points as this rank awaited plus
  // one; returns the note of the peer's last noted signal.
  virtual Result<DirectNote> Await(Deadline deadline) = 0;
  // The peer's shared block of `generation` (from its note), mapped
  // read-only here on first use and kept until the peer shares another.
  virtual Result<std::span<const uint8_t>> PeerBlock(uint64_t generation) = 0;
};

}  // namespace sinkrt::device
