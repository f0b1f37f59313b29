// Blocked (fused) ReduceScatter and AllGather: the communicator's calls
// against the unfused ones (bitwise), the verifier's refusals of the
// inputs/outputs lists, and a hand-built stream run by Executors of a
// world of in-process communicators.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "device/src/comm/communicator.h"
#include "device/src/executor.h"
#include "sinkrt/device/device_options.h"
#include "sinkrt/runtime/dtype.h"
#include "sinkrt/runtime/stream_format.h"
#include "sinkrt/runtime/task_stream_verifier.h"
#include "support/blocked_stream.h"
#include "support/comm_cluster.h"
#include "support/str_cat.h"
#include "support/test_util.h"

namespace sinkrt {
namespace {

using device::ReduceOp;
using testing::BlockedBuffer;
using testing::BlockedStream;
using testing::BlockedTask;
using testing::Cat;
using testing::Cluster;
using testing::OnEachRank;

device::CommOptions TestOptions(bool shm) {
  device::CommOptions o;
  o.peer_timeout = std::chrono::seconds(10);
  o.segment_bytes = 4096;  // many segments per chunk: the fused and unfused rings cut them differently
  o.use_shared_memory = shm;
  return o;
}

// f32 values whose sums round: the order of every addition shows in the bits.
std::vector<uint8_t> RandomF32(size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> real(-1.0f, 1.0f);
  std::vector<uint8_t> out(count * 4);
  for (size_t i = 0; i < count; ++i) {
    const float v = real(rng) * static_cast<float>(1 + i % 97);
    std::memcpy(out.data() + i * 4, &v, 4);
  }
  return out;
}

// Elements per member of each bucket's buffers: different sizes, one below
// a segment, one of several segments, one odd.
const std::vector<size_t> kBlocks = {3, 2500, 517};

// ---- the communicator -------------------------------------------------------

// For n members, Sum and Mean: the blocked call over kBlocks gives, for
// every buffer, the bytes the unfused ReduceScatter of that buffer alone
// gives. Buffer 1's output is its own input's block (in place).
void CheckReduceScatter(uint32_t n, bool shm) {
  Cluster c(n, TestOptions(shm));
  ASSERT_TRUE(c.ok()) << c.create_status(0).ToString();
  const device::Group world = device::Group::World(n);
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean}) {
    SCOPED_TRACE(op == ReduceOp::Sum ? "Sum" : "Mean");
    std::vector<Status> st(n);
    std::vector<size_t> wrong(n, 0);
    OnEachRank(n, [&](uint32_t r) {
      std::vector<std::vector<uint8_t>> in, fused(kBlocks.size()), alone(kBlocks.size());
      for (size_t i = 0; i < kBlocks.size(); ++i) in.push_back(RandomF32(kBlocks[i] * n, r * 100 + i));
      const std::vector<std::vector<uint8_t>> original = in;
      for (size_t i = 0; i < kBlocks.size(); ++i) {
        alone[i].resize(kBlocks[i] * 4);
        fused[i].resize(kBlocks[i] * 4);
      }
      std::vector<std::span<const uint8_t>> ins;
      std::vector<std::span<uint8_t>> outs;
      for (size_t i = 0; i < kBlocks.size(); ++i) {
        ins.emplace_back(in[i]);
        outs.emplace_back(i == 1 ? std::span<uint8_t>(in[i]).subspan(r * kBlocks[i] * 4, kBlocks[i] * 4)
                                 : std::span<uint8_t>(fused[i]));
      }
      st[r] = c[r].ReduceScatterBlocked(ins, outs, DType::F32, op, world);
      if (!st[r].ok()) return;
      for (size_t i = 0; i < kBlocks.size() && st[r].ok(); ++i)
        st[r] = c[r].ReduceScatter(original[i], alone[i], DType::F32, op, world);
      if (!st[r].ok()) return;
      for (size_t i = 0; i < kBlocks.size(); ++i)
        wrong[r] += std::memcmp(outs[i].data(), alone[i].data(), alone[i].size()) != 0;
    });
    for (uint32_t r = 0; r < n; ++r) {
      SCOPED_TRACE("rank " + std::to_string(r));
      SINKRT_ASSERT_OK(st[r]);
      EXPECT_EQ(wrong[r], 0u) << "buffers whose blocked result differs from the unfused one";
    }
  }
}

TEST(ReduceScatterBlocked, BitwiseAsUnfusedOnTwoMembers) { CheckReduceScatter(2, /*shm=*/true); }
TEST(ReduceScatterBlocked, BitwiseAsUnfusedOnFourMembers) { CheckReduceScatter(4, /*shm=*/true); }
TEST(ReduceScatterBlocked, BitwiseAsUnfusedOnFourMembersOverTcp) { CheckReduceScatter(4, /*shm=*/false); }

