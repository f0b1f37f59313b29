// DATA_PARALLEL compilation: fusion buckets per comm_fusion, the in-place
// gradient layout, the compute/comm streams and their events, gradients_mean,
// parameter_broadcast, MindSpore's validation messages, and the verifier's
// checks of multi-stream programs and collectives. Everything is read from
// the stream through the runtime's verifier, as a device would read it.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "host/src/parallel/data_parallel/fusion_buckets.h"
#include "host/src/util/schema_enums.h"
#include "sinkrt/fb/task_stream_generated.h"
#include "sinkrt/host/compiler.h"
#include "sinkrt/host/parallel_context.h"
#include "sinkrt/runtime/stream_format.h"
#include "sinkrt/runtime/task_stream_verifier.h"
#include "support/test_models.h"
#include "support/test_util.h"

namespace sinkrt {
namespace {

using host::CompiledStream;
using host::CompileOptions;
using host::Graph;
using host::OptimizerSpec;
using host::ParallelMode;

constexpr uint64_t kReadAll = kSupportedFeatures | kFeatureCollectives;

CompileOptions DataParallel(uint32_t world = 2, uint32_t rank = 0) {
  CompileOptions o;
  o.optimizer = OptimizerSpec::Momentum(0.01f, 0.9f);
  o.parallel_mode = ParallelMode::DataParallel;
  o.world_size = world;
  o.rank = rank;
  return o;
}

CompiledStream CompileOk(const Graph& g, const CompileOptions& o) {
  auto cs = host::Compile(g, o);
  EXPECT_TRUE(cs.ok()) << cs.status().ToString();
  return std::move(cs).value();  // throws on failure: gtest reports it and goes on
}

std::string CompileError(const Graph& g, const CompileOptions& o) {
  auto cs = host::Compile(g, o);
  return cs.ok() ? "(compiled)" : cs.status().message();
}

VerifiedStream View(const std::vector<uint8_t>& bytes) {
  auto v = VerifyTaskStream(bytes, kReadAll);
  EXPECT_TRUE(v.ok()) << v.status().ToString();
  return std::move(v).value();  // throws on failure: gtest reports it and goes on
}

using Tasks = flatbuffers::Vector<flatbuffers::Offset<fb::Task>>;

const Tasks& StreamTasks(const fb::Program* p, uint32_t stream) { return *p->streams()->Get(stream)->tasks(); }

std::vector<uint32_t> Indices(const flatbuffers::Vector<uint32_t>* v) {
  return v ? std::vector<uint32_t>(v->begin(), v->end()) : std::vector<uint32_t>{};
}

// Buffers a task reads or writes (kernels and GetNext; events touch none).
std::set<uint32_t> Touched(const fb::Task* t) {
  std::set<uint32_t> out;
  if (const auto* k = t->body_as_KernelTask()) {
    for (uint32_t b : Indices(k->inputs())) out.insert(b);
    for (uint32_t b : Indices(k->outputs())) out.insert(b);
    if (k->fused_bias() >= 0) out.insert(static_cast<uint32_t>(k->fused_bias()));
  }
  if (const auto* g = t->body_as_GetNextTask())
    for (uint32_t b : Indices(g->outputs())) out.insert(b);
  return out;
}

bool Writes(const fb::Task* t, uint32_t buffer) {
  const auto* k = t->body_as_KernelTask();
  if (!k) return false;
  std::vector<uint32_t> outs = Indices(k->outputs());
  return std::find(outs.begin(), outs.end(), buffer) != outs.end();
}

std::vector<const fb::AllReduceTask*> AllReduces(const fb::Program* p) {
  std::vector<const fb::AllReduceTask*> out;
  for (uint32_t s = 0; s < p->streams()->size(); ++s)
    for (const fb::Task* t : StreamTasks(p, s))
      if (const auto* a = t->body_as_AllReduceTask()) out.push_back(a);
  return out;
}

std::vector<std::vector<std::string>> BucketNames(const CompiledStream& cs) {
  std::vector<std::vector<std::string>> out;
  for (const host::GradientBucket& b : cs.report.buckets) out.push_back(b.gradients);
  return out;
}

// testing::BuffersWithRole reads like a device, which refuses these streams.
std::vector<uint32_t> BuffersWithRole(const std::vector<uint8_t>& bytes, BufferRole role) {
  std::vector<uint32_t> out;
  auto v = VerifyTaskStream(bytes, kReadAll);
  if (!v.ok()) return out;
  for (uint32_t i = 0; i < v->root()->buffers()->size(); ++i)
    if (FromFb(v->root()->buffers()->Get(i)->role()) == role) out.push_back(i);
  return out;
}

uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// Every property a DATA_PARALLEL train_step must have, whatever the model,
// optimizer and comm_fusion: checked on the stream alone.
void ExpectWellFormedDataParallel(const CompiledStream& cs, uint32_t world, bool mean) {
  VerifiedStream v = View(cs.stream.bytes());
  ASSERT_NE(v.root(), nullptr);
  const fb::TaskStream& s = *v.root();
  EXPECT_EQ(s.header()->world_size(), world);
  EXPECT_EQ(s.header()->requirements() & kFeatureCollectives, kFeatureCollectives);
  ASSERT_NE(s.groups(), nullptr);
  ASSERT_EQ(s.groups()->size(), 1u);
  EXPECT_EQ(s.groups()->Get(0)->name()->str(), "world");
  std::vector<uint32_t> ranks = Indices(s.groups()->Get(0)->ranks());
  ASSERT_EQ(ranks.size(), world);
  for (uint32_t r = 0; r < world; ++r) EXPECT_EQ(ranks[r], r);

  // Eval and predict never communicate.
  for (ProgramKind kind : {ProgramKind::EvalStep, ProgramKind::PredictStep})
    if (const fb::Program* p = v.FindProgram(kind)) {
      EXPECT_EQ(p->streams()->size(), 1u);
      EXPECT_EQ(p->num_events(), 0u);
      EXPECT_TRUE(AllReduces(p).empty());
    }

  const fb::Program* train = v.FindProgram(ProgramKind::TrainStep);
  ASSERT_NE(train, nullptr);
  ASSERT_EQ(train->streams()->size(), 2u);
  EXPECT_EQ(train->streams()->Get(0)->name()->str(), "compute");
  EXPECT_EQ(train->streams()->Get(1)->name()->str(), "comm");
  const Tasks& compute = StreamTasks(train, 0);
  const Tasks& comm = StreamTasks(train, 1);
  const size_t buckets = cs.report.buckets.size();
  ASSERT_GT(buckets, 0u);
  EXPECT_EQ(train->num_events(), 2 * buckets);
  EXPECT_EQ(cs.report.comm_tasks, 3 * buckets);

  // The comm stream: wait "ready", reduce, record "done", bucket by bucket.
  ASSERT_EQ(comm.size(), 3 * buckets);
  std::vector<std::vector<uint32_t>> bucket_buffers;
  for (size_t k = 0; k < buckets; ++k) {
    const auto* wait = comm.Get(3 * k)->body_as_EventWaitTask();
    const auto* reduce = comm.Get(3 * k + 1)->body_as_AllReduceTask();
    const auto* done = comm.Get(3 * k + 2)->body_as_EventRecordTask();
    ASSERT_TRUE(wait && reduce && done) << "comm task " << 3 * k;
    EXPECT_EQ(wait->event(), 2 * k);
    EXPECT_EQ(done->event(), 2 * k + 1);
    EXPECT_EQ(reduce->group(), 0u);
    EXPECT_EQ(reduce->op(), mean ? fb::ReduceOp::Mean : fb::ReduceOp::Sum);
    bucket_buffers.push_back(Indices(reduce->buffers()));
  }

  // In place over contiguous gradients: every Grad buffer in exactly one
  // bucket, the buckets laid out one after another in the table and the
  // arena, each one byte range.
  std::vector<uint32_t> grads = BuffersWithRole(cs.stream.bytes(), BufferRole::Grad);
  std::vector<uint32_t> concatenated;
  for (size_t k = 0; k < buckets; ++k) {
    const std::vector<uint32_t>& b = bucket_buffers[k];
    ASSERT_FALSE(b.empty());
    concatenated.insert(concatenated.end(), b.begin(), b.end());
    for (size_t i = 1; i < b.size(); ++i) {
      const fb::Buffer* prev = s.buffers()->Get(b[i - 1]);
      EXPECT_EQ(s.buffers()->Get(b[i])->offset(), AlignUp(prev->offset() + prev->bytes(), s.arena_alignment()));
    }
    const host::GradientBucket& report = cs.report.buckets[k];
    ASSERT_EQ(report.gradients.size(), b.size());
    for (size_t i = 0; i < b.size(); ++i) EXPECT_EQ(report.gradients[i], s.buffers()->Get(b[i])->name()->str());
    EXPECT_EQ(report.offset, s.buffers()->Get(b.front())->offset());
    EXPECT_EQ(report.offset + report.bytes, s.buffers()->Get(b.back())->offset() + s.buffers()->Get(b.back())->bytes());
  }
  EXPECT_EQ(concatenated, grads) << "gradients must be laid out bucket by bucket";

  // The compute stream: one "ready" record and one "done" wait per bucket.
  std::map<uint32_t, size_t> record_at, wait_at;
  for (uint32_t i = 0; i < compute.size(); ++i) {
    const fb::Task* t = compute.Get(i);
    EXPECT_EQ(t->body_as_AllReduceTask(), nullptr) << "collective on the compute stream";
    if (const auto* r = t->body_as_EventRecordTask()) {
      EXPECT_TRUE(record_at.emplace(r->event(), i).second);
    }
    if (const auto* w = t->body_as_EventWaitTask()) {
      EXPECT_TRUE(wait_at.emplace(w->event(), i).second);
    }
  }
  ASSERT_EQ(record_at.size(), buckets);
  ASSERT_EQ(wait_at.size(), buckets);
  for (size_t k = 0; k < buckets; ++k) {
    SCOPED_TRACE("bucket " + std::to_string(k));
    ASSERT_TRUE(record_at.count(2 * k) && wait_at.count(2 * k + 1));
    const size_t ready = record_at[2 * k], done = wait_at[2 * k + 1];
    ASSERT_LT(ready, done);
    const std::set<uint32_t> mine(bucket_buffers[k].begin(), bucket_buffers[k].end());
    // "ready" comes right after the last write of the bucket's gradients
    // (other buckets' records may sit between), never later.
    size_t last_write = 0;
    for (uint32_t i = 0; i < ready; ++i)
      for (uint32_t b : mine)
        if (Writes(compute.Get(i), b)) last_write = std::max<size_t>(last_write, i);
    for (size_t i = last_write + 1; i < ready; ++i)
      EXPECT_NE(compute.Get(static_cast<uint32_t>(i))->body_as_EventRecordTask(), nullptr)
          << "ready is recorded late: task " << i << " runs in between";
    // Nothing touches the gradients while they are being reduced, ...
    for (size_t i = ready + 1; i < done; ++i) {
      std::set<uint32_t> touched = Touched(compute.Get(static_cast<uint32_t>(i)));
      for (uint32_t b : mine) EXPECT_EQ(touched.count(b), 0u) << "task " << i << " touches buffer " << b;
    }
    // ... and the wait is no earlier than needed: the first non-wait task
    // after it uses the bucket (its optimizer update), unless the wait ends
    // the stream.
    size_t next = done + 1;
    while (next < compute.size() && compute.Get(static_cast<uint32_t>(next))->body_as_EventWaitTask()) ++next;
    if (next < compute.size()) {
      std::set<uint32_t> touched = Touched(compute.Get(static_cast<uint32_t>(next)));
      EXPECT_TRUE(std::any_of(mine.begin(), mine.end(), [&](uint32_t b) { return touched.count(b) > 0; }))
          << "the wait for bucket " << k << " comes before task " << next << ", which does not need it";
    }
  }
  // The updates run bucket by bucket, so the "done" waits come in bucket
  // order and bucket 0's updates overlap the later reductions.
  for (size_t k = 1; k < buckets; ++k) EXPECT_LT(wait_at[2 * k - 1], wait_at[2 * k + 1]) << "bucket " << k;
  // Every optimizer update of a gradient waits for its bucket.
  for (uint32_t i = 0; i < compute.size(); ++i) {
    const auto* k = compute.Get(i)->body_as_KernelTask();
    if (!k || (k->op() != fb::OpCode::SgdUpdate && k->op() != fb::OpCode::MomentumUpdate &&
               k->op() != fb::OpCode::AdamUpdate))
      continue;
    const uint32_t grad = k->inputs()->Get(1);
    for (size_t b = 0; b < buckets; ++b)
      if (std::count(bucket_buffers[b].begin(), bucket_buffers[b].end(), grad)) {
        EXPECT_GT(i, wait_at[2 * b + 1]) << "update task " << i << " runs before bucket " << b << " is reduced";
      }
  }
}

// ---- fusion buckets -----------------------------------------------------------------

const Graph& SmallMlp() {
  // fc1.weight [16, 12] 768 B, fc1.bias 48 B, fc2.weight [12, 4] 192 B, fc2.bias 16 B.
  static const Graph g = testing::MakeMlp(8, {16, 12, 4});
  return g;
}

TEST(DataParallelCompile, AutoFusesTheSmallMlpIntoOneAllReduce) {
  CompiledStream cs = CompileOk(SmallMlp(), DataParallel());
  ExpectWellFormedDataParallel(cs, 2, false);
  ASSERT_EQ(cs.report.buckets.size(), 1u);
  EXPECT_EQ(cs.report.buckets[0].gradients.size(), 4u);
  // 768 + 48 + 192 + 16, with 16 and 48 padded to 64 before a following gradient.
  EXPECT_GE(cs.report.buckets[0].bytes, 1024u);
  EXPECT_LE(cs.report.buckets[0].bytes, 1024u + 3 * 64);
}

TEST(DataParallelCompile, OpenstateFalseGivesOneAllReducePerGradient) {
  CompileOptions o = DataParallel();
  o.comm_fusion.openstate = false;
  CompiledStream cs = CompileOk(SmallMlp(), o);
  ExpectWellFormedDataParallel(cs, 2, false);
  ASSERT_EQ(cs.report.buckets.size(), 4u);
  // Reduced in the order backward finishes them: fc2 before fc1, so the
  // first AllReduces overlap the rest of backward.
  EXPECT_NE(cs.report.buckets.front().gradients[0].find("fc2."), std::string::npos);
  EXPECT_NE(cs.report.buckets.back().gradients[0].find("fc1."), std::string::npos);
  VerifiedStream v = View(cs.stream.bytes());
  const Tasks& compute = StreamTasks(v.FindProgram(ProgramKind::TrainStep), 0);
  size_t first_ready = 0, kernels_after = 0;
  for (uint32_t i = 0; i < compute.size(); ++i) {
    const auto* r = compute.Get(i)->body_as_EventRecordTask();
    if (r && r->event() == 0) first_ready = i;
    if (first_ready && compute.Get(i)->body_as_KernelTask()) ++kernels_after;
  }
  EXPECT_GT(first_ready, 0u);
  EXPECT_GT(kernels_after, 4u) << "bucket 0 should be ready well before backward ends";
}

// MindSpore's split as coded: N MB = N × 262144 bytes, and the gradient that
// crosses the threshold closes the bucket it joined.
TEST(DataParallelCompile, SizeModeSplitsAtTheThreshold) {
  for (double mb : {0.001, 0.0005}) {  // 262 and 131 bytes
    SCOPED_TRACE("size " + std::to_string(mb));
    CompileOptions o = DataParallel();
    o.comm_fusion.mode = "size";
    o.comm_fusion.size_mb = mb;
    CompiledStream cs = CompileOk(SmallMlp(), o);
    ExpectWellFormedDataParallel(cs, 2, false);
    const uint64_t threshold = static_cast<uint64_t>(mb * 262144);

    // Reference: walk the gradients in backward order (the buckets' own
    // order, since they follow it) with MindSpore's rule.
    std::vector<std::pair<std::string, uint64_t>> order;
    VerifiedStream v = View(cs.stream.bytes());
    for (const host::GradientBucket& b : cs.report.buckets)
      for (const std::string& name : b.gradients)
        order.emplace_back(name, v.root()->buffers()->Get(uint32_t(v.FindBuffer(name)))->bytes());
    ASSERT_EQ(order.size(), 4u);
    std::vector<std::vector<std::string>> expected(1);
    uint64_t acc = 0;
    for (const auto& [name, bytes] : order) {
      expected.back().push_back(name);
      if (acc + bytes > threshold) {
        expected.emplace_back();
        acc = 0;
      } else {
        acc += bytes;
      }
    }
    if (expected.back().empty()) expected.pop_back();
    EXPECT_EQ(BucketNames(cs), expected);
    // Backward ends with fc1.weight (768 B), which crosses 262 bytes and
    // closes the only bucket; at 131 bytes fc2's pair closes one first.
    EXPECT_EQ(cs.report.buckets.size(), mb == 0.001 ? 1u : 2u);
  }

  CompileOptions o = DataParallel();
  o.comm_fusion.mode = "size";
  // A threshold above the model's gradients is one bucket; a tiny one, one
  // per gradient.
  o.comm_fusion.size_mb = 1;
  EXPECT_EQ(CompileOk(SmallMlp(), o).report.buckets.size(), 1u);
  o.comm_fusion.size_mb = 1e-9;
  EXPECT_EQ(CompileOk(SmallMlp(), o).report.buckets.size(), 4u);
}

TEST(DataParallelCompile, SizeModeOnTheFullMlp) {
  // 784-512-256-10, backward order fc3 (10 KiB), fc2 (513 KiB), fc1 (1.53
  // MiB): fc2.weight crosses 1 "MB" (256 KiB) and closes the first bucket,
  // fc1.weight the second.
  CompileOptions o = DataParallel(4, 1);
  o.comm_fusion.mode = "size";
  o.comm_fusion.size_mb = 1;
  CompiledStream cs = CompileOk(testing::MakeMlp(16), o);
  ExpectWellFormedDataParallel(cs, 4, false);
  EXPECT_EQ(cs.report.buckets.size(), 2u);
  // Auto (64 MB = 16 MiB) holds the whole 2.1 MiB of gradients.
  EXPECT_EQ(CompileOk(testing::MakeMlp(16), DataParallel(4, 1)).report.buckets.size(), 1u);
}

// Split indices are inclusive bucket ends in parameter order (fc1.weight,
// fc1.bias, fc2.weight, fc2.bias); the buckets run as they become ready.
TEST(DataParallelCompile, IndexModeSplitsInParameterOrder) {
  auto buckets_for = [](std::vector<int> indices) {
    CompileOptions o = DataParallel();
    o.comm_fusion.mode = "index";
    o.comm_fusion.indices = indices;
    CompiledStream cs = CompileOk(SmallMlp(), o);
    ExpectWellFormedDataParallel(cs, 2, false);
    std::vector<std::vector<std::string>> names = BucketNames(cs);
    std::sort(names.begin(), names.end());  // compare as sets: the run order follows backward
    return names;
  };
  using Names = std::vector<std::vector<std::string>>;
  EXPECT_EQ(buckets_for({0}), (Names{{"fc1.bias/grad", "fc2.weight/grad", "fc2.bias/grad"}, {"fc1.weight/grad"}}));
  EXPECT_EQ(buckets_for({1, 2}), (Names{{"fc1.weight/grad", "fc1.bias/grad"}, {"fc2.bias/grad"}, {"fc2.weight/grad"}}));
  EXPECT_EQ(buckets_for({3}), (Names{{"fc1.weight/grad", "fc1.bias/grad", "fc2.weight/grad", "fc2.bias/grad"}}));
  EXPECT_EQ(buckets_for({0, 1, 2, 3}).size(), 4u);
}

TEST(DataParallelCompile, PlannerOrdersByReadiness) {
  using host::parallel::FusionGradient;
  std::vector<FusionGradient> grads = {
      {"w1", 400, DType::F32, 9}, {"b1", 40, DType::F32, 8}, {"w2", 400, DType::F32, 5}, {"b2", 40, DType::F32, 4}};
  host::CommFusion f;
  f.mode = "index";
  f.indices = {1};
  auto buckets = host::parallel::PlanFusionBuckets(grads, f);
  SINKRT_ASSERT_OK(buckets);
  ASSERT_EQ(buckets->size(), 2u);
  EXPECT_EQ((*buckets)[0].gradients, (std::vector<size_t>{2, 3}));  // ready at 5, parameter order inside
  EXPECT_EQ((*buckets)[1].gradients, (std::vector<size_t>{0, 1}));
  EXPECT_EQ((*buckets)[1].ready_at, 9);

  f.mode = "size";
  f.size_mb = 400.0 / 262144;  // 400 bytes: w2 takes b2's bucket past it and closes it
  buckets = host::parallel::PlanFusionBuckets(grads, f);
  SINKRT_ASSERT_OK(buckets);
  ASSERT_EQ(buckets->size(), 2u);
  EXPECT_EQ((*buckets)[0].gradients, (std::vector<size_t>{3, 2}));
  EXPECT_EQ((*buckets)[1].gradients, (std::vector<size_t>{1, 0}));

  grads[1].dtype = DType::BF16;  // a bucket holds one dtype
  f.size_mb = 64;
  buckets = host::parallel::PlanFusionBuckets(grads, f);
  SINKRT_ASSERT_OK(buckets);
  EXPECT_EQ(buckets->size(), 3u);
}

TEST(DataParallelCompile, EveryModelAndOptimizerIsWellFormed) {
  for (OptimizerSpec opt :
       {OptimizerSpec::Sgd(0.1f), OptimizerSpec::Momentum(0.01f, 0.9f, true), OptimizerSpec::Adam(0.001f)}) {
    for (const char* mode : {"auto", "size", "index", "off"}) {
      for (bool lenet : {false, true}) {
        SCOPED_TRACE(std::string(mode) + " optimizer " + std::to_string(int(opt.kind)) + (lenet ? " lenet" : " mlp"));
        CompileOptions o = DataParallel(3, 2);
        o.optimizer = opt;
        o.predict_program = true;
        o.gradients_mean = lenet;
        if (std::string(mode) == "off")
          o.comm_fusion.openstate = false;
        else
          o.comm_fusion.mode = mode;
        o.comm_fusion.size_mb = 0.01;
        o.comm_fusion.indices = {1, 4};
        CompiledStream cs = CompileOk(lenet ? testing::MakeLeNet(2) : testing::MakeMlp(4, {20, 16, 8, 3}), o);
        ExpectWellFormedDataParallel(cs, 3, lenet);
      }
    }
  }
}

// ---- the rest of the plan ---------------------------------------------------------------

TEST(DataParallelCompile, GradientsMeanSelectsMean) {
  CompileOptions o = DataParallel();
  o.comm_fusion.openstate = false;
  for (bool mean : {false, true}) {
    o.gradients_mean = mean;
    CompiledStream cs = CompileOk(SmallMlp(), o);
    ExpectWellFormedDataParallel(cs, 2, mean);
    VerifiedStream v = View(cs.stream.bytes());
    for (const fb::AllReduceTask* a : AllReduces(v.FindProgram(ProgramKind::TrainStep)))
      EXPECT_EQ(a->op(), mean ? fb::ReduceOp::Mean : fb::ReduceOp::Sum);
  }
}

TEST(DataParallelCompile, ParameterBroadcastEndsInit) {
  CompileOptions o = DataParallel(4, 2);
  CompiledStream plain = CompileOk(SmallMlp(), o);
  VerifiedStream pv = View(plain.stream.bytes());
  const Tasks& plain_init = StreamTasks(pv.FindProgram(ProgramKind::Init), 0);
  ASSERT_EQ(plain_init.size(), 1u);
  EXPECT_NE(plain_init.Get(0)->body_as_InitTask(), nullptr);

  o.parameter_broadcast = true;
  CompiledStream cs = CompileOk(SmallMlp(), o);
  ExpectWellFormedDataParallel(cs, 4, false);
  VerifiedStream v = View(cs.stream.bytes());
  const fb::Program* init = v.FindProgram(ProgramKind::Init);
  ASSERT_EQ(init->streams()->size(), 1u);
  const Tasks& tasks = StreamTasks(init, 0);
  ASSERT_EQ(tasks.size(), 2u);
  EXPECT_NE(tasks.Get(0)->body_as_InitTask(), nullptr);
  const fb::BroadcastTask* b = tasks.Get(1)->body_as_BroadcastTask();
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->group(), 0u);
  EXPECT_EQ(b->root(), 0u);
  EXPECT_EQ(Indices(b->buffers()), BuffersWithRole(cs.stream.bytes(), BufferRole::Param));
  EXPECT_EQ(Indices(b->buffers()).size(), 4u);
}

TEST(DataParallelCompile, RanksDifferOnlyInTheHeaderRank) {
  // Rank 0 is the schema default and left out of the header, so compare two
  // ranks that both store it, after giving one the other's rank and hash.
  CompiledStream r1 = CompileOk(SmallMlp(), DataParallel(4, 1));
  CompiledStream r3 = CompileOk(SmallMlp(), DataParallel(4, 3));
  ASSERT_NE(r1.stream.bytes(), r3.stream.bytes());
  ASSERT_EQ(r1.stream.bytes().size(), r3.stream.bytes().size());
  std::vector<uint8_t> relabelled = r3.stream.bytes();
  fb::Header* h = fb::GetMutableTaskStream(relabelled.data() + 4)->mutable_header();
  EXPECT_EQ(h->rank(), 3u);
  ASSERT_TRUE(h->mutate_rank(1));
  ASSERT_TRUE(h->mutate_graph_hash(r1.graph_hash));  // the cache key covers the rank
  EXPECT_EQ(relabelled, r1.stream.bytes());

  CompiledStream r0 = CompileOk(SmallMlp(), DataParallel(4, 0));
  EXPECT_EQ(View(r0.stream.bytes()).root()->header()->rank(), 0u);
  EXPECT_EQ(BucketNames(r0), BucketNames(r1));
  EXPECT_EQ(r0.report.arena_bytes, r1.report.arena_bytes);
}

TEST(DataParallelCompile, ArenaMatchesStandAlone) {
  // The same buffers, only the gradients reordered: no extra memory.
  for (bool lenet : {false, true}) {
    const Graph g = lenet ? testing::MakeLeNet(4) : testing::MakeMlp(32);
    CompileOptions sa;
    sa.optimizer = OptimizerSpec::Adam(0.001f);
    CompileOptions dp = DataParallel(2, 1);
    dp.optimizer = sa.optimizer;
    dp.comm_fusion.openstate = false;
    CompiledStream a = CompileOk(g, sa), b = CompileOk(g, dp);
    EXPECT_EQ(a.report.arena_bytes, b.report.arena_bytes);
    EXPECT_EQ(a.report.persistent_bytes, b.report.persistent_bytes);
    EXPECT_EQ(a.report.liveness_lower_bound, b.report.liveness_lower_bound);
  }
}

TEST(DataParallelCompile, StandAloneIsUnchanged) {
  CompileOptions base;
  base.optimizer = OptimizerSpec::Momentum(0.01f, 0.9f);
  base.world_size = 2;  // stand-alone has always accepted a header-only world size
  base.rank = 1;
  CompiledStream ref = CompileOk(SmallMlp(), base);
  CompileOptions noisy = base;
  noisy.gradients_mean = true;
  noisy.comm_fusion.mode = "size";
  noisy.comm_fusion.size_mb = 0.001;
  CompiledStream same = CompileOk(SmallMlp(), noisy);
  EXPECT_EQ(same.stream.bytes(), ref.stream.bytes()) << "stand-alone must ignore the data-parallel options";
  EXPECT_TRUE(ref.report.buckets.empty());
  EXPECT_EQ(ref.report.comm_tasks, 0u);

  auto device_view = VerifyTaskStream(ref.stream.bytes());  // what a device accepts today
  SINKRT_ASSERT_OK(device_view);
  const fb::TaskStream& s = *device_view->root();
  EXPECT_EQ(s.header()->requirements(), 0u);
  EXPECT_EQ(s.groups(), nullptr);
  for (const fb::Program* p : *s.programs()) {
    EXPECT_EQ(p->streams()->size(), 1u);
    EXPECT_EQ(p->num_events(), 0u);
  }
}

TEST(DataParallelCompile, DevicesWithoutCollectivesRefuseTheStream) {
  CompiledStream cs = CompileOk(SmallMlp(), DataParallel());
  auto v = VerifyTaskStream(cs.stream.bytes(), /*supported_features=*/0);  // a device built without collectives
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(v.status().message().find("requires feature bits 0x1"), std::string::npos) << v.status().ToString();
}

// ---- validation ------------------------------------------------------------------------

TEST(DataParallelCompile, CommFusionValidationMessages) {
  auto with = [](auto change) {
    CompileOptions o = DataParallel();
    change(o);
    return CompileError(SmallMlp(), o);
  };
  const std::string who = "For 'set_auto_parallel_context().set_all_reduce_fusion_split_indices', ";
  EXPECT_EQ(with([](CompileOptions& o) { o.comm_fusion.mode = "bucket"; }),
            "fusion method mode must be auto, index or size, but got bucket");
  EXPECT_EQ(with([](CompileOptions& o) {
              o.comm_fusion.mode = "size";
              o.comm_fusion.size_mb = -1;
            }),
            "fusion threshold must be larger than 0, but got -1.0");
  EXPECT_EQ(with([](CompileOptions& o) { o.comm_fusion.mode = "index"; }),
            who + "the argument 'indices' can not be empty");
  EXPECT_EQ(with([](CompileOptions& o) {
              o.comm_fusion.mode = "index";
              o.comm_fusion.indices = {2, 1, 1};
            }),
            "The indices has duplicate elements");
  EXPECT_EQ(with([](CompileOptions& o) {
              o.comm_fusion.mode = "index";
              o.comm_fusion.indices = {2, 1};
            }),
            who + "the elements in argument 'indices' must be sorted in ascending order");
  EXPECT_EQ(with([](CompileOptions& o) {
              o.comm_fusion.mode = "index";
              o.comm_fusion.indices = {-1, 2};
            }),
            who + "the argument 'indices' must be non-negative, but got -1.");
  // In range is a compile-time check: the model has 4 gradients.
  EXPECT_EQ(with([](CompileOptions& o) {
              o.comm_fusion.mode = "index";
              o.comm_fusion.indices = {1, 4};
            }),
            "AllReduce's split index 4 is Greater than or equal to total gradient's number 4");
}

TEST(DataParallelCompile, ParallelContextValidationMessages) {
  CompileOptions o = DataParallel(5000, 0);
  EXPECT_EQ(CompileError(SmallMlp(), o),
            "The context configuration parameter 'device_num' must be in [1, 4096], but got the value of "
            "device_num : 5000.");
  CompileOptions sa;
  sa.parameter_broadcast = true;
  EXPECT_EQ(CompileError(SmallMlp(), sa),
            "stand_alone, semi_auto_parallel and auto_parallel do not support parameter broadcast, parallel_mode: "
            "stand_alone, parameter_broadcast:True");
  // semi_auto_parallel compiles (semi_auto_train_test), and so does
  // auto_parallel, searched and then compiled as semi-auto
  // (auto_parallel_model_test).
  CompileOptions semi = DataParallel();
  semi.parallel_mode = ParallelMode::SemiAutoParallel;
  SINKRT_ASSERT_OK(host::Compile(SmallMlp(), semi));
  CompileOptions autop = DataParallel();
  autop.parallel_mode = ParallelMode::AutoParallel;
  auto r = host::Compile(SmallMlp(), autop);
  SINKRT_ASSERT_OK(r);
  EXPECT_TRUE(r->report.auto_parallel.has_value());

  host::ParallelContext c;
  c.mode = ParallelMode::DataParallel;
  c.device_num = 8;
  c.global_rank = 3;
  c.parameter_broadcast = true;
  EXPECT_EQ(c.Validate().code(), StatusCode::kUnimplemented);
  SINKRT_ASSERT_OK(c.Validate({ParallelMode::StandAlone, ParallelMode::DataParallel}));
}

// ---- the verifier on multi-stream programs -----------------------------------------------

class DataParallelVerifier : public ::testing::Test {
 protected:
  void SetUp() override {
    CompileOptions o = DataParallel(4, 1);
    o.comm_fusion.openstate = false;
    o.parameter_broadcast = true;
    bytes_ = CompileOk(SmallMlp(), o).stream.bytes();
    SINKRT_ASSERT_OK(VerifyTaskStream(bytes_, kReadAll));
  }

