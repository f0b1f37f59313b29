// TcpTransport: a Transport over a TcpLink (the link does the work; this
// only adapts the interface the algorithms use).
//
// Layer: concrete transport; built only by SocketMesh.
#pragma once

#include "device/src/comm/transport/tcp/tcp_link.h"
#include "device/src/comm/transport/transport.h"

namespace sinkrt::device {

class TcpTransport final : public Transport {
 public:
  explicit TcpTransport(TcpLink& link) : link_(link) {}

  const char* kind() const override { return "tcp"; }
  uint32_t peer() const override { return link_.peer(); }
  Result<uint64_t> PostSend(const Tag& tag, std::span<const uint8_t> bytes, Deadline deadline) override {
    return link_.PostData(tag, bytes, deadline);
  }
  Status WaitSent(uint64_t ticket, Deadline deadline) override { return link_.WaitSent(ticket, deadline); }
  uint64_t posted() const override { return link_.posted(); }
  Result<std::span<const uint8_t>> Receive(const Tag& tag, size_t bytes, Deadline deadline) override {
    return link_.ReceiveData(tag, bytes, deadline);
  }
  void Release() override { link_.ReleaseData(); }

 private:
  TcpLink& link_;
};

}  // namespace sinkrt::device
