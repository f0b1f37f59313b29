// The collectives' own framing on a peer connection, after the Hello
// exchange (schemas/wire.fbs): a fixed 32-byte header, then for some kinds
// a payload of `bytes` bytes.
//
// The data path cannot afford a FlatBuffer per segment (building and
// verifying one costs more than a 4 KiB segment takes on the wire), and a
// fixed header lets the reader land a payload straight in its slot. Fields
// are in host byte order: peers are the same build on little-endian hosts,
// and the magic catches anything else.
//
// Layer: framing only, below the TCP transport and beside rendezvous (the
// option exchange); it includes nothing else from comm/.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "runtime/src/wire_socket.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::device {

// Version 2 ("SKC2"): data headers carry returned credits. Version 3
// ("SKC3"): a reply carries the replier's task positions. Version 4
// ("SKC4"): the options carry pair_allreduce_bytes. Version 5 ("SKC5"):
// and direct_allreduce_bytes (and the shm pair page holds the direct
// AllReduce's flags). Version 6 ("SKC6"): and hierarchical_allreduce. A
// peer of another version fails the rendezvous on the magic instead of
// hanging.
inline constexpr uint32_t kCommMagic = 0x36434B53;  // "SKC6"

enum class MsgKind : uint8_t {
  kData = 1,       // a segment: op, group, seq, segment, credits; payload = the bytes
  kCredit = 2,     // `bytes` more slots are free at the receiver
  kNotice = 3,     // the sender's op (op, seq) failed; payload = its message
  kQuery = 4,      // "where are you?" (a peer timed out waiting)
  kReply = 5,      // op, group, seq; segment = waiting-on rank + 1; flags: kActive, kFailed;
                   // payload = TaskPositionReport (task_positions.h), as it is
  kConfig = 6,     // rendezvous: payload = ConfigPayload
  kShmOffer = 7,   // rendezvous: payload = the shm object's name ("" = none)
  kShmAnswer = 8,  // rendezvous: flags kShmMapped or 0
};

inline constexpr uint16_t kReplyActive = 1;
inline constexpr uint16_t kReplyFailed = 2;
inline constexpr uint16_t kShmMapped = 1;
inline constexpr uint32_t kMaxNoticeBytes = 4096;

struct MsgHeader {
  uint32_t magic = kCommMagic;
  MsgKind kind = MsgKind::kData;
  uint8_t op = 0;
  uint16_t flags = 0;
  uint32_t group = 0;
  uint32_t segment = 0;
  uint64_t seq = 0;
  uint32_t bytes = 0;
  uint32_t credits = 0;  // kData: slots the sender freed since its last credit (piggybacked)
};
static_assert(sizeof(MsgHeader) == 32, "MsgHeader is a wire format");

// Every rank must cut messages the same way; rendezvous compares these.
struct ConfigPayload {
  uint64_t segment_bytes = 0;
  uint64_t small_allreduce_bytes = 0;
  uint32_t segments_in_flight = 0;
  uint32_t use_shared_memory = 0;
  uint64_t pair_allreduce_bytes = 0;
  uint64_t direct_allreduce_bytes = 0;
  uint32_t hierarchical_allreduce = 0;
  uint32_t reserved = 0;
};
static_assert(sizeof(ConfigPayload) == 48, "ConfigPayload is a wire format");

// Blocking helpers for the rendezvous, before the I/O thread owns the
// socket; they go through the socket's TLS session when it has one, and work
// on blocking and non-blocking descriptors alike. `who` names the peer in
// errors ("rank 2").
Status WriteFully(FrameSocket& socket, std::span<const uint8_t> head, std::span<const uint8_t> body, Deadline deadline,
                  const std::string& who);
Status ReadFully(FrameSocket& socket, std::span<uint8_t> dst, Deadline deadline, const std::string& who);
Status SetNonBlocking(int fd);

// One header plus payload, read whole; a payload above `max_payload` is an error.
struct RawMessage {
  MsgHeader header;
  std::string payload;
};
Result<RawMessage> ReadMessage(FrameSocket& socket, Deadline deadline, const std::string& who, uint32_t max_payload);
Status WriteMessage(FrameSocket& socket, const MsgHeader& header, std::span<const uint8_t> payload, Deadline deadline,
                    const std::string& who);

}  // namespace sinkrt::device
