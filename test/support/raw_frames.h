// Raw frames for tests that play a hostile or broken client against a real
// sinkd: dialing, hand-made Hello and control frames, bytes that bypass the
// framing, and reading back the daemon's Error.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/src/hello.h"
#include "runtime/src/wire.h"
#include "runtime/src/wire_socket.h"

namespace sinkrt::testing {

using namespace std::chrono_literals;

inline std::unique_ptr<FrameSocket> Dial(const Address& a) {
  auto s = FrameSocket::Connect(a, 10s);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(s).value() : nullptr;
}

inline Status SendHello(FrameSocket& s, fb::PeerRole role = fb::PeerRole::Host, const std::string& token = "",
                        uint16_t major = kProtocolMajor, uint16_t minor = kProtocolMinor) {
  HelloFields hello;
  hello.protocol_major = major;
  hello.protocol_minor = minor;
  hello.role = role;
  hello.token = token;
  flatbuffers::FlatBufferBuilder fbb;
  BuildHello(fbb, hello);
  return s.Send(fbb);
}

// The bytes of one whole frame holding `hello`, for a stand-in daemon that
// writes to a plain socket.
inline std::vector<uint8_t> HelloFrameBytes(const HelloFields& hello) {
  flatbuffers::FlatBufferBuilder fbb(256);
  BuildHello(fbb, hello);
  std::vector<uint8_t> frame(kFrameHeaderBytes);
  EncodeFrameHeader({fbb.GetSize(), 0}, frame.data());
  frame.insert(frame.end(), fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
  return frame;
}

// The next frame's type; its payload is skipped. Error frames become the Status.
inline Result<fb::MessageBody> Next(FrameSocket& s, Status* error = nullptr) {
  InFrame f;
  SINKRT_RETURN_IF_ERROR(s.Receive(&f, DeadlineIn(20s)));
  SINKRT_RETURN_IF_ERROR(s.SkipPayload(&f, DeadlineIn(20s)));
  if (f.type() == fb::MessageBody::Error && error) *error = StatusFromError(*f.message->body_as_Error());
  return f.type();
}

// Reads frames until an Error arrives (Credits may come first); returns it.
inline Status NextError(FrameSocket& s) {
  for (int i = 0; i < 64; ++i) {
    Status err;
    auto t = Next(s, &err);
    if (!t.ok()) return Internal("no Error frame before: " + t.status().message());
    if (*t == fb::MessageBody::Error) return err;
  }
  return Internal("no Error frame in 64 frames");
}

// True when the daemon closed the connection (the next read sees the end).
inline bool Closed(FrameSocket& s) {
  InFrame f;
  Status st = s.Receive(&f, DeadlineIn(20s));
  return st.code() == StatusCode::kUnavailable;
}

inline Status SendRaw(FrameSocket& s, const void* bytes, size_t n) {
  // A hand-made frame: header and all, bypassing Send's framing.
  int fd = s.native_handle();
  const char* p = static_cast<const char*>(bytes);
  while (n) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w <= 0) return Unavailable("send failed");
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

template <typename Build>
inline Status SendMessage(FrameSocket& s, fb::MessageBody type, Build build,
                          std::span<const std::span<const uint8_t>> payload = {}) {
  flatbuffers::FlatBufferBuilder fbb;
  flatbuffers::Offset<void> body = build(fbb);
  FinishMessage(fbb, type, body);
  return s.Send(fbb, payload);
}

inline Status SendLoad(FrameSocket& s, std::span<const uint8_t> stream) {
  std::span<const uint8_t> payload[1] = {stream};
  return SendMessage(
      s, fb::MessageBody::LoadProgram,
      [&](flatbuffers::FlatBufferBuilder& fbb) { return fb::CreateLoadProgram(fbb, stream.size()).Union(); }, payload);
}

inline Status SendRunSink(FrameSocket& s, uint32_t steps) {
  return SendMessage(s, fb::MessageBody::RunSink, [&](flatbuffers::FlatBufferBuilder& fbb) {
    return fb::CreateRunSink(fbb, fb::ProgramKind::TrainStep, steps, 0).Union();
  });
}

inline Status SendReadTensor(FrameSocket& s, uint32_t buffer) {
  return SendMessage(s, fb::MessageBody::ReadTensor,
                     [&](flatbuffers::FlatBufferBuilder& fbb) { return fb::CreateReadTensor(fbb, buffer).Union(); });
}

// Reads frames (skipping their payloads) until one of `type`; false on an
// Error, the end of the connection or 20 s without it.
inline bool ReadUntil(FrameSocket& s, fb::MessageBody type) {
  for (;;) {
    InFrame f;
    if (!s.Receive(&f, DeadlineIn(20s)).ok() || f.type() == fb::MessageBody::Error) return false;
    if (!s.SkipPayload(&f).ok()) return false;
    if (f.type() == type) return true;
  }
}

inline Status SendPush(FrameSocket& s, uint32_t queue, uint64_t sequence, std::span<const uint8_t> bytes) {
  std::span<const uint8_t> payload[1] = {bytes};
  return SendMessage(
      s, fb::MessageBody::PushBatch,
      [&](flatbuffers::FlatBufferBuilder& fbb) { return fb::CreatePushBatch(fbb, queue, sequence).Union(); }, payload);
}

}  // namespace sinkrt::testing
