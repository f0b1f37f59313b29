// Pipeline stages (issue 19) against one device and data parallel, on
// worlds of in-process devices, and the 1F1B bubble against its formula.
//
//   BM_World/net/stages/replicas/micro/threads/semi
//       train_step of `net` (0: the zoo ViT, host::MakeVitNetwork, Adam
//       1e-3; 1: a deep MLP 784-512x6-10, 7 layers, Momentum 0.01/0.9) at
//       global batch 64 on stages x replicas in-process devices, each
//       running `threads` threads:
//         stages 1, replicas 1      one device, STAND_ALONE
//         stages 1, replicas N      data parallel on N devices (gradients mean)
//         stages S, replicas R      S pipeline stages (1F1B, `micro`
//                                   micro-batches), each stage data parallel
//                                   over R replicas
//       With semi 1 the R ranks of each stage (or of the whole world,
//       without stages) are not replicas: SEMI_AUTO_PARALLEL splits the
//       layers over them with the "model" preset (Megatron's column/row
//       pairs), and every rank reads the whole batch.
//       Every device is compiled for its rank with host::Compile and driven
//       as Model drives it: a feeder thread per queue pushes the batches
//       (the first stage gets the images, the last the labels; a replica
//       gets its 64 / R rows, a semi-auto rank all 64) beside one RunSink
//       of kSteps steps.
//
// One iteration is one sink of kSteps steps on every rank at once; one
// untimed sink warms up first (the arenas' first touch, the kernels' first
// runs, the world's first transfers). Counters:
//   step_ms          the host's wall time from starting every rank's sink
//                    to the last one returning, per step
//   samples_per_s    global samples per second of that wall time
//   cpu_ms           this process's CPU time (every thread: devices, their
//                    comm threads, feeders) per step; passive waits cost
//                    none, and unlike the clocks below it does not grow
//                    while another process holds the core
//   bubble_frac      per rank bubble_ms / its device wall time (compute +
//                    queue wait + comm wait + bubble + other: the compute
//                    stream's whole sink), averaged over the ranks; 0
//                    without stages
//   bubble_s<k>      the same for stage k alone (averaged over its replicas)
//   compute_s<k>     stage k's kernel ms per step: the imbalance
//   predicted_bubble CompileReport::predicted_bubble: the schedule's own
//                    simulation from the cost model (stage imbalance
//                    included), the mean over stages of idle / makespan
//   formula_bubble   (S-1)/(M+S-1): 1F1B with equal stages and free transfers
//   arena_MiB        the largest CompileReport::arena_bytes over the ranks:
//                    the peak memory of the heaviest stage
//   compute_ms, comm_wait_ms, bubble_ms, queue_wait_ms, other_ms
//                    per step, the devices' own clocks averaged over ranks
//   work_ms, matmul_ms, addn_ms
//                    kernel ms per step summed over every rank
//                    (Executor::TaskTimes): all kernels, the MatMuls, the
//                    AddNs (AccumulateGrad's lowering); against one device's
//                    work_ms, what micro-batches cost in kernel time
//
// main prints the two tables of bench/history/parallel.md ("Pipeline stages (issue
// 19)") from the medians. Run it with --benchmark_repetitions=5
// --benchmark_enable_random_interleaving=true so every row shares the
// machine's state: the speed claims are ratios within one run.
#include <benchmark/benchmark.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "device/src/executor.h"  // AvailableCores
#include "recording_reporter.h"
#include "sinkrt/device/in_process_device.h"
#include "sinkrt/host/compiler.h"
#include "sinkrt/host/shard_strategies.h"
#include "support/test_models.h"

