// Views (docs/design/compiler.md "Views"): Reshapes and axis-0 Splits and Concats
// that share their input's bytes instead of copying them. Each compiled case
// checks the stream (which copy tasks are gone, which buffers share offsets)
// and the values one device step computes through it; the planner cases
// check how a view group is placed and counted.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "host/src/compiler/memory_planner.h"
#include "host/src/util/schema_enums.h"
#include "sinkrt/device/in_process_device.h"
#include "sinkrt/fb/task_stream_generated.h"
#include "sinkrt/host/compiler.h"
#include "sinkrt/runtime/task_stream_verifier.h"

namespace sinkrt {
namespace {

using host::CompiledStream;
using host::Graph;
using host::InitSpec;
using host::TensorId;

// Values with distinct, exactly representable products: k/8 for k in [-7, 8].
std::vector<float> Values(int64_t n, int salt) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>((i * 5 + salt) % 16 - 7) / 8.0f;
  return v;
}

CompiledStream CompileSgd(const Graph& g, float learning_rate) {
  host::CompileOptions o;
  o.optimizer = host::OptimizerSpec::Sgd(learning_rate);
  o.eval_program = false;
  auto cs = host::Compile(g, o);
  EXPECT_TRUE(cs.ok()) << cs.status().ToString();
  return std::move(cs).value();
}

int CountKernels(const VerifiedStream& v, OpCode op) {
  int n = 0;
  for (const fb::Task* t : *v.FindProgram(ProgramKind::TrainStep)->streams()->Get(0)->tasks())
    if (t->body_type() == fb::TaskBody::KernelTask && FromFb(t->body_as_KernelTask()->op()) == op) ++n;
  return n;
}

const fb::Buffer* BufferOf(const VerifiedStream& v, const Graph& g, TensorId t) {
  const int64_t i = v.FindBuffer(g.tensor(t).name);
  EXPECT_GE(i, 0) << "no buffer for '" << g.tensor(t).name << "'";
  return i < 0 ? nullptr : v.root()->buffers()->Get(static_cast<uint32_t>(i));
}

const host::PlannedBuffer* Planned(const CompiledStream& cs, const std::string& name) {
  for (const host::PlannedBuffer& b : cs.report.buffers)
    if (b.name == name) return &b;
  return nullptr;
}

// One device running a compiled stream without inputs.
struct DeviceRun {
  explicit DeviceRun(const CompiledStream& cs) : dev(Options()) {
    auto loaded = dev.Load(cs.stream);
    EXPECT_TRUE(loaded.ok()) << loaded.status().ToString();
  }
  static device::DeviceOptions Options() {
    device::DeviceOptions o;
    o.threads = 1;
    o.prefault = false;
    o.get_next_timeout = std::chrono::seconds(10);
    return o;
  }
  double Step() {
    auto sink = dev.RunSink(ProgramKind::TrainStep, 1);
    EXPECT_TRUE(sink.ok()) << sink.status().ToString();
    if (!sink.ok()) return NAN;
    for (const ReportedTensor& r : sink->reports)
      if (r.name == "loss") return r.scalar();
    ADD_FAILURE() << "train_step reports no 'loss'";
    return NAN;
  }
  std::vector<float> Read(const VerifiedStream& v, const std::string& name) {
    const int64_t i = v.FindBuffer(name);
    EXPECT_GE(i, 0) << name;
    if (i < 0) return {};
    auto bytes = dev.ReadTensor(static_cast<uint32_t>(i));
    EXPECT_TRUE(bytes.ok()) << bytes.status().ToString();
    std::vector<float> out(bytes->size() / sizeof(float));
    std::memcpy(out.data(), bytes->data(), out.size() * sizeof(float));
    return out;
  }
  device::InProcessDevice dev;
};

// A Reshape of an activation is its input's bytes: no Reshape task, the same
// offset, and the loss and gradient come out as if it had copied.
TEST(CompilerViews, ReshapeOfAnActivationIsAnAlias) {
  const std::vector<float> w = Values(64, 0), k = Values(64, 3);
  Graph g("reshape_view");
  const TensorId wt = g.Param("w", {4, 16}, InitSpec::Inline(w));
  const TensorId a = g.Mul(wt, wt);
  const TensorId r = g.Reshape(a, {8, 8});
  g.SetLoss(g.ReduceSum(g.Mul(r, g.Const("k", {8, 8}, InitSpec::Inline(k)))));
  ASSERT_TRUE(g.status().ok()) << g.status().ToString();

  CompiledStream cs = CompileSgd(g, 0.5f);
  const VerifiedStream& v = cs.stream;
  EXPECT_EQ(CountKernels(v, OpCode::Reshape), 0);  // neither forward nor its gradient
  const fb::Buffer* ab = BufferOf(v, g, a);
  const fb::Buffer* rb = BufferOf(v, g, r);
  ASSERT_TRUE(ab && rb);
  EXPECT_EQ(rb->offset(), ab->offset());
  EXPECT_EQ(rb->bytes(), ab->bytes());
  const host::PlannedBuffer* rp = Planned(cs, g.tensor(r).name);
  ASSERT_NE(rp, nullptr);
  EXPECT_EQ(rp->view_of, g.tensor(a).name);
  EXPECT_GE(cs.report.arena_bytes, cs.report.liveness_lower_bound);

  DeviceRun run(cs);
  double want = 0;
  for (size_t i = 0; i < w.size(); ++i) want += double{w[i]} * w[i] * k[i];
  EXPECT_NEAR(run.Step(), want, 1e-5);
  const std::vector<float> grad = run.Read(v, "w/grad");
  ASSERT_EQ(grad.size(), w.size());
  for (size_t i = 0; i < w.size(); ++i) EXPECT_FLOAT_EQ(grad[i], 2 * w[i] * k[i]) << i;
}

// A Reshape of a parameter stays a copy: the parameter is updated in place at
// the end of every step, and a view of it would be persistent too. The
// second step's loss sees the updated weights through the copy.
TEST(CompilerViews, ReshapeOfAParameterKeepsItsCopy) {
  const std::vector<float> w = Values(64, 1), k = Values(64, 6);
  Graph g("reshape_param");
  const TensorId wt = g.Param("w", {4, 16}, InitSpec::Inline(w));
  const TensorId r = g.Reshape(wt, {8, 8});
  const TensorId y = g.Mul(r, g.Const("k", {8, 8}, InitSpec::Inline(k)));
  // A reported output stays a copy too: the host reads it by name.
  const TensorId out = g.Reshape(y, {64});
  g.AddOutput(out);
  g.SetLoss(g.ReduceSum(y));
  ASSERT_TRUE(g.status().ok()) << g.status().ToString();

  CompiledStream cs = CompileSgd(g, 0.5f);
  const VerifiedStream& v = cs.stream;
  // The Reshape of w, the one of the output and the gradient's, which writes
  // w/grad (a persistent Grad, reduced and read by the update in place).
  EXPECT_EQ(CountKernels(v, OpCode::Reshape), 3);
  const fb::Buffer* wb = BufferOf(v, g, wt);
  const fb::Buffer* rb = BufferOf(v, g, r);
  ASSERT_TRUE(wb && rb);
  EXPECT_NE(rb->offset(), wb->offset());
  for (const host::PlannedBuffer& b : cs.report.buffers) EXPECT_EQ(b.view_of, "") << b.name;

  DeviceRun run(cs);
  double first = 0, second = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    first += double{w[i]} * k[i];
    second += double{w[i] - 0.5f * k[i]} * k[i];
  }
  EXPECT_NEAR(run.Step(), first, 1e-5);
  EXPECT_NEAR(run.Step(), second, 1e-5);
  const std::vector<float> updated = run.Read(v, "w");
  const std::vector<float> reported = run.Read(v, g.tensor(out).name);
  ASSERT_EQ(updated.size(), w.size());
  ASSERT_EQ(reported.size(), w.size());
  for (size_t i = 0; i < w.size(); ++i) {
    EXPECT_FLOAT_EQ(updated[i], w[i] - 2 * (0.5f * k[i])) << i;
    EXPECT_FLOAT_EQ(reported[i], (w[i] - 0.5f * k[i]) * k[i]) << i;  // the second step's forward
  }
}

