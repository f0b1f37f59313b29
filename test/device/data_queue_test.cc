// DataQueue (device/src/data_queue.h): the bounded ring of batch slots
// between a feeder and GetNext. Capacity, FIFO order across the ring's wrap,
// Clear (drops, returns slots, voids an in-flight push), Close, the GetNext
// timeout, FillNext, the freed-slot callback and the high-water mark.
//
// Waits are bounded; threads meet through futures, never sleeps. Where two
// threads race (a push that may or may not be waiting when Clear runs), the
// test accepts either documented outcome and checks the queue's invariants.
#include <flatbuffers/flatbuffers.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <future>
#include <string>
#include <vector>

#include "device/src/data_queue.h"
#include "sinkrt/fb/task_stream_generated.h"

namespace sinkrt::device {
namespace {

using std::chrono::milliseconds;

// Long enough never to expire in a passing test; a missed wake-up shows as a
// test that hangs until ctest's timeout instead of a flaky failure.
constexpr milliseconds kForever{10 * 60 * 1000};

// A queue "train" of `capacity` slots with columns f32 [2,3] (24 bytes) and
// i32 [2] (8 bytes), plus `extra_columns` u8 [1] columns.
Status InitQueue(DataQueue& q, uint32_t capacity, int extra_columns = 0) {
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<flatbuffers::Offset<fb::QueueColumn>> cols;
  const std::vector<int64_t> image{2, 3}, label{2}, byte{1};
  cols.push_back(fb::CreateQueueColumnDirect(fbb, "image", fb::DType::F32, &image));
  cols.push_back(fb::CreateQueueColumnDirect(fbb, "label", fb::DType::I32, &label));
  for (int i = 0; i < extra_columns; ++i)
    cols.push_back(fb::CreateQueueColumnDirect(fbb, ("extra" + std::to_string(i)).c_str(), fb::DType::U8, &byte));
  fbb.Finish(fb::CreateQueueSpecDirect(fbb, "train", capacity, &cols));
  return q.Init(*flatbuffers::GetRoot<fb::QueueSpec>(fbb.GetBufferPointer()), /*prefault=*/false);
}

// One batch: every column filled with bytes derived from `tag`.
struct Batch {
  std::vector<std::vector<uint8_t>> columns;