namespace sinkrt {
namespace {

constexpr int64_t kGlobalBatch = 64;
constexpr int64_t kFeatures = 784;
constexpr int kClasses = 10;
constexpr uint32_t kSteps = 16;  // per sink
constexpr int kTimedSinks = 3;
constexpr int kMaxStages = 4;
const std::vector<int64_t> kDeepMlp = {kFeatures, 512, 512, 512, 512, 512, 512, kClasses};
const char* const kNets[] = {"vit", "mlp"};

host::Graph Network(int net, int64_t batch) {
  return net == 0 ? testing::MakeVit(batch) : testing::MakeMlp(batch, kDeepMlp);
}

host::OptimizerSpec Optimizer(int net) {
  return net == 0 ? host::OptimizerSpec::Adam(1e-3f) : host::OptimizerSpec::Momentum(0.01f, 0.9f);
}

double FormulaBubble(int stages, int micro) {
  return stages > 1 ? static_cast<double>(stages - 1) / (micro + stages - 1) : 0.0;
}

device::DeviceOptions Threads(int threads) {
  device::DeviceOptions o = device::DeviceOptions::FromEnvironment();
  o.threads = threads;
  o.peer_timeout = std::chrono::seconds(60);
  return o;
}

// CPU time of every thread of this process: unlike the kernels' wall
// clocks, it does not grow while other processes hold the cores.
double ProcessCpuMs() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) / 1e6;
}

// Each world gets a fresh job id.
uint64_t NextJob() {
  static std::atomic<uint64_t> job{1900};
  return job++;
}

struct Rank {
  std::unique_ptr<device::InProcessDevice> dev;
  std::optional<host::CompiledStream> compiled;  // no default: a stream is only ever a verified one
  int stage = 0, replica = 0;
  int64_t first_row = 0;  // of each global batch, the first this rank reads
  DeviceTiming sum;       // over the timed sinks
};

// One sink on `rank` with a feeder beside it, as Model drives a device.
Status RunFedSink(Rank& rank, const testing::SyntheticData& data, int64_t rows, uint32_t steps) {
  const std::vector<std::string>& columns = rank.compiled->input_columns;
  std::thread feeder;
  if (!columns.empty()) {  // a middle stage has no queue
    feeder = std::thread([&] {
      for (uint32_t i = 0; i < steps; ++i) {
        // 8 distinct global batches, as bench/fed_sink.h cycles; a replica
        // reads its share of rows of each.
        const int64_t first = (i % 8) * kGlobalBatch + rank.first_row;
        std::vector<ConstBytes> cols;
        for (const std::string& c : columns) {
          if (c == "image")
            cols.emplace_back(reinterpret_cast<const uint8_t*>(&data.images[first * kFeatures]),
                              rows * kFeatures * sizeof(float));
          else
            cols.emplace_back(reinterpret_cast<const uint8_t*>(&data.labels[first]), rows * sizeof(int32_t));
        }
        if (!rank.dev->PushBatch(0, cols).ok()) return;  // RunSink reports what went wrong
      }
    });
  }
  auto r = rank.dev->RunSink(ProgramKind::TrainStep, steps);
  if (!r.ok()) (void)rank.dev->ClearQueue(0);  // unblock the feeder
  if (feeder.joinable()) feeder.join();
  if (!r.ok()) return r.status();
  DeviceTiming& s = rank.sum;
  s.compute_ms += r->timing.compute_ms;
  s.comm_ms += r->timing.comm_ms;
  s.comm_wait_ms += r->timing.comm_wait_ms;
  s.bubble_ms += r->timing.bubble_ms;
  s.queue_wait_ms += r->timing.queue_wait_ms;
  s.other_ms += r->timing.other_ms;
  return Status::Ok();
}

// Runs `body(r)` on one thread per rank and returns the first error.
template <typename F>
Status OnEveryRank(int n, F body) {
  std::vector<Status> status(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { status[r] = body(r); });
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < n; ++r)
    if (!status[r].ok()) return Status(status[r].code(), "rank " + std::to_string(r) + ": " + status[r].message());
  return Status::Ok();
}

