// Corrupt task streams are refused with a clear error, never a crash. This
// binary also runs under AddressSanitizer + UBSan in CI (scripts/test).
#include <gtest/gtest.h>

#include <random>

#include "device/src/executor.h"
#include "runtime/src/file_io.h"
#include "sinkrt/fb/task_stream_generated.h"
#include "sinkrt/host/compiler.h"
#include "sinkrt/runtime/stream_format.h"
#include "sinkrt/runtime/task_stream_verifier.h"
#include "support/test_models.h"
#include "support/test_util.h"

namespace sinkrt {
namespace {

class CorruptStream : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    host::CompileOptions o;
    o.optimizer = host::OptimizerSpec::Momentum(0.1f, 0.9f);
    auto cs = host::Compile(testing::MakeMlp(4, {12, 8, 3}), o);
    ASSERT_TRUE(cs.ok()) << cs.status().ToString();
    good_ = new std::vector<uint8_t>(cs->stream.bytes());
    auto cnn = host::Compile(testing::MakeLeNet(2), o);
    ASSERT_TRUE(cnn.ok()) << cnn.status().ToString();
    cnn_ = new std::vector<uint8_t>(cnn->stream.bytes());
  }
  static void TearDownTestSuite() {
    delete good_;
    delete cnn_;
  }

  // Verifies and, if that passes, loads on a device; returns the first error.
  static Status VerifyAndLoad(const std::vector<uint8_t>& bytes) {
    SINKRT_ASSIGN_OR_RETURN(VerifiedStream stream, VerifyTaskStream(bytes));
    device::DeviceOptions opts;
    opts.prefault = false;
    auto ex = device::Executor::Load(std::move(stream), opts);
    return ex.status();
  }

  static fb::TaskStream* Mutable(std::vector<uint8_t>& bytes) { return fb::GetMutableTaskStream(bytes.data() + 4); }

  // Calls fn(program index, task) on every task of every program until it
  // returns true; returns whether one did.
  template <typename Fn>
  static bool MutateFirstTask(std::vector<uint8_t>& bytes, Fn&& fn) {
    auto* programs = Mutable(bytes)->mutable_programs();
    for (uint32_t p = 0; p < programs->size(); ++p) {
      auto* tasks = programs->GetMutableObject(p)->mutable_streams()->GetMutableObject(0)->mutable_tasks();
      for (uint32_t t = 0; t < tasks->size(); ++t)
        if (fn(p, tasks->GetMutableObject(t))) return true;
    }
    return false;
  }

  static void ExpectError(const std::vector<uint8_t>& bytes, const std::string& fragment) {
    Status st = VerifyAndLoad(bytes);
    ASSERT_FALSE(st.ok()) << "expected an error containing '" << fragment << "'";
    EXPECT_NE(st.message().find(fragment), std::string::npos) << st.ToString();
  }

  static std::vector<uint8_t>* good_;
  static std::vector<uint8_t>* cnn_;
};
std::vector<uint8_t>* CorruptStream::good_ = nullptr;
std::vector<uint8_t>* CorruptStream::cnn_ = nullptr;

TEST_F(CorruptStream, GoodStreamsLoad) {
  SINKRT_ASSERT_OK(VerifyAndLoad(*good_));
  SINKRT_ASSERT_OK(VerifyAndLoad(*cnn_));
}

TEST_F(CorruptStream, EveryTruncationIsRefused) {
  for (size_t len = 0; len < good_->size(); len += (len < 256 ? 1 : 7)) {
    std::vector<uint8_t> cut(good_->begin(), good_->begin() + len);
    Status st = VerifyAndLoad(cut);
    ASSERT_FALSE(st.ok()) << "truncated to " << len << " bytes was accepted";
    EXPECT_FALSE(st.message().empty());
  }
}

TEST_F(CorruptStream, TruncationMessageSaysTruncated) {
  ExpectError({good_->begin(), good_->begin() + 100}, "truncated");
}

// Found by fuzz/stream_fuzzer: a shape vector whose 8-byte elements sit at a
// 4-byte boundary passes FlatBuffers' Verifier (google/flatbuffers#8397).
TEST_F(CorruptStream, MisalignedShapeVectorIsRefused) {
  auto bytes = ReadFileBytes(SINKRT_SOURCE_DIR "/test/data/streams/misaligned_shape.tstream", kFlatBufferFileLimit);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  ExpectError(*bytes, "not 8-byte aligned");
}

TEST_F(CorruptStream, WrongFileIdentifier) {
  std::vector<uint8_t> bad = *good_;
  std::memcpy(bad.data() + 8, "TFL3", 4);
  ExpectError(bad, "file identifier is 'TFL3', expected 'SKTS'");
}