  Batch(const DataQueue& q, uint8_t tag) {
    for (size_t c = 0; c < q.column_bytes().size(); ++c) {
      std::vector<uint8_t> col(q.column_bytes()[c]);
      for (size_t i = 0; i < col.size(); ++i) col[i] = static_cast<uint8_t>(tag * 31 + c * 7 + i);
      columns.push_back(std::move(col));
    }
  }
  std::vector<ConstBytes> spans() const { return {columns.begin(), columns.end()}; }
};

Status Push(DataQueue& q, const Batch& b, milliseconds timeout = milliseconds(0)) {
  const std::vector<ConstBytes> spans = b.spans();
  return q.Push(spans, timeout);
}

// Pops one batch and returns its columns (empty on error, with *status set).
std::vector<std::vector<uint8_t>> Pop(DataQueue& q, Status* status, milliseconds timeout = milliseconds(0)) {
  std::vector<std::vector<uint8_t>> out;
  std::vector<uint8_t*> dst;
  for (uint64_t bytes : q.column_bytes()) out.emplace_back(bytes, 0xEE);
  for (auto& c : out) dst.push_back(c.data());
  int64_t waited_ns = 0;
  *status = q.Pop(dst, timeout, &waited_ns);
  if (!status->ok()) out.clear();
  return out;
}

// Pops one batch and expects it to be `want`.
void ExpectPop(DataQueue& q, const Batch& want, const std::string& what) {
  Status st;
  const auto got = Pop(q, &st);
  ASSERT_TRUE(st.ok()) << what << ": " << st.ToString();
  EXPECT_EQ(got, want.columns) << what;
}

void ExpectError(const Status& st, StatusCode code, const std::string& part) {
  ASSERT_FALSE(st.ok()) << "expected an error containing '" << part << "'";
  EXPECT_EQ(st.code(), code) << st.ToString();
  EXPECT_NE(st.message().find(part), std::string::npos) << "'" << part << "' not in: " << st.message();
}

//===--- Shape and capacity ----------------------------------------------------===//

TEST(DataQueue, InitSizesSlotsFromTheColumns) {
  DataQueue q;
  ASSERT_TRUE(InitQueue(q, 4).ok());
  EXPECT_EQ(q.name(), "train");
  EXPECT_EQ(q.capacity(), 4u);
  EXPECT_EQ(q.column_bytes(), (std::vector<uint64_t>{24, 8}));
  EXPECT_EQ(q.batch_bytes(), 128u);  // each column starts 64-byte aligned in its slot
  EXPECT_EQ(q.size(), 0u);
  EXPECT_EQ(q.high_water_mark(), 0u);
}

TEST(DataQueue, PushRejectsAMisshapenBatch) {
  DataQueue q;
  ASSERT_TRUE(InitQueue(q, 2).ok());
  Batch b(q, 1);
  b.columns.pop_back();
  ExpectError(Push(q, b), StatusCode::kInvalidArgument, "queue 'train': batch has 1 columns, expected 2");
  Batch short_col(q, 1);
  short_col.columns[1].resize(7);
  ExpectError(Push(q, short_col), StatusCode::kInvalidArgument, "queue 'train': column 1 has 7 bytes, expected 8");
  EXPECT_EQ(q.size(), 0u);
}

TEST(DataQueue, PushBeyondCapacityWaitsThenTimesOut) {
  DataQueue q;
  ASSERT_TRUE(InitQueue(q, 2).ok());
  ASSERT_TRUE(Push(q, Batch(q, 1)).ok());
  ASSERT_TRUE(Push(q, Batch(q, 2)).ok());
  ExpectError(Push(q, Batch(q, 3), milliseconds(5)), StatusCode::kDeadlineExceeded,
              "queue 'train' stayed full for 5 ms: the device is not consuming batches");
  EXPECT_EQ(q.size(), 2u);
  // The refused batch left nothing behind.
  ExpectPop(q, Batch(q, 1), "first");
  ExpectPop(q, Batch(q, 2), "second");
  EXPECT_EQ(q.size(), 0u);
}

TEST(DataQueue, AWaitingPushProceedsOnceAPopFreesASlot) {
  DataQueue q;
  ASSERT_TRUE(InitQueue(q, 1).ok());
  ASSERT_TRUE(Push(q, Batch(q, 1)).ok());
  const Batch second(q, 2);
  auto pusher = std::async(std::launch::async, [&] { return Push(q, second, kForever); });
  ExpectPop(q, Batch(q, 1), "first");
  const Status pushed = pusher.get();
  ASSERT_TRUE(pushed.ok()) << pushed.ToString();
  ExpectPop(q, second, "second");
}

//===--- Order -----------------------------------------------------------------===//

TEST(DataQueue, PopsInFifoOrderAcrossTheRingsWrap) {
  DataQueue q;
  ASSERT_TRUE(InitQueue(q, 3).ok());
  uint8_t pushed = 0, popped = 0;
  // Two in, one out, until the head and tail have gone round the ring twice.
  for (int round = 0; round < 6; ++round) {
    ASSERT_TRUE(Push(q, Batch(q, pushed++)).ok());
    if (q.size() < q.capacity()) {
      ASSERT_TRUE(Push(q, Batch(q, pushed++)).ok());
    }
    ExpectPop(q, Batch(q, popped++), "round " + std::to_string(round));
  }
  while (popped < pushed) ExpectPop(q, Batch(q, popped++), "drain");
  EXPECT_EQ(q.size(), 0u);
}

TEST(DataQueue, AWaitingPopGetsTheNextPush) {
  DataQueue q;
  ASSERT_TRUE(InitQueue(q, 2).ok());
  auto consumer = std::async(std::launch::async, [&] {
    Status st;
    auto cols = Pop(q, &st, kForever);
    return std::make_pair(st, cols);
  });
  const Batch b(q, 9);
  ASSERT_TRUE(Push(q, b).ok());
  const auto [st, cols] = consumer.get();
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(cols, b.columns);
  EXPECT_EQ(q.size(), 0u);
}

//===--- GetNext timeout ---------------------------------------------------------===//

TEST(DataQueue, PopOnADryQueueTimesOutNamingTheQueue) {
  DataQueue q;
  ASSERT_TRUE(InitQueue(q, 2).ok());
  std::vector<uint8_t> a(24), b(8);
  uint8_t* dst[] = {a.data(), b.data()};
  int64_t waited_ns = 0;
  const Status st = q.Pop(dst, milliseconds(5), &waited_ns);
  ExpectError(st, StatusCode::kDeadlineExceeded,
              "GetNext timed out: queue 'train' (depth 2; batches taken so far: 0) was empty for 5 ms (the host "
              "sent no batch)");
  EXPECT_GT(waited_ns, 0);  // the wait is accounted to GetNext
  // A batch that is there is taken without waiting or accounting.
  ASSERT_TRUE(Push(q, Batch(q, 1)).ok());
  waited_ns = 0;
  ASSERT_TRUE(q.Pop(dst, milliseconds(5), &waited_ns).ok());
  EXPECT_EQ(waited_ns, 0);
  // The next timeout counts the batch taken.
  EXPECT_NE(q.Pop(dst, milliseconds(5), &waited_ns).message().find("(depth 2; batches taken so far: 1)"),
            std::string::npos);
}

//===--- Clear and Close -----------------------------------------------------------===//

TEST(DataQueue, ClearDropsQueuedBatchesAndReturnsTheirSlots) {
  DataQueue q;
  std::vector<uint32_t> freed;
  ASSERT_TRUE(InitQueue(q, 3).ok());
  q.SetOnSlotsFreed([&](uint32_t n) { freed.push_back(n); });
  for (uint8_t i = 0; i < 3; ++i) ASSERT_TRUE(Push(q, Batch(q, i)).ok());
  q.Clear();
  EXPECT_EQ(q.size(), 0u);
  EXPECT_EQ(freed, (std::vector<uint32_t>{3}));  // every dropped slot is a credit back
  // The whole capacity is free again, and nothing from before the clear pops.
  for (uint8_t i = 10; i < 13; ++i) ASSERT_TRUE(Push(q, Batch(q, i)).ok()) << int(i);
  for (uint8_t i = 10; i < 13; ++i) ExpectPop(q, Batch(q, i), "after clear");
  EXPECT_EQ(freed, (std::vector<uint32_t>{3, 1, 1, 1}));  // then one per pop
  q.Clear();                                              // nothing queued: no callback
  EXPECT_EQ(freed.size(), 4u);
}

TEST(DataQueue, ClearDuringAFillVoidsThatBatch) {
  // FillNext's callback runs between taking a slot and publishing it, which
  // is the "copying into a slot when Clear runs" case of Push as well.
  DataQueue q;
  ASSERT_TRUE(InitQueue(q, 2).ok());
  ASSERT_TRUE(Push(q, Batch(q, 1)).ok());
  const Status st = q.FillNext([&](std::span<const std::span<uint8_t>> cols) {
    for (auto c : cols) std::memset(c.data(), 0x5A, c.size());
    q.Clear();
    return Status::Ok();
  });
  ExpectError(st, StatusCode::kAborted, "queue 'train' was cleared");
  EXPECT_EQ(q.size(), 0u);
  // The voided slot is reused cleanly.
  ASSERT_TRUE(Push(q, Batch(q, 2)).ok());
  ExpectPop(q, Batch(q, 2), "after the voided fill");
}

TEST(DataQueue, ClearWakesAPushWaitingForASlot) {
  // Whether the push is already waiting when Clear runs is up to the
  // scheduler: waiting, it returns kAborted and adds nothing; not yet
  // waiting, it lands in the emptied queue. Both keep the queue consistent,
  // and neither may hang.
  for (int attempt = 0; attempt < 20; ++attempt) {
    DataQueue q;
    ASSERT_TRUE(InitQueue(q, 1).ok());
    ASSERT_TRUE(Push(q, Batch(q, 1)).ok());
    const Batch late(q, 2);
    std::promise<void> started;
    auto pusher = std::async(std::launch::async, [&] {
      started.set_value();
      return Push(q, late, kForever);
    });
    started.get_future().wait();
    q.Clear();
    const Status st = pusher.get();
    if (st.ok()) {
      ASSERT_EQ(q.size(), 1u);
      ExpectPop(q, late, "push after the clear");
    } else {
      ExpectError(st, StatusCode::kAborted, "queue 'train' was cleared");
      EXPECT_EQ(q.size(), 0u);
    }
  }
}

TEST(DataQueue, CloseWakesEveryWaiterWithAborted) {
  DataQueue q;
  ASSERT_TRUE(InitQueue(q, 1).ok());
  DataQueue empty;
  ASSERT_TRUE(InitQueue(empty, 1).ok());
  ASSERT_TRUE(Push(q, Batch(q, 1)).ok());
  auto pusher = std::async(std::launch::async, [&] { return Push(q, Batch(q, 2), kForever); });
  auto popper = std::async(std::launch::async, [&] {
    Status st;
    Pop(empty, &st, kForever);
    return st;
  });
  q.Close();
  empty.Close();
  ExpectError(pusher.get(), StatusCode::kAborted, "queue 'train' was closed");
  ExpectError(popper.get(), StatusCode::kAborted, "queue 'train' was closed");
  ExpectError(q.FillNext([](auto) { return Status::Ok(); }), StatusCode::kAborted, "was closed");
}

//===--- FillNext, callback, high water ------------------------------------------===//

TEST(DataQueue, FillNextWritesInPlaceAndNeverWaits) {
  DataQueue q;
  ASSERT_TRUE(InitQueue(q, 2).ok());
  const Batch b(q, 4);
  auto fill_with = [&](const Batch& batch) {
    return [&batch](std::span<const std::span<uint8_t>> cols) {
      EXPECT_EQ(cols.size(), batch.columns.size());
      for (size_t c = 0; c < cols.size(); ++c) {
        EXPECT_EQ(cols[c].size(), batch.columns[c].size());
        EXPECT_EQ(reinterpret_cast<uintptr_t>(cols[c].data()) % 64, 0u) << "column " << c;
        std::memcpy(cols[c].data(), batch.columns[c].data(), cols[c].size());
      }
      return Status::Ok();
    };
  };
  ASSERT_TRUE(q.FillNext(fill_with(b)).ok());
  // A failing fill publishes nothing and returns its error.
  ExpectError(q.FillNext([](auto) { return Unavailable("socket closed mid-batch"); }), StatusCode::kUnavailable,
              "socket closed mid-batch");
  EXPECT_EQ(q.size(), 1u);
  const Batch c(q, 5);
  ASSERT_TRUE(q.FillNext(fill_with(c)).ok());
  // Full: a remote feeder without a credit broke the protocol; no waiting.
  ExpectError(q.FillNext(fill_with(c)), StatusCode::kResourceExhausted,
              "queue 'train' is full (2 slots): a batch was pushed without a free slot");
  ExpectPop(q, b, "first fill");
  ExpectPop(q, c, "second fill");
}

TEST(DataQueue, FillNextHandlesManyColumns) {
  DataQueue q;
  ASSERT_TRUE(InitQueue(q, 1, /*extra_columns=*/20).ok());
  ASSERT_EQ(q.column_bytes().size(), 22u);
  const Batch b(q, 6);
  ASSERT_TRUE(q.FillNext([&](std::span<const std::span<uint8_t>> cols) {
                 if (cols.size() != b.columns.size()) return Internal("wrong column count");
                 for (size_t c = 0; c < cols.size(); ++c)
                   std::memcpy(cols[c].data(), b.columns[c].data(), cols[c].size());
                 return Status::Ok();
               }).ok());
  ExpectPop(q, b, "22 columns");
}

TEST(DataQueue, HighWaterMarkIsTheMostEverQueued) {
  DataQueue q;
  ASSERT_TRUE(InitQueue(q, 4).ok());
  Status st;
  for (uint8_t i = 0; i < 3; ++i) ASSERT_TRUE(Push(q, Batch(q, i)).ok());
  EXPECT_EQ(q.high_water_mark(), 3u);
  Pop(q, &st);
  Pop(q, &st);
  ASSERT_TRUE(Push(q, Batch(q, 3)).ok());
  EXPECT_EQ(q.size(), 2u);
  EXPECT_EQ(q.high_water_mark(), 3u);
  q.Clear();
  EXPECT_EQ(q.high_water_mark(), 3u);  // a clear does not reset it
  for (uint8_t i = 0; i < 4; ++i) ASSERT_TRUE(Push(q, Batch(q, i)).ok());
  EXPECT_EQ(q.high_water_mark(), 4u);
}

}  // namespace
}  // namespace sinkrt::device
