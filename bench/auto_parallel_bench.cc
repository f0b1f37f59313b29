// AUTO_PARALLEL's predicted step time against the measured one (issue 17):
// the zoo MLP, the zoo ViT and the wide ViT of semi_auto_bench, each under
// the `data` and `model` presets and under the searched plan, trained in
// SEMI_AUTO_PARALLEL on 2 local sinkd daemons.
//
//   BM_Predicted/net/layout   net 0: the zoo MLP (784-512-256-10, 535k
//       parameters); 1: the zoo ViT (dim 64, 4 heads, MLP 256, 2 blocks,
//       105k); 2: the wide ViT (dim 256, 4 heads, MLP 1024, 4 blocks,
//       3.2M). layout 0: `data`, 1: `model` (host::ApplyShardStrategy on
//       every op), 2: `auto` (nothing preset). Then PlanAutoParallel on 2
//       devices with Adam: for a preset every op is fixed, so its step_s is
//       the cost model's prediction for that hand layout; for `auto` it is
//       the searched plan's. The graph then carries every strategy and
//       Model.train runs it (sink mode, Adam 1e-3, global batch 64, gradients
//       mean), each daemon --threads max(1, cores/2) as `sinkrun train
//       --devices 2` starts them.
//
// The calibration is PlanAutoParallel's default lookup: $SINKRT_CALIBRATION,
// else the built-in data/calibration/default.json; the summary names the
// file. The plans price the "shm" fits, and the daemons do talk over shared
// memory: both run on this host, so their host ids (boot id + hostname)
// match and Communicator::Create maps a shm ring per pair
// (device/src/comm/rendezvous/rendezvous.cc) unless SINKRT_COMM_SHM=0 is in
// the daemons' environment (device_options.cc). Every run checks it from
// the Joined reply (RemoteDevice::transports) and fails if a peer is on
// TCP, which a run with SINKRT_COMM_SHM=0 therefore does.
//
// One benchmark iteration is one epoch (kSteps[net] steps, long enough
// that the per-epoch round trips are a few percent of it); one untimed
// epoch warms up first. Counters, per step:
//   predicted_ms  the plan's step_s
//   measured_ms   the median over the timed epochs of the host's epoch
//                 time / steps (what semi_auto_bench calls step_ms); the
//                 summary takes the median over every timed epoch of every
//                 repetition, and also the best (least) epoch: on a shared
//                 machine other work only adds time, and two ranks on two
//                 cores feel every other process (README)
//   pred_compute_ms, pred_comm_ms   the plan's per-op compute and its
//                 communication + redistribution, summed over ops
//   compute_ms, comm_ms, comm_wait_ms   the devices' own clocks, averaged
//                 over the ranks
//   collectives   collective tasks in rank 0's train step
//   dp            the ranks the batch is split over (each rank is fed
//                 64 / dp samples a step: a replicated loss means dp 1)
// AUTO_BENCH_EXPLAIN=1 prints ExplainPlan of every plan to stderr.
//
//   BM_Compute/net   the compute term alone: one rank's work under `data`
//       (batch 32) as one in-process device with one kernel thread and no
//       communication, its train tasks timed by the executor
//       (Executor::TaskTimes), against the plan's per-op compute on one
//       device. Per op class, ms per step, predicted (p_*) and measured
//       (m_*): matmul (MatMul; the prediction includes the update of the
//       weight it reads), bmm (the attention's BatchMatMuls), mem (every
//       memory-bound op, forward and backward, the LayerNorms' and biases'
//       updates predicted with them), opt (AdamUpdate/AdamPowers,
//       measured only), other (GetNext, the loss and the rest, measured
//       only). AUTO_BENCH_TASKS=1 prints every task's ms per step.
// main prints the table bench/history/parallel.md shows ("AUTO_PARALLEL: predicted
// vs measured"): error per row, the median absolute error, and per net
// whether the predicted ranking of the three layouts is the measured one
// and the searched plan against the best hand layout (issue 17's 10 %).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "fed_sink.h"
#include "local_daemons.h"
#include "recording_reporter.h"
#include "sinkrt/device/in_process_device.h"
#include "sinkrt/fb/task_stream_generated.h"
#include "sinkrt/host/auto_parallel.h"
#include "sinkrt/host/compiler.h"
#include "sinkrt/host/model.h"
#include "sinkrt/host/model_zoo.h"
#include "sinkrt/host/shard_strategies.h"
#include "support/model_fixtures.h"
#include "support/test_models.h"

