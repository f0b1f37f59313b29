// Transport: moves tagged segments between this rank and one peer.
//
// Algorithms see a peer only through this interface, so the same ring or
// recursive doubling runs over shared memory and over TCP. A send is posted
// (it may still be on its way when PostSend returns: the bytes must stay
// untouched until WaitSent says they left) and receives are two-phase
// (Receive returns a view of the message where the transport holds it,
// Release hands its slot back), so a receive-and-reduce reads straight from
// the shm slot or the socket's landing buffer with no extra copy.
//
// Each peer grants `segments_in_flight` slots of credit; a sender waits for
// a free one only when that many of its messages are still unconsumed, and
// the algorithms never post more than that many ahead of their own
// receives, which keeps every schedule deadlock-free (see ring.cc).
//
// Waits end early on Abort(), on a peer's failure notice and when the peer's
// connection closes. Codes tell the op layer how to word the error:
//   kDeadlineExceeded   nothing from the peer in time (message names it)
//   kUnavailable        the peer closed its connection ("rank 2 closed its connection")
//   kAborted            Abort() here, or a failure notice from a peer (message is the notice)
//   kFailedPrecondition the peer sent another message than expected (message complete)
//
// Layer: the interface between algorithms/ (above) and the concrete
// transports in tcp/ and shm/ (below). Nothing here knows a reduction.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "runtime/src/wire_socket.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::device {

enum class OpKind : uint8_t {
  kNone = 0,
  kAllReduce = 1,
  kAllGather = 2,
  kReduceScatter = 3,
  kBroadcast = 4,
  kSend = 5,  // Send/Recv messages carry kSend on both sides
  kRecv = 6,  // only names the receiving side in errors
  kBarrier = 7,
  kAllToAll = 8,
};

const char* OpName(OpKind op);

struct Tag {
  OpKind op = OpKind::kNone;
  uint32_t group = 0;  // hash of the group's ranks: equal numbers in two groups never match
  uint64_t seq = 0;    // per group, one per collective call
  uint32_t segment = 0;

  bool operator==(const Tag&) const = default;
};

// "AllReduce #7 segment 3"
std::string TagText(const Tag& tag);
// "rank 1 expected AllReduce #7 segment 3 from rank 0, got AllGather #8 segment 0"
Status TagMismatch(uint32_t self, uint32_t peer, const Tag& expected, const Tag& got);
Status SizeMismatch(uint32_t self, uint32_t peer, const Tag& tag, size_t expected, size_t got);

class Transport {
 public:
  virtual ~Transport() = default;

  // "shm" or "tcp".
  virtual const char* kind() const = 0;
  virtual uint32_t peer() const = 0;

  // Posts one message; returns its ticket (1, 2, ... per transport). Waits
  // until `deadline` only while the send window is full.
  virtual Result<uint64_t> PostSend(const Tag& tag, std::span<const uint8_t> bytes, Deadline deadline) = 0;
  // Until every message up to `ticket` has left this rank's memory.
  virtual Status WaitSent(uint64_t ticket, Deadline deadline) = 0;
  // Tickets handed out so far.
  virtual uint64_t posted() const = 0;

  // The next message, which must carry `tag` and be exactly `bytes` long.
  // The view stays valid until Release().
  virtual Result<std::span<const uint8_t>> Receive(const Tag& tag, size_t bytes, Deadline deadline) = 0;
  virtual void Release() = 0;
};

}  // namespace sinkrt::device
