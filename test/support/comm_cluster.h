// A world of communicators in one process: one thread per rank, each with
// its own Communicator over real loopback TCP and real POSIX shared memory
// (the comm suites and the device's collective-task tests).
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "device/src/comm/communicator.h"
#include "device/src/comm/rendezvous/listening_inbox.h"
#include "support/on_each_rank.h"

namespace sinkrt::testing {

class Cluster {
 public:
  using CommOptions = device::CommOptions;

  // Rendezvous of n ranks with options per rank (job per rank too); statuses
  // of Create are kept for the tests that expect it to fail. `inbox_tls`: a
  // server context every rank's inbox handshakes with (CommOptions::tls
  // then names the dialers' client context).
  Cluster(
      uint32_t n, const std::function<CommOptions(uint32_t)>& options,
      const std::function<uint64_t(uint32_t)>& job = [](uint32_t) { return uint64_t{42}; },
      const std::function<std::string(uint32_t)>& host = [](uint32_t) { return device::LocalHostId(); },
      std::shared_ptr<const TlsContext> inbox_tls = nullptr)
      : n_(n), comms_(n), create_status_(n) {
    std::vector<device::PeerAddress> world;
    for (uint32_t r = 0; r < n; ++r) {
      auto inbox = device::ListeningInbox::Start(std::chrono::seconds(10), "127.0.0.1", "", inbox_tls);
      EXPECT_TRUE(inbox.ok()) << inbox.status().ToString();
      inboxes_.push_back(std::move(inbox).value());
      world.push_back(device::PeerAddress{r, inboxes_.back()->address(), host(r)});
    }
    OnEachRank(n, [&](uint32_t r) {
      auto c = device::Communicator::Create(r, world, job(r), *inboxes_[r], options(r));
      if (c.ok())
        comms_[r] = std::move(c).value();
      else
        create_status_[r] = c.status();
    });
  }
  Cluster(uint32_t n, const CommOptions& o) : Cluster(n, [o](uint32_t) { return o; }) {}

  ~Cluster() {
    OnEachRank(n_, [&](uint32_t r) { comms_[r].reset(); });
  }

  bool ok() const {
    for (auto& c : comms_)
      if (!c) return false;
    return true;
  }
  device::Communicator& operator[](uint32_t r) { return *comms_[r]; }
  void Destroy(uint32_t r) { comms_[r].reset(); }
  const Status& create_status(uint32_t r) const { return create_status_[r]; }
  uint32_t size() const { return n_; }

 private:
  uint32_t n_;
  std::vector<std::unique_ptr<device::ListeningInbox>> inboxes_;
  std::vector<std::unique_ptr<device::Communicator>> comms_;
  std::vector<Status> create_status_;
};

}  // namespace sinkrt::testing
