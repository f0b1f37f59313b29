// TcpLink: one peer connection after rendezvous, driven by non-blocking I/O.
//
// Both the op thread and the communicator's I/O thread (TcpEngine) write to
// the socket, one at a time under the send lock: a post writes at once when
// the socket has room, and whatever is left (EAGAIN, or no credit) is
// finished by the I/O thread when the socket drains or credit arrives. So
// a send never blocks its caller and a ring where every rank sends before
// it receives cannot deadlock. Only the I/O thread reads: it lands each data
// segment in one of the `window` slots the receiver pre-posted, and handles
// credits, failure notices and stall queries whatever the op thread does.
//
// Flow control is credit-based, not a handshake per message: the sender
// starts with `window` credits (the receiver's slots) and spends one per
// data message; the receiver returns them in batches of window/2 as it
// releases slots. A sender therefore always holds at least one credit once
// the receiver has caught up, and never overruns a slot.
//
// Links to shm peers carry no data: they exist for the notices, queries and
// end-of-file that tell a rank its neighbour died.
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

#include "comm_signals.h"
#include "comm_wire.h"
#include "sinkrt/runtime/wire_socket.h"
#include "transport.h"

namespace sinkrt::device {

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

  // From the I/O thread.
  short PollEvents();
  void OnReadable();
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
  enum class InState { kHeader, kData, kNotice };

  void FlushLocked();        // under send_mu_
  void FlushFromOpThread();  // FlushLocked, then wake the engine if it must watch for POLLOUT
  void MarkClosed(const std::string& why, bool holding_send);
  void ProtocolError(const std::string& what);
  Status InterruptedRecvLocked();  // aborted, poisoned or closed, else ok; recv_mu_ held
  Status InterruptedSendLocked();  // the same with send_mu_ held
  std::string Who() const { return "rank " + std::to_string(params_.peer); }
  void OnHeader();
  void OnPayloadDone();

  Params params_;
  std::unique_ptr<FrameSocket> socket_;
  int fd_;
  CommSignals& signals_;
  std::function<void()> engine_wake_;
  std::function<void()> event_hook_;
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
  uint32_t credit_pending_ = 0;
  uint32_t credit_batch_;
  bool query_pending_ = false;
  bool reply_pending_ = false;
  std::deque<std::string> notices_;
  Current current_ = Current::kNone;
  size_t current_done_ = 0;
  std::string control_;        // the control message being written
  bool want_write_ = false;    // a write hit EAGAIN: someone must wait for POLLOUT
  bool engine_knows_ = false;  // the I/O thread's poll set includes POLLOUT for us
  bool write_shut_ = false;

  // Receive side: parse state belongs to the I/O thread.
  InState in_state_ = InState::kHeader;
  MsgHeader in_header_;
  size_t in_done_ = 0;
  uint8_t* in_dst_ = nullptr;
  size_t in_left_ = 0;
  size_t in_slot_ = 0;
  std::string notice_;

  std::mutex recv_mu_;
  std::condition_variable recv_cv_;
  std::vector<uint8_t> slots_;
  std::vector<MsgHeader> slot_headers_;
  uint64_t filled_ = 0;
  uint64_t consumed_ = 0;
  PeerProgress reply_;
  uint64_t reply_generation_ = 0;
  std::string close_reason_;
};

}  // namespace sinkrt::device
