// ShmTransport: a Transport over a POSIX shared-memory mapping shared by
// the two ranks of a pair on one host.
//
// Per direction the mapping holds a ring of `window` slots of slot_bytes
// plus a head (messages published by the sender) and a tail (messages
// released by the receiver), each on its own cache line. The sender copies
// a segment into the free slot and publishes it with a release store; the
// receiver reduces or copies straight out of the slot and releases it. So
// a segment costs one copy in and one read out, like a pipe with no kernel
// in between.
//
// Waiting spins for a few microseconds and then sleeps on the counter with
// a futex: ranks share two cores here, and a spinning waiter would steal
// the core its peer needs. A sleeper announces itself in a flag so the
// other side pays for the wake syscall only when someone sleeps. Sleeps
// are sliced (20 ms) so that a peer dying without a word, or an Abort that
// races the sleep, is noticed without any shared state from the dead side.
//
// The same page holds the pair's DirectPair flags (direct.h): a counter
// per direction with the note of the last op's first signal, waited on the
// same way; and per direction the name of the block that side shares
// (ShmBlock), which the other maps when a note first points into it.
//
// Layer: a concrete transport. It sees the transport interfaces and its
// pair's TcpLink (for the peer's end of file); never an algorithm.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "device/src/comm/transport/comm_signals.h"
#include "device/src/comm/transport/direct.h"
#include "device/src/comm/transport/tcp/tcp_link.h"
#include "device/src/comm/transport/transport.h"

namespace sinkrt::device {

// One POSIX shared-memory object, mapped and pre-faulted.
class ShmRegion {
 public:
  // Creates a new object (mode 0600; the name must not exist), reserves
  // its memory (an object larger than /dev/shm fails here, not later with
  // SIGBUS on first touch) and maps it.
  static Result<std::unique_ptr<ShmRegion>> Create(const std::string& name, size_t bytes);
  // Maps an existing object and removes its name at once: both sides hold
  // it now, and nothing is left in /dev/shm whatever happens next.
  static Result<std::unique_ptr<ShmRegion>> OpenAndUnlink(const std::string& name, size_t bytes);
  ~ShmRegion();

  uint8_t* base() const { return base_; }
  size_t size() const { return size_; }

 private:
  ShmRegion(uint8_t* base, size_t size) : base_(base), size_(size) {}
  uint8_t* base_;
  size_t size_;
};

void UnlinkShm(const std::string& name);

// A block one rank shares with every peer on its host: a header page (how
// many peers must map it, how many have) and then the data. The last peer
// to map it removes its name, so nothing is left in /dev/shm once every
// side holds it; the owner removes it too when it replaces or drops the
// block, in case a peer never came to map it.
struct ShmBlock {
  static constexpr size_t kHeaderBytes = 4096;
  // Creates the object (mode 0600, reserved, pre-faulted) for `bytes` of
  // data and `peers` future mappers.
  static Result<ShmBlock> Create(const std::string& name, size_t bytes, uint32_t peers);
  std::unique_ptr<ShmRegion> region;
  std::string name;
  std::span<uint8_t> data() const;
};

// Bytes of one pair's mapping (both directions).
size_t ShmPairBytes(int window, size_t slot_bytes);
// The creator stamps the layout; the other side checks it.
void InitShmPair(uint8_t* base, int window, size_t slot_bytes);
Status CheckShmPair(const uint8_t* base, int window, size_t slot_bytes);

struct ShmRing;
struct ShmSlotHeader;
struct ShmDirectCell;
struct ShmBlockCell;

class ShmTransport final : public Transport, public DirectPair {
 public:
  // `link` is the peer's TCP connection: its end of file is how a dead
  // peer shows. Direction 0 carries lower -> higher rank.
  ShmTransport(uint32_t self, uint32_t peer, const ShmRegion& region, int window, size_t slot_bytes, TcpLink& link,
               CommSignals& signals);

  const char* kind() const override { return "shm"; }
  uint32_t peer() const override { return peer_; }
  Result<uint64_t> PostSend(const Tag& tag, std::span<const uint8_t> bytes, Deadline deadline) override;
  Status WaitSent(uint64_t ticket, Deadline deadline) override { return Status::Ok(); }  // copied at post
  uint64_t posted() const override { return posted_; }
  Result<std::span<const uint8_t>> Receive(const Tag& tag, size_t bytes, Deadline deadline) override;
  void Release() override;

  ~ShmTransport() override;
  void Signal(const DirectNote* note) override;
  Result<DirectNote> Await(Deadline deadline) override;
  Result<std::span<const uint8_t>> PeerBlock(uint64_t generation) override;
  // Tells the peer the name of this side's shared block (ShmBlock), to be
  // mapped when a note first names `generation`.
  void PublishBlock(const std::string& name, size_t total_bytes, uint64_t generation);

  // Wakes this side's sleepers (Abort, notices, the peer's end of file).
  void Wake();

 private:
  template <typename Ready>
  Status Wait(std::atomic<uint32_t>* word, std::atomic<uint32_t>* sleeping, Ready ready, Deadline deadline,
              bool sending);

  uint32_t self_;
  uint32_t peer_;
  uint32_t window_;
  size_t slot_bytes_;
  TcpLink& link_;
  CommSignals& signals_;
  ShmRing* send_;
  ShmRing* recv_;
  ShmSlotHeader* send_headers_;
  ShmSlotHeader* recv_headers_;
  uint8_t* send_slots_;
  uint8_t* recv_slots_;
  size_t stride_;
  ShmDirectCell* direct_out_;  // this side's signals
  ShmDirectCell* direct_in_;   // the peer's
  uint32_t signaled_ = 0;      // our copy of direct_out_->step
  uint32_t awaited_ = 0;       // the peer's signals consumed
  ShmBlockCell* block_out_;    // the name of our shared block
  ShmBlockCell* block_in_;     // the peer's
  // The peer's block as mapped here: the data read-only, the header page
  // writable (its count of mappers).
  uint64_t peer_generation_ = 0;
  uint8_t* peer_header_ = nullptr;
  uint8_t* peer_data_ = nullptr;
  size_t peer_data_bytes_ = 0;
  void UnmapPeerBlock();
  uint32_t sent_ = 0;      // our copy of send_->head
  uint32_t received_ = 0;  // our copy of recv_->tail
  uint64_t posted_ = 0;
};

}  // namespace sinkrt::device
