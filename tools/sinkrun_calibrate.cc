// `sinkrun calibrate`: measures this machine for AUTO_PARALLEL's cost model
// and writes a calibration file (docs/reference/calibration_file.md).
//
// - GEMM: the device's own MatMul kernel, as training runs it: a one-MatMul
//   graph compiled by the host compiler and run by the executor with
//   --threads kernel threads (1: one rank per core); the time is the MatMul
//   task's own (Executor::TaskTimes), not the step's.
// - Memory bandwidth: a Relu over 16 MiB through the same path (it reads
//   and writes every byte); the launch cost: a Relu of 16 floats.
// - Collectives: 2 ranks as threads of this process, on the device's
//   Communicator over shared memory and over loopback TCP; per kind the
//   median time of each message size, fitted to α + β·f(2)·bytes by least
//   squares. Only group size 2 is measured (more ranks than cores would
//   measure the scheduler); larger groups use the same fit.
// - In a sunk step: the zoo MLP (784-512-256-10, batch 64 a rank, 2.1 MB
//   of gradients) and a narrow one (784-8-10, 25 KB) trained DATA_PARALLEL
//   on 2 in-process devices of --threads kernel threads; the AllReduce's
//   time per step at the two sizes gives the α and β training meets (the
//   comm stream, its events, a peer arriving late), which scale the shm
//   fits up where they exceed them; and 1 - (the compute stream's wait for
//   the AllReduce) / (its time) of the large run is the hidden fraction.
//   Skipped with --no-collectives.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <thread>
#include <vector>

#include "device/src/comm/communicator.h"
#include "device/src/comm/rendezvous/listening_inbox.h"
#include "device/src/executor.h"
#include "runtime/src/file_io.h"
#include "sinkrt/device/in_process_device.h"
#include "sinkrt/fb/task_stream_generated.h"
#include "sinkrt/host/calibration.h"
#include "sinkrt/host/compiler.h"
#include "sinkrt/host/dataset.h"
#include "sinkrt/host/model.h"
#include "sinkrt/host/model_zoo.h"
#include "sinkrun.h"

