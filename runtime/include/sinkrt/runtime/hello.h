/// \file
/// The Hello that opens every connection (schemas/wire.fbs): a host or a
/// launcher's probe dialing a daemon, the daemon's answer, and daemons
/// dialing each other to join a world. One builder, so every sender writes
/// the same fields in the same layout, and one reader.
#pragma once

#include <flatbuffers/flatbuffers.h>

#include <cstdint>
#include <string>

#include "sinkrt/fb/wire_generated.h"
#include "sinkrt/runtime/version.h"
#include "sinkrt/runtime/wire.h"

namespace sinkrt {

/// What this build calls itself in every Hello it sends.
inline constexpr const char* kSoftwareName = "sinkrt " SINKRT_VERSION_STRING;

/// A Hello's fields with the schema's meaning; the defaults are what a host
/// sends. Fields at their schema default (and empty strings) are not written.
struct HelloFields {
  uint16_t protocol_major = kProtocolMajor;
  uint16_t protocol_minor = kProtocolMinor;
  fb::PeerRole role = fb::PeerRole::Host;
  int32_t rank = -1;
  std::string token;
  std::string software = kSoftwareName;
  bool busy = false;
  uint32_t cores = 0;
  uint32_t pid = 0;
  uint64_t job = 0;
  std::string host_id;
};

/// Finishes `fbb` with a Message holding this Hello.
void BuildHello(flatbuffers::FlatBufferBuilder& fbb, const HelloFields& hello);

/// The fields of a received (verified) Hello; absent strings read as empty.
HelloFields ReadHello(const fb::Hello& hello);

}  // namespace sinkrt
