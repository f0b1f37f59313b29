// TcpLink: one peer connection after rendezvous, driven by non-blocking I/O.
//
// Both the op thread and the communicator's I/O thread (TcpEngine) write to
// the socket, one at a time under the send lock: a post writes at once when
// the socket has room, and whatever is left (EAGAIN, or no credit) is
// finished by the I/O thread when the socket drains or credit arrives. So
// a send never blocks its caller and a ring where every rank sends before
// it receives cannot deadlock. The I/O thread reads: it lands each data
// segment in one of the `window` slots the receiver pre-posted, and handles
// credits, failure notices and stall queries whatever the op thread does.
// An op thread that must wait (for data, credit or a send) first polls a
// while (SpinThenYield), reading and writing the socket itself under the
// same locks: a message then costs no thread wake-up, which on these VMs
// costs more than a small message's whole trip. A wait that outlasts that
// sleeps in TcpEngine::OpSleep, a poll over every data link's socket, so
// the awaited message wakes the op thread itself. Meanwhile the I/O thread
// leaves those sockets' input to the op thread (no second reader woken for
// every message); one that stopped waiting (between collectives) hands it
// back at the I/O thread's next tick (10 ms), and one about to sleep
// elsewhere (a futex on a shm ring) at once (StopReading).
//
// Flow control is credit-based, not a handshake per message: the sender
// starts with `window` credits (the receiver's slots) and spends one per
// data message; the receiver returns them as it releases slots: in the
// header of its next data message to that peer when one leaves (two ranks
// exchanging need no credit messages at all), in a message of their own
// once window/2 are due and no data is leaving. A sender therefore always
// holds at least one credit once the receiver has caught up, and never
// overruns a slot.
//
// Links to shm peers carry no data: they exist for the notices, queries and
// end-of-file that tell a rank its neighbour died.
//
// Layer: a concrete transport. It sees the transport interfaces and the
// framing (wire/); never an algorithm or the communicator's state.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "device/src/comm/transport/comm_signals.h"
#include "device/src/comm/transport/transport.h"
#include "device/src/comm/wire/comm_wire.h"
#include "runtime/src/wire_socket.h"

namespace sinkrt::device {

// Where an op thread sleeps when its wait on a TCP link outlasts its
// polling: TcpEngine, which polls every data link's socket for it.
class OpSleeper {
 public:
  virtual ~OpSleeper() = default;
  // Set before the waiter's last check of its condition, cleared after:
  // an I/O thread that lands a message meanwhile wakes the sleeper.
  virtual void SetOpSleeping(bool sleeping) = 0;
  // Until a data link has input (or room to write what is queued), a wake-up, or `max`.
  virtual void OpSleep(std::chrono::nanoseconds max) = 0;
};

class TcpLink {
 public:
  struct Params {
    uint32_t self = 0;
    uint32_t peer = 0;
    int window = 4;         // slots at each receiver (segments in flight)
    size_t slot_bytes = 0;  // largest data message
    bool carries_data = true;
  };

  // The socket must already be non-blocking.
  TcpLink(const Params& params, std::unique_ptr<FrameSocket> socket, CommSignals& signals);
  ~TcpLink();

  // Set before the engine starts.
  void SetEngineWake(std::function<void()> wake) { engine_wake_ = std::move(wake); }
  void SetEventHook(std::function<void()> hook) { event_hook_ = std::move(hook); }
  void SetOpSleeper(OpSleeper* sleeper) { sleeper_ = sleeper; }

  uint32_t peer() const { return params_.peer; }
  int fd() const { return fd_; }
  bool closed() const { return closed_.load(std::memory_order_acquire); }

  // Data, from the op thread (Transport semantics).
  Result<uint64_t> PostData(const Tag& tag, std::span<const uint8_t> bytes, Deadline deadline);
  Status WaitSent(uint64_t ticket, Deadline deadline);
  uint64_t posted() const { return posted_; }
  Result<std::span<const uint8_t>> ReceiveData(const Tag& tag, size_t bytes, Deadline deadline);
  void ReleaseData();

  // Control, from any thread; never blocks.
  void SendNotice(const std::string& text);
  // Asks the peer where it is; the answer comes to AwaitReply.
  uint64_t SendQuery();
  Result<PeerProgress> AwaitReply(uint64_t generation, Deadline deadline);

  // Teardown: until everything queued has left (or the deadline), then
  // half-close, then until the peer's end of file, so the close that
  // follows never resets data the peer has not read yet.
  void Drain(Deadline deadline);
  void ShutdownWrite();
  void AwaitEof(Deadline deadline);

