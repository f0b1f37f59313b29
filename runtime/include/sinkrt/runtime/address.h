// Network addresses as users write them: "host:port", "[v6]:port".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "sinkrt/runtime/status.h"

namespace sinkrt {

struct Address {
  std::string host;   // a name or a literal IPv4/IPv6 address, no brackets
  uint16_t port = 0;

  // "host:port", bracketing IPv6 literals.
  std::string ToString() const;
  bool operator==(const Address&) const = default;
};

// Parses "host:port" or "[v6]:port". The port must be 0..65535 and, unless
// `allow_port_zero` (listen on any free port), not 0.
Result<Address> ParseAddress(std::string_view text, bool allow_port_zero = false);

// True for 127.0.0.0/8, ::1 and "localhost": addresses only this machine reaches.
bool IsLoopback(std::string_view host);

}  // namespace sinkrt