// Split and Concat along axis 0 at aligned offsets (rows of 16 floats are
// 64 bytes): the pieces are sub-ranges, and the Concat's inputs are written
// straight into its output. Their gradients (a Concat and a Split) too.
TEST(CompilerViews, AxisZeroSplitAndConcatAreSubRanges) {
  const std::vector<float> w = Values(96, 2), k0 = Values(32, 5), k1 = Values(64, 7), k2 = Values(96, 4);
  Graph g("split_concat_view");
  const TensorId wt = g.Param("w", {6, 16}, InitSpec::Inline(w));
  const TensorId a = g.Mul(wt, wt);
  const std::vector<TensorId> parts = g.Split(a, 0, {2, 4});
  ASSERT_EQ(parts.size(), 2u);
  const TensorId s0 = g.Mul(parts[0], g.Const("k0", {2, 16}, InitSpec::Inline(k0)));
  const TensorId s1 = g.Mul(parts[1], g.Const("k1", {4, 16}, InitSpec::Inline(k1)));
  const TensorId c = g.Concat({s0, s1}, 0);
  g.SetLoss(g.ReduceSum(g.Mul(c, g.Const("k2", {6, 16}, InitSpec::Inline(k2)))));
  ASSERT_TRUE(g.status().ok()) << g.status().ToString();

  CompiledStream cs = CompileSgd(g, 0.5f);
  const VerifiedStream& v = cs.stream;
  EXPECT_EQ(CountKernels(v, OpCode::Split), 0);
  EXPECT_EQ(CountKernels(v, OpCode::Concat), 0);
  const fb::Buffer *ab = BufferOf(v, g, a), *p0 = BufferOf(v, g, parts[0]), *p1 = BufferOf(v, g, parts[1]);
  const fb::Buffer *cb = BufferOf(v, g, c), *b0 = BufferOf(v, g, s0), *b1 = BufferOf(v, g, s1);
  ASSERT_TRUE(ab && p0 && p1 && cb && b0 && b1);
  EXPECT_EQ(p0->offset(), ab->offset());
  EXPECT_EQ(p1->offset(), ab->offset() + 2 * 64);
  EXPECT_EQ(b0->offset(), cb->offset());
  EXPECT_EQ(b1->offset(), cb->offset() + 2 * 64);
  EXPECT_GE(cs.report.arena_bytes, cs.report.liveness_lower_bound);

  DeviceRun run(cs);
  std::vector<float> kp = k0;
  kp.insert(kp.end(), k1.begin(), k1.end());
  double want = 0;
  for (size_t i = 0; i < w.size(); ++i) want += double{w[i]} * w[i] * kp[i] * k2[i];
  EXPECT_NEAR(run.Step(), want, 1e-5);
  const std::vector<float> grad = run.Read(v, "w/grad");
  ASSERT_EQ(grad.size(), w.size());
  for (size_t i = 0; i < w.size(); ++i) {
    const float d = k2[i] * kp[i];
    EXPECT_FLOAT_EQ(grad[i], d * w[i] + d * w[i]) << i;
  }
}