// In place (buffer 0 and 2: the input is the output's block) and out of
// place (buffer 1): every block of every output ends as its member's bytes.
void CheckAllGather(uint32_t n) {
  Cluster c(n, TestOptions(true));
  ASSERT_TRUE(c.ok()) << c.create_status(0).ToString();
  const device::Group world = device::Group::World(n);
  std::vector<Status> st(n);
  std::vector<size_t> wrong(n, 0);
  auto block_of = [](uint32_t member, size_t i) { return RandomF32(kBlocks[i], 1000 + member * 10 + i); };
  OnEachRank(n, [&](uint32_t r) {
    std::vector<std::vector<uint8_t>> out, separate;
    std::vector<std::span<const uint8_t>> ins;
    std::vector<std::span<uint8_t>> outs;
    for (size_t i = 0; i < kBlocks.size(); ++i) {
      const size_t block = kBlocks[i] * 4;
      out.emplace_back(block * n, uint8_t{0xAB});
      separate.push_back(block_of(r, i));
    }
    for (size_t i = 0; i < kBlocks.size(); ++i) {
      const size_t block = kBlocks[i] * 4;
      std::span<uint8_t> mine = std::span<uint8_t>(out[i]).subspan(r * block, block);
      if (i != 1) std::memcpy(mine.data(), separate[i].data(), block);
      ins.emplace_back(i != 1 ? std::span<const uint8_t>(mine) : std::span<const uint8_t>(separate[i]));
      outs.emplace_back(out[i]);
    }
    st[r] = c[r].AllGatherBlocked(ins, outs, world);
    if (!st[r].ok()) return;
    for (size_t i = 0; i < kBlocks.size(); ++i)
      for (uint32_t m = 0; m < n; ++m) {
        const std::vector<uint8_t> expected = block_of(m, i);
        wrong[r] += std::memcmp(out[i].data() + m * expected.size(), expected.data(), expected.size()) != 0;
      }
  });
  for (uint32_t r = 0; r < n; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    SINKRT_ASSERT_OK(st[r]);
    EXPECT_EQ(wrong[r], 0u) << "blocks that did not arrive";
  }
}

TEST(AllGatherBlocked, InPlaceAndOutOfPlaceOnTwoMembers) { CheckAllGather(2); }
TEST(AllGatherBlocked, InPlaceAndOutOfPlaceOnFourMembers) { CheckAllGather(4); }

// One member: the blocked calls are copies (and Mean divides by one).
TEST(BlockedCollectives, OneMemberCopies) {
  Cluster c(1, TestOptions(true));
  ASSERT_TRUE(c.ok()) << c.create_status(0).ToString();
  const device::Group world = device::Group::World(1);
  std::vector<uint8_t> a = RandomF32(5, 1), b = RandomF32(7, 2), a_out(20), b_out(28);
  const std::vector<std::span<const uint8_t>> ins = {a, b};
  const std::vector<std::span<uint8_t>> outs = {a_out, b_out};
  SINKRT_ASSERT_OK(c[0].ReduceScatterBlocked(ins, outs, DType::F32, ReduceOp::Mean, world));
  EXPECT_EQ(a_out, a);
  EXPECT_EQ(b_out, b);
  std::fill(a_out.begin(), a_out.end(), 0);
  std::fill(b_out.begin(), b_out.end(), 0);
  SINKRT_ASSERT_OK(c[0].AllGatherBlocked(ins, outs, world));
  EXPECT_EQ(a_out, a);
  EXPECT_EQ(b_out, b);
}

TEST(BlockedCollectives, MismatchedListsAreRefusedBeforeAnyMessage) {
  Cluster c(1, TestOptions(true));
  ASSERT_TRUE(c.ok()) << c.create_status(0).ToString();
  const device::Group world = device::Group::World(1);
  std::vector<uint8_t> a(8), b(12);
  const std::vector<std::span<const uint8_t>> one = {a}, two = {a, b};
  const std::vector<std::span<uint8_t>> outs = {a, b};
  Status st = c[0].ReduceScatterBlocked(one, outs, DType::F32, ReduceOp::Sum, world);
  EXPECT_NE(st.message().find("ReduceScatterBlocked: 1 inputs for 2 outputs"), std::string::npos) << st.ToString();
  const std::vector<std::span<uint8_t>> short_out = {std::span<uint8_t>(a), std::span<uint8_t>(b).first(8)};
  st = c[0].AllGatherBlocked(two, short_out, world);
  EXPECT_NE(st.message().find("AllGatherBlocked: output 1 of 8 bytes for 1 members of 12 bytes"), std::string::npos)
      << st.ToString();
  // An argument error breaks nothing: the next call runs.
  SINKRT_ASSERT_OK(c[0].AllGatherBlocked(two, outs, world));
}