  // From the op thread's sleep (OpSleeper): the link is read by the op
  // thread now; whether it has queued bytes waiting for POLLOUT.
  void MarkOpReading();
  // The op thread's share of the I/O while it waits: reads what has
  // arrived (unless the I/O thread is reading) and writes what is queued.
  void PollOnce();
  bool carries_data() const { return params_.carries_data; }
  bool WantsWrite() const { return want_write_seen_.load(std::memory_order_acquire); }
  bool AtEof() const { return eof_.load(std::memory_order_acquire); }

  // From the I/O thread.
  short PollEvents();
  // True while the op thread reads this socket itself (it polled within
  // `idle_ns`); after that the duty falls back to the I/O thread.
  bool ReleaseIdleReading(int64_t idle_ns);
  void OnReadable();  // takes the read lock
  void OnWritable();

  // Wakes every wait (Abort, a notice from another peer).
  void WakeWaiters();

 private:
  struct OutData {
    MsgHeader header;
    const uint8_t* data = nullptr;
    size_t bytes = 0;
  };
  enum class Current { kNone, kData, kControl };
  enum class InState { kHeader, kData, kNotice, kReply };

  template <typename Ready>
  Status AwaitOp(Ready ready, Deadline deadline, bool sending);
  void FlushLocked();    // under send_mu_
  void ReadAvailable();  // under read_mu_

 public:
  // The op thread is about to sleep: hand reading back to the I/O thread
  // (CommSignals::BeforeSleep calls it on every link).
  void StopReading();

 private:
  void FlushFromOpThread();  // FlushLocked, then wake the engine if it must watch for POLLOUT
  void MarkClosed(const std::string& why, bool holding_send);
  void ProtocolError(const std::string& what);
  Status InterruptedRecvLocked();  // aborted, poisoned or closed, else ok; recv_mu_ held
  Status InterruptedSendLocked();  // the same with send_mu_ held
  std::string Who() const { return "rank " + std::to_string(params_.peer); }
  void OnHeader();
  void OnPayloadDone();
  void OnReply();  // a reply's payload has arrived

  Params params_;
  std::unique_ptr<FrameSocket> socket_;
  int fd_;
  CommSignals& signals_;
  std::function<void()> engine_wake_;
  std::function<void()> event_hook_;
  OpSleeper* sleeper_ = nullptr;
  std::atomic<bool> closed_{false};
  std::atomic<bool> eof_{false};

  // Send side.
  std::mutex send_mu_;
  std::condition_variable send_cv_;
  std::vector<OutData> out_;  // ring of posted data messages
  size_t out_head_ = 0;
  size_t out_count_ = 0;
  int64_t credits_;
  uint64_t posted_ = 0;  // written by the op thread only
  uint64_t completed_ = 0;
  std::atomic<uint64_t> completed_seen_{0};  // completed_, for polling without the lock
  uint32_t credit_pending_ = 0;
  uint32_t credit_batch_;
  bool query_pending_ = false;
  bool reply_pending_ = false;
  std::deque<std::string> notices_;
  Current current_ = Current::kNone;
  size_t current_done_ = 0;
  std::string control_;                       // the control message being written
  bool want_write_ = false;                   // a write hit EAGAIN: someone must wait for POLLOUT
  std::atomic<bool> want_write_seen_{false};  // want_write_, for polling without the lock
  bool engine_knows_ = false;                 // the I/O thread's poll set includes POLLOUT for us
  bool write_shut_ = false;

  // Receive side: the parse state belongs to whoever holds read_mu_: the
  // I/O thread, or the op thread while it polls in a wait (PollOnce).
  std::mutex read_mu_;
  // Set by the op thread's polling, cleared when it sleeps or, by the I/O
  // thread, once it has not polled for a while (TcpEngine's tick): meanwhile
  // the I/O thread leaves POLLIN to it.
  std::atomic<bool> op_reading_{false};
  std::atomic<int64_t> last_poll_ns_{0};
  InState in_state_ = InState::kHeader;
  MsgHeader in_header_;
  size_t in_done_ = 0;
  uint8_t* in_dst_ = nullptr;
  size_t in_left_ = 0;
  size_t in_slot_ = 0;
  std::string notice_;
  TaskPositionReport in_positions_;  // a reply's payload being read

  std::mutex recv_mu_;
  std::condition_variable recv_cv_;
  std::vector<uint8_t> slots_;
  std::vector<MsgHeader> slot_headers_;
  uint64_t filled_ = 0;
  std::atomic<uint64_t> filled_seen_{0};  // filled_, for polling without the lock
  uint64_t consumed_ = 0;
  PeerProgress reply_;
  uint64_t reply_generation_ = 0;
  std::string close_reason_;
};

}  // namespace sinkrt::device
