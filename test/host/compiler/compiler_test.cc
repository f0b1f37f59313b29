// Compile(): determinism, hashing, fusion, the buffer table, queues, programs
// and initialisers, checked on the stream as a device reads it (through the
// runtime's verifier) rather than on the compiler's internals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <string>
#include <tuple>

#include "host/src/util/schema_enums.h"
#include "sinkrt/fb/task_stream_generated.h"
#include "sinkrt/host/compiler.h"
#include "sinkrt/runtime/stream_format.h"
#include "sinkrt/runtime/task_stream_verifier.h"
#include "sinkrt/runtime/version.h"
#include "support/test_models.h"
#include "support/test_util.h"

namespace sinkrt {
namespace {

using host::CompiledStream;
using host::CompileOptions;
using host::Graph;
using host::InitSpec;
using host::OptimizerSpec;
using host::TensorId;

CompileOptions MomentumOptions() {
  CompileOptions o;
  o.optimizer = OptimizerSpec::Momentum(0.01f, 0.9f);
  return o;
}

CompiledStream CompileOk(const Graph& g, const CompileOptions& o = MomentumOptions()) {
  auto cs = host::Compile(g, o);
  EXPECT_TRUE(cs.ok()) << cs.status().ToString();
  return std::move(cs).value();  // throws on failure: gtest reports it and goes on
}

// The stream as the device sees it (Compile verified it).
const VerifiedStream& View(const CompiledStream& cs) { return cs.stream; }

uint64_t HeaderHash(const CompiledStream& cs) { return cs.stream.root()->header()->graph_hash(); }

const fb::Buffer* BufferNamed(const VerifiedStream& v, const std::string& name) {
  int64_t i = v.FindBuffer(name);
  return i < 0 ? nullptr : v.root()->buffers()->Get(static_cast<uint32_t>(i));
}

std::vector<const fb::KernelTask*> Kernels(const fb::Program* p) {
  std::vector<const fb::KernelTask*> out;
  for (const fb::Task* t : *p->streams()->Get(0)->tasks())
    if (t->body_type() == fb::TaskBody::KernelTask) out.push_back(t->body_as_KernelTask());
  return out;
}

std::vector<int64_t> ShapeOf(const flatbuffers::Vector<int64_t>* s) {
  return s ? std::vector<int64_t>(s->begin(), s->end()) : std::vector<int64_t>{};
}

// ---- determinism and hashing ----------------------------------------------------

TEST(Compiler, SameGraphAndOptionsGiveIdenticalBytes) {
  const CompileOptions o = MomentumOptions();
  CompiledStream a = CompileOk(testing::MakeMlp(64), o);
  CompiledStream b = CompileOk(testing::MakeMlp(64), o);  // built again from scratch
  CompiledStream c = CompileOk(testing::MakeMlp(64), o);
  ASSERT_FALSE(a.stream.bytes().empty());
  EXPECT_EQ(a.stream.bytes(), b.stream.bytes());
  EXPECT_EQ(a.stream.bytes(), c.stream.bytes());
  EXPECT_EQ(a.graph_hash, b.graph_hash);

  CompiledStream l1 = CompileOk(testing::MakeLeNet(16), o);
  CompiledStream l2 = CompileOk(testing::MakeLeNet(16), o);
  EXPECT_EQ(l1.stream.bytes(), l2.stream.bytes());
}

TEST(Compiler, GraphHashFollowsContent) {
  EXPECT_EQ(host::GraphHash(testing::MakeMlp(64)), host::GraphHash(testing::MakeMlp(64)));
  EXPECT_NE(host::GraphHash(testing::MakeMlp(64)), host::GraphHash(testing::MakeMlp(32)));
  EXPECT_NE(host::GraphHash(testing::MakeMlp(64)), host::GraphHash(testing::MakeMlp(64, {784, 512, 256, 10}, 2)));
  EXPECT_NE(host::GraphHash(testing::MakeMlp(64)), host::GraphHash(testing::MakeLeNet(64)));

  // Inline initial values are part of the content.
  auto with_const = [](float v) {
    Graph g = testing::MakeMlp(4, {6, 3});
    g.Const("table", {2}, InitSpec::Inline({1.0f, v}));
    return host::GraphHash(g);
  };
  EXPECT_EQ(with_const(2.0f), with_const(2.0f));
  EXPECT_NE(with_const(2.0f), with_const(3.0f));
}

TEST(Compiler, DifferentOptionsChangeTheHash) {
  const Graph g = testing::MakeMlp(8, {16, 8, 4});
  const CompileOptions base = MomentumOptions();
  const CompiledStream ref = CompileOk(g, base);
  EXPECT_EQ(HeaderHash(ref), ref.graph_hash);

  std::vector<CompileOptions> variants;
  auto vary = [&](auto change) {
    CompileOptions o = base;
    change(o);
    variants.push_back(o);
  };
  vary([](CompileOptions& o) { o.optimizer.learning_rate = 0.02f; });
  vary([](CompileOptions& o) { o.optimizer = OptimizerSpec::Sgd(0.01f); });
  vary([](CompileOptions& o) { o.optimizer = OptimizerSpec::Adam(0.01f); });
  vary([](CompileOptions& o) { o.optimizer.nesterov = true; });
  vary([](CompileOptions& o) { o.queue_capacity = 8; });
  vary([](CompileOptions& o) { o.fuse = false; });
  vary([](CompileOptions& o) { o.eval_program = false; });
  vary([](CompileOptions& o) { o.predict_program = true; });
  vary([](CompileOptions& o) { o.arena_alignment = 128; });
  vary([](CompileOptions& o) {
    o.world_size = 2;
    o.rank = 1;
  });
  std::set<uint64_t> hashes = {ref.graph_hash};
  for (const CompileOptions& o : variants) {
    CompiledStream cs = CompileOk(g, o);
    EXPECT_NE(cs.graph_hash, ref.graph_hash);
    EXPECT_NE(cs.stream.bytes(), ref.stream.bytes());
    EXPECT_EQ(HeaderHash(cs), cs.graph_hash);
    hashes.insert(cs.graph_hash);
  }
  EXPECT_EQ(hashes.size(), variants.size() + 1) << "two option sets share a hash";
}

// ---- header and verification ------------------------------------------------------

TEST(Compiler, StreamsPassTheVerifier) {
  for (OptimizerSpec opt :
       {OptimizerSpec::Sgd(0.1f), OptimizerSpec::Momentum(0.01f, 0.9f, true), OptimizerSpec::Adam(0.001f)}) {
    for (bool fuse : {true, false}) {
      for (bool eval : {true, false}) {
        CompileOptions o;
        o.optimizer = opt;
        o.fuse = fuse;
        o.eval_program = eval;
        SCOPED_TRACE("optimizer " + std::to_string(int(opt.kind)) + " fuse " + std::to_string(fuse) + " eval " +
                     std::to_string(eval));
        SINKRT_ASSERT_OK(VerifyTaskStream(CompileOk(testing::MakeMlp(64), o).stream.bytes()));
        SINKRT_ASSERT_OK(VerifyTaskStream(CompileOk(testing::MakeLeNet(8), o).stream.bytes()));
      }
    }
  }
}

TEST(Compiler, HeaderCarriesVersionRankAndProducer) {
  CompileOptions o = MomentumOptions();
  o.world_size = 4;
  o.rank = 3;
  CompiledStream cs = CompileOk(testing::MakeMlp(8, {16, 8, 4}), o);
  VerifiedStream v = View(cs);
  ASSERT_NE(v.root(), nullptr);
  const fb::Header* h = v.root()->header();
  EXPECT_EQ(h->format_major(), kFormatMajor);
  EXPECT_EQ(h->format_minor(), kFormatMinor);
  EXPECT_EQ(h->rank(), 3u);
  EXPECT_EQ(h->world_size(), 4u);
  EXPECT_EQ(h->target()->str(), "cpu");
  EXPECT_EQ(h->producer()->str(), "sinkrt " SINKRT_VERSION_STRING);
  EXPECT_EQ(h->requirements(), 0u);
  EXPECT_EQ(v.root()->arena_alignment(), 64u);
  EXPECT_EQ(v.root()->arena_bytes(), cs.report.arena_bytes);
  EXPECT_EQ(v.root()->liveness_lower_bound(), cs.report.liveness_lower_bound);
  EXPECT_EQ(v.root()->blob_bytes(), 0u);
  // No blobs: the file ends right after the size-prefixed FlatBuffer.
  uint32_t fb_bytes;
  std::memcpy(&fb_bytes, cs.stream.bytes().data(), 4);
  EXPECT_EQ(cs.stream.bytes().size(), 4u + fb_bytes);
}

// ---- fusion ---------------------------------------------------------------------------

TEST(Compiler, MlpFusesMatMulBiasAddRelu) {
  const Graph g = testing::MakeMlp(64);
  CompiledStream cs = CompileOk(g);
  EXPECT_EQ(cs.report.fused_kernels, 3u);
  VerifiedStream v = View(cs);
  ASSERT_NE(v.root(), nullptr);
  for (ProgramKind kind : {ProgramKind::TrainStep, ProgramKind::EvalStep}) {
    const fb::Program* p = v.FindProgram(kind);
    ASSERT_NE(p, nullptr);
    std::vector<const fb::KernelTask*> fused;
    for (const fb::KernelTask* k : Kernels(p)) {
      EXPECT_NE(k->op(), fb::OpCode::BiasAdd) << "a BiasAdd was left unfused";
      EXPECT_NE(k->op(), fb::OpCode::Relu) << "a Relu was left unfused";
      if (k->fused_bias() >= 0) fused.push_back(k);
    }
    ASSERT_EQ(fused.size(), 3u);
    const char* biases[] = {"fc1.bias", "fc2.bias", "fc3.bias"};
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(fused[i]->op(), fb::OpCode::MatMul);
      EXPECT_EQ(v.root()->buffers()->Get(fused[i]->fused_bias())->name()->str(), biases[i]);
      EXPECT_EQ(fused[i]->fused_activation(), i < 2 ? fb::Activation::Relu : fb::Activation::None);
    }
  }
  // The fused-away intermediates (MatMul and pre-ReLU BiasAdd results) have
  // no buffer; the logits (a graph output) do.
  for (const host::OpNode& op : g.ops()) {
    if (op.op == OpCode::MatMul) {
      EXPECT_LT(v.FindBuffer(g.tensor(op.outputs[0]).name), 0) << op.name;
    }
  }
  EXPECT_NE(BufferNamed(v, g.tensor(g.outputs()[0]).name), nullptr);
}

TEST(Compiler, NoFusionWhenDisabled) {
  const Graph g = testing::MakeMlp(64);
  CompileOptions o = MomentumOptions();
  o.fuse = false;
  CompiledStream cs = CompileOk(g, o);
  EXPECT_EQ(cs.report.fused_kernels, 0u);
  VerifiedStream v = View(cs);
  ASSERT_NE(v.root(), nullptr);
  int bias_adds = 0, relus = 0;
  for (const fb::KernelTask* k : Kernels(v.FindProgram(ProgramKind::TrainStep))) {
    EXPECT_EQ(k->fused_bias(), -1);
    EXPECT_EQ(k->fused_activation(), fb::Activation::None);
    bias_adds += k->op() == fb::OpCode::BiasAdd;
    relus += k->op() == fb::OpCode::Relu;
  }
  EXPECT_EQ(bias_adds, 3);
  EXPECT_EQ(relus, 2);
  for (const host::OpNode& op : g.ops()) {
    if (op.op == OpCode::MatMul) {
      EXPECT_GE(v.FindBuffer(g.tensor(op.outputs[0]).name), 0) << op.name;
    }
  }
  // One kernel per graph op: fusion is the only thing that merges ops.
  CompiledStream fused = CompileOk(g);
  EXPECT_EQ(cs.report.train_tasks, fused.report.train_tasks + 5);
  EXPECT_LE(fused.report.arena_bytes, cs.report.arena_bytes);
}

TEST(Compiler, LeNetFusesConvolutionsAndDenseLayers) {
  CompiledStream cs = CompileOk(testing::MakeLeNet(8));
  EXPECT_EQ(cs.report.fused_kernels, 5u);
  VerifiedStream v = View(cs);
  ASSERT_NE(v.root(), nullptr);
  int conv_fused = 0;
  for (const fb::KernelTask* k : Kernels(v.FindProgram(ProgramKind::TrainStep)))
    if (k->op() == fb::OpCode::Conv2D) {
      EXPECT_GE(k->fused_bias(), 0);
      EXPECT_EQ(k->fused_activation(), fb::Activation::Relu);
      ++conv_fused;
    }
  EXPECT_EQ(conv_fused, 2);
}

TEST(Compiler, FusionKeepsIntermediatesThatAreOutputsOrReadTwice) {
  // Layer 1's pre-activation is a graph output, so its Relu cannot be folded
  // (MatMul + BiasAdd still can); layer 2's MatMul result is read twice.
  Graph g("partial");
  TensorId x = g.Input("x", {4, 6});
  TensorId label = g.Input("label", {4}, DType::I32);
  TensorId w1 = g.Param("w1", {6, 5}, InitSpec::XavierUniform(1));
  TensorId b1 = g.Param("b1", {5}, InitSpec::Zeros());
  TensorId w2 = g.Param("w2", {5, 3}, InitSpec::XavierUniform(2));
  TensorId b2 = g.Param("b2", {3}, InitSpec::Zeros());
  TensorId pre = g.BiasAdd(g.MatMul(x, w1), b1);
  TensorId h = g.Relu(pre);
  TensorId m2 = g.MatMul(h, w2);
  TensorId logits = g.Add(g.BiasAdd(m2, b2), m2);
  g.AddOutput(logits);
  g.AddOutput(pre);
  g.SetLoss(g.SparseSoftmaxCrossEntropy(logits, label));
  ASSERT_TRUE(g.status().ok()) << g.status().ToString();

  CompiledStream cs = CompileOk(g);
  EXPECT_EQ(cs.report.fused_kernels, 1u);
  VerifiedStream v = View(cs);
  ASSERT_NE(v.root(), nullptr);
  auto kernels = Kernels(v.FindProgram(ProgramKind::TrainStep));
  ASSERT_GE(kernels.size(), 4u);
  EXPECT_EQ(kernels[0]->op(), fb::OpCode::MatMul);
  EXPECT_EQ(kernels[0]->fused_activation(), fb::Activation::None);
  EXPECT_EQ(v.root()->buffers()->Get(kernels[0]->outputs()->Get(0))->name()->str(), g.tensor(pre).name);
  EXPECT_EQ(kernels[1]->op(), fb::OpCode::Relu);
  EXPECT_EQ(kernels[2]->op(), fb::OpCode::MatMul);
  EXPECT_EQ(kernels[2]->fused_bias(), -1);
  EXPECT_EQ(kernels[3]->op(), fb::OpCode::BiasAdd);
}

TEST(Compiler, FusionSpansNonAdjacentOpsOnlyWhenTheBiasIsReady) {
  Graph g("interleaved");
  TensorId x = g.Input("x", {4, 6});
  TensorId label = g.Input("label", {4}, DType::I32);
  TensorId w1 = g.Param("w1", {6, 3}, InitSpec::XavierUniform(1));
  TensorId w2 = g.Param("w2", {6, 3}, InitSpec::XavierUniform(2));
  TensorId b1 = g.Param("b1", {3}, InitSpec::Zeros());
  TensorId b2 = g.Param("b2", {3}, InitSpec::Zeros());
  TensorId m1 = g.MatMul(x, w1);
  TensorId m2 = g.MatMul(x, w2);
  TensorId late_bias = g.Relu(b2);         // written after both MatMuls
  TensorId y1 = g.BiasAdd(m1, b1);         // b1 is a leaf: fusable into m1's kernel
  TensorId y2 = g.BiasAdd(m2, late_bias);  // not ready when m2 runs: stays a BiasAdd
  TensorId logits = g.Add(y1, y2);
  g.AddOutput(logits);
  g.SetLoss(g.SparseSoftmaxCrossEntropy(logits, label));
  ASSERT_TRUE(g.status().ok()) << g.status().ToString();

  CompiledStream cs = CompileOk(g);
  EXPECT_EQ(cs.report.fused_kernels, 1u);
  VerifiedStream v = View(cs);
  ASSERT_NE(v.root(), nullptr);
  auto kernels = Kernels(v.FindProgram(ProgramKind::EvalStep));
  ASSERT_GE(kernels.size(), 4u);
  EXPECT_EQ(kernels[0]->op(), fb::OpCode::MatMul);
  EXPECT_EQ(v.root()->buffers()->Get(kernels[0]->fused_bias())->name()->str(), "b1");
  EXPECT_EQ(v.root()->buffers()->Get(kernels[0]->outputs()->Get(0))->name()->str(), "eval/" + g.tensor(y1).name);
  EXPECT_EQ(kernels[1]->op(), fb::OpCode::MatMul);
  EXPECT_EQ(kernels[1]->fused_bias(), -1);
  EXPECT_EQ(kernels[2]->op(), fb::OpCode::Relu);
  EXPECT_EQ(kernels[3]->op(), fb::OpCode::BiasAdd);
  SINKRT_ASSERT_OK(VerifyTaskStream(cs.stream.bytes()));
}

// ---- buffers ------------------------------------------------------------------------------

TEST(Compiler, BufferTableHasTheExpectedRolesAndNames) {
  CompiledStream cs = CompileOk(testing::MakeMlp(64));
  VerifiedStream v = View(cs);
  ASSERT_NE(v.root(), nullptr);
  struct Expect {
    const char* name;
    BufferRole role;
    DType dtype;
    std::vector<int64_t> shape;
  };
  const Expect expected[] = {
      {"fc1.weight", BufferRole::Param, DType::F32, {784, 512}},
      {"fc1.bias", BufferRole::Param, DType::F32, {512}},
      {"fc1.weight/grad", BufferRole::Grad, DType::F32, {784, 512}},
      {"fc3.bias/grad", BufferRole::Grad, DType::F32, {10}},
      {"fc1.weight/momentum", BufferRole::OptState, DType::F32, {784, 512}},
      {"loss", BufferRole::Output, DType::F32, {}},
      {"accuracy", BufferRole::Output, DType::F32, {}},
      {"image", BufferRole::Input, DType::F32, {64, 784}},
      {"label", BufferRole::Input, DType::I32, {64}},
      {"eval/image", BufferRole::Input, DType::F32, {64, 784}},
      {"eval/label", BufferRole::Input, DType::I32, {64}},
  };
  for (const Expect& e : expected) {
    const fb::Buffer* b = BufferNamed(v, e.name);
    ASSERT_NE(b, nullptr) << e.name;
    EXPECT_EQ(FromFb(b->role()), e.role) << e.name;
    EXPECT_EQ(FromFb(b->dtype()), e.dtype) << e.name;
    EXPECT_EQ(ShapeOf(b->shape()), e.shape) << e.name;
  }

  // Names are unique; offsets aligned and inside the arena; the report
  // describes the same table.
  std::set<std::string> names;
  ASSERT_EQ(cs.report.buffers.size(), v.root()->buffers()->size());
  for (uint32_t i = 0; i < v.root()->buffers()->size(); ++i) {
    const fb::Buffer* b = v.root()->buffers()->Get(i);
    EXPECT_TRUE(names.insert(b->name()->str()).second) << b->name()->str();
    EXPECT_EQ(b->offset() % 64, 0u);
    EXPECT_LE(b->offset() + b->bytes(), v.root()->arena_bytes());
    EXPECT_EQ(cs.report.buffers[i].name, b->name()->str());
    EXPECT_EQ(cs.report.buffers[i].offset, b->offset());
    EXPECT_EQ(cs.report.buffers[i].bytes, b->bytes());
    EXPECT_EQ(cs.report.buffers[i].role, FromFb(b->role()));
  }

  // Persistent buffers sit below every transient one, and the gradients are
  // one contiguous run (a fused AllReduce can work on them in place).
  uint64_t persistent_end = 0, transient_begin = UINT64_MAX, grad_lo = UINT64_MAX, grad_hi = 0, grad_sum = 0;
  for (const fb::Buffer* b : *v.root()->buffers()) {
    const bool persistent = b->role() == fb::BufferRole::Param || b->role() == fb::BufferRole::Grad ||
                            b->role() == fb::BufferRole::OptState || b->role() == fb::BufferRole::Const ||
                            b->role() == fb::BufferRole::Output;
    if (persistent)
      persistent_end = std::max(persistent_end, b->offset() + b->bytes());
    else
      transient_begin = std::min(transient_begin, b->offset());
    if (b->role() == fb::BufferRole::Grad) {
      grad_lo = std::min(grad_lo, b->offset());
      grad_hi = std::max(grad_hi, b->offset() + (b->bytes() + 63) / 64 * 64);
      grad_sum += (b->bytes() + 63) / 64 * 64;
    }
  }
  EXPECT_LE(persistent_end, transient_begin);
  EXPECT_LE(persistent_end, cs.report.persistent_bytes);
  EXPECT_EQ(grad_hi - grad_lo, grad_sum);
}

TEST(Compiler, MaxPoolWorkspaceIsPlanned) {
  CompiledStream cs = CompileOk(testing::MakeLeNet(8));
  VerifiedStream v = View(cs);
  ASSERT_NE(v.root(), nullptr);
  int workspaces = 0;
  for (const fb::KernelTask* k : Kernels(v.FindProgram(ProgramKind::TrainStep))) {
    if (k->op() != fb::OpCode::MaxPool2D) continue;
    ASSERT_EQ(k->outputs()->size(), 2u);
    const fb::Buffer* y = v.root()->buffers()->Get(k->outputs()->Get(0));
    const fb::Buffer* ws = v.root()->buffers()->Get(k->outputs()->Get(1));
    EXPECT_EQ(ws->role(), fb::BufferRole::Workspace);
    EXPECT_EQ(ws->dtype(), fb::DType::U8);
    EXPECT_EQ(ws->bytes(), y->bytes());  // 4 bytes per f32 element of y
    ++workspaces;
  }
  EXPECT_EQ(workspaces, 2);
}

// ---- queues and programs -----------------------------------------------------------------

TEST(Compiler, QueueSpecColumnsMatchTheInputs) {
  CompileOptions o = MomentumOptions();
  o.queue_capacity = 5;
  CompiledStream cs = CompileOk(testing::MakeLeNet(16), o);
  EXPECT_EQ(cs.input_columns, (std::vector<std::string>{"image", "label"}));
  VerifiedStream v = View(cs);
  ASSERT_NE(v.root(), nullptr);
  ASSERT_EQ(v.root()->queues()->size(), 2u);
  const char* queue_names[] = {"train", "eval"};
  for (uint32_t q = 0; q < 2; ++q) {
    const fb::QueueSpec* spec = v.root()->queues()->Get(q);
    EXPECT_EQ(spec->name()->str(), queue_names[q]);
    EXPECT_EQ(spec->capacity(), 5u);
    ASSERT_EQ(spec->columns()->size(), 2u);
    EXPECT_EQ(spec->columns()->Get(0)->name()->str(), "image");
    EXPECT_EQ(spec->columns()->Get(0)->dtype(), fb::DType::F32);
    EXPECT_EQ(ShapeOf(spec->columns()->Get(0)->shape()), (std::vector<int64_t>{16, 1, 28, 28}));
    EXPECT_EQ(spec->columns()->Get(1)->name()->str(), "label");
    EXPECT_EQ(spec->columns()->Get(1)->dtype(), fb::DType::I32);
    EXPECT_EQ(ShapeOf(spec->columns()->Get(1)->shape()), (std::vector<int64_t>{16}));
  }
  // Each step program starts by popping its own queue into its input buffers.
  for (auto [kind, queue, prefix] :
       {std::tuple{ProgramKind::TrainStep, 0u, ""}, std::tuple{ProgramKind::EvalStep, 1u, "eval/"}}) {
    const fb::Program* p = v.FindProgram(kind);
    ASSERT_NE(p, nullptr);
    const fb::Task* first = p->streams()->Get(0)->tasks()->Get(0);
    ASSERT_EQ(first->body_type(), fb::TaskBody::GetNextTask);
    const fb::GetNextTask* gn = first->body_as_GetNextTask();
    EXPECT_EQ(gn->queue(), queue);
    ASSERT_EQ(gn->outputs()->size(), 2u);
    EXPECT_EQ(v.root()->buffers()->Get(gn->outputs()->Get(0))->name()->str(), std::string(prefix) + "image");
    EXPECT_EQ(v.root()->buffers()->Get(gn->outputs()->Get(1))->name()->str(), std::string(prefix) + "label");
  }
}

TEST(Compiler, GraphWithoutInputsHasNoQueue) {
  // Fits a parameter to a constant: nothing comes from a dataset.
  Graph g("no_inputs");
  TensorId p = g.Param("p", {4, 3}, InitSpec::Normal(0.0f, 1.0f, 9));
  TensorId target = g.Const("target", {4, 3}, InitSpec::Constant(0.5f));
  TensorId d = g.Sub(p, target);
  g.SetLoss(g.ReduceMean(g.Mul(d, d)));
  ASSERT_TRUE(g.status().ok()) << g.status().ToString();
  CompiledStream cs = CompileOk(g);
  EXPECT_TRUE(cs.input_columns.empty());
  VerifiedStream v = View(cs);
  ASSERT_NE(v.root(), nullptr);
  EXPECT_EQ(v.root()->queues() ? v.root()->queues()->size() : 0u, 0u);
  for (const fb::Program* prog : *v.root()->programs())
    for (const fb::Task* t : *prog->streams()->Get(0)->tasks()) EXPECT_NE(t->body_type(), fb::TaskBody::GetNextTask);
  ASSERT_NE(BufferNamed(v, "target"), nullptr);
  EXPECT_EQ(BufferNamed(v, "target")->role(), fb::BufferRole::Const);
}

TEST(Compiler, ProgramsAndReports) {
  const Graph g = testing::MakeMlp(32, {64, 32, 4});
  CompiledStream cs = CompileOk(g);
  VerifiedStream v = View(cs);
  ASSERT_NE(v.root(), nullptr);
  ASSERT_EQ(v.root()->programs()->size(), 3u);
  EXPECT_EQ(v.root()->programs()->Get(0)->name()->str(), "init");
  EXPECT_EQ(v.root()->programs()->Get(1)->name()->str(), "train_step");
  EXPECT_EQ(v.root()->programs()->Get(2)->name()->str(), "eval_step");
  for (const fb::Program* p : *v.root()->programs()) {
    ASSERT_EQ(p->streams()->size(), 1u);
    EXPECT_EQ(p->streams()->Get(0)->name()->str(), "compute");
  }

  // init: one InitTask listing every initializer.
  const fb::Program* init = v.FindProgram(ProgramKind::Init);
  ASSERT_EQ(init->streams()->Get(0)->tasks()->size(), 1u);
  const fb::Task* it = init->streams()->Get(0)->tasks()->Get(0);
  ASSERT_EQ(it->body_type(), fb::TaskBody::InitTask);
  ASSERT_EQ(it->body_as_InitTask()->initializers()->size(), v.root()->initializers()->size());

  auto report_names = [&](const fb::Program* p) {
    std::vector<std::string> out;
    for (uint32_t b : *p->reports()) out.push_back(v.root()->buffers()->Get(b)->name()->str());
    return out;
  };
  EXPECT_EQ(report_names(v.FindProgram(ProgramKind::TrainStep)), (std::vector<std::string>{"loss"}));
  // eval_step's last report: the metric sums of sunk eval (format 1.4), the
  // program's one accumulator.
  EXPECT_EQ(report_names(v.FindProgram(ProgramKind::EvalStep)),
            (std::vector<std::string>{"loss", "accuracy", g.tensor(g.outputs()[0]).name, "eval/metric_sums"}));
  const fb::Program* eval = v.FindProgram(ProgramKind::EvalStep);
  ASSERT_TRUE(eval->accumulators() && eval->accumulators()->size() == 1);
  EXPECT_EQ(eval->accumulators()->Get(0), eval->reports()->Get(3));
  EXPECT_EQ(v.FindProgram(ProgramKind::TrainStep)->accumulators(), nullptr);

  // Task names are op names; train_step = GetNext + one kernel per op (less
  // the ops folded by fusion); eval_step runs the forward ops, the metric
  // and the compiler's MetricSum.
  std::set<std::string> op_names;
  for (const host::OpNode& op : g.ops()) op_names.insert(op.name);
  for (const fb::Task* t : *eval->streams()->Get(0)->tasks()) {
    if (t->body_type() != fb::TaskBody::KernelTask) continue;
    std::string name = t->name()->str();
    if (t->body_as_KernelTask()->op() == fb::OpCode::ArgMaxAccuracy) continue;
    if (t->body_as_KernelTask()->op() == fb::OpCode::MetricSum) {
      EXPECT_EQ(name, "eval/metric_sum");
      continue;
    }
    std::string first = name.substr(0, name.find('+'));
    EXPECT_TRUE(op_names.count(first)) << name;
  }
  EXPECT_EQ(cs.report.eval_tasks, eval->streams()->Get(0)->tasks()->size());
  EXPECT_EQ(cs.report.train_tasks, v.FindProgram(ProgramKind::TrainStep)->streams()->Get(0)->tasks()->size());

  CompileOptions no_eval = MomentumOptions();
  no_eval.eval_program = false;
  CompiledStream train_only = CompileOk(g, no_eval);
  VerifiedStream tv = View(train_only);
  ASSERT_NE(tv.root(), nullptr);
  EXPECT_EQ(tv.root()->programs()->size(), 2u);
  EXPECT_EQ(tv.FindProgram(ProgramKind::EvalStep), nullptr);
  EXPECT_EQ(tv.root()->queues()->size(), 1u);
  EXPECT_LT(tv.FindBuffer("eval/image"), 0);
  EXPECT_EQ(train_only.report.eval_tasks, 0u);
}

TEST(Compiler, KernelOptionsComeFromOpAttrs) {
  CompileOptions o;
  o.optimizer = OptimizerSpec::Momentum(0.05f, 0.8f, /*nesterov=*/true);
  CompiledStream cs = CompileOk(testing::MakeLeNet(4), o);
  VerifiedStream v = View(cs);
  ASSERT_NE(v.root(), nullptr);
  bool saw_conv_pad = false, saw_pool = false, saw_transpose = false, saw_momentum = false, saw_fill = false;
  for (const fb::KernelTask* k : Kernels(v.FindProgram(ProgramKind::TrainStep))) {
    switch (FromFb(k->op())) {
      case OpCode::Conv2D: {
        const fb::Conv2DOptions* c = k->options_as_Conv2DOptions();
        ASSERT_NE(c, nullptr);
        if (c->pad_top() == 2 && c->pad_left() == 2 && c->stride_h() == 1) saw_conv_pad = true;
        break;
      }
      case OpCode::MaxPool2D: {
        const fb::Pool2DOptions* p = k->options_as_Pool2DOptions();
        ASSERT_NE(p, nullptr);
        EXPECT_EQ(p->kernel_h(), 2);
        EXPECT_EQ(p->stride_w(), 2);
        saw_pool = true;
        break;
      }
      case OpCode::MatMul: {
        const fb::MatMulOptions* m = k->options_as_MatMulOptions();
        ASSERT_NE(m, nullptr);
        if (m->transpose_a() || m->transpose_b()) saw_transpose = true;
        break;
      }
      case OpCode::MomentumUpdate: {
        const fb::MomentumOptions* m = k->options_as_MomentumOptions();
        ASSERT_NE(m, nullptr);
        EXPECT_FLOAT_EQ(m->learning_rate(), 0.05f);
        EXPECT_FLOAT_EQ(m->momentum(), 0.8f);
        EXPECT_TRUE(m->nesterov());
        EXPECT_EQ(k->outputs() ? k->outputs()->size() : 0u, 0u);  // updates in place
        saw_momentum = true;
        break;
      }
      case OpCode::Fill: {
        const fb::FillOptions* f = k->options_as_FillOptions();
        ASSERT_NE(f, nullptr);
        EXPECT_FLOAT_EQ(f->value(), 1.0f);
        saw_fill = true;
        break;
      }
      case OpCode::BiasAddGrad:
        ASSERT_NE(k->options_as_AxisOptions(), nullptr);
        EXPECT_EQ(k->options_as_AxisOptions()->axis(), 1);
        break;
      case OpCode::SparseSoftmaxCrossEntropy:
      case OpCode::ReluGrad:
        EXPECT_EQ(k->options_type(), fb::OpOptions::NONE);
        break;
      default:
        break;
    }
  }
  EXPECT_TRUE(saw_conv_pad && saw_pool && saw_transpose && saw_momentum && saw_fill);
}

// ---- initialisers -------------------------------------------------------------------------

TEST(Compiler, InitializersCarryFanInAndFanOut) {
  CompiledStream cs = CompileOk(testing::MakeLeNet(4));
  VerifiedStream v = View(cs);
  ASSERT_NE(v.root(), nullptr);
  auto init_of = [&](const std::string& name) -> const fb::Init* {
    for (const fb::Initializer* in : *v.root()->initializers())
      if (v.root()->buffers()->Get(in->buffer())->name()->str() == name) return in->init();
    return nullptr;
  };
  struct Fan {
    const char* name;
    InitKind kind;
    int64_t in, out;
  };
  for (const Fan& f :
       {Fan{"conv1.weight", InitKind::HeUniform, 1 * 25, 6 * 25},
        Fan{"conv2.weight", InitKind::HeUniform, 6 * 25, 16 * 25}, Fan{"fc1.weight", InitKind::HeUniform, 400, 120},
        Fan{"fc1.bias", InitKind::Zeros, 120, 120}, Fan{"fc1.weight/momentum", InitKind::Zeros, 400, 120}}) {
    const fb::Init* d = init_of(f.name);
    ASSERT_NE(d, nullptr) << f.name;
    EXPECT_EQ(FromFb(d->kind()), f.kind) << f.name;
    EXPECT_EQ(d->fan_in(), f.in) << f.name;
    EXPECT_EQ(d->fan_out(), f.out) << f.name;
  }
  EXPECT_EQ(init_of("fc1.weight")->seed(), 3u);  // MakeLeNet: seed + 2
  // Only Params, Consts and optimizer state are initialised.
  for (const fb::Initializer* in : *v.root()->initializers()) {
    BufferRole r = FromFb(v.root()->buffers()->Get(in->buffer())->role());
    EXPECT_TRUE(r == BufferRole::Param || r == BufferRole::Const || r == BufferRole::OptState);
  }
  EXPECT_EQ(v.root()->initializers()->size(), 10u + 10u);  // 10 params, 10 momentum slots
}

TEST(Compiler, UserFanInOutWins) {
  Graph g = testing::MakeMlp(4, {6, 3});
  InitSpec spec = InitSpec::XavierNormal(5);
  spec.fan_in = 100;  // fan_out left 0: derived from the shape
  g.Const("proj", {6, 3}, spec);
  CompiledStream cs = CompileOk(g);
  VerifiedStream v = View(cs);
  ASSERT_NE(v.root(), nullptr);
  const int64_t proj = v.FindBuffer("proj");
  ASSERT_GE(proj, 0);
  for (const fb::Initializer* in : *v.root()->initializers()) {
    if (in->buffer() != proj) continue;
    EXPECT_EQ(in->init()->kind(), fb::InitKind::XavierNormal);
    EXPECT_EQ(in->init()->fan_in(), 100);
    EXPECT_EQ(in->init()->fan_out(), 3);
  }
}

TEST(Compiler, InlineDataGoesToTheAlignedBlobSection) {
  Graph g = testing::MakeMlp(4, {6, 3});
  std::vector<float> a = {1, 2, 3}, b = {4, 5, 6, 7, 8};
  g.Const("table_a", {3}, InitSpec::Inline(a));
  g.Const("table_b", {5}, InitSpec::Inline(b));
  ASSERT_TRUE(g.status().ok()) << g.status().ToString();
  CompiledStream cs = CompileOk(g);
  VerifiedStream v = View(cs);
  ASSERT_NE(v.root(), nullptr);
  auto sections = SplitStream(cs.stream.bytes());
  ASSERT_TRUE(sections.ok());
  EXPECT_EQ((sections->blobs.data() - cs.stream.bytes().data()) % 64, 0);
  EXPECT_EQ(v.root()->blob_bytes(), sections->blobs.size());
  int seen = 0;
  for (const fb::Initializer* in : *v.root()->initializers()) {
    const fb::Buffer* buf = v.root()->buffers()->Get(in->buffer());
    if (in->init()->kind() != fb::InitKind::Inline) continue;
    EXPECT_EQ(buf->role(), fb::BufferRole::Const);
    EXPECT_EQ(in->init()->data_offset() % 64, 0u);
    EXPECT_EQ(in->init()->data_bytes(), buf->bytes());
    const std::vector<float>& want = buf->name()->str() == "table_a" ? a : b;
    ASSERT_EQ(in->init()->data_bytes(), want.size() * sizeof(float));
    EXPECT_EQ(std::memcmp(v.blobs().data() + in->init()->data_offset(), want.data(), want.size() * sizeof(float)), 0);
    ++seen;
  }
  EXPECT_EQ(seen, 2);
  // An unused constant still gets a buffer: init writes it.
  EXPECT_GE(v.FindBuffer("table_a"), 0);
}

// ---- errors -------------------------------------------------------------------------------

TEST(Compiler, RefusesBadInputWithAClearMessage) {
  Graph no_loss("no_loss");
  TensorId x = no_loss.Input("x", {2, 3});
  TensorId w = no_loss.Param("w", {3, 2}, InitSpec::XavierUniform(1));
  no_loss.AddOutput(no_loss.MatMul(x, w));
  auto r = host::Compile(no_loss, MomentumOptions());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("SetLoss"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("no_loss"), std::string::npos) << r.status().message();

  const Graph g = testing::MakeMlp(4, {6, 3});
  CompileOptions bad = MomentumOptions();
  bad.arena_alignment = 48;
  auto a = host::Compile(g, bad);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("arena_alignment"), std::string::npos);
  bad = MomentumOptions();
  bad.rank = 2;
  bad.world_size = 2;
  auto b = host::Compile(g, bad);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("rank 2"), std::string::npos);
  bad = MomentumOptions();
  bad.queue_capacity = 0;
  EXPECT_FALSE(host::Compile(g, bad).ok());

  Graph broken("broken");
  broken.Input("x", {2, 3});
  broken.MatMul(0, 0);  // [2,3] x [2,3]: a shape error kept in status()
  auto c = host::Compile(broken, MomentumOptions());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("broken"), std::string::npos) << c.status().message();
}

