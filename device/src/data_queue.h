// DataQueue: a bounded ring of pre-allocated batch slots between a feeder
// (PushBatch) and the GetNext task.
//
// Slots are allocated and pre-faulted at load; pushing and popping copy into
// and out of them and never allocate. One producer and one consumer may run
// at once: the producer copies into a slot the consumer cannot see yet, the
// consumer copies out of a slot the producer cannot reuse yet, and the lock
// is held only to move the indices.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "device/src/arena.h"
#include "sinkrt/fb/task_stream_generated.h"
#include "sinkrt/runtime/device_link.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::device {

class WorkerTeam;

class DataQueue {
 public:
  Status Init(const fb::QueueSpec& spec, bool prefault);

  // Copies one batch in; waits up to `timeout` for a free slot.
  Status Push(std::span<const ConstBytes> columns, std::chrono::milliseconds timeout);

  // Fills the next free slot in place, without waiting: `fill` gets the
  // slot's column spans (in column order) and writes them, e.g. straight
  // from a socket. A full queue is kResourceExhausted: a remote feeder
  // holding a credit per free slot can never find it full. The slot is
  // published only if `fill` succeeds.
  Status FillNext(const std::function<Status(std::span<const std::span<uint8_t>> columns)>& fill);

  // Called (outside the queue's lock) with the number of slots that became
  // free: 1 after each Pop, the dropped count after Clear. The daemon turns
  // it into Credit frames. Set before any producer or consumer runs.
  void SetOnSlotsFreed(std::function<void(uint32_t)> callback) { on_freed_ = std::move(callback); }

  // Copies the oldest batch out, column c into dst[c]; waits up to `timeout`
  // for one to arrive. Adds the time spent waiting to *waited_ns. With a
  // `team`, a large column's copy is split across it (a memory-bound copy
  // goes faster from two cores).
  Status Pop(std::span<uint8_t* const> dst, std::chrono::milliseconds timeout, int64_t* waited_ns,
             WorkerTeam* team = nullptr);

  // Drops every queued batch. A Push waiting for a free slot, or copying
  // into one, when Clear runs returns kAborted and leaves nothing behind, so
  // a feeder being stopped cannot slip one batch in after the clear. Meant
  // for when no consumer runs; a Pop copying out during a Clear still
  // finishes without disturbing the counts.
  void Clear();

  // Wakes every waiter with an error (job unloaded or aborted).
  void Close();

  const std::string& name() const { return name_; }
  uint32_t capacity() const { return capacity_; }
  uint32_t size() const;
  uint32_t high_water_mark() const;  // most slots ever filled at once
  uint64_t batch_bytes() const { return slot_bytes_; }
  const std::vector<uint64_t>& column_bytes() const { return column_bytes_; }

 private:
  // Makes the slot at tail_ visible to Pop, unless a Clear came in between.
  Status Publish(uint64_t generation);

  std::string name_;
  uint32_t capacity_ = 0;
  std::vector<uint64_t> column_bytes_;
  uint64_t slot_bytes_ = 0;
  PageBlock slots_;

  std::mutex push_mu_;  // serialises producers
  mutable std::mutex mu_;
  std::condition_variable not_full_, not_empty_;
  uint32_t head_ = 0;   // next slot to pop
  uint32_t tail_ = 0;   // next slot to fill
  uint32_t count_ = 0;  // filled slots
  uint32_t high_water_ = 0;
  uint64_t popped_ = 0;      // batches taken since load (GetNext's timeout names it)
  uint64_t generation_ = 0;  // bumped by Clear: in-flight pushes and pops are void
  bool closed_ = false;
  std::function<void(uint32_t)> on_freed_;
};

}  // namespace sinkrt::device