// ---- the verifier -----------------------------------------------------------

constexpr uint64_t kReadAll = kSupportedFeatures;
const std::string kTask = "program 0 'train_step' stream 1 task 1 'bucket0'";

void ExpectRefused(const std::vector<uint8_t>& bytes, const std::string& fragment) {
  auto v = VerifyTaskStream(bytes, kReadAll);
  ASSERT_FALSE(v.ok()) << "expected: " << fragment;
  EXPECT_NE(v.status().message().find(fragment), std::string::npos) << v.status().ToString();
}

// Two buckets' buffers for 4 members: gradients g0 (4x3) and g1 (4x5),
// their shards s0 (3) and s1 (5), and an i32 shard.
const std::vector<BlockedBuffer> kBuffers = {{"g0", DType::F32, {4, 3}}, {"g1", DType::F32, {4, 5}},
                                             {"s0", DType::F32, {3}},    {"s1", DType::F32, {5}},
                                             {"i", DType::I32, {5}},     {"gi", DType::I32, {4, 5}}};

TEST(BlockedVerifier, WellFormedTasksVerify) {
  SINKRT_ASSERT_OK(VerifyTaskStream(
      BlockedStream(1, 4, kBuffers, {{true, 0, fb::ReduceOp::Mean, {0, 1}, {2, 3}}, {false, 0, {}, {2, 3}, {0, 1}}}),
      kReadAll));
  // AllGather moves bytes: one dtype per pair is enough.
  SINKRT_ASSERT_OK(VerifyTaskStream(BlockedStream(0, 4, kBuffers, {{false, 0, {}, {2, 4}, {0, 5}}}), kReadAll));
}

TEST(BlockedVerifier, ListsMustPairUp) {
  ExpectRefused(BlockedStream(0, 4, kBuffers, {{true, 0, {}, {0, 1}, {2}}}),
                kTask + ": 2 inputs and 1 outputs: a blocked ReduceScatter pairs every input with one output");
  ExpectRefused(BlockedStream(0, 4, kBuffers, {{false, 0, {}, {2}, {}}}),
                kTask + ": 1 inputs and 0 outputs: a blocked AllGather pairs every input with one output");
}

TEST(BlockedVerifier, BuffersMustExist) {
  ExpectRefused(BlockedStream(0, 4, kBuffers, {{true, 0, {}, {0, 9}, {2, 3}}}),
                kTask + " input 1: buffer index 9 is outside the buffer table (6 buffers)");
  ExpectRefused(BlockedStream(0, 4, kBuffers, {{false, 0, {}, {2, 3}, {0, 7}}}),
                kTask + " output 1: buffer index 7 is outside the buffer table (6 buffers)");
}

TEST(BlockedVerifier, SizesMustBeMembersBlocks) {
  // s0 is not a quarter of g1.
  ExpectRefused(BlockedStream(0, 4, kBuffers, {{true, 0, {}, {0, 1}, {2, 2}}}),
                kTask + ": input 1 'g1' of 80 bytes is not 4 x output 1 's0' of 12 bytes");
  ExpectRefused(BlockedStream(0, 4, kBuffers, {{false, 0, {}, {3}, {0}}}),
                kTask + ": output 0 'g0' of 48 bytes is not 4 x input 0 's1' of 20 bytes");
  // 5 elements do not split into 4 blocks.
  ExpectRefused(BlockedStream(0, 4, kBuffers, {{true, 0, {}, {3}, {3}}}),
                kTask + ": input 0 's1' of 5 f32 elements does not split into 4 equal blocks for group 0 'world'");
}

TEST(BlockedVerifier, OneDtype) {
  ExpectRefused(BlockedStream(0, 4, kBuffers, {{true, 0, {}, {0}, {4}}}),
                kTask + ": input 0 'g0' is f32, output 0 'i' i32: a blocked ReduceScatter works on one dtype");
  ExpectRefused(BlockedStream(0, 4, kBuffers, {{true, 0, {}, {0, 5}, {2, 4}}}),
                kTask +
                    ": input 1 'gi' is i32, output 1 'i' i32, input 0 'g0' f32: a blocked ReduceScatter works "
                    "on one dtype");
  ExpectRefused(BlockedStream(0, 4, kBuffers, {{false, 0, {}, {4}, {1}}}),
                kTask + ": input 0 'i' is i32, output 0 'g1' f32: a blocked AllGather works on one dtype per pair");
}

