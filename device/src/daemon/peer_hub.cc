#include "device/src/daemon/peer_hub.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "device/src/daemon/daemon_log.h"

namespace sinkrt::device {
namespace {

std::string JobText(uint64_t job) { return "job " + std::to_string(job); }

}  // namespace

PeerHub::PeerHub(Options options) : options_(options), expiry_([this] { ExpiryLoop(); }) {}

PeerHub::~PeerHub() {
  Stop();
  if (expiry_.joinable()) expiry_.join();
}

Status PeerHub::Offer(uint64_t job, uint32_t rank, std::unique_ptr<FrameSocket> socket) {
  Parked p{job, rank, std::move(socket), std::chrono::steady_clock::now() + options_.linger};
  Status refused;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stopping_) {
      refused = Unavailable("sinkd rank " + std::to_string(options_.rank) + " is shutting down");
    } else if (parked_.size() >= options_.max_pending) {
      refused = ResourceExhausted("sinkd rank " + std::to_string(options_.rank) + " already holds " +
                                  std::to_string(parked_.size()) +
                                  " peer connections that no JoinWorld has taken (the limit); rank " +
                                  std::to_string(rank) + " of " + JobText(job) + " was refused");
    } else {
      parked_.push_back(std::move(p));
    }
  }
  if (!refused.ok()) {
    Drop(p, refused);
    return refused;
  }
  cv_.notify_all();
  return Status::Ok();
}

std::unique_ptr<PeerHub::Claim> PeerHub::ClaimJob(uint64_t job) {
  std::unique_ptr<Claim> claim(new Claim(*this, job));
  {
    std::lock_guard<std::mutex> lk(mu_);
    claims_.push_back(claim.get());
    claim->aborted_ = stopping_;
  }
  cv_.notify_all();  // the expiry thread stops timing this job's sockets
  return claim;
}

PeerHub::Claim::~Claim() { hub_.Release(*this); }

void PeerHub::Claim::Abort() {
  {
    std::lock_guard<std::mutex> lk(hub_.mu_);
    aborted_ = true;
  }
  hub_.cv_.notify_all();
}

bool PeerHub::Claim::Abandoned() {
  std::lock_guard<std::mutex> lk(hub_.mu_);
  return aborted_;
}

void PeerHub::Claim::set_outcome(std::string why) {
  std::lock_guard<std::mutex> lk(hub_.mu_);
  outcome_ = std::move(why);
}

Result<std::pair<uint32_t, std::unique_ptr<FrameSocket>>> PeerHub::Claim::Accept(Deadline deadline) {
  std::unique_lock<std::mutex> lk(hub_.mu_);
  bool timed_out = false;
  for (;;) {
    if (aborted_) return Aborted("the JoinWorld of " + JobText(job_) + " was abandoned (the job is ending)");
    // A socket parked just as the deadline passed still counts.
    for (auto it = hub_.parked_.begin(); it != hub_.parked_.end(); ++it) {
      if (it->job != job_) continue;
      std::pair<uint32_t, std::unique_ptr<FrameSocket>> next(it->rank, std::move(it->socket));
      hub_.parked_.erase(it);
      return next;
    }
    if (timed_out) return DeadlineExceeded("no peer of " + JobText(job_) + " connected before the deadline");
    if (!deadline)
      hub_.cv_.wait(lk);
    else
      timed_out = hub_.cv_.wait_until(lk, *deadline) == std::cv_status::timeout;
  }
}

void PeerHub::Release(Claim& claim) {
  std::vector<Parked> left;
  std::string outcome;
  {
    std::lock_guard<std::mutex> lk(mu_);
    claims_.remove(&claim);
    for (auto it = parked_.begin(); it != parked_.end();) {
      auto next = std::next(it);
      if (it->job == claim.job_) {
        left.push_back(std::move(*it));
        parked_.erase(it);
      }
      it = next;
    }
    outcome = claim.outcome_;
  }
  for (Parked& p : left)
    Drop(p, FailedPrecondition("sinkd rank " + std::to_string(options_.rank) + " is done with the JoinWorld of " +
                               JobText(claim.job_) + " and did not take this connection from rank " +
                               std::to_string(p.rank) + (outcome.empty() ? "" : ": " + outcome)));
}

bool PeerHub::Claimed(uint64_t job) const {
  return std::any_of(claims_.begin(), claims_.end(), [job](const Claim* c) { return c->job_ == job; });
}

void PeerHub::ExpiryLoop() {
  std::unique_lock<std::mutex> lk(mu_);
  while (!stopping_) {
    // Sockets of a job being joined never expire here: the claim takes them
    // or drops them when it ends.
    const auto now = std::chrono::steady_clock::now();
    std::vector<Parked> expired;
    std::optional<std::chrono::steady_clock::time_point> next;
    for (auto it = parked_.begin(); it != parked_.end();) {
      auto after = std::next(it);
      if (!Claimed(it->job)) {
        if (it->expires <= now) {
          expired.push_back(std::move(*it));
          parked_.erase(it);
        } else if (!next || it->expires < *next) {
          next = it->expires;
        }
      }
      it = after;
    }
    if (!expired.empty()) {
      lk.unlock();
      for (Parked& p : expired) {
        Status why =
            DeadlineExceeded("sinkd rank " + std::to_string(options_.rank) + " got no JoinWorld for " + JobText(p.job) +
                             " within " + std::to_string(options_.linger.count()) + " ms of rank " +
                             std::to_string(p.rank) + " connecting (is its host driving another job?)");
        DaemonLog(options_.log, options_.rank, "dropped a peer connection: " + why.message());
        Drop(p, why);
      }
      lk.lock();
      continue;
    }
    if (next)
      cv_.wait_until(lk, *next);
    else
      cv_.wait(lk);
  }
}

void PeerHub::Drop(Parked& parked, const Status& why) {
  if (!parked.socket) return;
  flatbuffers::FlatBufferBuilder fbb(256);
  ErrorContext ctx;
  ctx.rank = options_.rank;
  BuildError(fbb, why, ctx);
  // A fresh connection's send buffer is empty: this small frame never blocks.
  (void)parked.socket->Send(fbb);
  parked.socket->Shutdown();
  parked.socket.reset();
}

void PeerHub::Stop() {
  std::list<Parked> dropped;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stopping_) return;
    stopping_ = true;
    dropped.swap(parked_);
    for (Claim* c : claims_) c->aborted_ = true;
  }
  cv_.notify_all();
  for (Parked& p : dropped) Drop(p, Unavailable("sinkd rank " + std::to_string(options_.rank) + " is shutting down"));
}

}  // namespace sinkrt::device