void BM_World(benchmark::State& state) {
  const int net = static_cast<int>(state.range(0));
  const int stages = static_cast<int>(state.range(1));
  const int replicas = static_cast<int>(state.range(2));
  const int micro = static_cast<int>(state.range(3));
  const int threads = static_cast<int>(state.range(4));
  const bool semi = state.range(5) != 0;
  const int world = stages * replicas;
  const int64_t rows = semi ? kGlobalBatch : kGlobalBatch / replicas;  // what one rank reads

  std::vector<Rank> ranks(world);
  std::vector<PeerEndpoint> members;
  for (int r = 0; r < world; ++r) {
    ranks[r].dev = std::make_unique<device::InProcessDevice>(Threads(threads));
    ranks[r].stage = r / replicas;  // MindSpore's layout: stage k holds ranks [k·R, (k+1)·R)
    ranks[r].replica = r % replicas;
    ranks[r].first_row = semi ? 0 : ranks[r].replica * rows;
    if (world > 1) {
      auto e = ranks[r].dev->Endpoint();
      if (!e.ok()) return state.SkipWithError(e.status().ToString().c_str());
      members.push_back(*e);
    }
  }
  const uint64_t job = NextJob();
  Status st = OnEveryRank(world, [&](int r) -> Status {
    Rank& rank = ranks[r];
    if (world > 1) SINKRT_RETURN_IF_ERROR(rank.dev->JoinWorld({job, static_cast<uint32_t>(r), members}));
    host::CompileOptions o;
    o.optimizer = Optimizer(net);
    o.eval_program = false;
    o.predict_program = false;
    if (world > 1) {
      o.parallel_mode = semi ? host::ParallelMode::SemiAutoParallel : host::ParallelMode::DataParallel;
      o.world_size = static_cast<uint32_t>(world);
      o.rank = static_cast<uint32_t>(r);
      o.gradients_mean = true;
      o.full_batch = semi;
    }
    if (stages > 1) {
      o.pipeline.stages = stages;
      o.pipeline.micro_size = micro;
    }
    host::Graph g = Network(net, rows);
    if (semi) SINKRT_RETURN_IF_ERROR(host::ApplyShardStrategy("model", g, replicas));
    SINKRT_ASSIGN_OR_RETURN(host::CompiledStream cs, host::Compile(g, o));
    rank.compiled = std::move(cs);
    SINKRT_RETURN_IF_ERROR(rank.dev->Load(rank.compiled->stream).status());
    return Status::Ok();
  });
  if (!st.ok()) return state.SkipWithError(st.ToString().c_str());

  const testing::SyntheticData data = testing::MakeSyntheticData(8 * kGlobalBatch, kFeatures, kClasses, 1);
  auto sink = [&] { return OnEveryRank(world, [&](int r) { return RunFedSink(ranks[r], data, rows, kSteps); }); };
  if (Status w = sink(); !w.ok()) return state.SkipWithError(w.ToString().c_str());
  for (Rank& r : ranks) {
    r.sum = {};
    r.dev->executor()->ResetTaskTimes();
  }

  double wall_ms = 0, cpu_ms = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = ProcessCpuMs();
    if (Status s = sink(); !s.ok()) return state.SkipWithError(s.ToString().c_str());
    cpu_ms += ProcessCpuMs() - c0;
    wall_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  const double steps = static_cast<double>(state.iterations()) * kSteps;
  state.SetItemsProcessed(static_cast<int64_t>(steps) * kGlobalBatch);
  state.counters["step_ms"] = wall_ms / steps;
  state.counters["cpu_ms"] = cpu_ms / steps;
  state.counters["samples_per_s"] = wall_ms > 0 ? steps * kGlobalBatch / (wall_ms / 1e3) : 0.0;

  DeviceTiming mean;
  double bubble_frac = 0, arena = 0;
  std::vector<double> stage_bubble(stages, 0), stage_compute(stages, 0);
  for (const Rank& r : ranks) {
    const DeviceTiming& t = r.sum;
    const double device_wall = t.compute_ms + t.queue_wait_ms + t.comm_wait_ms + t.bubble_ms + t.other_ms;
    const double frac = device_wall > 0 ? t.bubble_ms / device_wall : 0.0;
    bubble_frac += frac / world;
    stage_bubble[r.stage] += frac / replicas;
    stage_compute[r.stage] += t.compute_ms / steps / replicas;
    mean.compute_ms += t.compute_ms / steps / world;
    mean.comm_wait_ms += t.comm_wait_ms / steps / world;
    mean.bubble_ms += t.bubble_ms / steps / world;
    mean.queue_wait_ms += t.queue_wait_ms / steps / world;
    mean.other_ms += t.other_ms / steps / world;
    arena = std::max(arena, static_cast<double>(r.compiled->report.arena_bytes) / (1 << 20));
  }
  // The kernels' time summed over the ranks (Executor::TaskTimes): what
  // cutting the batch into micro-batches costs against one device's
  // kernels. AddN is where AccumulateGrad is lowered (and any gradient sum).
  double matmul = 0, accumulate = 0, work = 0;
  for (const Rank& r : ranks) {
    for (const device::TaskTime& t : r.dev->executor()->TaskTimes(ProgramKind::TrainStep)) {
      if (t.stream != 0 || t.op.ends_with("Task")) continue;  // kernels only, not waits or GetNext
      const double ms = t.ns / 1e6 / steps;
      work += ms;
      if (t.op.find("MatMul") != std::string_view::npos) matmul += ms;
      if (t.op == "AddN") accumulate += ms;
    }
  }
  state.counters["work_ms"] = work;
  state.counters["matmul_ms"] = matmul;
  state.counters["addn_ms"] = accumulate;
  state.counters["bubble_frac"] = bubble_frac;
  state.counters["predicted_bubble"] = ranks[0].compiled->report.predicted_bubble;
  state.counters["formula_bubble"] = FormulaBubble(stages, micro);
  state.counters["arena_MiB"] = arena;
  state.counters["compute_ms"] = mean.compute_ms;
  state.counters["comm_wait_ms"] = mean.comm_wait_ms;
  state.counters["bubble_ms"] = mean.bubble_ms;
  state.counters["queue_wait_ms"] = mean.queue_wait_ms;
  state.counters["other_ms"] = mean.other_ms;
  if (stages > 1) {
    for (int k = 0; k < stages; ++k) {
      state.counters["bubble_s" + std::to_string(k)] = stage_bubble[k];
      state.counters["compute_s" + std::to_string(k)] = stage_compute[k];
    }
  }
}

