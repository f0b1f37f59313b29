#include "device/src/comm/transport/tcp/tcp_link.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "device/src/sync/futex.h"
#include "runtime/src/clock.h"

namespace sinkrt::device {
namespace {

std::string HeaderBytes(const MsgHeader& h) { return std::string(reinterpret_cast<const char*>(&h), sizeof h); }

bool Expired(const Deadline& d) { return d && std::chrono::steady_clock::now() >= *d; }

// An op thread asleep in the op poll wakes at least this often (it also
// keeps its links' reading duty from falling back to the I/O thread).
constexpr int64_t kOpSleepSliceNs = 5'000'000;

}  // namespace

TcpLink::TcpLink(const Params& params, std::unique_ptr<FrameSocket> socket, CommSignals& signals)
    : params_(params),
      socket_(std::move(socket)),
      fd_(socket_->native_handle()),
      signals_(signals),
      out_(static_cast<size_t>(2 * params.window + 2)),
      credits_(params.window),
      credit_batch_(static_cast<uint32_t>(std::max(1, params.window / 2))) {
  // Control messages are written from here in the sink: it never grows.
  control_.reserve(sizeof(MsgHeader) + kMaxNoticeBytes);
  if (params_.carries_data) {
    // Zero-filled, so every slot page is touched now and not in the first op.
    slots_.assign(static_cast<size_t>(params_.window) * params_.slot_bytes, 0);
    slot_headers_.resize(static_cast<size_t>(params_.window));
  }
}

TcpLink::~TcpLink() = default;

// Why a wait must end early. Checked with the wait's own mutex held:
// Abort, notices and closes notify under that mutex after setting their
// flag, so a wake can never fall between the check and the sleep.
Status TcpLink::InterruptedRecvLocked() {
  if (signals_.aborted()) return Aborted("aborted");
  if (signals_.poisoned()) return signals_.poison();
  if (closed()) return Unavailable(close_reason_);
  return Status::Ok();
}

Status TcpLink::InterruptedSendLocked() {
  if (signals_.aborted()) return Aborted("aborted");
  if (signals_.poisoned()) return signals_.poison();
  if (closed()) {
    std::lock_guard<std::mutex> lk(recv_mu_);  // lock order: send_mu_, then recv_mu_
    return Unavailable(close_reason_);
  }
  return Status::Ok();
}

// The op thread's wait on this link: poll (reading and writing the socket
// itself) for a few microseconds, then sleep in the engine's op poll, which
// watches every data link's socket and the communicator's wake-up, so the
// message we wait for wakes this thread directly (one wake-up, not two
// through the I/O thread and a condition variable).
template <typename Ready>
Status TcpLink::AwaitOp(Ready ready, Deadline deadline, bool sending) {
  auto poll_ready = [&] {
    PollOnce();
    return ready();
  };
  if (SpinThenYield(poll_ready)) return Status::Ok();
  WaitingOn waiting(signals_, params_.peer);
  for (;;) {
    if (sleeper_) sleeper_->SetOpSleeping(true);  // before the last check: an I/O thread landing our message wakes us
    if (poll_ready()) break;
    Status st;
    {
      std::lock_guard<std::mutex> lk(recv_mu_);
      st = InterruptedRecvLocked();
    }
    if (st.ok() && Expired(deadline))
      st = DeadlineExceeded(sending ? Who() + " took no data" : "no data from " + Who());
    if (!st.ok()) {
      if (sleeper_) sleeper_->SetOpSleeping(false);
      return st;
    }
    auto slice = std::chrono::nanoseconds(kOpSleepSliceNs);
    if (deadline) slice = std::min<std::chrono::nanoseconds>(slice, *deadline - std::chrono::steady_clock::now());
    if (sleeper_) {
      sleeper_->OpSleep(slice);
    } else {
      std::this_thread::sleep_for(std::min<std::chrono::nanoseconds>(slice, std::chrono::microseconds(50)));
    }
  }
  if (sleeper_) sleeper_->SetOpSleeping(false);
  return Status::Ok();
}

Result<uint64_t> TcpLink::PostData(const Tag& tag, std::span<const uint8_t> bytes, Deadline deadline) {
  // A full queue empties as credit comes back.
  if (posted_ - completed_seen_.load(std::memory_order_acquire) >= out_.size())
    SINKRT_RETURN_IF_ERROR(AwaitOp(
        [&] { return posted_ - completed_seen_.load(std::memory_order_acquire) < out_.size(); }, deadline, true));
  std::unique_lock<std::mutex> lk(send_mu_);
  if (closed()) return InterruptedSendLocked();
  OutData& o = out_[(out_head_ + out_count_) % out_.size()];
  o.header = MsgHeader{};
  o.header.kind = MsgKind::kData;
  o.header.op = static_cast<uint8_t>(tag.op);
  o.header.group = tag.group;
  o.header.seq = tag.seq;
  o.header.segment = tag.segment;
  o.header.bytes = static_cast<uint32_t>(bytes.size());
  o.data = bytes.data();
  o.bytes = bytes.size();
  ++out_count_;
  const uint64_t ticket = ++posted_;
  FlushLocked();
  bool wake = want_write_ && !engine_knows_;
  lk.unlock();
  if (wake && engine_wake_) engine_wake_();
  return ticket;
}

Status TcpLink::WaitSent(uint64_t ticket, Deadline deadline) {
  if (completed_seen_.load(std::memory_order_acquire) >= ticket) return Status::Ok();
  return AwaitOp([&] { return completed_seen_.load(std::memory_order_acquire) >= ticket; }, deadline, true);
}

Result<std::span<const uint8_t>> TcpLink::ReceiveData(const Tag& tag, size_t bytes, Deadline deadline) {
  if (filled_seen_.load(std::memory_order_acquire) == consumed_)
    SINKRT_RETURN_IF_ERROR(
        AwaitOp([&] { return filled_seen_.load(std::memory_order_acquire) != consumed_; }, deadline, false));
  std::unique_lock<std::mutex> lk(recv_mu_);
  const size_t slot = consumed_ % slot_headers_.size();
  const MsgHeader& h = slot_headers_[slot];
  Tag got{static_cast<OpKind>(h.op), h.group, h.seq, h.segment};
  if (!(got == tag)) return TagMismatch(params_.self, params_.peer, tag, got);
  if (h.bytes != bytes) return SizeMismatch(params_.self, params_.peer, tag, bytes, h.bytes);
  return std::span<const uint8_t>(slots_.data() + slot * params_.slot_bytes, h.bytes);
}

void TcpLink::ReleaseData() {
  {
    std::lock_guard<std::mutex> lk(recv_mu_);
    ++consumed_;
  }
  std::unique_lock<std::mutex> lk(send_mu_);
  if (++credit_pending_ < credit_batch_) return;
  FlushLocked();
  bool wake = want_write_ && !engine_knows_;
  lk.unlock();
  if (wake && engine_wake_) engine_wake_();
}

void TcpLink::SendNotice(const std::string& text) {
  MsgHeader h;
  h.kind = MsgKind::kNotice;
  std::string body = text.substr(0, kMaxNoticeBytes);
  h.bytes = static_cast<uint32_t>(body.size());
  std::unique_lock<std::mutex> lk(send_mu_);
  notices_.push_back(HeaderBytes(h) + body);
  FlushLocked();
  bool wake = want_write_ && !engine_knows_;
  lk.unlock();
  if (wake && engine_wake_) engine_wake_();
}

uint64_t TcpLink::SendQuery() {
  uint64_t generation;
  {
    std::lock_guard<std::mutex> lk(recv_mu_);
    generation = reply_generation_;
  }
  std::unique_lock<std::mutex> lk(send_mu_);
  query_pending_ = true;
  FlushLocked();
  bool wake = want_write_ && !engine_knows_;
  lk.unlock();
  if (wake && engine_wake_) engine_wake_();
  return generation;
}

Result<PeerProgress> TcpLink::AwaitReply(uint64_t generation, Deadline deadline) {
  std::unique_lock<std::mutex> lk(recv_mu_);
  while (reply_generation_ == generation) {
    if (closed()) return Unavailable(close_reason_);
    if (signals_.aborted()) return Aborted("aborted");
    if (Expired(deadline)) return DeadlineExceeded(Who() + " does not answer");
    recv_cv_.wait_until(lk, *deadline);
  }
  return reply_;
}

void TcpLink::Drain(Deadline deadline) {
  std::unique_lock<std::mutex> lk(send_mu_);
  while (out_count_ > 0 || current_ != Current::kNone || !notices_.empty()) {
    if (closed() || signals_.aborted() || Expired(deadline)) return;
    send_cv_.wait_until(lk, *deadline);
  }
}

void TcpLink::ShutdownWrite() {
  std::lock_guard<std::mutex> lk(send_mu_);
  write_shut_ = true;
  socket_->ShutdownWrite();
}

void TcpLink::AwaitEof(Deadline deadline) {
  std::unique_lock<std::mutex> lk(recv_mu_);
  while (!eof_.load(std::memory_order_acquire) && !Expired(deadline)) recv_cv_.wait_until(lk, *deadline);
}

void TcpLink::WakeWaiters() {
  { std::lock_guard<std::mutex> lk(send_mu_); }
  send_cv_.notify_all();
  { std::lock_guard<std::mutex> lk(recv_mu_); }
  recv_cv_.notify_all();
}

void TcpLink::MarkClosed(const std::string& why, bool holding_send) {
  {
    // The reason is set before the flag, under the lock waits check both with.
    std::lock_guard<std::mutex> lk(recv_mu_);
    if (closed()) return;
    close_reason_ = why;
    closed_.store(true, std::memory_order_release);
  }
  recv_cv_.notify_all();
  if (holding_send) {
    send_cv_.notify_all();
  } else {
    { std::lock_guard<std::mutex> lk(send_mu_); }
    send_cv_.notify_all();
  }
  if (event_hook_) event_hook_();
}

void TcpLink::FlushLocked() {
  while (!closed() && !write_shut_) {
    if (current_ == Current::kNone) {
      // Control first: credits and answers unblock the peer; data waits for credit.
      MsgHeader h;
      const bool data_ready = out_count_ > 0 && credits_ > 0;
      // Credits ride on our next data message when one is about to leave;
      // alone only when none is (a ring's receiver never sends to its
      // sender, and two ranks that both wait for credit must not wait for
      // each other's data).
      if (credit_pending_ >= credit_batch_ && !data_ready) {
        h.kind = MsgKind::kCredit;
        h.bytes = credit_pending_;
        credit_pending_ = 0;
        control_.assign(reinterpret_cast<const char*>(&h), sizeof h);
        current_ = Current::kControl;
      } else if (reply_pending_) {
        reply_pending_ = false;
        PeerProgress p = signals_.Now();
        h.kind = MsgKind::kReply;
        h.op = static_cast<uint8_t>(p.op);
        h.group = p.group;
        h.seq = p.seq;
        h.segment = static_cast<uint32_t>(p.waiting_on + 1);
        h.flags = static_cast<uint16_t>((p.active ? kReplyActive : 0) | (p.failed ? kReplyFailed : 0));
        h.bytes = sizeof(TaskPositionReport);
        TaskPositionReport positions;
        signals_.DescribePositions(&positions);
        control_.assign(reinterpret_cast<const char*>(&h), sizeof h);  // into the reserved buffer
        control_.append(reinterpret_cast<const char*>(&positions), sizeof positions);
        current_ = Current::kControl;
      } else if (query_pending_) {
        query_pending_ = false;
        h.kind = MsgKind::kQuery;
        control_.assign(reinterpret_cast<const char*>(&h), sizeof h);
        current_ = Current::kControl;
      } else if (!notices_.empty()) {
        control_.assign(notices_.front());  // into the reserved buffer
        notices_.pop_front();
        current_ = Current::kControl;
      } else if (data_ready) {
        --credits_;
        out_[out_head_].header.credits = credit_pending_;
        credit_pending_ = 0;
        current_ = Current::kData;
      } else {
        want_write_ = false;
        want_write_seen_.store(false, std::memory_order_release);
        send_cv_.notify_all();  // Drain waits for an empty queue
        return;
      }
      current_done_ = 0;
    }
    std::span<const uint8_t> pieces[2];
    size_t n = 0;
    size_t total;
    if (current_ == Current::kControl) {
      total = control_.size();
      pieces[n++] = {reinterpret_cast<const uint8_t*>(control_.data()) + current_done_, total - current_done_};
    } else {
      OutData& o = out_[out_head_];
      total = sizeof(MsgHeader) + o.bytes;
      if (current_done_ < sizeof(MsgHeader))
        pieces[n++] = {reinterpret_cast<const uint8_t*>(&o.header) + current_done_, sizeof(MsgHeader) - current_done_};
      size_t body_done = current_done_ > sizeof(MsgHeader) ? current_done_ - sizeof(MsgHeader) : 0;
      if (body_done < o.bytes) pieces[n++] = {o.data + body_done, o.bytes - body_done};
    }
    Result<IoStep> w = socket_->WriteSome(std::span<const std::span<const uint8_t>>(pieces, n));
    if (!w.ok()) {
      MarkClosed(Who() + " closed its connection (" + w.status().message() + ")", true);
      return;
    }
    if (w->bytes == 0) {
      want_write_ = true;
      want_write_seen_.store(true, std::memory_order_release);
      return;
    }
    current_done_ += w->bytes;
    if (current_done_ < total) continue;
    if (current_ == Current::kData) {
      out_head_ = (out_head_ + 1) % out_.size();
      --out_count_;
      ++completed_;
      completed_seen_.store(completed_, std::memory_order_release);
      send_cv_.notify_all();
    }
    current_ = Current::kNone;
  }
}

short TcpLink::PollEvents() {
  short events = 0;
  // While the op thread reads this socket itself, the I/O thread keeps out:
  // two readers would only wake each other.
  if (!eof_.load(std::memory_order_acquire) && !op_reading_.load(std::memory_order_acquire)) events |= POLLIN;
  std::lock_guard<std::mutex> lk(send_mu_);
  engine_knows_ = want_write_ && !closed() && !write_shut_;
  if (engine_knows_) events |= POLLOUT;
  return events;
}

void TcpLink::OnWritable() {
  std::lock_guard<std::mutex> lk(send_mu_);
  FlushLocked();
}

void TcpLink::PollOnce() {
  MarkOpReading();
  if (read_mu_.try_lock()) {
    ReadAvailable();
    read_mu_.unlock();
  }
  if (want_write_seen_.load(std::memory_order_acquire)) {
    std::unique_lock<std::mutex> lk(send_mu_, std::try_to_lock);
    if (lk.owns_lock()) FlushLocked();
  }
}

void TcpLink::MarkOpReading() {
  last_poll_ns_.store(NowNs(), std::memory_order_relaxed);
  if (!op_reading_.load(std::memory_order_relaxed)) op_reading_.store(true, std::memory_order_release);
}

void TcpLink::StopReading() {
  if (op_reading_.exchange(false, std::memory_order_acq_rel) && engine_wake_) engine_wake_();
}

bool TcpLink::ReleaseIdleReading(int64_t idle_ns) {
  if (!op_reading_.load(std::memory_order_acquire)) return false;
  if (NowNs() - last_poll_ns_.load(std::memory_order_relaxed) < idle_ns) return true;
  op_reading_.store(false, std::memory_order_release);
  return false;
}

void TcpLink::OnReadable() {
  std::lock_guard<std::mutex> lk(read_mu_);
  ReadAvailable();
}

void TcpLink::ReadAvailable() {
  while (!eof_.load(std::memory_order_relaxed)) {
    uint8_t* dst;
    size_t want;
    if (in_state_ == InState::kHeader) {
      dst = reinterpret_cast<uint8_t*>(&in_header_) + in_done_;
      want = sizeof(MsgHeader) - in_done_;
    } else {
      dst = in_dst_;
      want = in_left_;
    }
    Result<IoStep> r = socket_->ReadSome(std::span<uint8_t>(dst, want));
    if (r.ok() && r->bytes > 0) {
      if (in_state_ == InState::kHeader) {
        in_done_ += r->bytes;
        if (in_done_ == sizeof(MsgHeader)) OnHeader();
      } else {
        in_dst_ += r->bytes;
        in_left_ -= r->bytes;
        if (in_left_ == 0) OnPayloadDone();
      }
      continue;
    }
    // A TLS read may want the socket writable; the link's polls watch for
    // input, which is what TLS 1.3 without renegotiation needs here.
    if (r.ok() && r->wait != IoWait::kNone) return;
    std::string why = Who() + " closed its connection";
    if (!r.ok()) why += " (" + r.status().message() + ")";
    eof_.store(true, std::memory_order_release);
    MarkClosed(why, false);
    return;
  }
}

void TcpLink::ProtocolError(const std::string& what) {
  eof_.store(true, std::memory_order_release);  // stop reading a stream we no longer understand
  MarkClosed(Who() + " broke the collectives protocol: " + what, false);
}

void TcpLink::OnHeader() {
  in_done_ = 0;
  const MsgHeader& h = in_header_;
  if (h.magic != kCommMagic) return ProtocolError("bad frame magic");
  switch (h.kind) {
    case MsgKind::kData: {
      if (!params_.carries_data) return ProtocolError("data on a shared-memory peer's connection");
      if (h.credits > 0) {
        std::lock_guard<std::mutex> lk(send_mu_);
        credits_ += h.credits;
        FlushLocked();
      }
      if (h.bytes > params_.slot_bytes)
        return ProtocolError("a " + std::to_string(h.bytes) + "-byte segment, slots hold " +
                             std::to_string(params_.slot_bytes));
      size_t slot;
      bool overrun;
      {
        std::lock_guard<std::mutex> lk(recv_mu_);
        overrun = filled_ - consumed_ >= slot_headers_.size();
        slot = filled_ % slot_headers_.size();
        if (!overrun && h.bytes == 0) {
          slot_headers_[slot] = h;
          ++filled_;
          filled_seen_.store(filled_, std::memory_order_release);
        }
      }
      if (overrun) return ProtocolError("a segment beyond its credit");
      if (h.bytes == 0) {
        recv_cv_.notify_all();
        return;
      }
      in_state_ = InState::kData;
      in_slot_ = slot;
      in_dst_ = slots_.data() + slot * params_.slot_bytes;
      in_left_ = h.bytes;
      return;
    }
    case MsgKind::kCredit: {
      std::lock_guard<std::mutex> lk(send_mu_);
      credits_ += h.bytes;
      FlushLocked();
      return;
    }
    case MsgKind::kNotice:
      if (h.bytes > kMaxNoticeBytes) return ProtocolError("an oversized failure notice");
      notice_.assign(h.bytes, '\0');
      if (h.bytes == 0) return OnPayloadDone();
      in_state_ = InState::kNotice;
      in_dst_ = reinterpret_cast<uint8_t*>(notice_.data());
      in_left_ = h.bytes;
      return;
    case MsgKind::kQuery: {
      std::lock_guard<std::mutex> lk(send_mu_);
      reply_pending_ = true;
      FlushLocked();
      return;
    }
    case MsgKind::kReply:
      if (h.bytes != sizeof(TaskPositionReport))
        return ProtocolError("a " + std::to_string(h.bytes) + "-byte stall reply, " +
                             std::to_string(sizeof(TaskPositionReport)) + " expected");
      in_state_ = InState::kReply;
      in_dst_ = reinterpret_cast<uint8_t*>(&in_positions_);
      in_left_ = h.bytes;
      return;
    default:
      return ProtocolError("unexpected message kind " + std::to_string(static_cast<int>(h.kind)));
  }
}

void TcpLink::OnReply() {
  const MsgHeader& h = in_header_;
  {
    std::lock_guard<std::mutex> lk(recv_mu_);
    reply_.op = static_cast<OpKind>(h.op);
    reply_.group = h.group;
    reply_.seq = h.seq;
    reply_.waiting_on = static_cast<int32_t>(h.segment) - 1;
    reply_.active = (h.flags & kReplyActive) != 0;
    reply_.failed = (h.flags & kReplyFailed) != 0;
    reply_.positions = in_positions_;
    ++reply_generation_;
  }
  recv_cv_.notify_all();
}

void TcpLink::OnPayloadDone() {
  InState done = in_state_;
  in_state_ = InState::kHeader;
  if (done == InState::kData) {
    {
      std::lock_guard<std::mutex> lk(recv_mu_);
      slot_headers_[in_slot_] = in_header_;
      ++filled_;
      filled_seen_.store(filled_, std::memory_order_release);
    }
    recv_cv_.notify_all();
  } else if (done == InState::kReply) {
    OnReply();
  } else {
    signals_.Poison(Aborted(Who() + " failed: " + notice_));
  }
}

}  // namespace sinkrt::device
