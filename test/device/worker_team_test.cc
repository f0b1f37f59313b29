// WorkerTeam (device/src/team/worker_team.h): every part of every Run runs
// exactly once, on distinct threads at once, whether the workers are found
// polling or asleep; and the kernels that split across a team compute what
// they compute unsplit.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <pthread.h>
#include <sched.h>

#include "device/src/team/worker_team.h"
#include "sinkrt/device/in_process_device.h"
#include "sinkrt/host/compiler.h"
#include "support/feeder.h"
#include "support/kernel_runner.h"
#include "support/reference_ops.h"
#include "support/test_models.h"

namespace sinkrt::device {
namespace {

using namespace ::sinkrt::testing;
using fb::OpCode;
using Tensor = KernelTensor;

// Runs `rounds` Runs of `parts` parts, each part adding its index + 1 to its
// own counter, and checks every count.
void CheckEveryPartOnce(WorkerTeam& team, int parts, int rounds) {
  std::vector<int64_t> sums(parts, 0);
  for (int r = 0; r < rounds; ++r) team.Run(parts, [&](int p) { sums[p] += p + 1; });
  for (int p = 0; p < parts; ++p) EXPECT_EQ(sums[p], int64_t{rounds} * (p + 1)) << "part " << p;
}

TEST(WorkerTeam, EveryPartRunsOnceWhileTheWorkersPoll) {
  // The device's default poll (50 µs): back-to-back Runs find the workers
  // polling, unless the machine's other load has them descheduled.
  WorkerTeam team(2, /*spin_ns=*/50'000);
  EXPECT_EQ(team.size(), 2);
  CheckEveryPartOnce(team, 2, 5000);
  WorkerTeam three(3, 50'000);
  CheckEveryPartOnce(three, 3, 500);
  CheckEveryPartOnce(three, 2, 500);  // fewer parts than threads: the last worker sits out
}

TEST(WorkerTeam, EveryPartRunsOnceWhenTheWorkersSleepBetweenRuns) {
  // No polling at all: every Run wakes the workers through the futex, and
  // the caller sleeps for their ends.
  WorkerTeam team(2, /*spin_ns=*/0);
  CheckEveryPartOnce(team, 2, 5000);
}

TEST(WorkerTeam, PartsRunOnDistinctThreadsAtOnce) {
  WorkerTeam team(2, 0);
  // Part 0 waits (bounded) for part 1 to have started: they can only meet if
  // both run at the same time, part 0 on the caller.
  std::atomic<bool> one_started{false};
  std::thread::id ids[2];
  bool met = false;
  team.Run(2, [&](int p) {
    ids[p] = std::this_thread::get_id();
    if (p == 1) {
      one_started = true;
      return;
    }
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!one_started && std::chrono::steady_clock::now() < until) std::this_thread::yield();
    met = one_started;
  });
  EXPECT_TRUE(met);
  EXPECT_EQ(ids[0], std::this_thread::get_id());
  EXPECT_NE(ids[1], ids[0]);
}

TEST(WorkerTeam, TheCallerRunsThePartsOfWorkersThatHaveNotWoken) {
  // Workers that sleep at once (no poll) are still waking when the caller's
  // part, which does nothing, is done: the caller takes their parts rather
  // than wait. Which thread runs which part varies from run to run; that
  // each runs exactly once, and all before Run returns, may not.
  WorkerTeam team(3, /*spin_ns=*/0);
  std::vector<int64_t> sums(3, 0);
  std::atomic<int> on_caller{0};
  const std::thread::id caller = std::this_thread::get_id();
  for (int r = 0; r < 3000; ++r)
    team.Run(3, [&](int p) {
      sums[p] += p + 1;
      if (p > 0 && std::this_thread::get_id() == caller) ++on_caller;
    });
  for (int p = 0; p < 3; ++p) EXPECT_EQ(sums[p], int64_t{3000} * (p + 1)) << "part " << p;
  std::printf("parts of workers run by the caller: %d of 6000\n", on_caller.load());
}

TEST(WorkerTeam, OnePartOrOneThreadIsAPlainCall) {
  WorkerTeam solo(1, 0);
  std::thread::id where;
  solo.Run(4, [&](int p) {
    EXPECT_EQ(p, 0);
    where = std::this_thread::get_id();
  });
  EXPECT_EQ(where, std::this_thread::get_id());
  WorkerTeam pair(2, 0);
  int calls = 0;
  pair.Run(1, [&](int p) { calls += p + 1; });
  EXPECT_EQ(calls, 1);
}

TEST(WorkerTeam, DestroysWithWorkersAsleepOrPolling) {
  for (int64_t spin : {int64_t{0}, int64_t{1'000'000'000}}) {
    WorkerTeam team(4, spin);
    CheckEveryPartOnce(team, 4, 10);
  }  // each destructor joins its workers, polling or asleep
}

TEST(WorkerTeam, PinnedWorkersRunOnTheirCores) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  std::vector<int> cores;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cores.push_back(c);
  if (cores.size() < 2) GTEST_SKIP() << "one core: nothing to pin apart";
  WorkerTeam team(3, 0, {cores[0], cores[1]});
  int where[3] = {-1, -1, -1};
  std::thread::id who[3];
  // Part 0 waits (bounded) until both workers have their parts: otherwise
  // the caller would run a part whose worker had not woken yet.
  std::atomic<int> started{0};
  team.Run(3, [&](int p) {
    who[p] = std::this_thread::get_id();
    if (p > 0) {
      where[p] = sched_getcpu();
      ++started;
      return;
    }
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (started.load() < 2 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
  });
  ASSERT_EQ(started.load(), 2);
  EXPECT_NE(who[1], who[0]);
  EXPECT_NE(who[2], who[0]);
  EXPECT_EQ(where[1], cores[1]);
  EXPECT_EQ(where[2], cores[0]);  // worker 2 wraps around the list
}

TEST(WorkerTeam, APinnedDeviceGivesTheCallerItsAffinityBack) {
  cpu_set_t before;
  CPU_ZERO(&before);
  ASSERT_EQ(pthread_getaffinity_np(pthread_self(), sizeof before, &before), 0);
  if (CPU_COUNT(&before) < 2) GTEST_SKIP() << "one core: a device runs one thread";
  DeviceOptions o;
  o.threads = 2;
  o.pin_threads = true;
  InProcessDevice dev(o);
  host::CompileOptions co;
  co.optimizer = host::OptimizerSpec::Momentum(0.01f, 0.9f);
  auto cs = host::Compile(MakeMlp(64), co);
  ASSERT_TRUE(cs.ok()) << cs.status().ToString();
  ASSERT_TRUE(dev.Load(cs->stream).ok());
  const SyntheticData data = MakeSyntheticData(64 * 2, 784, 10, 1);
  ASSERT_TRUE(PushBatches(dev, 0, data, 64, 0, 2).ok());
  auto r = dev.RunSink(ProgramKind::TrainStep, 2);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  cpu_set_t after;
  CPU_ZERO(&after);
  ASSERT_EQ(pthread_getaffinity_np(pthread_self(), sizeof after, &after), 0);
  EXPECT_TRUE(CPU_EQUAL(&before, &after));
}

//===--- Kernels split across a team ------------------------------------------===//

// MatMul y = op(a)·op(b) (+ bias, ReLU) with and without a team of `threads`.
// oneDNN blocks a part's smaller M or N differently, and its K loop with
// it, so the split kernel rounds differently from the unsplit one (by
// ~1e-5 on these K ≤ 1000 sums of values in [-1, 1]): it must match the
// reference as closely as the unsplit kernel does, and give the same bits
// on every run.
void CheckMatMulSplit(int64_t m, int64_t k, int64_t n, bool ta, bool tb, bool bias_relu, int threads) {
  const std::string what = "MatMul " + std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n) +
                           (ta ? " ta" : "") + (tb ? " tb" : "") + (bias_relu ? " bias+relu" : "") + ", " +
                           std::to_string(threads) + " threads";
  const Tensor a = RandomTensor(ta ? Shape{k, m} : Shape{m, k}, 11);
  const Tensor b = RandomTensor(tb ? Shape{n, k} : Shape{k, n}, 12);
  const Tensor bias = RandomTensor({n}, 13);
  Tensor whole({m, n}), split({m, n});
  KernelRunner one(OpCode::MatMul);
  one.In(a).In(b).Out(whole).MatMulOpts(ta, tb);
  WorkerTeam team(threads, 0);
  KernelRunner many(OpCode::MatMul);
  many.In(a).In(b).Out(split).MatMulOpts(ta, tb).Team(&team);
  if (bias_relu) {
    one.Bias(bias).Relu();
    many.Bias(bias).Relu();
  }
  one.PrepareAndRun();
  many.PrepareAndRun();
  const std::vector<float> first = split.values();
  ASSERT_TRUE(many.Run().ok());  // twice: the same bits, the parts' scratch bindings hold
  ExpectBitwise(split, first, what + ", second run");
  const std::vector<float> unsplit = whole.values();
  ExpectClose(split, std::vector<double>(unsplit.begin(), unsplit.end()), 1e-4, 5e-5, what + " against unsplit");
  RefTensor want = RefMatMul(ToRef(a), ToRef(b), ta, tb);
  if (bias_relu) want = RefRelu(RefBiasAdd(want, ToRef(bias), 1));
  ExpectClose(split, want, 1e-4, 1e-5, what);
}

TEST(WorkerTeamKernels, MatMulSplitByRowsOrColumnsMatchesUnsplit) {
  // The MLP's products at batch 64 and 256 (split by rows where op(a) is
  // the larger operand, by columns otherwise), odd sizes whose parts are
  // not whole 16-blocks, and three threads.
  struct Case {
    int64_t m, k, n;
    bool ta, tb;
  };
  for (const Case c :
       {Case{256, 784, 512, false, false}, Case{64, 784, 512, false, false}, Case{784, 256, 512, true, false},
        Case{256, 512, 784, false, true}, Case{512, 64, 256, true, false}, Case{50, 300, 200, false, false},
        Case{300, 97, 45, true, true}, Case{33, 1000, 130, false, true}})
    for (bool fused : {false, true})
      for (int threads : {2, 3})
        if (threads == 2 || c.m * c.k * c.n < 4'000'000)  // three parts: the odd sizes only
          CheckMatMulSplit(c.m, c.k, c.n, c.ta, c.tb, fused, threads);
}

// One optimizer update over fresh copies of the same tensors, with or
// without a team: returns the tensors after it.
std::vector<Tensor> RunUpdate(OpCode op, bool nesterov, WorkerTeam* team) {
  const int64_t n = 100003;  // parts of 16-element multiples and a ragged tail
  const int states = op == OpCode::SgdUpdate ? 0 : op == OpCode::MomentumUpdate ? 1 : 2;
  std::vector<Tensor> t;
  t.push_back(RandomTensor({n}, 21));  // param
  t.push_back(RandomTensor({n}, 22));  // grad
  for (int s = 0; s < states; ++s) t.push_back(RandomTensor({n}, 23 + s, 0.0f, 1.0f));
  if (op == OpCode::AdamUpdate) {
    t.push_back(Tensor({2}));
    t.back().set({0.9f * 0.9f, 0.999f * 0.999f});
  }
  KernelRunner r(op);
  for (const Tensor& x : t) r.In(x);
  if (op == OpCode::SgdUpdate) r.Sgd(0.1f, 1e-4f);
  if (op == OpCode::MomentumUpdate) r.Momentum(0.1f, 0.9f, nesterov, 1e-4f);
  if (op == OpCode::AdamUpdate) r.Adam(1e-3f, 0.9f, 0.999f, 1e-8f, 1e-4f);
  if (team) r.Team(team);
  r.PrepareAndRun();
  return t;
}

TEST(WorkerTeamKernels, OptimizerUpdatesSplitGiveTheUnsplitBits) {
  WorkerTeam team(2, 0);
  struct Case {
    OpCode op;
    bool nesterov;
  };
  for (const Case c : {Case{OpCode::SgdUpdate, false}, Case{OpCode::MomentumUpdate, false},
                       Case{OpCode::MomentumUpdate, true}, Case{OpCode::AdamUpdate, false}}) {
    const std::vector<Tensor> whole = RunUpdate(c.op, c.nesterov, nullptr);
    const std::vector<Tensor> split = RunUpdate(c.op, c.nesterov, &team);
    for (size_t i = 0; i < whole.size(); ++i)
      ExpectBitwise(
          split[i], whole[i].values(),
          std::string(fb::EnumNameOpCode(c.op)) + (c.nesterov ? " (Nesterov)" : "") + " input " + std::to_string(i));
  }
}

TEST(WorkerTeamKernels, ActivationsSplitGiveTheUnsplitBits) {
  // The vectorised loops' ragged tails fall where they fall unsplit: parts
  // begin on 16-element bounds.
  const int64_t n = 70001;
  WorkerTeam team(2, 0);
  for (OpCode op : {OpCode::Relu, OpCode::Gelu, OpCode::Tanh, OpCode::Sigmoid, OpCode::ReluGrad, OpCode::GeluGrad,
                    OpCode::TanhGrad, OpCode::SigmoidGrad}) {
    const bool grad =
        op == OpCode::ReluGrad || op == OpCode::GeluGrad || op == OpCode::TanhGrad || op == OpCode::SigmoidGrad;
    const Tensor x = RandomTensor({n}, 31, -4.0f, 4.0f), dy = RandomTensor({n}, 32);
    Tensor whole({n}), split({n});
    for (Tensor* y : {&whole, &split}) {
      KernelRunner r(op);
      if (grad) r.In(dy);
      r.In(x).Out(*y);
      if (y == &split) r.Team(&team);
      r.PrepareAndRun();
    }
    ExpectBitwise(split, whole.values(), fb::EnumNameOpCode(op));
  }
}

TEST(WorkerTeamKernels, SoftmaxAndLayerNormSplitByRowsGiveTheUnsplitBits) {
  // The ViT's attention rows ([B,4,16,16], softmax over the last axis) and
  // its token rows ([B·16, 64]), with a ragged count of rows.
  WorkerTeam team(2, 0);
  const Shape att{37, 4, 16, 16};
  for (OpCode op : {OpCode::Softmax, OpCode::LogSoftmax}) {
    const Tensor x = RandomTensor(att, 51, -3.0f, 3.0f), dy = RandomTensor(att, 52);
    Tensor y[2] = {Tensor(att), Tensor(att)}, dx[2] = {Tensor(att), Tensor(att)};
    for (int split = 0; split < 2; ++split) {
      KernelRunner fwd(op), bwd(op == OpCode::Softmax ? OpCode::SoftmaxGrad : OpCode::LogSoftmaxGrad);
      fwd.In(x).Out(y[split]).Axis(3);
      bwd.In(dy).In(y[split]).Out(dx[split]).Axis(3);
      if (split) {
        fwd.Team(&team);
        bwd.Team(&team);
      }
      fwd.PrepareAndRun();
      bwd.PrepareAndRun();
    }
    ExpectBitwise(y[1], y[0].values(), std::string(fb::EnumNameOpCode(op)));
    ExpectBitwise(dx[1], dx[0].values(), std::string(fb::EnumNameOpCode(op)) + " grad");
  }
  const int64_t rows = 37 * 16 + 5, d = 64;
  const Tensor x = RandomTensor({rows, d}, 53), gamma = RandomTensor({d}, 54), beta = RandomTensor({d}, 55);
  Tensor y[2] = {Tensor({rows, d}), Tensor({rows, d})}, mean[2] = {Tensor({rows}), Tensor({rows})},
         rstd[2] = {Tensor({rows}), Tensor({rows})};
  for (int split = 0; split < 2; ++split) {
    KernelRunner r(OpCode::LayerNorm);
    r.In(x).In(gamma).In(beta).Out(y[split]).Out(mean[split]).Out(rstd[split]).LayerNormEpsilon(1e-5f);
    if (split) r.Team(&team);
    r.PrepareAndRun();
  }
  ExpectBitwise(y[1], y[0].values(), "LayerNorm y");
  ExpectBitwise(mean[1], mean[0].values(), "LayerNorm mean");
  ExpectBitwise(rstd[1], rstd[0].values(), "LayerNorm rstd");
}

TEST(WorkerTeamKernels, BatchMatMulSharesProductsWithoutChangingBits) {
  // The ViT's QK^T at batch 64: 256 products of [16,16]x[16,16].
  const Tensor a = RandomTensor({64, 4, 16, 16}, 41), b = RandomTensor({64, 4, 16, 16}, 42);
  Tensor whole({64, 4, 16, 16}), split({64, 4, 16, 16});
  WorkerTeam team(2, 0);
  for (Tensor* y : {&whole, &split}) {
    KernelRunner r(OpCode::BatchMatMul);
    r.In(a).In(b).Out(*y).MatMulOpts(false, true);
    if (y == &split) r.Team(&team);
    r.PrepareAndRun();
  }
  ExpectBitwise(split, whole.values(), "BatchMatMul");
}

}  // namespace
}  // namespace sinkrt::device
