// Gloo's AllReduce (Debian's libgloo-dev) timed like sinkrt's
// (allreduce_harness.h), for bench/compare_allreduce.
//
//   gloo_allreduce [--ranks N] [--sizes 4K,...] [--mlp] [--algos a,b]
//
// Ranks are processes (forked here), over Gloo's TCP transport on
// 127.0.0.1, meeting through a FileStore in a temporary directory. This
// Gloo has no shared-memory transport, so the transport is always "tcp".
// Algorithms (one JSON line each per size; the script keeps the fastest):
//   ring_chunked      AllreduceRingChunked (legacy API, 2n chunks)
//   halving_doubling  AllreduceHalvingDoubling (legacy API)
//   bcube             AllreduceBcube (legacy API)
//   ring              gloo::allreduce, AllreduceOptions::RING (the new API's default)
//   new_bcube         gloo::allreduce, AllreduceOptions::BCUBE
// The legacy algorithms allocate and register their buffers when built, so
// each is built once per size and run repeatedly; that setup is not timed.
#include <gloo/allreduce.h>
#include <gloo/allreduce_bcube.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "allreduce_harness.h"

namespace ah = allreduce_harness;

namespace {

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

void Barrier(const std::shared_ptr<gloo::Context>& ctx) {
  gloo::BarrierOptions opts(ctx);
  gloo::barrier(opts);
}

// An AllReduce over `count` floats at `p` with one algorithm, built once.
std::function<void()> MakeOp(const std::string& algo, const std::shared_ptr<gloo::Context>& ctx, float* p,
                             size_t count) {
  const int c = static_cast<int>(count);
  if (algo == "ring_chunked") {
    auto a = std::make_shared<gloo::AllreduceRingChunked<float>>(ctx, std::vector<float*>{p}, c);
    return [a] { a->run(); };
  }
  if (algo == "halving_doubling") {
    auto a = std::make_shared<gloo::AllreduceHalvingDoubling<float>>(ctx, std::vector<float*>{p}, c);
    return [a] { a->run(); };
  }
  if (algo == "bcube") {
    auto a = std::make_shared<gloo::AllreduceBcube<float>>(ctx, std::vector<float*>{p}, c);
    return [a] { a->run(); };
  }
  auto opts = std::make_shared<gloo::AllreduceOptions>(ctx);
  opts->setAlgorithm(algo == "new_bcube" ? gloo::AllreduceOptions::Algorithm::BCUBE
                                         : gloo::AllreduceOptions::Algorithm::RING);
  opts->setOutput(p, count);
  opts->setReduceFunction(static_cast<ReduceFn>(&gloo::sum<float>));
  return [opts] { gloo::allreduce(*opts); };
}

int Rank(int r, const std::string& dir, const ah::Args& args) {
  const int n = args.ranks;
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto dev = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore store(dir);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(r, n);
  ctx->setTimeout(std::chrono::seconds(120));
  ctx->connectFullMesh(store, dev);
  std::shared_ptr<gloo::Context> base = ctx;

  // Every rank's value of `mine`, in rank order.
  auto gather = [&](double mine) {
    std::vector<double> all(n, 0.0);
    all[r] = mine;
    gloo::AllreduceOptions opts(base);
    opts.setOutput(all.data(), all.size());
    opts.setReduceFunction(static_cast<ReduceFn>(&gloo::sum<double>));
    gloo::allreduce(opts);
    return all;
  };
  auto slowest = [&](double mine) {
    auto all = gather(mine);
    return *std::max_element(all.begin(), all.end());
  };
  auto report = [&](ah::Line line, double my_us) { ah::Report(line, gather(my_us), r); };

  const std::vector<std::string> algos = {"ring_chunked", "halving_doubling", "bcube", "ring", "new_bcube"};
  int rc = 0;
  for (size_t bytes : args.sizes) {
    const size_t count = bytes / sizeof(float);
    std::vector<float> buf(count);
    for (const auto& algo : algos) {
      if (!ah::Wants(args, algo)) continue;
      std::fill(buf.begin(), buf.end(), static_cast<float>(r + 1));
      auto op = MakeOp(algo, base, buf.data(), count);
      Barrier(base);
      auto t0 = ah::Clock::now();
      op();
      const double first_us = slowest(ah::MicrosSince(t0));
      if (!ah::CheckSum(buf.data(), count, n)) {
        std::fprintf(stderr, "gloo %s: wrong sum at %zu bytes\n", algo.c_str(), bytes);
        rc = 1;
      }
      const ah::Plan plan = ah::Budget(ah::PlanFor(bytes, args.iters_scale), first_us);
      double us = ah::TimeOp(plan, op, [&] { Barrier(base); });
      report(ah::Line{"gloo", "tcp", algo, "size", n, bytes, plan.iters}, us);
    }
  }
  if (args.mlp) {
    const auto& sizes = ah::kMlpGradients;
    const size_t total = std::accumulate(sizes.begin(), sizes.end(), size_t{0});
    for (const auto& algo : algos) {
      if (!ah::Wants(args, algo)) continue;
      std::vector<float> fused(total, 1.0f);
      auto op = MakeOp(algo, base, fused.data(), total);
      auto t0 = ah::Clock::now();
      op();
      const ah::Plan plan =
          ah::Budget(ah::PlanFor(total * sizeof(float), args.iters_scale), 6 * slowest(ah::MicrosSince(t0)));
      double us = ah::TimeOp(plan, op, [&] { Barrier(base); });
      report(ah::Line{"gloo", "tcp", algo, "mlp_fused", n, total * sizeof(float), plan.iters}, us);
      std::vector<std::vector<float>> tensors;
      for (auto it = sizes.rbegin(); it != sizes.rend(); ++it) tensors.emplace_back(*it, 1.0f);
      std::vector<std::function<void()>> ops;
      for (auto& t : tensors) ops.push_back(MakeOp(algo, base, t.data(), t.size()));
      us = ah::TimeOp(
          plan,
          [&] {
            for (auto& o : ops) o();
          },
          [&] { Barrier(base); });
      report(ah::Line{"gloo", "tcp", algo, "mlp_unfused", n, total * sizeof(float), plan.iters}, us);
    }
  }
  Barrier(base);
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  ah::Args args;
  if (!ah::ParseArgs(argc, argv, args) || args.ranks < 2) {
    ah::Usage(argv[0], "; algos: ring_chunked, halving_doubling, bcube, ring, new_bcube");
    return 2;
  }
  return ah::ForkRanks(args.ranks, "gloo-allreduce", [&](int r, const char* dir) { return Rank(r, dir, args); });
}