namespace sinkrt::tools {
namespace {

using host::AlphaBeta;
using host::Calibration;
using host::CollectiveKind;

// Seconds per step of the task of op `op` in program EvalStep of a graph
// whose only Input is `x` of `x_elems` floats: compiled, loaded with
// `threads` kernel threads, one warm-up step, then enough steps for ~20 ms,
// the best of three rounds.
Result<double> TaskSeconds(const host::Graph& g, int64_t x_elems, const std::string& op, int threads) {
  host::CompileOptions co;
  co.queue_capacity = 16;
  SINKRT_ASSIGN_OR_RETURN(host::CompiledStream cs, host::Compile(g, co));
  device::DeviceOptions dopts;
  dopts.threads = threads;
  SINKRT_ASSIGN_OR_RETURN(std::unique_ptr<device::Executor> ex, device::Executor::Load(std::move(cs.stream), dopts));
  std::vector<float> x(static_cast<size_t>(x_elems), 0.5f);
  const ConstBytes column(reinterpret_cast<const uint8_t*>(x.data()), x.size() * sizeof(float));
  auto run = [&](uint32_t steps) -> Result<double> {
    for (uint32_t s = 0; s < steps; ++s) SINKRT_RETURN_IF_ERROR(ex->PushBatch(1, std::span(&column, 1)));
    ex->ResetTaskTimes();
    device::RunStats stats;
    SINKRT_RETURN_IF_ERROR(ex->Run(ProgramKind::EvalStep, steps, &stats));
    for (const device::TaskTime& t : ex->TaskTimes(ProgramKind::EvalStep))
      if (t.op == op) return double(t.ns) / 1e9 / steps;
    return Internal("calibrate: the compiled eval step has no " + op + " task");
  };
  SINKRT_ASSIGN_OR_RETURN(double first, run(1));
  const uint32_t steps = static_cast<uint32_t>(std::clamp(0.02 / std::max(first, 1e-7), 2.0, 15.0));
  // The best of three rounds: on a shared machine the noise only adds time.
  double best = first;
  for (int round = 0; round < 3; ++round) {
    SINKRT_ASSIGN_OR_RETURN(double s, run(steps));
    best = std::min(best, s);
  }
  return best;
}

Result<double> MatMulFlops(int64_t m, int64_t n, int64_t k, int threads) {
  host::Graph g("calibrate_matmul");
  const host::TensorId x = g.Input("x", {m, k});
  const host::TensorId w = g.Param("w", {k, n}, host::InitSpec::Uniform(-1, 1, 1));
  g.SetLoss(g.ReduceMean(g.MatMul(x, w)));
  SINKRT_ASSIGN_OR_RETURN(double s, TaskSeconds(g, m * k, "MatMul", threads));
  return 2.0 * double(m) * double(n) * double(k) / s;
}

Result<double> ReluSeconds(int64_t elems, int threads) {
  host::Graph g("calibrate_relu");
  const host::TensorId x = g.Input("x", {elems});
  // The compiler wants a parameter to train; one float adds no traffic.
  const host::TensorId p = g.Param("p", {1}, host::InitSpec::Zeros());
  g.SetLoss(g.Add(g.ReduceMean(g.Relu(x)), g.ReduceMean(p)));
  return TaskSeconds(g, elems, "Relu", threads);
}

// Least squares of t = alpha + beta * x in relative error (weights 1/t²),
// so that 4 KiB fixes alpha as much as 8 MiB fixes beta; each clamped at 0.
AlphaBeta Fit(const std::vector<double>& x, const std::vector<double>& t) {
  double sw = 0, sx = 0, st = 0, sxx = 0, sxt = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double w = 1 / (t[i] * t[i]);
    sw += w;
    sx += w * x[i];
    st += w * t[i];
    sxx += w * x[i] * x[i];
    sxt += w * x[i] * t[i];
  }
  const double beta = std::max(0.0, (sw * sxt - sx * st) / (sw * sxx - sx * sx));
  return {std::max(0.0, (st - beta * sx) / sw), beta};
}

// Two ranks as threads over one transport; per kind, the fit over `sizes`.
Result<host::TransportFits> MeasureCollectives(bool shm, const std::vector<int64_t>& sizes) {
  constexpr int kRanks = 2, kReps = 9;
  device::CommOptions o;
  o.use_shared_memory = shm;
  o.peer_timeout = std::chrono::seconds(30);
  std::vector<std::unique_ptr<device::ListeningInbox>> inboxes;
  std::vector<device::PeerAddress> world;
  for (int r = 0; r < kRanks; ++r) {
    SINKRT_ASSIGN_OR_RETURN(std::unique_ptr<device::ListeningInbox> inbox, device::ListeningInbox::Start());
    world.push_back(device::PeerAddress{static_cast<uint32_t>(r), inbox->address(), device::LocalHostId()});
    inboxes.push_back(std::move(inbox));
  }
  std::vector<std::unique_ptr<device::Communicator>> comms(kRanks);
  std::vector<Status> status(kRanks);
  {
    std::vector<std::thread> threads;
    for (int r = 0; r < kRanks; ++r)
      threads.emplace_back([&, r] {
        auto c = device::Communicator::Create(r, world, 1, *inboxes[r], o);
        if (c.ok())
          comms[r] = std::move(c).value();
        else
          status[r] = c.status();
      });
    for (auto& t : threads) t.join();
  }
  for (const Status& s : status)
    SINKRT_RETURN_IF_ERROR(s, std::string("calibrate: ") + (shm ? "shm" : "tcp") + " rendezvous");
  const device::Group group = device::Group::World(kRanks);

  host::TransportFits fits;
  for (int kind = 0; kind < host::kCollectiveKinds; ++kind) {
    std::vector<double> xs, ts;
    for (int64_t bytes : sizes) {
      // Every rank runs the same reps; rank 0's times, median.
      std::vector<double> times(kReps);
      std::vector<Status> st(kRanks);
      std::vector<std::thread> threads;
      for (int r = 0; r < kRanks; ++r)
        threads.emplace_back([&, r] {
          std::vector<uint8_t> in(static_cast<size_t>(bytes), 0), out(static_cast<size_t>(bytes) * kRanks, 0);
          device::Communicator& c = *comms[r];
          for (int i = 0; i < kReps && st[r].ok(); ++i) {
            const auto t0 = std::chrono::steady_clock::now();
            switch (static_cast<CollectiveKind>(kind)) {
              case CollectiveKind::AllReduce:
                st[r] = c.AllReduce(in, DType::F32, device::ReduceOp::Sum, group);
                break;
              case CollectiveKind::AllGather:
                st[r] = c.AllGather(std::span(in).first(in.size() / kRanks), std::span(out).first(in.size()), group);
                break;
              case CollectiveKind::ReduceScatter:
                st[r] = c.ReduceScatter(in, std::span(out).first(in.size() / kRanks), DType::F32, device::ReduceOp::Sum,
                                        group);
                break;
              case CollectiveKind::AllToAll:
                st[r] = c.AllToAll(in, std::span(out).first(in.size()), group);
                break;
            }
            if (r == 0) times[i] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          }
        });
      for (auto& t : threads) t.join();
      for (const Status& s : st)
        SINKRT_RETURN_IF_ERROR(s, std::string("calibrate: ") + CollectiveKindName(static_cast<CollectiveKind>(kind)));
      std::nth_element(times.begin(), times.begin() + kReps / 2, times.end());
      // `bytes` is the whole buffer (AllGather's output, ReduceScatter's input).
      xs.push_back(host::RingFactor(static_cast<CollectiveKind>(kind), kRanks) * double(bytes));
      ts.push_back(times[kReps / 2]);
    }
    fits[kind].fit = Fit(xs, ts);
    fits[kind].per_group[kRanks] = fits[kind].fit;
  }
  std::vector<std::thread> closers;
  for (auto& c : comms) closers.emplace_back([&c] { c.reset(); });
  for (auto& t : closers) t.join();
  return fits;
}

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

// Sums the device timing of the epochs after the first (the first warms
// the kernels and the links), and counts their steps.
class OverlapTiming : public host::Callback {
 public:
  DeviceTiming sum;
  int64_t steps = 0;
  Status on_train_epoch_begin(host::RunContext& rc) override {
    begin_ = rc.original_args().cur_step_num;
    return Status::Ok();
  }
  Status on_train_epoch_end(host::RunContext& rc) override {
    if (++epochs_ == 1) return Status::Ok();
    sum.comm_ms += rc.original_args().device.comm_ms;
    sum.comm_wait_ms += rc.original_args().device.comm_wait_ms;
    steps += rc.original_args().cur_step_num - begin_;
    return Status::Ok();
  }

