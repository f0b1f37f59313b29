// Feeder: the host thread that pushes dataset batches into a device queue
// (MindSpore's DataQueueOp / TDT sender), one way, while the device runs.
//
// It pushes exactly `count` batches starting at global batch `start_batch`,
// continuing through dataset passes without a break (MindSpore sends
// total_batch = (epoch - initial_epoch) x steps and stops). The bounded
// device queue is the backpressure: PushBatch blocks while it is full.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "host/src/model/model_impl.h"
#include "host/src/model/slices.h"
#include "sinkrt/host/dataset.h"
#include "sinkrt/runtime/device_link.h"

namespace sinkrt::host {

struct ProfileSession;

struct FeedPlan {
  uint32_t queue = 0;
  std::vector<ColumnSpec> columns;  // one batch's columns in the queue, per-batch shapes
  std::vector<size_t> source;       // queue column c is dataset column source[c]
  // Dataset batches per queue entry (gradient accumulation's K): an entry
  // holds `columns` of each of them in turn.
  int64_t group = 1;
  int64_t start_batch = 0;        // in dataset batches
  int64_t count = 0;              // queue entries
  int64_t batches_per_epoch = 1;  // entries; data-wait time is accounted per epoch
  // Per column (SEMI_AUTO_PARALLEL): the block of each batch column this
  // rank's queue holds when it is split inside a row; nullopt: all of it.
  std::vector<std::optional<Block>> blocks;
  // Profiling: the session that records each push, and this feeder's rank.
  ProfileSession* profile = nullptr;
  int rank = 0;
  // Build each batch straight into the device's memory (DeviceLink::
  // FillBatch) on the feeder thread, where every dataset column fuses and
  // the source is in memory (dataset/batch_writer.h), no column is cut into
  // blocks and the device
  // lends its memory; otherwise iterate and push. Off: the pipeline as it
  // ran before fusion, unfused, iterated and pushed (benchmarks and tests
  // compare the two).
  bool fuse = true;
};

// Maps the queue's columns to the dataset's by name (CheckDatasetColumns has
// vouched for them).
FeedPlan MakeFeedPlan(const QueueInfo& queue, const Dataset& dataset);

// Checks one dataset batch against the queue's columns; `global_batch` names
// it in errors.
Status CheckBatch(const FeedPlan& plan, const Row& row, int64_t global_batch);

class BatchWriter;

class Feeder {
 public:
  // Creates the dataset iterator here, so that its errors come back before
  // any training, then starts the thread.
  static Result<std::unique_ptr<Feeder>> Start(DeviceLink& device, const Dataset& dataset, FeedPlan plan);
  ~Feeder();

  // Normal end: waits until every batch is pushed; the feeder's status.
  Status Finish();
  // Early end: stops the thread, clears the device queue (which also frees
  // a PushBatch blocked on a full queue), joins, and clears again for a
  // batch pushed between the first clear and the thread seeing the stop.
  // Returns the feeder's own error if it had one before being stopped.
  Status Stop();

  // The first error, once the thread has one (Ok while it is fine).
  Status status() const;
  int64_t pushed() const { return pushed_.load(); }
  // Time the thread spent waiting on the dataset pipeline for the batches
  // of epoch `index` (0-based, relative to start_batch).
  double wait_ms(int64_t index) const;

 private:
  Feeder(DeviceLink& device, const Dataset& dataset, FeedPlan plan, std::unique_ptr<BatchWriter> writer,
         std::unique_ptr<BatchIterator> it);
  void Run();
  // Entries from *next on through FillBatch; false if the device has no
  // FillBatch (then nothing was pushed and the iterator takes over).
  bool RunFilling(int64_t* next);
  void RunIterating(int64_t next);
  // The filler: entry `fill_first_`'s batches written into the slot.
  Status FillEntry(std::span<const std::span<uint8_t>> slot);
  void RecordPush(int64_t begin_ns, int64_t first);
  void Fail(Status st);

  DeviceLink& device_;
  const Dataset dataset_;  // for an iterator made late, after a fill fell back
  const FeedPlan plan_;
  std::unique_ptr<BatchWriter> writer_;
  std::unique_ptr<BatchIterator> it_;
  DeviceLink::BatchFiller filler_;             // made once: a std::function per batch would allocate
  int64_t fill_first_ = 0;                     // the entry's first dataset batch
  int64_t fill_epoch_ = 0;                     // its epoch, for wait_ns_
  Status fill_error_;                          // the pipeline's error in FillEntry, apart from the device's
  std::vector<std::span<uint8_t>> fill_dst_;   // per dataset column
  std::vector<std::atomic<int64_t>> wait_ns_;  // per epoch
  std::atomic<int64_t> pushed_{0};
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  Status status_;
  std::thread thread_;
};

// Stops every feeder (Feeder::Stop); the first of their own errors.
Status StopAll(const std::vector<std::unique_ptr<Feeder>>& feeders);

}  // namespace sinkrt::host