TEST_F(CorruptStream, FlippedBytesNeverCrash) {
  std::mt19937 rng(1234);
  int refused = 0;
  for (int trial = 0; trial < 400; ++trial) {
    std::vector<uint8_t> bad = *good_;
    int flips = 1 + trial % 4;
    for (int f = 0; f < flips; ++f) bad[rng() % bad.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
    Status st = VerifyAndLoad(bad);
    if (!st.ok()) {
      ++refused;
      EXPECT_FALSE(st.message().empty());
    }
  }
  // Flips in names or float options are legitimately accepted; most are not.
  EXPECT_GT(refused, 100);
}

TEST_F(CorruptStream, BufferOutsideArena) {
  std::vector<uint8_t> bad = *good_;
  auto* root = Mutable(bad);
  auto* b = root->mutable_buffers()->GetMutableObject(root->buffers()->size() - 1);
  ASSERT_TRUE(b->mutate_offset(root->arena_bytes()));
  ExpectError(bad, "outside the arena");
}

TEST_F(CorruptStream, ArenaShrunkUnderItsBuffers) {
  std::vector<uint8_t> bad = *good_;
  auto* root = Mutable(bad);
  ASSERT_TRUE(root->mutate_arena_bytes(root->arena_bytes() / 2));
  ExpectError(bad, "outside the arena");
}

TEST_F(CorruptStream, BytesDisagreeWithShape) {
  std::vector<uint8_t> bad = *good_;
  auto* root = Mutable(bad);
  auto* b = root->mutable_buffers()->GetMutableObject(0);
  ASSERT_TRUE(b->mutate_bytes(b->bytes() + 64));
  ExpectError(bad, "needs");
}

TEST_F(CorruptStream, KernelInputIndexOutOfTable) {
  std::vector<uint8_t> bad = *good_;
  ASSERT_TRUE(MutateFirstTask(bad, [](uint32_t, fb::Task* task) {
    if (task->body_type() != fb::TaskBody::KernelTask) return false;
    auto* k = const_cast<fb::KernelTask*>(task->body_as_KernelTask());
    if (!k->inputs() || k->inputs()->size() == 0) return false;
    k->mutable_inputs()->Mutate(0, 100000);
    return true;
  }));
  ExpectError(bad, "buffer index 100000 is outside the buffer table");
}

TEST_F(CorruptStream, KernelShapeMismatchIsCaughtAtLoad) {
  // Point a MatMul's weight operand at a buffer of the wrong shape: the
  // Verifier cannot know, the kernel's prepare must.
  std::vector<uint8_t> bad = *good_;
  auto view = VerifyTaskStream(bad);
  SINKRT_ASSERT_OK(view);
  const int64_t bias = view->FindBuffer("fc2.bias");
  ASSERT_GE(bias, 0);
  ASSERT_TRUE(MutateFirstTask(bad, [bias](uint32_t, fb::Task* task) {
    if (task->body_type() != fb::TaskBody::KernelTask) return false;
    auto* k = const_cast<fb::KernelTask*>(task->body_as_KernelTask());
    if (k->op() != fb::OpCode::MatMul) return false;
    k->mutable_inputs()->Mutate(1, static_cast<uint32_t>(bias));
    return true;
  }));
  ExpectError(bad, "MatMul");
}

TEST_F(CorruptStream, GetNextQueueOutOfTable) {
  std::vector<uint8_t> bad = *good_;
  // Only a non-default queue index is stored, so this hits the eval queue.
  ASSERT_TRUE(MutateFirstTask(bad, [](uint32_t, fb::Task* task) {
    if (task->body_type() != fb::TaskBody::GetNextTask) return false;
    return const_cast<fb::GetNextTask*>(task->body_as_GetNextTask())->mutate_queue(7);
  }));
  ExpectError(bad, "queue index 7 is outside the queue table");
}

// Format 1.4's accumulators (sunk eval): eval_step lists its metric sums.
// Pointed at a Param, the device would zero trained weights every sink;
// pointed at another Output, the MetricSum's sums would never be zeroed.
TEST_F(CorruptStream, AccumulatorThatIsNotAnOutputIsRefused) {
  std::vector<uint8_t> bad = *good_;
  auto view = VerifyTaskStream(bad);
  SINKRT_ASSERT_OK(view);
  const int64_t weight = view->FindBuffer("fc1.weight");
  ASSERT_GE(weight, 0);
  auto* programs = Mutable(bad)->mutable_programs();
  bool mutated = false;
  for (uint32_t p = 0; p < programs->size(); ++p) {
    auto* prog = programs->GetMutableObject(p);
    if (prog->kind() != fb::ProgramKind::EvalStep) continue;
    ASSERT_TRUE(prog->accumulators() && prog->accumulators()->size() == 1);
    prog->mutable_accumulators()->Mutate(0, static_cast<uint32_t>(weight));
    mutated = true;
  }
  ASSERT_TRUE(mutated);
  ExpectError(bad, "has role Param, an accumulator must be an Output buffer");
}

TEST_F(CorruptStream, MetricSumIntoABufferNeverZeroedIsRefused) {
  std::vector<uint8_t> bad = *good_;
  auto view = VerifyTaskStream(bad);
  SINKRT_ASSERT_OK(view);
  const fb::Program* eval = view->FindProgram(ProgramKind::EvalStep);
  ASSERT_TRUE(eval && eval->reports() && eval->reports()->size() >= 2);
  const uint32_t loss = eval->reports()->Get(0);  // an Output too, but not an accumulator
  auto* programs = Mutable(bad)->mutable_programs();
  for (uint32_t p = 0; p < programs->size(); ++p) {
    auto* prog = programs->GetMutableObject(p);
    if (prog->kind() == fb::ProgramKind::EvalStep) prog->mutable_accumulators()->Mutate(0, loss);
  }
  ExpectError(bad, "MetricSum task 'eval/metric_sum' adds into buffer");
  ExpectError(bad, "not among the program's accumulators");
}

TEST_F(CorruptStream, UnsupportedFormatVersion) {
  std::vector<uint8_t> bad = *good_;
  ASSERT_TRUE(Mutable(bad)->mutable_header()->mutate_format_major(9));
  // Both versions, the stream's and the device's (docs/design/compatibility.md).
  ExpectError(bad, "task stream format 9." + std::to_string(kFormatMinor) + " is not supported (this device reads " +
                       std::to_string(kFormatMajor) + ".x)");
}

TEST_F(CorruptStream, StrayBytesAfterTheFlatBuffer) {
  std::vector<uint8_t> bad = *good_;
  bad.push_back(0);
  ExpectError(bad, "blob section");
}

}  // namespace
}  // namespace sinkrt