 private:
  int epochs_ = 0;
  int64_t begin_ = 0;
};

// One data-parallel run on 2 in-process devices: the gradients' AllReduce
// as training meets it (a sunk step's comm stream, its events, the peer
// arriving late), per step.
struct StepComm {
  double comm_s = 0;       // the bucket AllReduce's time on the comm stream, per step
  double wait_s = 0;       // the compute stream's wait for it, per step
  int64_t grad_bytes = 0;  // the bucket (every gradient: one bucket)
};

Result<StepComm> DataParallelStep(const std::vector<int64_t>& widths, int threads) {
  constexpr int64_t kBatch = 64, kSteps = 16;
  std::vector<std::unique_ptr<device::InProcessDevice>> devices;
  std::vector<DeviceLink*> links;
  for (int r = 0; r < 2; ++r) {
    device::DeviceOptions o = device::DeviceOptions::FromEnvironment();
    o.threads = threads;
    devices.push_back(std::make_unique<device::InProcessDevice>(o));
    links.push_back(devices.back().get());
  }
  host::ModelOptions mo;
  mo.compile_cache = "";
  mo.context.mode = host::ParallelMode::DataParallel;
  mo.context.device_num = 2;
  mo.context.gradients_mean = true;
  host::Graph net = host::MakeMlpNetwork(kBatch, widths);
  StepComm out;
  for (const host::TensorInfo& t : net.tensors())
    if (t.kind == host::TensorKind::Param) out.grad_bytes += NumElements(t.shape) * 4;
  SINKRT_ASSIGN_OR_RETURN(std::unique_ptr<host::Model> model,
                          host::Model::Create(std::move(net), host::LossSpec::SparseSoftmaxCrossEntropy(),
                                              host::OptimizerSpec::Momentum(0.01f, 0.9f), links, mo));
  const int64_t n = 2 * kBatch * kSteps, features = widths.front();
  host::Tensor images = host::Tensor::Zeros(DType::F32, {n, features});
  host::Tensor labels = host::Tensor::Zeros(DType::I32, {n});
  float* px = reinterpret_cast<float*>(images.data.data());
  int32_t* pl = reinterpret_cast<int32_t*>(labels.data.data());
  for (int64_t i = 0; i < n * features; ++i) px[i] = static_cast<float>((i * 7919) % 256) / 256.0f;
  for (int64_t i = 0; i < n; ++i) pl[i] = static_cast<int32_t>(i % widths.back());
  const host::Dataset data =
      host::Dataset::FromArrays({{"image", std::move(images)}, {"label", std::move(labels)}}).Batch(kBatch, true);
  OverlapTiming timing;
  SINKRT_RETURN_IF_ERROR(model->train(4, data, {&timing}, /*dataset_sink_mode=*/true), "calibrate: data-parallel run");
  if (timing.sum.comm_ms <= 0 || timing.steps <= 0)
    return Internal("calibrate: the data-parallel run recorded no communication time");
  out.comm_s = timing.sum.comm_ms / 1e3 / static_cast<double>(timing.steps);
  out.wait_s = timing.sum.comm_wait_ms / 1e3 / static_cast<double>(timing.steps);
  return out;
}

// Scales every shm fit so that an AllReduce costs what a sunk step's does:
// α and β from two data-parallel runs (the zoo MLP's 2.1 MB of gradients
// and a narrow one's 25 KB), against the back-to-back fit's. Only ever up:
// the back-to-back fit is the transport's floor.
void ScaleToTheStep(host::TransportFits& fits, const StepComm& big, const StepComm& small) {
  const double db = double(big.grad_bytes - small.grad_bytes);
  const double beta = std::max(0.0, (big.comm_s - small.comm_s) / db);
  const double alpha = std::max(0.0, small.comm_s - beta * double(small.grad_bytes));
  const AlphaBeta floor = fits[0].fit;
  const double ka = floor.alpha > 0 ? std::max(1.0, alpha / floor.alpha) : 1.0;
  const double kb = floor.beta > 0 ? std::max(1.0, beta / floor.beta) : 1.0;
  for (host::CollectiveFit& f : fits) {
    f.fit.alpha *= ka;
    f.fit.beta *= kb;
    for (auto& [size, ab] : f.per_group) {
      ab.alpha *= ka;
      ab.beta *= kb;
    }
  }
  std::cout << "in a sunk step, AllReduce: alpha " << alpha * 1e6 << " us, beta " << beta * 1e9
            << " ns/byte; shm fits scaled x" << ka << " (alpha), x" << kb << " (beta)\n";
}

}  // namespace