// The optimizer gets the same check however the options were made (code,
// sinkc, sinkrun, a graph file): a value that cannot train is refused here,
// not found out when the loss diverges.
TEST(Compiler, RefusesOptimizerValuesThatCannotTrain) {
  const Graph g = testing::MakeMlp(4, {6, 3});
  auto message = [&](const OptimizerSpec& spec) {
    CompileOptions o;
    o.optimizer = spec;
    auto r = host::Compile(g, o);
    EXPECT_FALSE(r.ok());
    if (r.ok()) return std::string();
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    return r.status().message();
  };
  EXPECT_EQ(message(OptimizerSpec::Sgd(0.0f)), "compile: optimizer: SGD: learning_rate must be > 0, but got 0.000000");
  EXPECT_EQ(
      message(OptimizerSpec::Momentum(0.01f, 1.0f)).rfind("compile: optimizer: Momentum: momentum must be < 1", 0), 0u);
  EXPECT_NE(message(OptimizerSpec::Momentum(0.01f, 2.0f)).find("but got 2.000000"), std::string::npos);
  EXPECT_EQ(message(OptimizerSpec::Momentum(0.01f, -0.1f)),
            "compile: optimizer: Momentum: momentum must be >= 0, but got -0.100000");
  CompileOptions edge;
  edge.optimizer = OptimizerSpec::Momentum(0.01f, 0.0f);
  EXPECT_TRUE(host::Compile(g, edge).ok());
}

