// AllToAllTask end to end: the verifier's checks (each error names the
// task), and hand-built streams loaded by Executors of a world of
// in-process communicators, whose comm streams exchange the blocks on the
// world and on subgroups.
#include <flatbuffers/flatbuffers.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "device/src/executor.h"
#include "sinkrt/device/device_options.h"
#include "sinkrt/fb/task_stream_generated.h"
#include "sinkrt/runtime/dtype.h"
#include "sinkrt/runtime/stream_format.h"
#include "sinkrt/runtime/task_stream_verifier.h"
#include "support/alltoall_stream.h"
#include "support/comm_cluster.h"
#include "support/test_util.h"

namespace sinkrt {
namespace {

constexpr uint64_t kReadAll = kSupportedFeatures | kFeatureCollectives;

using testing::AllToAllStream;
using testing::BufferSpec;

void ExpectRefused(const std::vector<uint8_t>& bytes, const std::string& fragment) {
  auto v = VerifyTaskStream(bytes, kReadAll);
  ASSERT_FALSE(v.ok()) << "expected: " << fragment;
  EXPECT_NE(v.status().message().find(fragment), std::string::npos) << v.status().ToString();
}

// ---- the verifier -----------------------------------------------------------

const std::vector<BufferSpec> kGood = {{"in", DType::F32, {4, 3}}, {"out", DType::F32, {4, 3}}};

TEST(AllToAllTask, AWellFormedTaskVerifies) {
  SINKRT_ASSERT_OK(VerifyTaskStream(AllToAllStream(0, 4, kGood, {{0, 0, 1}}), kReadAll));
  SINKRT_ASSERT_OK(VerifyTaskStream(AllToAllStream(2, 4, kGood, {{1, 0, 1}}), kReadAll));
  // Empty buffers move nothing and are fine.
  SINKRT_ASSERT_OK(VerifyTaskStream(
      AllToAllStream(0, 4, {{"in", DType::F32, {0}}, {"out", DType::F32, {0}}}, {{0, 0, 1}}), kReadAll));
}

TEST(AllToAllTask, GroupMustExistAndHoldThisRank) {
  const std::string task = "program 0 'train_step' stream 1 task 1 'exchange0'";
  ExpectRefused(AllToAllStream(0, 4, kGood, {{5, 0, 1}}),
                task + ": communicator group 5 is outside the group table (3 groups)");
  ExpectRefused(AllToAllStream(0, 4, kGood, {{2, 0, 1}}),
                task + ": this stream's rank 0 is not a member of group 2 'odd'");
}

TEST(AllToAllTask, BuffersMustExist) {
  const std::string task = "program 0 'train_step' stream 1 task 1 'exchange0'";
  ExpectRefused(AllToAllStream(0, 4, kGood, {{0, 7, 1}}),
                task + " input: buffer index 7 is outside the buffer table (2 buffers)");
  ExpectRefused(AllToAllStream(0, 4, kGood, {{0, 0, 9}}),
                task + " output: buffer index 9 is outside the buffer table (2 buffers)");
}

TEST(AllToAllTask, DtypesAndSizesMustMatchAndSplitIntoEqualBlocks) {
  const std::string task = "program 0 'train_step' stream 1 task 1 'exchange0'";
  ExpectRefused(AllToAllStream(0, 4, {{"in", DType::F32, {4, 3}}, {"out", DType::I32, {4, 3}}}, {{0, 0, 1}}),
                task + ": input 'in' is f32, output 'out' i32: an AllToAll works on one dtype");
  ExpectRefused(
      AllToAllStream(0, 4, {{"in", DType::F32, {4, 3}}, {"out", DType::F32, {4, 2}}}, {{0, 0, 1}}),
      task + ": input 'in' of 48 bytes and output 'out' of 32 bytes differ: an AllToAll's buffers are equal in size");
  // 6 elements split into 2 blocks for a pair, not into 4 for the world.
  const std::vector<BufferSpec> six = {{"in", DType::F32, {6}}, {"out", DType::F32, {6}}};
  SINKRT_ASSERT_OK(VerifyTaskStream(AllToAllStream(0, 4, six, {{1, 0, 1}}), kReadAll));
  ExpectRefused(AllToAllStream(0, 4, six, {{0, 0, 1}}),
                task + ": input 'in' of 6 f32 elements does not split into 4 equal blocks for group 0 'world'");
}

TEST(AllToAllTask, InputAndOutputMustNotOverlap) {
  const std::string task = "program 0 'train_step' stream 1 task 1 'exchange0'";
  ExpectRefused(
      AllToAllStream(0, 4, kGood, {{0, 0, 0}}),
      task + ": input 'in' and output 'in' overlap in the arena: an AllToAll reads one while it writes the other");
  ExpectRefused(AllToAllStream(0, 4, kGood, {{0, 0, 1}}, /*alias=*/true),
                task + ": input 'in' and output 'out' overlap");
}

TEST(AllToAllTask, NeedsTheCollectivesBit) {
  ExpectRefused(AllToAllStream(0, 4, kGood, {{0, 0, 1}}, false, /*requirements=*/0),
                "a AllToAllTask task in a stream whose header does not require collectives");
  auto v = VerifyTaskStream(AllToAllStream(0, 4, kGood, {{0, 0, 1}}),
                            /*supported_features=*/kSupportedFeatures & ~kFeatureCollectives);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kUnimplemented) << v.status().ToString();
}

// ---- the device -------------------------------------------------------------

// Exact in f32 (below 2^24) and distinct for every (src, dst, k < 10^5).
float Value(uint32_t src, uint32_t dst, size_t k) { return static_cast<float>(src * 1000000 + dst * 100000 + k); }

// Four ranks, each an Executor over its own Communicator (shared memory and
// TCP): the comm stream runs a world exchange, then one inside the rank's
// pair ({0,2} or {1,3}), with blocks of several segments.
TEST(AllToAllTask, TheCommStreamExchangesOnTheWorldAndOnSubgroups) {
  for (bool shm : {true, false}) {
    SCOPED_TRACE(shm ? "shm" : "tcp");
    device::CommOptions o;
    o.peer_timeout = std::chrono::seconds(10);
    o.segment_bytes = 4096;
    o.use_shared_memory = shm;
    testing::Cluster c(4, o);
    ASSERT_TRUE(c.ok()) << c.create_status(0).ToString();
    constexpr size_t kBlock = 2501;  // f32 elements: ~2.4 segments of 4 KiB
    const std::vector<BufferSpec> buffers = {{"in", DType::F32, {4 * kBlock}},
                                             {"out", DType::F32, {4 * kBlock}},
                                             {"pair_in", DType::F32, {2 * kBlock}},
                                             {"pair_out", DType::F32, {2 * kBlock}}};
    device::DeviceOptions d;
    d.threads = 1;
    d.peer_timeout = o.peer_timeout;
    std::vector<std::unique_ptr<device::Executor>> ex(4);
    std::vector<Status> st(4);
    testing::OnEachRank(4, [&](uint32_t r) {
      const uint32_t pair = 1 + r % 2;
      auto v = VerifyTaskStream(AllToAllStream(r, 4, buffers, {{0, 0, 1}, {pair, 2, 3}}), kReadAll);
      if (!v.ok()) {
        st[r] = v.status();
        return;
      }
      auto loaded = device::Executor::Load(std::move(v).value(), d, &c[r]);
      if (!loaded.ok()) {
        st[r] = loaded.status();
        return;
      }
      ex[r] = std::move(loaded).value();
      const uint32_t members[2] = {r % 2, r % 2 + 2};
      auto in = ex[r]->Buffer(0);
      auto pair_in = ex[r]->Buffer(2);
      if (!in.ok() || !pair_in.ok()) {
        st[r] = in.ok() ? pair_in.status() : in.status();
        return;
      }
      float* w = reinterpret_cast<float*>(in->data());
      for (uint32_t j = 0; j < 4; ++j)
        for (size_t k = 0; k < kBlock; ++k) w[j * kBlock + k] = Value(r, j, k);
      float* p = reinterpret_cast<float*>(pair_in->data());
      for (uint32_t j = 0; j < 2; ++j)
        for (size_t k = 0; k < kBlock; ++k) p[j * kBlock + k] = -Value(r, members[j], k);
      device::RunStats stats;
      st[r] = ex[r]->Run(ProgramKind::TrainStep, 1, &stats);
    });
    for (uint32_t r = 0; r < 4; ++r) {
      SCOPED_TRACE("rank " + std::to_string(r));
      ASSERT_TRUE(st[r].ok()) << st[r].ToString();
      const uint32_t members[2] = {r % 2, r % 2 + 2};
      auto out = ex[r]->Buffer(1);
      auto pair_out = ex[r]->Buffer(3);
      ASSERT_TRUE(out.ok() && pair_out.ok());
      const float* w = reinterpret_cast<const float*>(out->data());
      const float* p = reinterpret_cast<const float*>(pair_out->data());
      size_t wrong = 0;
      for (uint32_t i = 0; i < 4; ++i)
        for (size_t k = 0; k < kBlock; ++k) wrong += w[i * kBlock + k] != Value(i, r, k);
      for (uint32_t i = 0; i < 2; ++i)
        for (size_t k = 0; k < kBlock; ++k) wrong += p[i * kBlock + k] != -Value(members[i], r, k);
      EXPECT_EQ(wrong, 0u);
    }
  }
}

}  // namespace
}  // namespace sinkrt