TEST(BlockedVerifier, NeedsTheBlockedCollectivesBit) {
  ExpectRefused(BlockedStream(0, 4, kBuffers, {{true, 0, {}, {0}, {2}}}, kFeatureCollectives),
                kTask +
                    ": a blocked ReduceScatter (inputs/outputs lists) in a stream whose header does not require "
                    "blocked collectives");
  ExpectRefused(BlockedStream(0, 4, kBuffers, {{false, 0, {}, {2}, {0}}}, kFeatureCollectives),
                kTask + ": a blocked AllGather (inputs/outputs lists)");
  // The single-buffer form (empty lists) needs no new bit.
  SINKRT_ASSERT_OK(
      VerifyTaskStream(BlockedStream(0, 4, kBuffers, {{true, 0, {}, {}, {}}}, kFeatureCollectives), kReadAll));
  // A device without the bit refuses the stream outright.
  auto v = VerifyTaskStream(BlockedStream(0, 4, kBuffers, {{true, 0, {}, {0}, {2}}}),
                            kSupportedFeatures & ~kFeatureBlockedCollectives);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kUnimplemented) << v.status().ToString();
}

// ---- the device -------------------------------------------------------------

// Two ranks, each an Executor over its own Communicator: the comm stream
// reduces three gradients (Mean) into shards that are views of their own
// blocks, then gathers the shards into three parameters. Values are exact
// in f32, so every rank's parameters must equal the mean exactly.
TEST(BlockedCollectives, AStreamReducesScattersAndGathersOnTwoDevices) {
  constexpr uint32_t kN = 2;
  Cluster c(kN, TestOptions(true));
  ASSERT_TRUE(c.ok()) << c.create_status(0).ToString();
  const std::vector<int64_t> block = {16, 1040, 48};  // f32 elements per member: 64-byte aligned views
  device::DeviceOptions d;
  d.threads = 1;
  d.peer_timeout = std::chrono::seconds(10);
  auto value = [](uint32_t rank, size_t i, size_t k) { return static_cast<float>(rank * 100000 + i * 10000 + k); };
  std::vector<std::unique_ptr<device::Executor>> ex(kN);
  std::vector<Status> st(kN);
  OnEachRank(kN, [&](uint32_t r) {
    // 0..2 gradients, 3..5 their shards (views of block r), 6..8 parameters.
    std::vector<BlockedBuffer> buffers;
    for (size_t i = 0; i < 3; ++i) buffers.push_back({Cat("g", std::to_string(i)), DType::F32, {kN * block[i]}});
    for (size_t i = 0; i < 3; ++i)
      buffers.push_back({Cat("s", std::to_string(i)),
                         DType::F32,
                         {block[i]},
                         static_cast<int32_t>(i),
                         static_cast<uint64_t>(r * block[i] * 4)});
    for (size_t i = 0; i < 3; ++i) buffers.push_back({Cat("p", std::to_string(i)), DType::F32, {kN * block[i]}});
    const std::vector<BlockedTask> tasks = {{true, 0, fb::ReduceOp::Mean, {0, 1, 2}, {3, 4, 5}},
                                            {false, 0, {}, {3, 4, 5}, {6, 7, 8}}};
    auto v = VerifyTaskStream(BlockedStream(r, kN, buffers, tasks), kReadAll);
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
    for (uint32_t i = 0; i < 3; ++i) {
      auto g = ex[r]->Buffer(i);
      if (!g.ok()) {
        st[r] = g.status();
        return;
      }
      float* w = reinterpret_cast<float*>(g->data());
      for (int64_t k = 0; k < kN * block[i]; ++k) w[k] = value(r, i, k);
    }
    device::RunStats stats;
    st[r] = ex[r]->Run(ProgramKind::TrainStep, 1, &stats);
  });
  for (uint32_t r = 0; r < kN; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    SINKRT_ASSERT_OK(st[r]);
    size_t wrong = 0;
    for (uint32_t i = 0; i < 3; ++i) {
      auto p = ex[r]->Buffer(6 + i);
      ASSERT_TRUE(p.ok()) << p.status().ToString();
      const float* w = reinterpret_cast<const float*>(p->data());
      for (int64_t k = 0; k < kN * block[i]; ++k) wrong += w[k] != (value(0, i, k) + value(1, i, k)) / 2;
    }
    EXPECT_EQ(wrong, 0u);
  }
}

}  // namespace
}  // namespace sinkrt