// A piece that would start off the arena alignment (rows of 4 floats are 16
// bytes) keeps the Split, and so its gradient's Concat.
TEST(CompilerViews, UnalignedSplitKeepsItsCopy) {
  const std::vector<float> w = Values(24, 3), k0 = Values(4, 1), k1 = Values(20, 2);
  Graph g("split_unaligned");
  const TensorId wt = g.Param("w", {6, 4}, InitSpec::Inline(w));
  const std::vector<TensorId> parts = g.Split(g.Mul(wt, wt), 0, {1, 5});
  ASSERT_EQ(parts.size(), 2u);
  const TensorId l0 = g.ReduceSum(g.Mul(parts[0], g.Const("k0", {1, 4}, InitSpec::Inline(k0))));
  const TensorId l1 = g.ReduceSum(g.Mul(parts[1], g.Const("k1", {5, 4}, InitSpec::Inline(k1))));
  g.SetLoss(g.Add(l0, l1));
  ASSERT_TRUE(g.status().ok()) << g.status().ToString();

  CompiledStream cs = CompileSgd(g, 0.5f);
  EXPECT_EQ(CountKernels(cs.stream, OpCode::Split), 1);
  EXPECT_EQ(CountKernels(cs.stream, OpCode::Concat), 1);
  DeviceRun run(cs);
  std::vector<float> kp = k0;
  kp.insert(kp.end(), k1.begin(), k1.end());
  double want = 0;
  for (size_t i = 0; i < w.size(); ++i) want += double{w[i]} * w[i] * kp[i];
  EXPECT_NEAR(run.Step(), want, 1e-5);
}

// ---- the planner's side --------------------------------------------------------

using host::compiler::BufferLifetime;
using host::compiler::PlanMemory;

BufferLifetime Transient(uint64_t bytes, int32_t first, int32_t last) {
  return {.bytes = bytes, .first_use = first, .last_use = last};
}

// A root live over [0, 1] and its view over [4, 5] are one buffer over
// [0, 5]: a buffer live at 3 cannot take its bytes, and the bound counts the
// group once.
TEST(MemoryPlannerViews, AGroupIsOneBufferOverTheUnionOfItsLifetimes) {
  std::vector<BufferLifetime> b = {Transient(256, 0, 1), Transient(256, 3, 3), Transient(128, 4, 5)};
  b[2].view_of = 0;
  b[2].view_offset = 64;
  auto plan = PlanMemory(b, 64);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->offsets[2], plan->offsets[0] + 64);
  EXPECT_EQ(plan->liveness_lower_bound, 512u);
  EXPECT_EQ(plan->arena_bytes, 512u);
  EXPECT_NE(plan->offsets[1], plan->offsets[0]);
  EXPECT_EQ(plan->buffers[0].last_use, 5);
  EXPECT_FALSE(host::compiler::AnyLiveOverlap(*plan));
  EXPECT_EQ(host::compiler::LivenessLowerBound(b, 64), 512u);
}

TEST(MemoryPlannerViews, RefusesABadView) {
  auto refused = [](int64_t of, uint64_t offset, uint64_t bytes, const char* what) {
    std::vector<BufferLifetime> b = {Transient(256, 0, 1), Transient(64, 0, 1), Transient(bytes, 0, 1)};
    b[1].view_of = 0;
    b[2].view_of = of;
    b[2].view_offset = offset;
    auto plan = PlanMemory(b, 64);
    ASSERT_FALSE(plan.ok()) << what;
    EXPECT_NE(plan.status().message().find("buffer 2"), std::string::npos) << plan.status().message();
  };
  refused(1, 0, 64, "a view of a view");
  refused(7, 0, 64, "a view of no buffer");
  refused(0, 32, 64, "an unaligned offset");
  refused(0, 192, 128, "past the root's end");
}

}  // namespace
}  // namespace sinkrt