int Calibrate(const CalibrateFlags& f) {
  const auto start = Clock::now();
  Result<Calibration> base = host::DefaultCalibration();
  if (!base.ok()) return Failure(base.status().ToString());
  Calibration c = *base;
  const int cores = device::AvailableCores();
  c.device_kind = "cpu-" + std::to_string(cores) + "core";
  c.description = CpuModel() + ", " + std::to_string(cores) + " cores; measured by sinkrun calibrate with " +
                  Counted(f.threads, "kernel thread") + "; collectives and the hidden fraction: 2 ranks as threads";
  c.gemm = {};
  c.gemm.m = c.gemm.n = c.gemm.k = f.grid;
  for (int64_t m : f.grid)
    for (int64_t n : f.grid)
      for (int64_t k : f.grid) {
        Result<double> flops = MatMulFlops(m, n, k, f.threads);
        if (!flops.ok())
          return Failure("GEMM " + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + ": " +
                         flops.status().ToString());
        c.gemm.flops.push_back(*flops);
      }
  std::cout << "GEMM: " << c.gemm.flops.size() << " points, " << c.gemm.flops.front() / 1e9 << " to "
            << c.gemm.flops.back() / 1e9 << " GFLOP/s (smallest, largest)\n";

  constexpr int64_t kBig = int64_t{4} << 20, kTiny = 16;
  Result<double> tiny = ReluSeconds(kTiny, f.threads);
  Result<double> big = ReluSeconds(kBig, f.threads);
  if (!tiny.ok() || !big.ok()) return Failure((tiny.ok() ? big : tiny).status().ToString());
  c.kernel_launch = *tiny;
  c.memory_bandwidth = 2.0 * kBig * sizeof(float) / std::max(*big - *tiny, 1e-9);
  std::cout << "memory: " << c.memory_bandwidth / 1e9 << " GB/s read+written, launch " << c.kernel_launch * 1e6
            << " us\n";

  if (!f.no_collectives) {
    const std::vector<int64_t> sizes = {4 << 10, 64 << 10, 1 << 20, 8 << 20};
    for (bool shm : {true, false}) {
      Result<host::TransportFits> fits = MeasureCollectives(shm, sizes);
      if (!fits.ok()) return Failure(fits.status().ToString());
      c.collectives[shm ? "shm" : "tcp"] = *fits;
      const AlphaBeta& ar = (*fits)[0].fit;
      std::cout << (shm ? "shm" : "tcp") << " AllReduce: alpha " << ar.alpha * 1e6 << " us, beta " << ar.beta * 1e9
                << " ns/byte\n";
    }
    Result<StepComm> big = DataParallelStep({784, 512, 256, 10}, f.threads);
    if (!big.ok()) return Failure(big.status().ToString());
    Result<StepComm> small = DataParallelStep({784, 8, 10}, f.threads);
    if (!small.ok()) return Failure(small.status().ToString());
    ScaleToTheStep(c.collectives["shm"], *big, *small);
    c.grad_hidden_fraction = std::clamp(1.0 - big->wait_s / big->comm_s, 0.0, 1.0);
    std::cout << "overlap: " << 100 * c.grad_hidden_fraction << "% of the gradient AllReduces hidden behind backward\n";
  } else {
    c.description += "; collectives and the hidden fraction copied from the built-in default (--no-collectives)";
  }

  // Check what we write as the search will read it.
  const std::string text = host::CalibrationToJson(c);
  if (Result<Calibration> back = host::ParseCalibration(text, f.out); !back.ok())
    return Failure(back.status().ToString());
  if (Status st = WriteFileBytes(f.out, {reinterpret_cast<const uint8_t*>(text.data()), text.size()}); !st.ok())
    return Failure("--out: " + st.message());
  std::cout << "wrote " << f.out << " in " << std::chrono::duration<double>(Clock::now() - start).count() << " s\n";
  return 0;
}

}  // namespace sinkrt::tools