namespace sinkrt {
namespace {

// A stream of one buffer [4, 8] whose fb::Slice is built by `slice`: the
// verifier checks it against the buffer's shape (the host reads slices to
// feed, merge and show them).
std::vector<uint8_t> StreamWithSlice(std::vector<int64_t> whole, std::vector<int64_t> offset,
                                     std::vector<int64_t> matrix, std::vector<int> map) {
  flatbuffers::FlatBufferBuilder fbb;
  auto header = fb::CreateHeaderDirect(fbb, kFormatMajor, kFormatMinor, 0, 2, "cpu");
  const std::vector<int64_t> shape = {4, 8};
  auto slice = fb::CreateSliceDirect(fbb, &whole, &offset, &matrix, &map);
  std::vector<flatbuffers::Offset<fb::Buffer>> buffers = {
      fb::CreateBufferDirect(fbb, "w", 0, 4 * 8 * 4, fb::DType::F32, &shape, fb::BufferRole::Param, slice)};
  fb::TaskStreamBuilder root(fbb);
  root.add_header(header);
  root.add_arena_bytes(4096);
  root.add_buffers(fbb.CreateVector(buffers));
  fb::FinishSizePrefixedTaskStreamBuffer(fbb, root.Finish());
  return {fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize()};
}

std::string Refusal(const std::vector<uint8_t>& bytes) {
  auto v = VerifyTaskStream(bytes);
  return v.ok() ? "accepted" : v.status().message();
}

TEST(CorruptSlice, GoodSliceIsAccepted) {
  EXPECT_EQ(Refusal(StreamWithSlice({4, 16}, {0, 8}, {2}, {-1, 0})), "accepted");
}

TEST(CorruptSlice, EachInconsistencyIsNamed) {
  EXPECT_NE(Refusal(StreamWithSlice({4}, {0}, {2}, {-1, 0})).find("global shape of rank 1"), std::string::npos);
  EXPECT_NE(Refusal(StreamWithSlice({4, 16}, {0, 12}, {2}, {-1, 0})).find("dim 1 holds [12, +8) of a global dim of 16"),
            std::string::npos);
  EXPECT_NE(Refusal(StreamWithSlice({4, 16}, {-1, 0}, {2}, {-1, 0})).find("dim 0 holds [-1, +4)"), std::string::npos);
  EXPECT_NE(Refusal(StreamWithSlice({4, 16}, {0, 8}, {0}, {-1, 0})).find("device matrix extent 0"), std::string::npos);
  EXPECT_NE(Refusal(StreamWithSlice({4, 16}, {0, 8}, {2}, {-1, 1})).find("tensor map entry 1 of dim 1 names no axis"),
            std::string::npos);
  EXPECT_NE(Refusal(StreamWithSlice({4, 16}, {0, 8}, {2}, {0})).find("a tensor map of 1 entries for 2 dims"),
            std::string::npos);
}

}  // namespace
}  // namespace sinkrt
