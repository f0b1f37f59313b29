// The wire: what driving a device through a sinkd daemon over loopback TCP
// costs, against the in-process device and a plain socket.
//
//   BM_ControlRoundTrip  RunSink of 0 steps (one control round trip) on a
//                        RemoteDevice to a real sinkd (daemon:1 plain,
//                        daemon:2 over TLS with client certificates), and on
//                        an InProcessDevice for reference; time per call.
//   BM_PushBatch         PushBatch throughput into a daemon: per iteration
//                        `capacity` batches of the 784-512-256-10 MLP, then
//                        ClearQueue (which returns once the daemon has
//                        dropped them and returned the credits), so nothing
//                        consumes batches and only the data path is timed;
//                        tls:1 over TLS.
//   BM_SocketCopy        the limit: the same bytes over a plain loopback TCP
//                        connection between two threads of this process,
//                        tuned as the wire's sockets (sinkrt::TuneSocket), the
//                        receiver reading each batch into a pre-touched
//                        buffer and acking every `capacity` batches (as
//                        ClearQueue's round trip). slots:1 reads every batch
//                        into one buffer; slots:64 into a ring of `capacity`
//                        buffers allocated as the daemon's queue slots.
//   BM_SocketPingPong    a 64-byte request and answer between two threads
//                        over such a connection: the floor under a round trip.
//   BM_Train             Model.train of the MLP at batch 64 on synthetic data
//                        (64 steps per epoch), sink mode (sink_size -1) vs
//                        dataset_sink_mode=false, through a daemon started
//                        with --threads 1 and 2 (daemon:2: over TLS, one
//                        thread), and in-process for reference.
//
// After the benchmarks, main prints the ratios the figures are read by: the
// gain from sinking, PushBatch against the plain socket, the daemon's round
// trip against the in-process call.
//
// Daemons: one per thread count, started on first use on 127.0.0.1:0 (the
// kernel picks the port) and stopped at exit; their logs go to temporary
// files, removed at exit.
#include <benchmark/benchmark.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <asio/connect.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "load_mlp.h"
#include "recording_reporter.h"
#include "runtime/src/wire_socket.h"
#include "sinkrt/device/in_process_device.h"
#include "sinkrt/host/compiler.h"
#include "sinkrt/host/model.h"
#include "sinkrt/host/remote_device.h"
#include "support/model_fixtures.h"
#include "support/sinkd_process.h"
#include "support/test_models.h"
#include "support/tls_certs.h"

#ifndef SINKD_PATH
#error "wire_bench needs SINKD_PATH (bench/CMakeLists.txt sets it to the built sinkd)"
#endif

