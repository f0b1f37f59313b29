// The pipeline schedule (parallel/pipeline/pipeline_schedule.h, docs/design/pipeline.md):
// each stage's 1F1B and GPipe block order, the planned message order and
// its bubble, the refusals, the deadlock check on hand-made orders; and the
// memory plan that shows why 1F1B exists: a 1F1B stage holds activations
// for at most S - k micro-batches, a GPipe stage for all M.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "host/src/parallel/pipeline/pipeline_schedule.h"
#include "sinkrt/host/compiler.h"
#include "support/test_models.h"

namespace sinkrt {
namespace {

using host::parallel::CheckPipelineDeadlock;
using host::parallel::PipelineBlock;
using host::parallel::PipelineLink;
using host::parallel::PipelineMessage;
using host::parallel::PipelineSchedule;
using host::parallel::PlanPipelineSchedule;
using host::parallel::PredictedBubble;
using host::parallel::StageBlockOrder;

bool Verbose() { return std::getenv("SINKRT_TEST_VERBOSE") != nullptr; }

std::string Describe(const std::vector<PipelineBlock>& blocks) {
  std::string s;
  for (const PipelineBlock& b : blocks)
    s += std::string(s.empty() ? "" : " ") + (b.backward ? "B" : "F") + std::to_string(b.micro);
  return s;
}

// The most micro-batches whose F has run and whose B has not, over the order.
int MaxInFlight(const std::vector<PipelineBlock>& blocks) {
  int now = 0, most = 0;
  for (const PipelineBlock& b : blocks) {
    now += b.backward ? -1 : 1;
    most = std::max(most, now);
  }
  return most;
}

// Every micro-batch's F and B exactly once, F before B.
void ExpectEachMicroOnce(const std::vector<PipelineBlock>& blocks, int micro_size, const std::string& what) {
  ASSERT_EQ(blocks.size(), static_cast<size_t>(2 * micro_size)) << what;
  std::vector<int> f_at(micro_size, -1), b_at(micro_size, -1);
  for (size_t i = 0; i < blocks.size(); ++i) {
    const PipelineBlock& b = blocks[i];
    ASSERT_GE(b.micro, 0) << what;
    ASSERT_LT(b.micro, micro_size) << what;
    int& at = b.backward ? b_at[b.micro] : f_at[b.micro];
    EXPECT_EQ(at, -1) << what << ": " << (b.backward ? "B" : "F") << b.micro << " twice";
    at = static_cast<int>(i);
  }
  for (int m = 0; m < micro_size; ++m) {
    EXPECT_GE(f_at[m], 0) << what << ": no F" << m;
    EXPECT_LT(f_at[m], b_at[m]) << what << ": B" << m << " before F" << m;
  }
}

TEST(PipelineSchedule, OneFOneBBlockOrderFourStagesEightMicroBatches) {
  constexpr int S = 4, M = 8;
  for (int k = 0; k < S; ++k) {
    const std::vector<PipelineBlock> blocks = StageBlockOrder(S, k, M, /*gpipe=*/false);
    const std::string what = "stage " + std::to_string(k) + ": " + Describe(blocks);
    ExpectEachMicroOnce(blocks, M, what);
    ASSERT_EQ(blocks.size(), static_cast<size_t>(2 * M)) << what;
    const int warmup = std::min(S - k - 1, M);
    size_t i = 0;
    for (int m = 0; m < warmup; ++m, ++i) {
      EXPECT_FALSE(blocks[i].backward) << what << " at " << i;
      EXPECT_EQ(blocks[i].micro, m) << what << " at " << i;
    }
    for (int j = 0; j < M - warmup; ++j) {
      EXPECT_FALSE(blocks[i].backward) << what << " at " << i;
      EXPECT_EQ(blocks[i].micro, warmup + j) << what << " at " << i;
      ++i;
      EXPECT_TRUE(blocks[i].backward) << what << " at " << i;
      EXPECT_EQ(blocks[i].micro, j) << what << " at " << i;
      ++i;
    }
    for (int m = M - warmup; m < M; ++m, ++i) {
      EXPECT_TRUE(blocks[i].backward) << what << " at " << i;
      EXPECT_EQ(blocks[i].micro, m) << what << " at " << i;
    }
    EXPECT_EQ(MaxInFlight(blocks), S - k) << what;
    if (Verbose()) std::printf("1f1b %s\n", what.c_str());
  }
}

TEST(PipelineSchedule, OneFOneBWarmupIsCappedByMicroSize) {
  // More stages than micro-batches (Compile refuses it, the order does
  // not): stage 0 of 4 with M = 2 warms up with both forwards.
  const std::vector<PipelineBlock> blocks = StageBlockOrder(4, 0, 2, false);
  ExpectEachMicroOnce(blocks, 2, Describe(blocks));
  EXPECT_EQ(Describe(blocks), "F0 F1 B0 B1");
  EXPECT_EQ(MaxInFlight(blocks), 2);
}

TEST(PipelineSchedule, GpipeBlockOrder) {
  constexpr int S = 4, M = 8;
  for (int k = 0; k < S; ++k) {
    const std::vector<PipelineBlock> blocks = StageBlockOrder(S, k, M, /*gpipe=*/true);
    const std::string what = "stage " + std::to_string(k) + ": " + Describe(blocks);
    ExpectEachMicroOnce(blocks, M, what);
    ASSERT_EQ(blocks.size(), static_cast<size_t>(2 * M)) << what;
    for (int m = 0; m < M; ++m) {
      EXPECT_FALSE(blocks[m].backward) << what;
      EXPECT_EQ(blocks[m].micro, m) << what;
      EXPECT_TRUE(blocks[M + m].backward) << what;
      EXPECT_EQ(blocks[M + m].micro, m) << what;
    }
    EXPECT_EQ(MaxInFlight(blocks), M) << what;
  }
}

std::vector<PipelineLink> Chain(int stages) {
  std::vector<PipelineLink> links;
  for (int k = 0; k + 1 < stages; ++k) links.push_back({.from = k, .to = k + 1, .grad = true});
  return links;
}

// The messages are sorted by `order`, which numbers them 0..n-1, and each
// (link, micro, direction) the links call for is there exactly once. With
// `timed`, their simulated times never go back (a chain's order is the
// simulated one; with skip links a message may have to let a later one go
// first).
void ExpectWellFormedMessages(const PipelineSchedule& s, const std::string& what, bool timed = false) {
  size_t expected = 0;
  for (const PipelineLink& l : s.links) expected += static_cast<size_t>(s.micro_size) * (l.grad ? 2 : 1);
  ASSERT_EQ(s.messages.size(), expected) << what;
  std::set<std::tuple<int, int, bool>> seen;
  for (size_t i = 0; i < s.messages.size(); ++i) {
    const PipelineMessage& m = s.messages[i];
    EXPECT_EQ(m.order, static_cast<int64_t>(i)) << what;
    if (timed && i > 0) {
      EXPECT_LE(s.messages[i - 1].time, m.time) << what << ": message " << i;
    }
    ASSERT_GE(m.link, 0) << what;
    ASSERT_LT(m.link, static_cast<int>(s.links.size())) << what;
    EXPECT_TRUE(!m.backward || s.links[m.link].grad) << what << ": a gradient on a link that carries none";
    EXPECT_TRUE(seen.insert({m.link, m.micro, m.backward}).second)
        << what << ": link " << m.link << " micro " << m.micro << (m.backward ? " backward" : " forward") << " twice";
  }
  for (size_t l = 0; l < s.links.size(); ++l)
    for (int m = 0; m < s.micro_size; ++m) {
      EXPECT_NE(s.Find(static_cast<int>(l), m, false), nullptr) << what << ": no activation " << m << " on link " << l;
      if (s.links[l].grad) {
        EXPECT_NE(s.Find(static_cast<int>(l), m, true), nullptr) << what << ": no gradient " << m << " on link " << l;
      }
    }
}

TEST(PipelineSchedule, ChainsPlanWithTheTextbookBubble) {
  for (const std::string scheduler : {"1f1b", "gpipe"})
    for (int S : {2, 4})
      for (int M : {4, 8, 16}) {
        const std::string what = scheduler + " S=" + std::to_string(S) + " M=" + std::to_string(M);
        auto s = PlanPipelineSchedule(S, M, scheduler, Chain(S));
        ASSERT_TRUE(s.ok()) << what << ": " << s.status().ToString();
        EXPECT_EQ(s->stages, S);
        EXPECT_EQ(s->micro_size, M);
        EXPECT_EQ(s->gpipe, scheduler == "gpipe");
        ASSERT_EQ(s->blocks.size(), static_cast<size_t>(S)) << what;
        for (int k = 0; k < S; ++k)
          EXPECT_EQ(Describe(s->blocks[k]), Describe(StageBlockOrder(S, k, M, s->gpipe))) << what << " stage " << k;
        ExpectWellFormedMessages(*s, what, /*timed=*/true);
        // Equal stages, backward = 2 forward: the run is M + S - 1 slots of
        // F + B, of which each stage is busy for M.
        const double want = static_cast<double>(S - 1) / static_cast<double>(M + S - 1);
        EXPECT_NEAR(PredictedBubble(*s), want, 1e-9) << what;
        EXPECT_NEAR(s->makespan, 3.0 * (M + S - 1), 1e-9) << what;
        EXPECT_TRUE(CheckPipelineDeadlock(*s).ok()) << what;
      }
}

TEST(PipelineSchedule, SkipLinkPlans) {
  // Stage 0 feeds stage 2 directly as well as through stage 1 (a residual
  // around the middle stage).
  const std::vector<PipelineLink> links = {{.from = 0, .to = 1}, {.from = 1, .to = 2}, {.from = 0, .to = 2}};
  for (const std::string scheduler : {"1f1b", "gpipe"}) {
    auto s = PlanPipelineSchedule(3, 6, scheduler, links);
    ASSERT_TRUE(s.ok()) << scheduler << ": " << s.status().ToString();
    ExpectWellFormedMessages(*s, scheduler);
    // Stage 2's F_m needs both of stage 0's and stage 1's activations m.
    for (int m = 0; m < 6; ++m)
      EXPECT_LE(s->Find(2, m, false)->order, s->Find(1, m, false)->order) << scheduler << " micro " << m;
  }
}

// Every link pattern between 3 or 4 stages that goes forward (each stage
// feeding the next, plus any skips), for either scheduler, with unequal
// stage costs: the planned order never deadlocks.
TEST(PipelineSchedule, EverySkipPatternPlans) {
  for (int S : {3, 4}) {
    std::vector<std::pair<int, int>> skips;
    for (int a = 0; a < S; ++a)
      for (int b = a + 2; b < S; ++b) skips.emplace_back(a, b);
    for (unsigned mask = 0; mask < (1u << skips.size()); ++mask)
      for (const std::string scheduler : {"1f1b", "gpipe"})
        for (int M : {S, 2 * S + 1})
          for (bool equal : {true, false}) {
            std::vector<PipelineLink> links = Chain(S);
            for (size_t i = 0; i < skips.size(); ++i)
              if (mask & (1u << i))
                links.push_back({.from = skips[i].first, .to = skips[i].second, .grad = i % 2 == 0});
            std::vector<double> fwd, bwd;
            for (int k = 0; k < S && !equal; ++k) {
              fwd.push_back(1.0 + 0.5 * k);
              bwd.push_back(3.0 - 0.4 * k);
            }
            const std::string what =
                scheduler + " S=" + std::to_string(S) + " M=" + std::to_string(M) + " skips " + std::to_string(mask);
            auto s = PlanPipelineSchedule(S, M, scheduler, links, fwd, bwd);
            ASSERT_TRUE(s.ok()) << what << ": " << s.status().ToString();
            ExpectWellFormedMessages(*s, what);
          }
  }
}

TEST(PipelineSchedule, NonDifferentiableLinkPlans) {
  // Stage 1 -> 2 carries something without a gradient (an index, a mask):
  // its backward sends nothing back, and stage 1's B waits for no message.
  const std::vector<PipelineLink> links = {
      {.from = 0, .to = 1, .grad = true}, {.from = 1, .to = 2, .grad = false}, {.from = 0, .to = 2, .grad = true}};
  for (const std::string scheduler : {"1f1b", "gpipe"}) {
    auto s = PlanPipelineSchedule(3, 4, scheduler, links);
    ASSERT_TRUE(s.ok()) << scheduler << ": " << s.status().ToString();
    ExpectWellFormedMessages(*s, scheduler);
    for (int m = 0; m < 4; ++m) EXPECT_EQ(s->Find(1, m, true), nullptr) << scheduler;
  }
}

void ExpectError(const Result<PipelineSchedule>& r, const std::vector<std::string>& words) {
  ASSERT_FALSE(r.ok());
  for (const std::string& w : words)
    EXPECT_NE(r.status().message().find(w), std::string::npos) << r.status().ToString();
}

TEST(PipelineSchedule, RefusalsNameWhatIsWrong) {
  ExpectError(PlanPipelineSchedule(0, 4, "1f1b", {}), {"stages 0", "out of range"});
  ExpectError(PlanPipelineSchedule(2, 0, "1f1b", Chain(2)), {"micro_size 0", "out of range"});
  ExpectError(PlanPipelineSchedule(2, 4, "interleaved", Chain(2)), {"scheduler", "'interleaved'", "1f1b", "gpipe"});
  ExpectError(PlanPipelineSchedule(3, 4, "1f1b", {{.from = 2, .to = 1}}),
              {"from stage 2 to stage 1", "does not go forward"});
}

// The 2-stage, 4 micro-batch 1F1B plan: stage 0 runs F0 F1 B0 F2 B1 F3 B2
// B3, stage 1 F0 B0 F1 B1 F2 B2 F3 B3; its messages (A: activation, G:
// gradient) in order A0 A1 G0 A2 G1 A3 G2 G3.
PipelineSchedule TwoStagePlan() {
  auto s = PlanPipelineSchedule(2, 4, "1f1b", Chain(2));
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? *s : PipelineSchedule{};
}

PipelineMessage& Message(PipelineSchedule& s, int micro, bool backward) {
  for (PipelineMessage& m : s.messages)
    if (m.link == 0 && m.micro == micro && m.backward == backward) return m;
  ADD_FAILURE() << "no message";
  return s.messages.front();
}

void SortByOrder(PipelineSchedule& s) {
  std::sort(s.messages.begin(), s.messages.end(),
            [](const PipelineMessage& a, const PipelineMessage& b) { return a.order < b.order; });
}

void ExpectDeadlock(const Status& st) {
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("deadlocks"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("stage 0"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("stage 1"), std::string::npos) << st.ToString();
  if (Verbose()) std::printf("%s\n", st.ToString().c_str());
}

TEST(PipelineSchedule, TwoStagePlanHasTheExpectedOrder) {
  const PipelineSchedule s = TwoStagePlan();
  std::string order;
  for (const PipelineMessage& m : s.messages)
    order += std::string(order.empty() ? "" : " ") + (m.backward ? "G" : "A") + std::to_string(m.micro);
  EXPECT_EQ(order, "A0 A1 G0 A2 G1 A3 G2 G3");
}

// Reversed, the first message both comm streams wait at is G3, which stage
// 1 only marks ready after B3, which follows F0 on its compute stream, which
// waits for A0: the last message of the comm streams.
TEST(PipelineSchedule, DeadlockCheckRefusesTheReversedOrder) {
  PipelineSchedule s = TwoStagePlan();
  const int64_t n = static_cast<int64_t>(s.messages.size());
  for (PipelineMessage& m : s.messages) m.order = n - 1 - m.order;
  SortByOrder(s);
  ExpectDeadlock(CheckPipelineDeadlock(s));
}

// One swap is enough: with A2 ahead of G0, stage 0's comm stream waits at
// A2 for stage 0's compute to mark it ready, after F2; but stage 0 runs B0
// before F2, and B0 waits for G0, which its comm stream only moves after
// A2. (Stage 1 is stuck too: before marking G1 ready it waits for G0, the
// previous send on its channel.)
TEST(PipelineSchedule, DeadlockCheckRefusesAnActivationOvertakingTheGradientItWaitsFor) {
  PipelineSchedule s = TwoStagePlan();
  std::swap(Message(s, 0, true).order, Message(s, 2, false).order);
  SortByOrder(s);
  const Status st = CheckPipelineDeadlock(s);
  ExpectDeadlock(st);
  EXPECT_NE(st.message().find("gradient 0"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("activation 2"), std::string::npos) << st.ToString();
}

// Not every swap hangs: G0 ahead of A1 still runs, since stage 1 marks G0
// ready after B0, which needs only A0, and stage 0 arms G0 before F1.
TEST(PipelineSchedule, DeadlockCheckAcceptsAHarmlessSwap) {
  PipelineSchedule s = TwoStagePlan();
  std::swap(Message(s, 0, true).order, Message(s, 1, false).order);
  SortByOrder(s);
  const Status st = CheckPipelineDeadlock(s);
  EXPECT_TRUE(st.ok()) << st.ToString();
}

// The comm streams run the messages in `order` (that is what the compiled
// stream's comm_order carries), so the check must follow `order` too, not
// the messages' positions in the vector.
TEST(PipelineSchedule, DeadlockCheckFollowsOrderNotPosition) {
  PipelineSchedule s = TwoStagePlan();
  std::swap(Message(s, 0, true).order, Message(s, 2, false).order);
  ExpectDeadlock(CheckPipelineDeadlock(s));

  PipelineSchedule sorted_elsewhere = TwoStagePlan();
  std::reverse(sorted_elsewhere.messages.begin(), sorted_elsewhere.messages.end());
  EXPECT_TRUE(CheckPipelineDeadlock(sorted_elsewhere).ok());
}

// --- The memory plan ------------------------------------------------------

// A train_step buffer of micro-batch m ("mb<m>/..."), by what holds it.
enum class Held {
  Activation,  // a forward tensor of the network, or a received one ("mb<m>/recv/...")
  Loss,        // the micro-batch's loss, read by the step's mean after the last forward
  Backward,    // a backward temporary (a gradient, what a gradient Send reads)
};

struct MicroBuffer {
  int micro = 0;
  Held held = Held::Activation;
  std::string name;
  int32_t first_use = 0, last_use = 0;
};

// The micro-batch an activation named "mb<m>/..." belongs to, or -1.
int MicroOf(const std::string& name) {
  if (name.rfind("mb", 0) != 0) return -1;
  const size_t slash = name.find('/');
  if (slash == std::string::npos || slash == 2) return -1;
  int m = 0;
  for (size_t i = 2; i < slash; ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    m = m * 10 + (name[i] - '0');
  }
  return m;
}

struct StageMemory {
  uint64_t arena_bytes = 0;
  size_t train_tasks = 0;
  std::vector<MicroBuffer> buffers;  // train_step's "mb<m>/..." Activation buffers (views left out)

  // The most micro-batches that hold a live buffer of a kind in `kinds` at
  // one task of train_step, and the first task where that is reached.
  std::pair<int, int32_t> MaxAlive(std::set<Held> kinds) const {
    std::pair<int, int32_t> best{0, -1};
    for (int32_t t = 0; t < static_cast<int32_t>(train_tasks); ++t) {
      std::set<int> alive;
      for (const MicroBuffer& b : buffers)
        if (kinds.count(b.held) && b.first_use <= t && t <= b.last_use) alive.insert(b.micro);
      if (static_cast<int>(alive.size()) > best.first) best = {static_cast<int>(alive.size()), t};
    }
    return best;
  }
  std::string LiveAt(int32_t t) const {
    std::string s;
    for (const MicroBuffer& b : buffers)
      if (b.first_use <= t && t <= b.last_use) s += " " + b.name;
    return s;
  }
};

struct CompiledStage {
  host::CompileReport report;
  StageMemory memory;
};

// The 6-layer MLP on 2 stages x 1 rank, M = 8 micro-batches of 2 rows.
CompiledStage CompileStage(int rank, const std::string& scheduler) {
  const host::Graph net = testing::MakeMlp(16, {32, 48, 48, 48, 48, 48, 10});
  std::set<std::string> forward_names;
  for (const host::TensorInfo& t : net.tensors()) forward_names.insert(t.name);
  const std::string loss_name = net.tensor(net.loss()).name;

  host::CompileOptions o;
  o.optimizer = host::OptimizerSpec::Momentum(0.05f, 0.9f);
  o.parallel_mode = host::ParallelMode::DataParallel;
  o.world_size = 2;
  o.rank = static_cast<uint32_t>(rank);
  o.eval_program = false;
  o.gradients_mean = true;
  o.pipeline.stages = 2;
  o.pipeline.micro_size = 8;
  o.pipeline.scheduler = scheduler;
  auto cs = host::Compile(net, o);
  EXPECT_TRUE(cs.ok()) << cs.status().ToString();
  CompiledStage out;
  if (!cs.ok()) return out;
  out.report = cs->report;
  EXPECT_EQ(out.report.pipeline_stage, rank);
  StageMemory& mem = out.memory;
  mem.arena_bytes = out.report.arena_bytes;
  mem.train_tasks = out.report.train_tasks;
  for (const host::PlannedBuffer& b : out.report.buffers) {
    if (b.program != ProgramKind::TrainStep || b.role != BufferRole::Activation) continue;
    if (b.last_use < b.first_use) continue;  // a view: its root carries its range
    const int m = MicroOf(b.name);
    if (m < 0) continue;
    const std::string rest = b.name.substr(b.name.find('/') + 1);
    Held held = Held::Backward;
    if (rest == loss_name) {
      held = Held::Loss;
    } else if (rest.rfind("recv/", 0) == 0 || forward_names.count(rest)) {
      held = Held::Activation;
    }
    mem.buffers.push_back({m, held, b.name, b.first_use, b.last_use});
  }
  return out;
}

void PrintStage(const std::string& what, const CompiledStage& s) {
  if (!Verbose()) return;
  const StageMemory& m = s.memory;
  const auto act = m.MaxAlive({Held::Activation});
  const auto all = m.MaxAlive({Held::Activation, Held::Backward, Held::Loss});
  std::printf("%s: arena %llu bytes (liveness bound %llu), %zu tasks\n", what.c_str(),
              static_cast<unsigned long long>(m.arena_bytes),
              static_cast<unsigned long long>(s.report.liveness_lower_bound), m.train_tasks);
  std::printf("  activations of at most %d micro-batches, first at task %d:%s\n", act.first, act.second,
              m.LiveAt(act.second).c_str());
  std::printf("  any mb buffer of at most %d micro-batches, first at task %d:%s\n", all.first, all.second,
              m.LiveAt(all.second).c_str());
}

// The memory plan of the issue: per stage k of S, 1F1B keeps the forward
// activations of at most S - k micro-batches, GPipe of all M, and the arena
// shows it.
TEST(PipelineMemory, OneFOneBHoldsFewerMicroBatchesThanGpipe) {
  constexpr int S = 2, M = 8;
  const CompiledStage f0 = CompileStage(0, "1f1b"), f1 = CompileStage(1, "1f1b");
  const CompiledStage g0 = CompileStage(0, "gpipe"), g1 = CompileStage(1, "gpipe");
  PrintStage("1f1b stage 0", f0);
  PrintStage("1f1b stage 1", f1);
  PrintStage("gpipe stage 0", g0);
  PrintStage("gpipe stage 1", g1);
  const std::set<Held> activations = {Held::Activation};

  // Stage 0 (F0 F1 B0 F2 B1 ...): F_{m+1} runs while m waits for its
  // backward. The receive armed one block ahead is B_m's gradient, armed
  // before F_{m+1}: micro-batch m is in flight already, so it adds none.
  EXPECT_EQ(f0.memory.MaxAlive(activations).first, S - 0);
  // Stage 1 (F0 B0 F1 B1 ...) has one micro-batch in flight, plus the
  // next one's received activation: Recv is armed one block ahead, at the
  // start of B_m, and its buffer may be written from then on.
  EXPECT_EQ(f1.memory.MaxAlive(activations).first, S - 1 + 1);
  // Counting its backward temporaries too, stage 1 holds one more: the
  // gradient B_{m-1} sends back lives until the compute stream waits for
  // that send to be done, right before the next send on the channel (in
  // B_m; pipeline_comm.h).
  EXPECT_EQ(f1.memory.MaxAlive({Held::Activation, Held::Backward}).first, S - 1 + 2);
  // And every micro-batch's loss (4 bytes) lives until the step's loss,
  // their mean, is taken after the last forward.
  EXPECT_EQ(f1.memory.MaxAlive({Held::Loss}).first, M);

  // GPipe: every forward before any backward.
  EXPECT_EQ(g0.memory.MaxAlive(activations).first, M);
  EXPECT_EQ(g1.memory.MaxAlive(activations).first, M);

  EXPECT_LT(f0.memory.arena_bytes, g0.memory.arena_bytes);
  EXPECT_LT(f1.memory.arena_bytes, g1.memory.arena_bytes);
}

}  // namespace
}  // namespace sinkrt