  fb::TaskStream* Root(std::vector<uint8_t>& bytes) { return fb::GetMutableTaskStream(bytes.data() + 4); }
  fb::Program* Program(std::vector<uint8_t>& bytes, ProgramKind kind) {
    auto* programs = Root(bytes)->mutable_programs();
    for (uint32_t i = 0; i < programs->size(); ++i)
      if (FromFb(programs->Get(i)->kind()) == kind) return programs->GetMutableObject(i);
    return nullptr;
  }
  fb::Task* TaskAt(std::vector<uint8_t>& bytes, uint32_t stream, uint32_t task) {
    return Program(bytes, ProgramKind::TrainStep)
        ->mutable_streams()
        ->GetMutableObject(stream)
        ->mutable_tasks()
        ->GetMutableObject(task);
  }

  void ExpectRefused(const std::vector<uint8_t>& bytes, const std::string& fragment) {
    auto v = VerifyTaskStream(bytes, kReadAll);
    ASSERT_FALSE(v.ok()) << "expected: " << fragment;
    EXPECT_NE(v.status().message().find(fragment), std::string::npos) << v.status().ToString();
  }

  std::vector<uint8_t> bytes_;
};

TEST_F(DataParallelVerifier, AllReduceBuffersMustBeContiguousAndAscending) {
  // Point bucket 0's AllReduce at two gradients out of order.
  std::vector<uint8_t> bad = bytes_;
  std::vector<uint32_t> grads = BuffersWithRole(bytes_, BufferRole::Grad);
  auto* reduce = const_cast<fb::AllReduceTask*>(TaskAt(bad, 1, 1)->body_as_AllReduceTask());
  ASSERT_NE(reduce, nullptr);
  ASSERT_EQ(reduce->buffers()->size(), 1u);
  reduce->mutable_buffers()->Mutate(0, grads[1]);
  SINKRT_ASSERT_OK(VerifyTaskStream(bad, kReadAll));  // one buffer is always contiguous

  CompileOptions o = DataParallel(4, 1);
  std::vector<uint8_t> fused = CompileOk(SmallMlp(), o).stream.bytes();
  auto* all = const_cast<fb::AllReduceTask*>(TaskAt(fused, 1, 1)->body_as_AllReduceTask());
  ASSERT_EQ(all->buffers()->size(), 4u);
  const uint32_t first = all->buffers()->Get(0), second = all->buffers()->Get(1);
  all->mutable_buffers()->Mutate(0, second);
  all->mutable_buffers()->Mutate(1, first);
  ExpectRefused(fused, "an AllReduce's buffers must be contiguous and ascending in the arena");
}

TEST_F(DataParallelVerifier, GroupsAndRootsMustExist) {
  std::vector<uint8_t> bad = bytes_;
  // Group 0 is the schema default and not stored: empty the group table
  // (a vector's length is the word it starts with).
  flatbuffers::WriteScalar<uint32_t>(const_cast<void*>(static_cast<const void*>(Root(bad)->groups())), 0);
  ExpectRefused(bad, "communicator group 0 is outside the group table (0 groups)");

  // Root 0 is the schema default and not stored, so take rank 0 out of the
  // group instead (this stream is rank 1's).
  bad = bytes_;
  ASSERT_NE(Program(bad, ProgramKind::Init)->streams()->Get(0)->tasks()->Get(1)->body_as_BroadcastTask(), nullptr);
  Root(bad)->mutable_groups()->GetMutableObject(0)->mutable_ranks()->Mutate(0, 2);
  ExpectRefused(bad, "root rank 0 is not a member of group 0 'world'");

  bad = bytes_;
  Root(bad)->mutable_groups()->GetMutableObject(0)->mutable_ranks()->Mutate(1, 0);
  ExpectRefused(bad, "this stream's rank 1 is not a member of group 0 'world'");
}

TEST_F(DataParallelVerifier, CollectivesNeedTheRequirementBit) {
  std::vector<uint8_t> bad = bytes_;
  ASSERT_TRUE(Root(bad)->mutable_header()->mutate_requirements(0));
  ExpectRefused(bad, "whose header does not require collectives");
  // A device built without collectives says Unimplemented.
  auto v = VerifyTaskStream(bad, /*supported_features=*/0);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kUnimplemented);
}

