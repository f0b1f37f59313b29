#include "sinkrt/runtime/address.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include <algorithm>
#include <cctype>
#include <cstring>

namespace sinkrt {
namespace {

std::string Quoted(std::string_view text) { return "address '" + std::string(text) + "'"; }

// Characters that cannot be in a host name or literal; rejecting them here
// gives a clear error instead of a resolver failure at connect time.
Status CheckHost(std::string_view text, std::string_view host) {
  if (host.empty()) return InvalidArgument(Quoted(text) + " has no host: write HOST:PORT");
  for (char c : host) {
    if (std::isspace(static_cast<unsigned char>(c)) || c == '[' || c == ']' || c == '/')
      return InvalidArgument(Quoted(text) + ": host '" + std::string(host) + "' contains '" + std::string(1, c) + "'");
  }
  return Status::Ok();
}

Result<uint16_t> ParsePort(std::string_view text, std::string_view port, bool allow_port_zero) {
  if (port.empty()) return InvalidArgument(Quoted(text) + " has an empty port: write HOST:PORT");
  if (!std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return InvalidArgument(Quoted(text) + ": port '" + std::string(port) + "' is not a number");
  const char* range = allow_port_zero ? "0..65535" : "1..65535";
  // More than five digits cannot be a port even with leading zeros stripped,
  // and would overflow the accumulator below if long enough.
  std::string_view digits = port.substr(std::min(port.find_first_not_of('0'), port.size()));
  uint32_t value = 0;
  if (digits.size() <= 5)
    for (char c : digits) value = value * 10 + static_cast<uint32_t>(c - '0');
  if (digits.size() > 5 || value > 65535 || (value == 0 && !allow_port_zero))
    return InvalidArgument(Quoted(text) + ": port " + std::string(port) + " is out of range " + range);
  return static_cast<uint16_t>(value);
}

}  // namespace

std::string Address::ToString() const {
  std::string port_text = std::to_string(port);
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + port_text;
  return host + ":" + port_text;
}

Result<Address> ParseAddress(std::string_view text, bool allow_port_zero) {
  if (text.empty()) return InvalidArgument("address '' is empty: write HOST:PORT");
  std::string_view host, port;
  if (text.front() == '[') {
    size_t close = text.find(']');
    if (close == std::string_view::npos) return InvalidArgument(Quoted(text) + " has '[' without ']'");
    host = text.substr(1, close - 1);
    std::string_view rest = text.substr(close + 1);
    if (rest.empty()) return InvalidArgument(Quoted(text) + " has no port: write [HOST]:PORT");
    if (rest.front() != ':') return InvalidArgument(Quoted(text) + ": expected ':' after ']'");
    port = rest.substr(1);
    if (!host.empty() && host.find(':') == std::string_view::npos)
      return InvalidArgument(Quoted(text) + ": brackets are for IPv6 literals; write HOST:PORT");
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return InvalidArgument(Quoted(text) + " has no port: write HOST:PORT");
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    // "::1:7100" cannot be split unambiguously, which is why IPv6 needs brackets.
    if (host.find(':') != std::string_view::npos)
      return InvalidArgument(Quoted(text) + ": an IPv6 address needs brackets: write [HOST]:PORT");
  }
  SINKRT_RETURN_IF_ERROR(CheckHost(text, host));
  SINKRT_ASSIGN_OR_RETURN(uint16_t port_value, ParsePort(text, port, allow_port_zero));
  return Address{std::string(host), port_value};
}

bool IsLoopback(std::string_view host) {
  std::string h(host);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  std::transform(h.begin(), h.end(), h.begin(), [](unsigned char c) { return std::tolower(c); });
  if (h == "localhost" || h == "localhost.") return true;
  in_addr v4;
  if (inet_pton(AF_INET, h.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6;
  if (inet_pton(AF_INET6, h.c_str(), &v6) != 1) return false;
  if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
  // ::ffff:127.x.y.z is the IPv4 loopback seen through a dual-stack socket.
  return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
}

Result<uint16_t> FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Unavailable(std::string("socket: ") + std::strerror(errno));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok) return Unavailable(std::string("no free port on 127.0.0.1: ") + std::strerror(err));
  return static_cast<uint16_t>(ntohs(a.sin_port));
}

}  // namespace sinkrt