// {stages, replicas, micro, threads} of table (a): the same global batch on
// 1, 2 and 4 devices. The one-device baseline runs with 1 thread (what each
// device of the other rows gets) and with both cores.
struct Layout {
  const char* name;
  int stages, replicas, micro, threads;
  int semi = 0;
};
const Layout kLayouts[] = {
    {"one device, 1 thread", 1, 1, 0, 1},
    {"one device, 2 threads", 1, 1, 0, 2},
    {"data parallel x2", 1, 2, 0, 1},
    {"2 stages, M=8", 2, 1, 8, 1},
    {"data parallel x4", 1, 4, 0, 1},
    {"4 stages, M=8", 4, 1, 8, 1},
    {"2 stages x 2 replicas, M=8", 2, 2, 8, 1},
    {"model parallel x2 (semi)", 1, 2, 0, 1, 1},
    {"2 stages x model x2, M=8", 2, 2, 8, 1, 1},
};
const int kBubbleMicro[] = {4, 8, 16};

std::string Name(int net, int stages, int replicas, int micro, int threads, int semi = 0) {
  return "BM_World/net:" + std::to_string(net) + "/stages:" + std::to_string(stages) +
         "/replicas:" + std::to_string(replicas) + "/micro:" + std::to_string(micro) +
         "/threads:" + std::to_string(threads) + "/semi:" + std::to_string(semi);
}

void Register() {
  auto* b = benchmark::RegisterBenchmark("BM_World", BM_World);
  b->ArgNames({"net", "stages", "replicas", "micro", "threads", "semi"});
  for (int net : {0, 1}) {
    for (const Layout& l : kLayouts) b->Args({net, l.stages, l.replicas, l.micro, l.threads, l.semi});
    for (int s : {2, 4})
      for (int m : kBubbleMicro)
        if (m != 8) b->Args({net, s, 1, m, 1, 0});  // M=8 is in the rows above
  }
  b->Iterations(kTimedSinks)->Unit(benchmark::kMillisecond)->UseRealTime();
}