namespace sinkrt {
namespace {

using namespace std::chrono_literals;

constexpr uint32_t kCapacity = 64;  // queue slots for the push benchmarks (compile allows 1..4096)
constexpr int64_t kFeatures = 784, kClasses = 10;

uint64_t BatchBytes(int64_t batch) { return static_cast<uint64_t>(batch) * (kFeatures * 4 + 4); }

// -- daemons ------------------------------------------------------------------

// The TLS daemons' and the host's certificates, written on first use.
const std::filesystem::path& TlsDir() {
  static const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("wire_bench_tls_" + std::to_string(getpid()));
  return dir;
}
const testing::TlsTestFiles& TlsFiles() {
  static const testing::TlsTestFiles files = [] {
    std::filesystem::create_directories(TlsDir());
    return testing::WriteTlsTestFiles(TlsDir().string());
  }();
  return files;
}

// Daemons by key: their thread count, + kTlsKey for one with TLS.
constexpr int kTlsKey = 1000;

std::map<int, std::unique_ptr<testing::SinkdProcess>>& Daemons() {
  static auto* daemons = new std::map<int, std::unique_ptr<testing::SinkdProcess>>();
  return *daemons;
}

std::filesystem::path DaemonLog(int threads) {
  return std::filesystem::temp_directory_path() /
         ("wire_bench_" + std::to_string(getpid()) + "_t" + std::to_string(threads) + ".log");
}

// The address of a daemon with `threads` kernel threads (and TLS with client
// certificates when `tls`), started on first use.
Result<Address> Daemon(int threads, bool tls = false) {
  auto& daemons = Daemons();
  const int key = threads + (tls ? kTlsKey : 0);
  auto it = daemons.find(key);
  if (it == daemons.end()) {
    auto d = std::make_unique<testing::SinkdProcess>();
    std::vector<std::string> args = {"--threads", std::to_string(threads)};
    if (tls) {
      const testing::TlsTestFiles& f = TlsFiles();
      args.insert(args.end(), {"--tls-cert", f.server_cert, "--tls-key", f.server_key, "--tls-ca", f.ca_cert});
    }
    SINKRT_RETURN_IF_ERROR(d->Start(SINKD_PATH, args, DaemonLog(key)));
    it = daemons.emplace(key, std::move(d)).first;
  }
  return it->second->address();
}

void StopDaemons() {
  for (auto& [threads, d] : Daemons()) {
    d->Stop();
    std::error_code ec;
    std::filesystem::remove(DaemonLog(threads), ec);
  }
  Daemons().clear();
  std::error_code ec;
  std::filesystem::remove_all(TlsDir(), ec);
}

host::RemoteOptions BenchRemoteOptions() {
  host::RemoteOptions o;
  o.connect_timeout = 20s;
  o.reply_timeout = 60s;
  o.push_timeout = 60s;
  o.sink_timeout = 300s;
  return o;
}

Result<std::unique_ptr<DeviceLink>> ConnectDaemon(int threads, bool tls = false) {
  SINKRT_ASSIGN_OR_RETURN(Address address, Daemon(threads, tls));
  host::RemoteOptions options = BenchRemoteOptions();
  if (tls) options.tls = {TlsFiles().client_cert, TlsFiles().client_key, TlsFiles().ca_cert};
  SINKRT_ASSIGN_OR_RETURN(auto remote, host::RemoteDevice::Connect(address, options));
  return std::unique_ptr<DeviceLink>(std::move(remote));
}

std::unique_ptr<DeviceLink> InProcess(int threads) {
  device::DeviceOptions opts = device::DeviceOptions::FromEnvironment();
  opts.threads = threads;
  return std::make_unique<device::InProcessDevice>(opts);
}

// One batch of the MLP's train queue ("image" f32 [batch, 784], "label" i32
// [batch]), pre-touched.
struct Batch {
  std::vector<float> images;
  std::vector<int32_t> labels;
  explicit Batch(int64_t batch) {
    testing::SyntheticData d = testing::MakeSyntheticData(batch, kFeatures, kClasses, 1);
    images = std::move(d.images);
    labels = std::move(d.labels);
  }
  std::array<ConstBytes, 2> columns() const {
    return {ConstBytes(reinterpret_cast<const uint8_t*>(images.data()), images.size() * sizeof(float)),
            ConstBytes(reinterpret_cast<const uint8_t*>(labels.data()), labels.size() * sizeof(int32_t))};
  }
};

void SetTransferCounters(benchmark::State& state, uint64_t batch_bytes) {
  const double batches = static_cast<double>(state.iterations()) * kCapacity;
  // Printed with SI prefixes: "3.1G/s" is 3.1 GB/s (10^9 bytes).
  state.counters["bytes/s"] =
      benchmark::Counter(batches * static_cast<double>(batch_bytes), benchmark::Counter::kIsRate);
  state.counters["batches/s"] = benchmark::Counter(batches, benchmark::Counter::kIsRate);
  state.counters["batch_KB"] = static_cast<double>(batch_bytes) / 1e3;
}

// -- 1. control round trip ------------------------------------------------------

void BM_ControlRoundTrip(benchmark::State& state) {
  const bool daemon = state.range(0) != 0;
  std::unique_ptr<DeviceLink> device;
  if (daemon) {
    auto d = ConnectDaemon(1, state.range(0) == 2);
    if (!d.ok()) return state.SkipWithError(d.status().ToString().c_str());
    device = std::move(*d);
  } else {
    device = InProcess(1);
  }
  if (Status st = LoadMlp(*device, 64, 16); !st.ok()) return state.SkipWithError(st.ToString().c_str());
  for (auto _ : state) {
    auto r = device->RunSink(ProgramKind::TrainStep, 0);
    if (!r.ok()) return state.SkipWithError(r.status().ToString().c_str());
    benchmark::DoNotOptimize(r->steps_run);
  }
}
BENCHMARK(BM_ControlRoundTrip)
    ->ArgName("daemon")
    ->Arg(1)
    ->Arg(2)
    ->Arg(0)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime()
    ->MinTime(1.0);

// -- 2. PushBatch throughput and its plain-socket limit -------------------------

void BM_PushBatch(benchmark::State& state) {
  const int64_t batch = state.range(0);
  auto device = ConnectDaemon(1, state.range(1) != 0);
  if (!device.ok()) return state.SkipWithError(device.status().ToString().c_str());
  DeviceLink& dev = **device;
  if (Status st = LoadMlp(dev, batch, kCapacity); !st.ok()) return state.SkipWithError(st.ToString().c_str());
  Batch data(batch);
  const auto cols = data.columns();
  for (auto _ : state) {
    for (uint32_t i = 0; i < kCapacity; ++i)
      if (Status st = dev.PushBatch(0, cols); !st.ok()) return state.SkipWithError(st.ToString().c_str());
    if (Status st = dev.ClearQueue(0); !st.ok()) return state.SkipWithError(st.ToString().c_str());
  }
  SetTransferCounters(state, BatchBytes(batch));
}
BENCHMARK(BM_PushBatch)
    ->ArgNames({"batch", "tls"})
    ->ArgsProduct({{64, 256}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(1.0);

// Receive memory as the daemon's queue slots get it (device/src/arena.cc):
// mmap'd, 2 MiB aligned with MADV_HUGEPAGE when that large, pre-touched.
struct Pages {
  static constexpr size_t kHuge = 2u << 20;
  void* map = MAP_FAILED;
  size_t map_bytes = 0;
  uint8_t* data = nullptr;
  explicit Pages(size_t bytes) {
    const bool huge = bytes >= kHuge;
    const size_t align = huge ? kHuge : 4096;
    const size_t rounded = (bytes + align - 1) / align * align;
    map_bytes = rounded + (huge ? kHuge : 0);
    map = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) throw std::bad_alloc();
    data = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(map) + align - 1) / align * align);
    if (huge) madvise(data, rounded, MADV_HUGEPAGE);
    std::memset(data, 1, bytes);
  }
  ~Pages() { munmap(map, map_bytes); }
  Pages(const Pages&) = delete;
  Pages& operator=(const Pages&) = delete;
};

// Two ends of a loopback TCP connection in this process, tuned as the wire's.
struct Loopback {
  asio::io_context io;
  asio::ip::tcp::socket tx{io}, rx{io};
  asio::error_code Open() {
    asio::error_code ec;
    asio::ip::tcp::acceptor acceptor(io);
    const asio::ip::tcp::endpoint any(asio::ip::make_address("127.0.0.1"), 0);
    acceptor.open(any.protocol(), ec);
    if (!ec) acceptor.bind(any, ec);
    if (!ec) acceptor.listen(1, ec);
    if (!ec) tx.connect(acceptor.local_endpoint(ec), ec);
    if (!ec) acceptor.accept(rx, ec);
    if (ec) return ec;
    TuneSocket(tx);
    TuneSocket(rx);
    return ec;
  }
};

void BM_SocketCopy(benchmark::State& state) {
  const int64_t batch = state.range(0);
  const uint32_t slots = static_cast<uint32_t>(state.range(1));
  const uint64_t bytes = BatchBytes(batch);
  Batch data(batch);

  Loopback link;
  asio::error_code ec = link.Open();
  if (ec) return state.SkipWithError(("loopback connection: " + ec.message()).c_str());
  asio::ip::tcp::socket& tx = link.tx;
  asio::ip::tcp::socket& rx = link.rx;

  std::thread receiver([&rx, bytes, slots] {
    Pages ring(bytes * slots);
    uint8_t ack = 1;
    asio::error_code rec;
    for (;;) {
      for (uint32_t i = 0; i < kCapacity; ++i) {
        asio::read(rx, asio::buffer(ring.data + (i % slots) * bytes, bytes), rec);
        if (rec) return;
      }
      asio::write(rx, asio::buffer(&ack, 1), rec);
      if (rec) return;
    }
  });

  const auto cols = data.columns();
  // Gathered as PushBatch sends its columns (less its 16-byte header and
  // ~40-byte message).
  const std::array<asio::const_buffer, 2> pieces = {asio::buffer(cols[0].data(), cols[0].size()),
                                                    asio::buffer(cols[1].data(), cols[1].size())};
  for (auto _ : state) {
    for (uint32_t i = 0; i < kCapacity && !ec; ++i) asio::write(tx, pieces, ec);
    uint8_t ack = 0;
    if (!ec) asio::read(tx, asio::buffer(&ack, 1), ec);
    if (ec) {
      state.SkipWithError(("plain socket: " + ec.message()).c_str());
      break;
    }
  }
  tx.shutdown(asio::ip::tcp::socket::shutdown_both, ec);
  receiver.join();
  SetTransferCounters(state, bytes);
}
BENCHMARK(BM_SocketCopy)
    ->ArgNames({"batch", "slots"})
    ->Args({64, 1})
    ->Args({64, kCapacity})
    ->Args({256, 1})
    ->Args({256, kCapacity})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(1.0);

// For reading BM_ControlRoundTrip: a 64-byte request and a 64-byte answer
// (a control frame's size) between two threads over the same kind of
// connection, with none of the daemon's hand-offs.
void BM_SocketPingPong(benchmark::State& state) {
  Loopback link;
  asio::error_code ec = link.Open();
  if (ec) return state.SkipWithError(("loopback connection: " + ec.message()).c_str());
  std::thread echo([&link] {
    std::array<uint8_t, 64> m{};
    asio::error_code rec;
    while (!rec) {
      asio::read(link.rx, asio::buffer(m), rec);
      if (!rec) asio::write(link.rx, asio::buffer(m), rec);
    }
  });
  std::array<uint8_t, 64> m{};
  for (auto _ : state) {
    asio::write(link.tx, asio::buffer(m), ec);
    if (!ec) asio::read(link.tx, asio::buffer(m), ec);
    if (ec) {
      state.SkipWithError(("plain socket: " + ec.message()).c_str());
      break;
    }
  }
  link.tx.shutdown(asio::ip::tcp::socket::shutdown_both, ec);
  echo.join();
}
BENCHMARK(BM_SocketPingPong)->Unit(benchmark::kMicrosecond)->UseRealTime()->MinTime(1.0);

// -- 3. sink vs non-sink training ---------------------------------------------

constexpr int64_t kTrainBatch = 64, kStepsPerEpoch = 64;

void BM_Train(benchmark::State& state) {
  const bool daemon = state.range(0) != 0;
  const bool sink = state.range(1) != 0;
  const int threads = static_cast<int>(state.range(2));
  std::unique_ptr<DeviceLink> device;
  if (daemon) {
    auto d = ConnectDaemon(threads, state.range(0) == 2);
    if (!d.ok()) return state.SkipWithError(d.status().ToString().c_str());
    device = std::move(*d);
  } else {
    device = InProcess(threads);
  }
  auto model = host::Model::Create(testing::MlpNetwork(kTrainBatch, {kFeatures, 512, 256, kClasses}),
                                   host::LossSpec::SparseSoftmaxCrossEntropy(),
                                   host::OptimizerSpec::Momentum(0.01f, 0.9f), *device);
  if (!model.ok()) return state.SkipWithError(model.status().ToString().c_str());
  testing::SyntheticData data = testing::MakeSyntheticData(kTrainBatch * kStepsPerEpoch, kFeatures, kClasses, 1);
  const host::Dataset ds = testing::MakeDataset(data, kTrainBatch);
  // One untimed epoch: first-touch of the host's batch buffers and the
  // kernels' first runs stay out of the figure.
  if (Status st = (*model)->train(1, ds, {}, sink, -1); !st.ok()) return state.SkipWithError(st.ToString().c_str());
  const uint64_t trips_before = (*model)->host_round_trips();
  for (auto _ : state) {
    if (Status st = (*model)->train(1, ds, {}, sink, -1); !st.ok()) return state.SkipWithError(st.ToString().c_str());
  }
  const double epochs = static_cast<double>(state.iterations());
  state.SetItemsProcessed(state.iterations() * kTrainBatch * kStepsPerEpoch);
  state.counters["round_trips/epoch"] = static_cast<double>((*model)->host_round_trips() - trips_before) / epochs;
}
BENCHMARK(BM_Train)
    ->ArgNames({"daemon", "sink", "threads"})
    ->Args({1, 1, 1})
    ->Args({1, 0, 1})
    ->Args({1, 1, 2})
    ->Args({1, 0, 2})
    ->Args({2, 1, 1})
    ->Args({2, 0, 1})
    ->Args({0, 1, 1})
    ->Args({0, 0, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(1.5);

// -- ratios -------------------------------------------------------------------

// What TLS adds to the same figures, measured in the same run.
void PrintTlsCost(const RecordingReporter& rep) {
  const double plain = rep.Median("BM_ControlRoundTrip/daemon:1"), tls = rep.Median("BM_ControlRoundTrip/daemon:2");
  if (plain > 0 && tls > 0)
    std::printf("TLS: control round trip %.1f us against %.1f us plain (+%.1f us)\n", tls, plain, tls - plain);
  for (int batch : {64, 256}) {
    const std::string b = "BM_PushBatch/batch:" + std::to_string(batch);
    const double p = rep.Median(b + "/tls:0", "bytes/s") / 1e6, t = rep.Median(b + "/tls:1", "bytes/s") / 1e6;
    if (p > 0 && t > 0)
      std::printf("TLS: batch %d PushBatch %.0f MB/s against %.0f MB/s plain (%.2fx)\n", batch, t, p, t / p);
  }
  for (int sink : {1, 0}) {
    const std::string s = "/sink:" + std::to_string(sink) + "/threads:1";
    const double p = rep.Median("BM_Train/daemon:1" + s), t = rep.Median("BM_Train/daemon:2" + s);
    if (p > 0 && t > 0)
      std::printf("TLS: %s epoch (64 steps) %.2f ms against %.2f ms plain (%+.1f%%)\n", sink ? "sunk" : "non-sink", t,
                  p, 100 * (t - p) / p);
  }
}

void PrintRatios(const RecordingReporter& rep) {
  std::printf("\n");
  double remote = rep.Median("BM_ControlRoundTrip/daemon:1"), local = rep.Median("BM_ControlRoundTrip/daemon:0");
  double ping = rep.Median("BM_SocketPingPong");
  if (remote > 0 && local > 0 && ping > 0)
    std::printf("control round trip: daemon %.1f us, in-process %.2f us; plain-socket ping-pong %.1f us\n", remote,
                local, ping);
  for (int batch : {64, 256}) {
    const std::string b = std::to_string(batch);
    double push = rep.Median("BM_PushBatch/batch:" + b + "/tls:0", "bytes/s") / 1e6;
    double one = rep.Median("BM_SocketCopy/batch:" + b + "/slots:1", "bytes/s") / 1e6;
    double ring = rep.Median("BM_SocketCopy/batch:" + b + "/slots:" + std::to_string(kCapacity), "bytes/s") / 1e6;
    if (push > 0 && one > 0 && ring > 0)
      std::printf(
          "batch %d: PushBatch %.0f MB/s = %.0f%% of a plain socket into one buffer (%.0f MB/s), "
          "%.0f%% of one into %u slots (%.0f MB/s)\n",
          batch, push, 100 * push / one, one, 100 * push / ring, kCapacity, ring);
  }
  for (int daemon : {1, 0})
    for (int threads : {1, 2}) {
      const std::string k = "BM_Train/daemon:" + std::to_string(daemon);
      const std::string t = "/threads:" + std::to_string(threads);
      double s = rep.Median(k + "/sink:1" + t, "items_per_second");
      double n = rep.Median(k + "/sink:0" + t, "items_per_second");
      if (s > 0 && n > 0)
        std::printf("gain from sinking (%s, %d thread%s): %.2fx (sink %.0f samples/s, non-sink %.0f samples/s)\n",
                    daemon ? "daemon" : "in-process", threads, threads > 1 ? "s" : "", s / n, s, n);
    }
  PrintTlsCost(rep);
}

}  // namespace
}  // namespace sinkrt

int main(int argc, char** argv) { return sinkrt::RunRecorded(argc, argv, sinkrt::StopDaemons, sinkrt::PrintRatios); }
