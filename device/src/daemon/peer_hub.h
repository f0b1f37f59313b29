// PeerHub: connections from peer daemons, held until a JoinWorld takes them.
//
// In a world's rendezvous every rank dials the ranks above it
// (device/src/comm/rendezvous.cc). The dial reaches this daemon's one port
// and may arrive before the host's JoinWorld does: the accept loop reads its
// Hello (role Device, rank, job) and parks the socket here under its job id,
// untouched, so the rendezvous finds it exactly as a ListeningInbox would
// hand it over. A JoinWorld of that job claims the job's inbox and takes its
// sockets as Communicator::Create asks for them.
//
// Bounded: at most `max_pending` sockets wait at once (a flood of dials
// cannot take every descriptor), and one nobody claims is dropped after the
// linger time (the peer timeout) with an Error saying so. When a claim ends,
// what it did not take (a duplicate, a dial that came too late) is dropped
// at once with the reason, so that dialer fails now instead of at its
// timeout.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "device/src/comm/communicator.h"
#include "runtime/src/wire_socket.h"

namespace sinkrt::device {

class PeerHub {
 public:
  struct Options {
    int rank = 0;  // this daemon's rank, for Error frames and logs
    size_t max_pending = 256;
    std::chrono::milliseconds linger{std::chrono::seconds(300)};
    bool log = true;
  };

  explicit PeerHub(Options options);
  ~PeerHub();  // Stop(), then joins the expiry thread

  // Parks a peer's connection (its Hello read, nothing answered) under
  // `job`. Past the bound it is answered with an Error and closed, and the
  // refusal is returned.
  Status Offer(uint64_t job, uint32_t rank, std::unique_ptr<FrameSocket> socket);

  // One JoinWorld's view of the hub: the sockets of its job, now and as they
  // arrive. At most one claim per job at a time (a daemon joins one world at
  // a time); destroying it drops the job's sockets it did not take.
  class Claim final : public PeerInbox {
   public:
    ~Claim() override;
    Result<std::pair<uint32_t, std::unique_ptr<FrameSocket>>> Accept(Deadline deadline) override;
    bool Abandoned() override;
    // Wakes an Accept with kAborted, now and for every later call (the
    // session is being torn down). Safe from any thread.
    void Abort();
    // Why the sockets left behind are dropped (the rendezvous' outcome).
    void set_outcome(std::string why);

   private:
    friend class PeerHub;
    Claim(PeerHub& hub, uint64_t job) : hub_(hub), job_(job) {}
    PeerHub& hub_;
    uint64_t job_;
    bool aborted_ = false;  // guarded by hub_.mu_
    std::string outcome_;   // guarded by hub_.mu_
  };
  std::unique_ptr<Claim> ClaimJob(uint64_t job);

  // Drops every parked socket and wakes every Accept (the daemon stops).
  void Stop();

 private:
  struct Parked {
    uint64_t job = 0;
    uint32_t rank = 0;
    std::unique_ptr<FrameSocket> socket;
    std::chrono::steady_clock::time_point expires;
  };

  void ExpiryLoop();
  void Release(Claim& claim);
  // Answers with `why` and closes; never under mu_.
  void Drop(Parked& parked, const Status& why);
  bool Claimed(uint64_t job) const;  // under mu_

  Options options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::list<Parked> parked_;
  std::list<Claim*> claims_;
  bool stopping_ = false;
  std::thread expiry_;
};

}  // namespace sinkrt::device
