/// \file
/// Network addresses as users write them: "host:port", "[v6]:port".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "sinkrt/runtime/status.h"

namespace sinkrt {

/// A TCP endpoint: a host and a port.
struct Address {
  std::string host;   ///< a name or a literal IPv4/IPv6 address, no brackets
  uint16_t port = 0;  ///< 0: any free port (only where a listener allows it)

  /// "host:port", bracketing IPv6 literals.
  std::string ToString() const;
  /// Same host text and port.
  bool operator==(const Address&) const = default;
};

/// Parses "host:port" or "[v6]:port". The port must be 0..65535 and, unless
/// `allow_port_zero` (listen on any free port), not 0.
Result<Address> ParseAddress(std::string_view text, bool allow_port_zero = false);

/// True for 127.0.0.0/8, ::1 and "localhost": addresses only this machine reaches.
bool IsLoopback(std::string_view host);

/// A port on 127.0.0.1 the kernel has just given out and taken back: free
/// now, for a listener started a moment later by whoever is told it (a
/// launcher's master, a test). Nothing holds it meanwhile, so use it on one
/// machine only, where nothing else races for it in that moment.
Result<uint16_t> FreeLoopbackPort();

}  // namespace sinkrt
