// Eval, per batch against sunk (docs/guide/training.md "Eval, sunk"): Model::eval of the
// 784-512-256-10 MLP at batch 64 over a pass of full batches, with
// dataset_sink_mode=false (one RunSink(eval_step, 1) per batch, the host
// summing) and true (one RunSink(eval_step, N) for the pass, the device
// summing), through one real sinkd daemon on 127.0.0.1 and on an in-process
// device. Rounds alternate the two modes, so the ratio is measured in one
// run on a shared, loaded machine; each figure is the median of the rounds.
// Also checks that both modes give the same loss and accuracy bits.
//
//   eval_bench [--batches N] [--rounds R] [--batch B]
//
// Prints one line per device: samples/s per batch and sunk, their ratio, and
// the control round trips of one pass in each mode.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "local_daemons.h"
#include "sinkrt/device/in_process_device.h"
#include "sinkrt/host/model.h"
#include "sinkrt/host/model_zoo.h"
#include "support/model_fixtures.h"
#include "support/test_models.h"

namespace sinkrt {
namespace {

struct Options {
  int64_t batches = 200;
  int rounds = 7;
  int64_t batch = 64;
};

struct Figures {
  std::vector<double> per_batch_sps, sunk_sps;
  uint64_t per_batch_trips = 0, sunk_trips = 0;
  bool same_bits = true;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

Result<Figures> Measure(DeviceLink& device, const Options& o) {
  SINKRT_ASSIGN_OR_RETURN(
      auto model, host::Model::Create(host::MakeMlpNetwork(o.batch), host::LossSpec::SparseSoftmaxCrossEntropy(),
                                      host::OptimizerSpec::Momentum(0.01f, 0.9f), device));
  const testing::SyntheticData data = testing::MakeSyntheticData(o.batches * o.batch, 784, 10, 11);
  const host::Dataset pass = testing::MakeDataset(data, o.batch);
  Figures f;
  // One untimed pass of each: the dataset workers, the daemon's queue slots.
  SINKRT_ASSIGN_OR_RETURN(const host::EvalResult first, model->eval(pass, false));
  SINKRT_RETURN_IF_ERROR(model->eval(pass, true).status());
  for (int r = 0; r < o.rounds; ++r) {
    for (bool sunk : {false, true}) {
      const auto t0 = std::chrono::steady_clock::now();
      SINKRT_ASSIGN_OR_RETURN(host::EvalResult e, model->eval(pass, sunk));
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      (sunk ? f.sunk_sps : f.per_batch_sps).push_back(static_cast<double>(e.samples) / s);
      (sunk ? f.sunk_trips : f.per_batch_trips) = e.round_trips;
      f.same_bits = f.same_bits && e.loss == first.loss && e.accuracy == first.accuracy;
    }
  }
  return f;
}

void Print(const char* where, const Figures& f, const Options& o) {
  const double per_batch = Median(f.per_batch_sps), sunk = Median(f.sunk_sps);
  std::printf(
      "%-22s per batch %9.0f samples/s, %4llu round trips/pass | sunk %9.0f samples/s, %llu round trip/pass | "
      "sunk/per-batch %.2fx | same loss and accuracy bits: %s\n",
      where, per_batch, static_cast<unsigned long long>(f.per_batch_trips), sunk,
      static_cast<unsigned long long>(f.sunk_trips), per_batch > 0 ? sunk / per_batch : 0.0,
      f.same_bits ? "yes" : "NO");
  (void)o;
}

}  // namespace
}  // namespace sinkrt

int main(int argc, char** argv) {
  using namespace sinkrt;
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const long long v = std::atoll(argv[i + 1]);
    if (flag == "--batches" && v > 0)
      o.batches = v;
    else if (flag == "--rounds" && v > 0)
      o.rounds = static_cast<int>(v);
    else if (flag == "--batch" && v > 0)
      o.batch = v;
    else {
      std::fprintf(stderr, "usage: eval_bench [--batches N] [--rounds R] [--batch B]\n");
      return 2;
    }
  }
  std::printf(
      "eval of the 784-512-256-10 MLP, batch %lld, %lld full batches a pass, median of %d alternating "
      "rounds\n",
      static_cast<long long>(o.batch), static_cast<long long>(o.batches), o.rounds);
  int rc = 0;
  {
    auto links = bench::Connect(1);
    if (!links.ok()) {
      std::fprintf(stderr, "cannot start sinkd: %s\n", links.status().ToString().c_str());
      rc = 1;
    } else {
      auto f = Measure(*(*links)[0], o);
      if (f.ok())
        Print("sinkd (127.0.0.1)", *f, o);
      else {
        std::fprintf(stderr, "sinkd: %s\n", f.status().ToString().c_str());
        rc = 1;
      }
    }
  }
  bench::StopDaemons();
  device::DeviceOptions opts = device::DeviceOptions::FromEnvironment();
  opts.threads = bench::ThreadsPerDaemon(1);
  device::InProcessDevice local(opts);
  auto f = Measure(local, o);
  if (f.ok())
    Print("in-process", *f, o);
  else {
    std::fprintf(stderr, "in-process: %s\n", f.status().ToString().c_str());
    rc = 1;
  }
  return rc;
}