namespace sinkrt {
namespace {

constexpr int kDevices = 2;
constexpr int64_t kGlobalBatch = 64;
constexpr int kTimedEpochs = 5;
const char* const kNets[] = {"mlp", "vit", "wide_vit"};
const char* const kLayouts[] = {"data", "model", "auto"};
// Steps per epoch: each net's epoch is ~0.1-1.6 s, so the sink's
// per-epoch round trips stay a small part of a step.
constexpr int64_t kSteps[] = {64, 32, 8};

// What the runs of one (net, layout) leave for the summary, beside the
// reporter's counters: which strategies ran (to tell when the search chose
// a preset), which calibration and transports, and every timed epoch's ms
// per step over all repetitions.
struct RunRecord {
  std::string strategies;
  std::string calibration;
  std::string transports;
  std::vector<double> epoch_step_ms;
};

std::map<std::pair<int, int>, RunRecord>& Records() {
  static auto* records = new std::map<std::pair<int, int>, RunRecord>();
  return *records;
}

// The network with the loss Model would append, so a preset and the
// search cover it.
host::Graph Network(int net, int64_t batch = kGlobalBatch) {
  host::Graph g = net == 0   ? host::MakeMlpNetwork(batch)
                  : net == 1 ? host::MakeVitNetwork(batch)
                             : host::MakeVitNetwork(batch, 1, {.dim = 256, .heads = 4, .hidden = 1024, .blocks = 4});
  const host::TensorId label = g.Input("label", {batch}, DType::I32);
  g.SetLoss(g.SparseSoftmaxCrossEntropy(g.outputs().front(), label));
  return g;
}

std::string StrategyText(const std::vector<std::vector<int64_t>>& s) {
  std::string out = "[";
  for (const auto& dims : s) {
    out += "[";
    for (int64_t d : dims) out += std::to_string(d) + ",";
    out += "]";
  }
  return out + "]";
}

std::string Fingerprint(const host::Graph& g) {
  std::string out;
  for (const host::OpNode& op : g.ops()) out += op.name + StrategyText(op.strategy) + ";";
  return out;
}

// Collective tasks in rank 0's train step: each is a synchronisation of
// the two ranks, which the cost model prices at the calibration's alpha.
int CollectivesPerStep(const VerifiedStream& stream) {
  int n = 0;
  if (const fb::Program* p = stream.FindProgram(ProgramKind::TrainStep))
    for (const fb::Stream* s : *p->streams())
      for (const fb::Task* task : *s->tasks()) switch (task->body_type()) {
          case fb::TaskBody::AllReduceTask:
          case fb::TaskBody::AllGatherTask:
          case fb::TaskBody::ReduceScatterTask:
          case fb::TaskBody::AllToAllTask:
          case fb::TaskBody::BroadcastTask:
            ++n;
            break;
          default:
            break;
        }
  return n;
}

double Median(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

void RunPredicted(benchmark::State& state) {
  const int net = static_cast<int>(state.range(0));
  const int layout = static_cast<int>(state.range(1));
  const int64_t steps = kSteps[net];
  const host::OptimizerSpec optimizer = host::OptimizerSpec::Adam(1e-3f);
  host::Graph g = Network(net);
  if (layout < 2)
    if (Status st = host::ApplyShardStrategy(kLayouts[layout], g, kDevices); !st.ok())
      return state.SkipWithError(st.ToString().c_str());
  host::AutoParallelOptions ao;
  ao.device_num = kDevices;
  ao.optimizer = optimizer;
  ao.transport = "shm";
  auto plan = host::PlanAutoParallel(g, ao);
  if (!plan.ok()) return state.SkipWithError(plan.status().ToString().c_str());
  if (const char* e = std::getenv("AUTO_BENCH_EXPLAIN"); e && std::string(e) == "1")
    std::fprintf(stderr, "=== %s / %s ===\n%s\n", kNets[net], kLayouts[layout], host::ExplainPlan(*plan).c_str());
  double pred_compute = 0, pred_comm = 0;
  for (const host::OpPlanChoice& c : plan->ops) {
    pred_compute += c.compute_s;
    pred_comm += c.communication_s + c.redistribution_s;
  }
  auto dp = host::StrategyDataParallel("", g, kDevices);
  if (!dp.ok()) return state.SkipWithError(dp.status().ToString().c_str());
  RunRecord& record = Records()[{net, layout}];
  record.strategies = Fingerprint(g);
  record.calibration = plan->calibration;
  record.transports.clear();

  host::ModelOptions options;
  options.compile_cache = "";
  options.context.mode = host::ParallelMode::SemiAutoParallel;
  options.context.device_num = kDevices;
  options.context.gradients_mean = true;
  auto links = bench::Connect(kDevices);
  if (!links.ok()) return state.SkipWithError(links.status().ToString().c_str());
  std::vector<DeviceLink*> pointers;
  for (auto& l : *links) pointers.push_back(l.get());
  auto model = host::Model::Create(std::move(g), host::LossSpec::None(), optimizer, pointers, options);
  if (!model.ok()) return state.SkipWithError(model.status().ToString().c_str());
  // The plan priced shm; a TCP pair would measure something else.
  for (auto& l : *links) {
    auto* remote = dynamic_cast<host::RemoteDevice*>(l.get());
    if (!remote) return state.SkipWithError("auto_parallel_bench: a link is not a RemoteDevice");
    std::string row;
    for (const std::string& t : remote->transports()) {
      row += (row.empty() ? "" : ",") + t;
      if (t != "self" && t != "shm")
        return state.SkipWithError(("auto_parallel_bench: a peer is on " + t + ", not shm").c_str());
    }
    record.transports += (record.transports.empty() ? "" : " ") + row;
  }

  const testing::SyntheticData data = testing::MakeSyntheticData(kGlobalBatch * steps, 784, 10, 1);
  const host::Dataset ds = testing::MakeDataset(data, kGlobalBatch / *dp);
  bench::TimingCallback timing;
  if (Status st = (*model)->train(1, ds, {&timing}, true, -1); !st.ok())
    return state.SkipWithError(st.ToString().c_str());
  timing.armed = true;
  std::vector<double> epoch_step_ms;
  for (auto _ : state) {
    const double before_ms = timing.epoch_ms;
    const int64_t before_steps = timing.steps;
    if (Status st = (*model)->train(1, ds, {&timing}, true, -1); !st.ok())
      return state.SkipWithError(st.ToString().c_str());
    epoch_step_ms.push_back((timing.epoch_ms - before_ms) / double(std::max<int64_t>(1, timing.steps - before_steps)));
  }
  // The devices' clocks, already averaged over the ranks (CallbackParams::device).
  const double rank_steps = static_cast<double>(std::max<int64_t>(1, timing.steps));
  const DeviceTiming& t = timing.sum;
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * kGlobalBatch * steps);
  state.counters["predicted_ms"] = plan->step_s * 1e3;
  state.counters["measured_ms"] = Median(epoch_step_ms);
  state.counters["pred_compute_ms"] = pred_compute * 1e3;
  state.counters["pred_comm_ms"] = pred_comm * 1e3;
  state.counters["compute_ms"] = t.compute_ms / rank_steps;
  state.counters["comm_ms"] = t.comm_ms / rank_steps;
  state.counters["comm_wait_ms"] = t.comm_wait_ms / rank_steps;
  state.counters["dp"] = static_cast<double>(*dp);
  state.counters["collectives"] = CollectivesPerStep((*model)->compiled().stream);
  record.epoch_step_ms.insert(record.epoch_step_ms.end(), epoch_step_ms.begin(), epoch_step_ms.end());
}

BENCHMARK(RunPredicted)
    ->Name("BM_Predicted")
    ->ArgNames({"net", "layout"})
    ->ArgsProduct({{0, 1, 2}, {0, 1, 2}})
    ->Iterations(kTimedEpochs)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

enum OpClass { kMatmul, kBmm, kMem, kOpt, kOther, kOpClasses };
constexpr const char* kOpClassNames[] = {"matmul", "bmm", "mem", "opt", "other"};

// A train task's class by its kernel's op; a forward op's class by its
// OpCode (the plan's compute is per forward op, backward included).
OpClass TaskClass(std::string_view op) {
  if (op == "MatMul") return kMatmul;
  if (op == "BatchMatMul") return kBmm;
  if (op == "AdamUpdate" || op == "AdamPowers" || op == "AdamWeightDecay" || op == "LambNorms" || op == "LambUpdate")
    return kOpt;
  if (op == "GetNextTask" || op.starts_with("SparseSoftmaxCrossEntropy") || op.ends_with("Task")) return kOther;
  return kMem;
}

OpClass ForwardClass(OpCode op) {
  if (op == OpCode::MatMul) return kMatmul;
  if (op == OpCode::BatchMatMul) return kBmm;
  return kMem;
}

void RunCompute(benchmark::State& state) {
  const int net = static_cast<int>(state.range(0));
  const int64_t batch = kGlobalBatch / kDevices;
  const host::OptimizerSpec optimizer = host::OptimizerSpec::Adam(1e-3f);
  host::Graph g = Network(net, batch);
  host::AutoParallelOptions ao;
  ao.device_num = 1;
  ao.optimizer = optimizer;
  auto plan = host::PlanAutoParallel(g, ao);
  if (!plan.ok()) return state.SkipWithError(plan.status().ToString().c_str());
  double predicted[kOpClasses] = {};
  for (size_t i = 0; i < plan->ops.size(); ++i) predicted[ForwardClass(g.ops()[i].op)] += plan->ops[i].compute_s * 1e3;

  host::CompileOptions co;
  co.optimizer = optimizer;
  auto cs = host::Compile(g, co);
  if (!cs.ok()) return state.SkipWithError(cs.status().ToString().c_str());
  device::DeviceOptions dopts = device::DeviceOptions::FromEnvironment();
  dopts.threads = bench::ThreadsPerDaemon(kDevices);
  device::InProcessDevice dev(dopts);
  if (auto loaded = dev.Load(cs->stream); !loaded.ok()) return state.SkipWithError(loaded.status().ToString().c_str());
  const uint32_t steps = static_cast<uint32_t>(kSteps[net]);
  const auto data = testing::MakeSyntheticData(batch * 8, 784, 10, 1);
  SinkTotals warmup, totals;
  if (Status st = RunFedSink(dev, data, batch, steps, &warmup); !st.ok())
    return state.SkipWithError(st.ToString().c_str());
  dev.executor()->ResetTaskTimes();
  for (auto _ : state)
    if (Status st = RunFedSink(dev, data, batch, steps, &totals); !st.ok())
      return state.SkipWithError(st.ToString().c_str());
  ReportStepCounters(state, totals, batch);
  const double n = std::max(1.0, totals.steps);
  std::vector<device::TaskTime> times = dev.executor()->TaskTimes(ProgramKind::TrainStep);
  double measured[kOpClasses] = {};
  for (const device::TaskTime& t : times) measured[TaskClass(t.op)] += double(t.ns) / 1e6 / n;
  for (int c = 0; c < kOpClasses; ++c) {
    state.counters[std::string("p_") + kOpClassNames[c]] = predicted[c];
    state.counters[std::string("m_") + kOpClassNames[c]] = measured[c];
  }
  state.counters["predicted_ms"] = plan->step_s * 1e3;
  state.counters["tasks"] = static_cast<double>(times.size());
  if (const char* e = std::getenv("AUTO_BENCH_TASKS"); e && std::string(e) == "1") {
    std::stable_sort(times.begin(), times.end(), [](const auto& a, const auto& b) { return a.ns > b.ns; });
    std::fprintf(stderr, "=== %s: train tasks at batch %lld, %d thread(s), ms per step ===\n", kNets[net],
                 static_cast<long long>(batch), dopts.threads);
    for (const device::TaskTime& t : times)
      std::fprintf(stderr, "  %8.4f  %-6s %-22.*s %.*s\n", double(t.ns) / 1e6 / n, kOpClassNames[TaskClass(t.op)],
                   static_cast<int>(t.op.size()), t.op.data(), static_cast<int>(t.name.size()), t.name.data());
  }
}

BENCHMARK(RunCompute)
    ->Name("BM_Compute")
    ->ArgNames({"net"})
    ->DenseRange(0, 2)
    ->Iterations(kTimedEpochs)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

std::string RunName(int net, int layout) {
  return "BM_Predicted/net:" + std::to_string(net) + "/layout:" + std::to_string(layout);
}

// Layouts of one net in ascending order of `time`, those with the same
// strategies (the search may choose a preset) as one group "auto=data".
std::vector<std::string> Order(const std::vector<double>& time, const std::vector<std::string>& group) {
  std::vector<int> idx(time.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int>(i);
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return time[a] < time[b]; });
  std::vector<std::string> out;
  for (int i : idx)
    if (std::find(out.begin(), out.end(), group[i]) == out.end()) out.push_back(group[i]);
  return out;
}

std::string Join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

void PrintSummary(const RecordingReporter& rep) {
  std::string calibration, transports;
  for (const auto& [key, r] : Records()) {
    calibration = r.calibration;
    transports = r.transports;
  }
  std::printf(
      "\nAUTO_PARALLEL predicted vs measured, %d ranks (transports per rank: %s), global batch %lld, sink "
      "mode, Adam; %d cores\ncalibration: %s\n",
      kDevices, transports.c_str(), static_cast<long long>(kGlobalBatch), device::AvailableCores(),
      calibration.c_str());
  std::printf("%-9s %-6s %12s %11s %8s %8s %8s %11s %8s %10s %8s %8s %5s %3s\n", "net", "layout", "predicted_ms",
              "measured_ms", "error", "best_ms", "error", "pred_comp", "pred_comm", "compute_ms", "comm_ms", "wait_ms",
              "colls", "dp");
  std::vector<double> errors, best_errors;
  std::vector<std::string> verdicts;
  for (int net = 0; net < 3; ++net) {
    std::vector<double> predicted, median, best;
    for (int layout = 0; layout < 3; ++layout) {
      const std::string name = RunName(net, layout);
      const std::vector<double>& epochs = Records()[{net, layout}].epoch_step_ms;
      const double p = rep.Median(name, "predicted_ms");
      if (p < 0 || epochs.empty()) continue;
      const double m = Median(epochs), b = *std::min_element(epochs.begin(), epochs.end());
      predicted.push_back(p);
      median.push_back(m);
      best.push_back(b);
      errors.push_back(std::fabs((p - m) / m));
      best_errors.push_back(std::fabs((p - b) / b));
      std::printf("%-9s %-6s %12.3f %11.3f %+7.1f%% %8.3f %+7.1f%% %11.3f %8.3f %10.3f %8.3f %8.3f %5.0f %3.0f\n",
                  kNets[net], kLayouts[layout], p, m, 100 * (p - m) / m, b, 100 * (p - b) / b,
                  rep.Median(name, "pred_compute_ms"), rep.Median(name, "pred_comm_ms"), rep.Median(name, "compute_ms"),
                  rep.Median(name, "comm_ms"), rep.Median(name, "comm_wait_ms"), rep.Median(name, "collectives"),
                  rep.Median(name, "dp"));
    }
    if (predicted.size() != 3) continue;
    // A layout whose strategies equal another's is one plan: its group
    // (e.g. "data=auto") takes the mean measured time of its members.
    std::vector<std::string> group(3);
    for (int i = 0; i < 3; ++i) {
      group[i] = kLayouts[i];
      for (int j = 0; j < 3; ++j)
        if (j != i && Records()[{net, i}].strategies == Records()[{net, j}].strategies)
          group[i] = std::string(kLayouts[std::min(i, j)]) + "=" + kLayouts[std::max(i, j)];
    }
    const std::vector<std::string> by_prediction = Order(predicted, group);
    for (const auto& [what, measured] : {std::pair{"median", median}, std::pair{"best", best}}) {
      std::vector<double> grouped = measured;
      for (int i = 0; i < 3; ++i) {
        double sum = 0;
        int n = 0;
        for (int j = 0; j < 3; ++j)
          if (group[j] == group[i]) sum += measured[j], ++n;
        grouped[i] = sum / n;
      }
      const std::vector<std::string> by_measurement = Order(grouped, group);
      const double best_hand = std::min(measured[0], measured[1]);
      char line[512];
      std::snprintf(line, sizeof line,
                    "%-9s %-6s predicted %s; measured %s: ranking %s; auto %.3f ms = %.2fx the best hand layout "
                    "(%s, %.3f ms): %s",
                    kNets[net], what, Join(by_prediction, " < ").c_str(), Join(by_measurement, " < ").c_str(),
                    by_prediction == by_measurement ? "MATCHES" : "DIFFERS", measured[2], measured[2] / best_hand,
                    measured[0] <= measured[1] ? "data" : "model", best_hand,
                    measured[2] <= 1.10 * best_hand ? "within 10%" : "NOT within 10%");
      verdicts.push_back(line);
    }
  }
  for (const std::string& v : verdicts) std::printf("%s\n", v.c_str());
  if (!errors.empty())
    std::printf("median |error| over %zu rows: %.1f%% against the median epoch, %.1f%% against the best\n",
                errors.size(), 100 * Median(errors), 100 * Median(best_errors));

  bool header = false;
  for (int net = 0; net < 3; ++net) {
    const std::string name = "BM_Compute/net:" + std::to_string(net);
    const double step = rep.Median(name, "step_ms");
    if (step < 0) continue;
    if (!header) {
      std::printf(
          "\nCompute alone: one rank's data-parallel work (batch %lld) in process, %d thread, no "
          "communication; ms per step, predicted/measured\n%-9s %15s %15s %15s %15s %8s %8s\n",
          static_cast<long long>(kGlobalBatch / kDevices), bench::ThreadsPerDaemon(kDevices), "net", "step", "matmul",
          "bmm", "mem", "opt", "other");
      header = true;
    }
    auto pair = [&](const char* cls) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.3f/%.3f", rep.Median(name, std::string("p_") + cls),
                    rep.Median(name, std::string("m_") + cls));
      return std::string(buf);
    };
    char step_text[32];
    std::snprintf(step_text, sizeof step_text, "%.3f/%.3f", rep.Median(name, "predicted_ms"), step);
    std::printf("%-9s %15s %15s %15s %15s %8.3f %8.3f\n", kNets[net], step_text, pair("matmul").c_str(),
                pair("bmm").c_str(), pair("mem").c_str(), rep.Median(name, "m_opt"), rep.Median(name, "m_other"));
  }
}

}  // namespace
}  // namespace sinkrt

int main(int argc, char** argv) {
  return sinkrt::RunRecorded(argc, argv, sinkrt::bench::StopDaemons, sinkrt::PrintSummary);
}