void PrintSummary(const RecordingReporter& rep) {
  const int cores = device::AvailableCores();
  std::printf(
      "\nMedians over repetitions. Global batch %lld, sink mode (%u steps per sink), in-process devices; %d "
      "cores\n",
      static_cast<long long>(kGlobalBatch), kSteps, cores);
  std::printf("work_x: kernel ms summed over every rank / the one-device (1 thread) kernel ms, per step\n");
  std::printf("cpu_x: the process's CPU ms per step / the one-device (1 thread) CPU ms per step\n");
  std::printf("\n(a) step time and peak per-stage memory\n");
  std::printf("%-4s %-28s %2s %8s %7s %7s %9s %7s %7s %7s %7s\n", "net", "layout", "N", "step_ms", "vs_1t", "vs_2t",
              "arena_MiB", "bubble", "cwait", "work_x", "cpu_x");
  for (int net : {0, 1}) {
    const double one1 = rep.Median(Name(net, 1, 1, 0, 1), "step_ms");
    const double one2 = rep.Median(Name(net, 1, 1, 0, 2), "step_ms");
    const double work1 = rep.Median(Name(net, 1, 1, 0, 1), "work_ms");
    const double cpu1 = rep.Median(Name(net, 1, 1, 0, 1), "cpu_ms");
    for (const Layout& l : kLayouts) {
      const std::string n = Name(net, l.stages, l.replicas, l.micro, l.threads, l.semi);
      const double step = rep.Median(n, "step_ms");
      if (step < 0) continue;
      const int devices = l.stages * l.replicas;
      std::printf("%-4s %-28s %2d %8.2f %6.2fx %6.2fx %9.2f %7.3f %7.2f %6.2fx %6.2fx%s\n", kNets[net], l.name, devices,
                  step, one1 > 0 ? one1 / step : 0.0, one2 > 0 ? one2 / step : 0.0, rep.Median(n, "arena_MiB"),
                  rep.Median(n, "bubble_frac"), rep.Median(n, "comm_wait_ms"),
                  work1 > 0 ? rep.Median(n, "work_ms") / work1 : 0.0, cpu1 > 0 ? rep.Median(n, "cpu_ms") / cpu1 : 0.0,
                  devices * l.threads > cores ? "  [oversubscribed]" : "");
    }
  }
  std::printf(
      "\n(b) 1F1B bubble, one device per stage (1 thread each); measured = mean over stages of "
      "bubble_ms / the stage's device wall\n");
  std::printf("%-4s %2s %3s %8s %9s %7s %8s %7s %7s %7s  %s\n", "net", "S", "M", "measured", "predicted", "formula",
              "step_ms", "work_x", "cpu_x", "addn_ms", "per stage: bubble (compute ms/step)");
  for (int net : {0, 1}) {
    const double work1 = rep.Median(Name(net, 1, 1, 0, 1), "work_ms");
    const double cpu1 = rep.Median(Name(net, 1, 1, 0, 1), "cpu_ms");
    for (int s : {2, 4}) {
      for (int m : kBubbleMicro) {
        const std::string n = Name(net, s, 1, m, 1);
        const double measured = rep.Median(n, "bubble_frac");
        if (measured < 0) continue;
        std::printf("%-4s %2d %3d %8.3f %9.3f %7.3f %8.2f %6.2fx %6.2fx %7.2f  ", kNets[net], s, m, measured,
                    rep.Median(n, "predicted_bubble"), FormulaBubble(s, m), rep.Median(n, "step_ms"),
                    work1 > 0 ? rep.Median(n, "work_ms") / work1 : 0.0, cpu1 > 0 ? rep.Median(n, "cpu_ms") / cpu1 : 0.0,
                    rep.Median(n, "addn_ms"));
        for (int k = 0; k < s; ++k)
          std::printf("%s%.3f (%.2f)", k ? ", " : "", rep.Median(n, "bubble_s" + std::to_string(k)),
                      rep.Median(n, "compute_s" + std::to_string(k)));
        std::printf("%s\n", s > cores ? "  [oversubscribed]" : "");
      }
    }
  }
}

}  // namespace
}  // namespace sinkrt

int main(int argc, char** argv) {
  sinkrt::Register();
  return sinkrt::RunRecorded(
      argc, argv, [] {}, sinkrt::PrintSummary);
}