// A graph no device could load fails at compile, naming the tensors, not
// later when a device reads the stream.
TEST(Compiler, RefusesATensorLargerThanTheDeviceArena) {
  // image [2^30, 784] f32 is 3.2e12 bytes, beyond the 2^38-byte arena limit.
  auto r = host::Compile(testing::MakeMlp(int64_t{1} << 30), MomentumOptions());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(
      r.status().message().find("compile graph 'mlp': tensor 'image' f32 [1073741824,784] of 3367254360064 bytes"),
      std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("arena limit of " + std::to_string(kMaxArenaBytes) + " bytes"), std::string::npos)
      << r.status().message();
}

TEST(Compiler, RefusesAnArenaLargerThanTheDeviceAcceptsNamingTheLargestBuffers) {
  // Every buffer fits under the limit; together they do not.
  auto r = host::Compile(testing::MakeMlp(int64_t{1} << 26, {784, 512, 10}), MomentumOptions());
  ASSERT_FALSE(r.ok());
  const std::string& m = r.status().message();
  EXPECT_NE(m.find("compile graph 'mlp': arena of "), std::string::npos) << m;
  EXPECT_NE(m.find("is larger than the device's limit of " + std::to_string(kMaxArenaBytes) + " bytes"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("; the largest buffers: '"), std::string::npos) << m;
  EXPECT_NE(m.find("'image' f32 [67108864,784] of 210453397504 bytes"), std::string::npos) << m;
}

TEST(Compiler, GraphBuilderRefusesAShapeWhoseByteCountOverflows) {
  // 2^61 f32 elements: the element count is fine, its 2^63 bytes are not.
  Graph g("big");
  g.Param("w", {int64_t{1} << 31, int64_t{1} << 30}, InitSpec::Zeros());
  ASSERT_FALSE(g.status().ok());
  EXPECT_NE(g.status().message().find("'w'"), std::string::npos) << g.status().message();
  EXPECT_NE(g.status().message().find("byte count beyond int64"), std::string::npos) << g.status().message();
}

// ---- predict_step --------------------------------------------------------------------

CompileOptions WithPredict(bool eval = true) {
  CompileOptions o = MomentumOptions();
  o.predict_program = true;
  o.eval_program = eval;
  return o;
}

std::vector<std::string> ReportNames(const VerifiedStream& v, const fb::Program* p) {
  std::vector<std::string> out;
  for (uint32_t b : *p->reports()) out.push_back(v.root()->buffers()->Get(b)->name()->str());
  return out;
}

TEST(Compiler, PredictProgramRunsTheForwardOpsOfTheFirstOutputWithoutTheLabel) {
  const Graph g = testing::MakeMlp(32, {64, 32, 4});
  CompiledStream cs = CompileOk(g, WithPredict());
  VerifiedStream v = View(cs);
  ASSERT_NE(v.root(), nullptr);
  ASSERT_EQ(v.root()->programs()->size(), 4u);
  EXPECT_EQ(v.root()->programs()->Get(3)->name()->str(), "predict_step");
  EXPECT_EQ(cs.predict_columns, (std::vector<std::string>{"image"}));
  ASSERT_EQ(v.root()->queues()->size(), 3u);
  const fb::QueueSpec* q = v.root()->queues()->Get(2);
  EXPECT_EQ(q->name()->str(), "predict");
  ASSERT_EQ(q->columns()->size(), 1u);
  EXPECT_EQ(q->columns()->Get(0)->name()->str(), "image");
  EXPECT_EQ(ShapeOf(q->columns()->Get(0)->shape()), (std::vector<int64_t>{32, 64}));

  const fb::Program* p = v.FindProgram(ProgramKind::PredictStep);
  ASSERT_NE(p, nullptr);
  const fb::Task* first = p->streams()->Get(0)->tasks()->Get(0);
  ASSERT_EQ(first->body_type(), fb::TaskBody::GetNextTask);
  EXPECT_EQ(first->body_as_GetNextTask()->queue(), 2u);
  EXPECT_EQ(v.root()->buffers()->Get(first->body_as_GetNextTask()->outputs()->Get(0))->name()->str(), "predict/image");
  EXPECT_EQ(ReportNames(v, p), (std::vector<std::string>{g.tensor(g.outputs()[0]).name}));
  // Forward ops only, up to the logits: no loss, no metric, no update.
  for (const fb::KernelTask* k : Kernels(p)) {
    EXPECT_NE(k->op(), fb::OpCode::SparseSoftmaxCrossEntropy);
    EXPECT_NE(k->op(), fb::OpCode::ArgMaxAccuracy);
    EXPECT_NE(k->op(), fb::OpCode::MomentumUpdate);
  }
  EXPECT_EQ(Kernels(p).size(), 2u);  // two fused MatMul+BiasAdd[+Relu]
  EXPECT_EQ(cs.report.predict_tasks, p->streams()->Get(0)->tasks()->size());
  // Its transients share the bytes of the other programs' (they never run
  // together), so the arena does not grow.
  CompiledStream without = CompileOk(g);
  EXPECT_EQ(cs.report.liveness_lower_bound, without.report.liveness_lower_bound);
  EXPECT_LE(cs.report.arena_bytes, without.report.arena_bytes);

  // Without eval_step the predict queue is queue 1.
  CompiledStream no_eval = CompileOk(g, WithPredict(false));
  VerifiedStream nv = View(no_eval);
  ASSERT_NE(nv.root(), nullptr);
  ASSERT_EQ(nv.root()->queues()->size(), 2u);
  EXPECT_EQ(nv.root()->queues()->Get(1)->name()->str(), "predict");
  const fb::Program* np = nv.FindProgram(ProgramKind::PredictStep);
  ASSERT_NE(np, nullptr);
  EXPECT_EQ(np->streams()->Get(0)->tasks()->Get(0)->body_as_GetNextTask()->queue(), 1u);

  // A predict program needs an output.
  Graph no_output("no_output");
  TensorId x = no_output.Input("x", {4, 3});
  TensorId w = no_output.Param("w", {3, 2}, InitSpec::Normal(0, 1, 1));
  no_output.SetLoss(no_output.ReduceMean(no_output.MatMul(x, w)));
  auto r = host::Compile(no_output, WithPredict());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("predict_step needs a graph output"), std::string::npos);
}