TEST_F(DataParallelVerifier, EveryWaitMustBeMet) {
  // Bucket 1's events (2 "ready", 3 "done"): event 0 is the schema default
  // and not stored, so it cannot be mutated.
  const fb::Program* train = View(bytes_).FindProgram(ProgramKind::TrainStep);
  const Tasks& compute = StreamTasks(train, 0);
  uint32_t ready1 = 0, done1 = 0;
  for (uint32_t i = 0; i < compute.size(); ++i) {
    if (const auto* r = compute.Get(i)->body_as_EventRecordTask(); r && r->event() == 2) ready1 = i;
    if (const auto* w = compute.Get(i)->body_as_EventWaitTask(); w && w->event() == 3) done1 = i;
  }
  ASSERT_GT(ready1, 0u);
  ASSERT_GT(done1, ready1);

  // Never recorded: the comm stream would wait for ever.
  std::vector<uint8_t> bad = bytes_;
  ASSERT_TRUE(const_cast<fb::EventRecordTask*>(TaskAt(bad, 0, ready1)->body_as_EventRecordTask())->mutate_event(4));
  ExpectRefused(bad, "stream 1 task 3 'bucket1/ready': waits on event 2 that no task of the program records");

  // Recorded only later in the waiting stream itself.
  bad = bytes_;
  ASSERT_TRUE(const_cast<fb::EventWaitTask*>(TaskAt(bad, 1, 3)->body_as_EventWaitTask())->mutate_event(3));
  ExpectRefused(bad, "waits on event 3 that only a later task of the same stream records");

  // Each stream waits on the other: compute's "ready 1" record and its later
  // "done 1" wait trade places, so compute waits for comm's "done 1" before
  // recording the "ready 1" that comm waits for.
  bad = bytes_;
  // Record and wait tables have the same layout; only the union type differs.
  auto retype = [&](uint32_t at, fb::TaskBody type, uint32_t event) {
    fb::Task* task = TaskAt(bad, 0, at);
    auto* table = reinterpret_cast<flatbuffers::Table*>(const_cast<void*>(task->body()));
    ASSERT_TRUE(table->SetField<uint32_t>(fb::EventWaitTask::VT_EVENT, event, 0));
    ASSERT_TRUE(reinterpret_cast<flatbuffers::Table*>(task)->SetField<uint8_t>(fb::Task::VT_BODY_TYPE,
                                                                               static_cast<uint8_t>(type), 0));
  };
  retype(ready1, fb::TaskBody::EventWaitTask, 3);
  retype(done1, fb::TaskBody::EventRecordTask, 2);
  ExpectRefused(bad,
                "waits on event 3 whose record in another stream is never reached: the streams wait on each other");
}

TEST_F(DataParallelVerifier, AtMostTwoStreams) {
  // A hand-built program with three empty streams.
  flatbuffers::FlatBufferBuilder fbb;
  auto header = fb::CreateHeaderDirect(fbb, kFormatMajor, kFormatMinor, 0, 1, "cpu");
  std::vector<flatbuffers::Offset<fb::Stream>> streams;
  for (const char* name : {"compute", "comm", "extra"}) streams.push_back(fb::CreateStreamDirect(fbb, name));
  std::vector<flatbuffers::Offset<fb::Program>> programs = {
      fb::CreateProgramDirect(fbb, "train_step", fb::ProgramKind::TrainStep, &streams)};
  fb::TaskStreamBuilder root(fbb);
  root.add_header(header);
  root.add_programs(fbb.CreateVector(programs));
  fb::FinishSizePrefixedTaskStreamBuffer(fbb, root.Finish());
  std::vector<uint8_t> bytes(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
  ExpectRefused(bytes, "3 streams, at most 2 (compute and comm) are supported");
}

}  // namespace
}  // namespace sinkrt
