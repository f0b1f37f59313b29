/// \file
/// The Hello that opens every connection (schemas/wire.fbs): a host or a
/// launcher's probe dialing a daemon, the daemon's answer, and daemons
/// dialing each other to join a world. One builder, so every sender writes
/// the same fields in the same layout, and one reader.
#pragma once

#include <flatbuffers/flatbuffers.h>

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/src/wire.h"
#include "sinkrt/fb/wire_generated.h"
#include "sinkrt/runtime/version.h"

namespace sinkrt {

/// What this build calls itself in every Hello it sends.
inline constexpr const char* kSoftwareName = "sinkrt " SINKRT_VERSION_STRING;

/// A Hello's fields with the schema's meaning; the defaults are what a host
/// sends. Fields at their schema default (and empty strings) are not written.
struct HelloFields {
  uint16_t protocol_major = kProtocolMajor;  ///< the sender's protocol version
  uint16_t protocol_minor = kProtocolMinor;  ///< its minor
  fb::PeerRole role = fb::PeerRole::Host;    ///< Host, Device, or a launcher's Probe
  int32_t rank = -1;                         ///< host: the rank it expects (-1 any); device: its rank
  std::string token;  ///< a 1.4 host's token in clear; 1.5 clients leave it empty and prove it (`nonce`, auth.h)
  std::string software = kSoftwareName;  ///< "sinkrt 1.0.0"
  bool busy = false;                     ///< device answering a probe: a job runs now
  uint32_t cores = 0;                    ///< device: cores its kernels may use
  uint32_t pid = 0;                      ///< device: its process id (launchers, logs)
  uint64_t job = 0;                      ///< device dialing a peer device: the job both serve
  std::string host_id;                   ///< device: its machine (LocalHostId); equal ids share memory
  std::vector<uint8_t>
      nonce;  ///< 1.5: the client's fresh nonce; a server with a token answers with a Challenge (auth.h)
};

/// Finishes `fbb` with a Message holding this Hello.
void BuildHello(flatbuffers::FlatBufferBuilder& fbb, const HelloFields& hello);

/// The fields of a received (verified) Hello; absent strings read as empty.
HelloFields ReadHello(const fb::Hello& hello);

}  // namespace sinkrt
