// A slow-loris for admission tests: one byte of a frame every `every` from
// its own thread, never the last one, until stopped or the peer closes.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/src/wire_socket.h"
#include "support/raw_frames.h"

namespace sinkrt::testing {

class SlowLoris {
 public:
  SlowLoris(std::unique_ptr<FrameSocket> socket, std::vector<uint8_t> frame, std::chrono::milliseconds every)
      : socket_(std::move(socket)), frame_(std::move(frame)), thread_([this, every] { Run(every); }) {}
  ~SlowLoris() { Stop(); }
  void Stop() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  size_t sent() {
    std::lock_guard<std::mutex> lk(mu_);
    return sent_;
  }
  FrameSocket& socket() { return *socket_; }

 private:
  void Run(std::chrono::milliseconds every) {
    std::unique_lock<std::mutex> lk(mu_);
    // The pace of an attacker, not a synchronisation: nothing waits on it.
    while (!cv_.wait_for(lk, every, [&] { return stop_; }) && sent_ + 1 < frame_.size()) {
      if (!SendRaw(*socket_, &frame_[sent_], 1).ok()) return;
      ++sent_;
    }
  }

  std::unique_ptr<FrameSocket> socket_;
  const std::vector<uint8_t> frame_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  size_t sent_ = 0;
  std::thread thread_;  // last: starts once the members it uses exist
};

}  // namespace sinkrt::testing