TEST(Compiler, AccuracyComparesWithTheLossLabels) {
  // An i32 input before the labels: accuracy must use what the loss uses.
  Graph g("ids_first");
  TensorId x = g.Input("x", {8, 6});
  g.Input("ids", {8}, DType::I32);
  TensorId label = g.Input("label", {8}, DType::I32);
  TensorId w = g.Param("w", {6, 3}, InitSpec::HeUniform(1));
  TensorId logits = g.MatMul(x, w);
  g.AddOutput(logits);
  g.SetLoss(g.SparseSoftmaxCrossEntropy(logits, label));
  ASSERT_TRUE(g.status().ok()) << g.status().ToString();
  CompiledStream cs = CompileOk(g, WithPredict());
  VerifiedStream v = View(cs);
  ASSERT_NE(v.root(), nullptr);
  const fb::KernelTask* accuracy = nullptr;
  for (const fb::KernelTask* k : Kernels(v.FindProgram(ProgramKind::EvalStep)))
    if (k->op() == fb::OpCode::ArgMaxAccuracy) accuracy = k;
  ASSERT_NE(accuracy, nullptr);
  EXPECT_EQ(v.root()->buffers()->Get(accuracy->inputs()->Get(1))->name()->str(), "eval/label");
  EXPECT_EQ(cs.predict_columns, (std::vector<std::string>{"x"}));
}

}  // namespace
}  // namespace sinkrt
