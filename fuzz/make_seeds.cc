// Writes the fuzzers' seed corpus: fuzz/corpus/frame/* (real wire frames)
// and fuzz/corpus/stream/* (small task streams from the real compiler).
// Not part of any build or of CI: the seed files are committed. To rebuild
// them after a schema change, from the repository root, with a normal
// (gcc) build in build/ and the fuzz build's generated headers:
//
//   cmake --build build --target sinkrt_host sinkrt_runtime
//   cmake --build build-fuzz --target sinkrt_schemas_gen
//   g++ -std=c++20 -O1 -I. -Iruntime/include -Ihost/include -Ibuild-fuzz/generated \
//       -DASIO_STANDALONE fuzz/make_seeds.cc \
//       build/host/libsinkrt_host.a build/runtime/libsinkrt_runtime.a \
//       -lflatbuffers -lz -ldnnl -o /tmp/make_seeds
//   /tmp/make_seeds fuzz/corpus
#include <flatbuffers/flatbuffers.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "runtime/src/hello.h"
#include "runtime/src/wire.h"
#include "sinkrt/host/compiler.h"
#include "sinkrt/host/graph.h"
#include "sinkrt/host/model_zoo.h"
#include "sinkrt/runtime/stream_format.h"
#include "sinkrt/runtime/task_stream_verifier.h"

namespace fs = std::filesystem;
using namespace sinkrt;

namespace {

std::vector<uint8_t> Frame(flatbuffers::FlatBufferBuilder& fbb, const std::vector<uint8_t>& payload = {}) {
  std::vector<uint8_t> out(kFrameHeaderBytes);
  EncodeFrameHeader({static_cast<uint32_t>(fbb.GetSize()), payload.size()}, out.data());
  out.insert(out.end(), fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
  out.insert(out.end(), payload.begin(), payload.end());
  // Each seed must pass the parser, or it seeds nothing.
  WireLimits limits;
  auto parsed = ParseFrame(out, limits);
  if (!parsed.ok()) {
    std::fprintf(stderr, "make_seeds: bad frame: %s\n", parsed.status().ToString().c_str());
    std::exit(1);
  }
  return out;
}

std::vector<uint8_t> Bytes(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7);
  return v;
}

std::vector<uint8_t> Hello(fb::PeerRole role, int rank, const char* token, uint64_t job = 0) {
  HelloFields hello;
  hello.role = role;
  hello.rank = rank;
  hello.token = token;
  hello.software = kSoftwareName;
  hello.cores = 2;
  hello.pid = 4242;
  hello.job = job;
  flatbuffers::FlatBufferBuilder fbb;
  BuildHello(fbb, hello);
  return Frame(fbb);
}

std::vector<uint8_t> LoadProgram(const std::vector<uint8_t>& stream) {
  flatbuffers::FlatBufferBuilder fbb;
  FinishMessage(fbb, fb::MessageBody::LoadProgram, fb::CreateLoadProgram(fbb, stream.size()).Union());
  return Frame(fbb, stream);
}

std::vector<uint8_t> Loaded() {
  flatbuffers::FlatBufferBuilder fbb;
  auto caps = fbb.CreateVector(std::vector<uint32_t>{16, 16, 4});
  FinishMessage(fbb, fb::MessageBody::Loaded, fb::CreateLoaded(fbb, 1 << 20, 4096, 3.5, caps, 0x1234abcdull).Union());
  return Frame(fbb);
}

std::vector<uint8_t> PushBatch(uint32_t queue, uint64_t seq) {
  flatbuffers::FlatBufferBuilder fbb;
  FinishMessage(fbb, fb::MessageBody::PushBatch, fb::CreatePushBatch(fbb, queue, seq).Union());
  return Frame(fbb, Bytes(4 * 12 * 4 + 4 * 4, uint8_t(seq)));
}

std::vector<uint8_t> Credit(uint32_t queue, uint32_t slots) {
  flatbuffers::FlatBufferBuilder fbb;
  FinishMessage(fbb, fb::MessageBody::Credit, fb::CreateCredit(fbb, queue, slots).Union());
  return Frame(fbb);
}

std::vector<uint8_t> RunSink() {
  flatbuffers::FlatBufferBuilder fbb;
  FinishMessage(fbb, fb::MessageBody::RunSink, fb::CreateRunSink(fbb, fb::ProgramKind::TrainStep, 10, 1).Union());
  return Frame(fbb);
}

std::vector<uint8_t> SinkDone() {
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<flatbuffers::Offset<fb::ReportedBuffer>> reports = {fb::CreateReportedBuffer(fbb, 7, 4),
                                                                  fb::CreateReportedBuffer(fbb, 9, 48)};
  auto rv = fbb.CreateVector(reports);
  FinishMessage(fbb, fb::MessageBody::SinkDone, fb::CreateSinkDone(fbb, 10, rv, 12.5, 0.0, 1.25, 0.5).Union());
  return Frame(fbb, Bytes(52, 3));
}

template <typename Create>
std::vector<uint8_t> Simple(fb::MessageBody type, Create create, std::vector<uint8_t> payload = {}) {
  flatbuffers::FlatBufferBuilder fbb;
  FinishMessage(fbb, type, create(fbb).Union());
  return Frame(fbb, payload);
}

std::vector<uint8_t> Error() {
  flatbuffers::FlatBufferBuilder fbb;
  BuildError(fbb, InvalidArgument("buffer index 9 is outside the buffer table (3 buffers)"),
             ErrorContext{1, "train_step", 4, "matmul_1"});
  return Frame(fbb);
}

std::vector<uint8_t> Cat(std::initializer_list<std::vector<uint8_t>> parts) {
  std::vector<uint8_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

void Write(const fs::path& path, const std::vector<uint8_t>& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  std::printf("%8zu  %s\n", bytes.size(), path.c_str());
}

std::vector<uint8_t> CompileStream(const host::Graph& g, const host::CompileOptions& o) {
  auto cs = host::Compile(g, o);
  if (!cs.ok()) {
    std::fprintf(stderr, "make_seeds: compile: %s\n", cs.status().ToString().c_str());
    std::exit(1);
  }
  return cs->stream.bytes();  // Compile verified it
}

host::Graph WithLoss(host::Graph g) {
  const host::TensorId logits = g.outputs().front();
  const host::TensorId label = g.Input("label", {g.tensor(logits).shape.at(0)}, DType::I32);
  g.SetLoss(g.SparseSoftmaxCrossEntropy(logits, label));
  return g;
}

// A linear classifier whose weights come inline (blob section), with a
// constant bias, a softmax head and a reduction: 2x4 -> 3.
host::Graph InlineNet() {
  host::Graph g;
  auto x = g.Input("image", {2, 4});
  std::vector<float> w(12);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.1f * float(i) - 0.5f;
  auto wt = g.Param("w", {4, 3}, host::InitSpec::Inline(w));
  auto b = g.Const("b", {3}, host::InitSpec::Constant(0.25f));
  auto logits = g.Tanh(g.BiasAdd(g.MatMul(x, wt), b));
  g.AddOutput(logits);
  return WithLoss(std::move(g));
}

// What the compiler does not emit yet: two streams joined by an event, a
// communicator group, kernel options and a fused bias, built by hand.
std::vector<uint8_t> EventsStream() {
  flatbuffers::FlatBufferBuilder fbb;
  auto buffer = [&](const char* name, uint64_t offset, std::vector<int64_t> shape, fb::BufferRole role) {
    uint64_t n = 1;
    for (int64_t d : shape) n *= uint64_t(d);
    return fb::CreateBuffer(fbb, fbb.CreateString(name), offset, n * 4, DType::F32, fbb.CreateVector(shape), role);
  };
  std::vector<flatbuffers::Offset<fb::Buffer>> bufs = {
      buffer("x", 0, {2, 3}, fb::BufferRole::Input), buffer("w", 64, {3, 3}, fb::BufferRole::Param),
      buffer("bias", 128, {3}, fb::BufferRole::Param), buffer("y", 192, {2, 3}, fb::BufferRole::Output)};
  auto col =
      fb::CreateQueueColumn(fbb, fbb.CreateString("x"), DType::F32, fbb.CreateVector(std::vector<int64_t>{2, 3}));
  auto queue = fb::CreateQueueSpec(fbb, fbb.CreateString("train"), 4, fbb.CreateVector(std::vector{col}));
  auto init_def = fb::CreateInit(fbb, fb::InitKind::Normal, 0, 0, 0, 0.0f, 0.02f, 7, 3, 3);
  std::vector<flatbuffers::Offset<fb::Initializer>> inits = {fb::CreateInitializer(fbb, 1, init_def),
                                                             fb::CreateInitializer(fbb, 2, fb::CreateInit(fbb))};
  auto group = fb::CreateCommGroup(fbb, fbb.CreateString("world"), fbb.CreateVector(std::vector<uint32_t>{0}));

  auto task = [&](fb::TaskBody type, flatbuffers::Offset<void> body, const char* name) {
    return fb::CreateTask(fbb, type, body, fbb.CreateString(name));
  };
  std::vector<flatbuffers::Offset<fb::Task>> init_tasks = {task(
      fb::TaskBody::InitTask, fb::CreateInitTask(fbb, fbb.CreateVector(std::vector<uint32_t>{0, 1})).Union(), "init")};
  auto mm = fb::CreateMatMulOptions(fbb, false, true);
  std::vector<flatbuffers::Offset<fb::Task>> compute = {
      task(fb::TaskBody::GetNextTask, fb::CreateGetNextTask(fbb, 0, fbb.CreateVector(std::vector<uint32_t>{0})).Union(),
           "getnext"),
      task(fb::TaskBody::KernelTask,
           fb::CreateKernelTask(fbb, fb::OpCode::MatMul, fbb.CreateVector(std::vector<uint32_t>{0, 1}),
                                fbb.CreateVector(std::vector<uint32_t>{3}), fb::OpOptions::MatMulOptions, mm.Union(),
                                fb::Activation::Relu, 2)
               .Union(),
           "dense"),
      task(fb::TaskBody::EventRecordTask, fb::CreateEventRecordTask(fbb, 0).Union(), "y_ready")};
  std::vector<flatbuffers::Offset<fb::Task>> comm = {
      task(fb::TaskBody::EventWaitTask, fb::CreateEventWaitTask(fbb, 0).Union(), "wait_y"),
      task(fb::TaskBody::KernelTask,
           fb::CreateKernelTask(fbb, fb::OpCode::Fill, 0, fbb.CreateVector(std::vector<uint32_t>{3}),
                                fb::OpOptions::FillOptions, fb::CreateFillOptions(fbb, 1.0f).Union())
               .Union(),
           "fill")};
  auto init_stream = fb::CreateStream(fbb, fbb.CreateString("compute"), fbb.CreateVector(init_tasks));
  auto s0 = fb::CreateStream(fbb, fbb.CreateString("compute"), fbb.CreateVector(compute));
  auto s1 = fb::CreateStream(fbb, fbb.CreateString("comm"), fbb.CreateVector(comm));
  std::vector<flatbuffers::Offset<fb::Program>> progs = {
      fb::CreateProgram(fbb, fbb.CreateString("init"), fb::ProgramKind::Init,
                        fbb.CreateVector(std::vector{init_stream})),
      fb::CreateProgram(fbb, fbb.CreateString("train_step"), fb::ProgramKind::TrainStep,
                        fbb.CreateVector(std::vector{s0, s1}), 1, fbb.CreateVector(std::vector<uint32_t>{3}))};
  auto header = fb::CreateHeader(fbb, kFormatMajor, kFormatMinor, 0, 1, fbb.CreateString("cpu"), 42, 0,
                                 fbb.CreateString("make_seeds"));
  auto root = fb::CreateTaskStream(fbb, header, 256, 64, 256, fbb.CreateVector(bufs), fbb.CreateVector(inits),
                                   fbb.CreateVector(std::vector{queue}), fbb.CreateVector(std::vector{group}),
                                   fbb.CreateVector(progs), 0);
  fbb.FinishSizePrefixed(root, fb::TaskStreamIdentifier());
  std::vector<uint8_t> out(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
  auto view = VerifyTaskStream(out);
  if (!view.ok()) {
    std::fprintf(stderr, "make_seeds: events stream: %s\n", view.status().ToString().c_str());
    std::exit(1);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds CORPUS_DIR\n");
    return 2;
  }
  const fs::path root = argv[1];

  host::CompileOptions mlp_opts;
  mlp_opts.optimizer = host::OptimizerSpec::Momentum(0.1f, 0.9f);
  mlp_opts.predict_program = true;
  std::vector<uint8_t> mlp = CompileStream(WithLoss(host::MakeMlpNetwork(4, {12, 8, 3})), mlp_opts);

  host::CompileOptions inline_opts;
  inline_opts.optimizer = host::OptimizerSpec::Sgd(0.05f);
  inline_opts.queue_capacity = 2;
  std::vector<uint8_t> inl = CompileStream(InlineNet(), inline_opts);

  host::CompileOptions cnn_opts;
  cnn_opts.optimizer = host::OptimizerSpec::Adam(0.001f);
  cnn_opts.eval_program = false;
  cnn_opts.rank = 1;
  cnn_opts.world_size = 2;
  std::vector<uint8_t> cnn = CompileStream(WithLoss(host::MakeLeNetNetwork(1)), cnn_opts);

  // Data parallel: a comm stream of fused AllReduces ordered by events, and
  // init ending in Broadcasts.
  host::CompileOptions dp_opts;
  dp_opts.optimizer = host::OptimizerSpec::Momentum(0.1f, 0.9f);
  dp_opts.parallel_mode = host::ParallelMode::DataParallel;
  dp_opts.world_size = 2;
  dp_opts.rank = 1;
  dp_opts.gradients_mean = true;
  dp_opts.parameter_broadcast = true;
  dp_opts.comm_fusion.mode = "index";
  dp_opts.comm_fusion.indices = {1, 3};
  std::vector<uint8_t> dp = CompileStream(WithLoss(host::MakeMlpNetwork(4, {12, 8, 6, 3})), dp_opts);

  Write(root / "stream" / "mlp_momentum_predict.tstream", mlp);
  Write(root / "stream" / "mlp_data_parallel_rank1.tstream", dp);
  Write(root / "stream" / "inline_sgd.tstream", inl);
  Write(root / "stream" / "lenet_adam_rank1.tstream", cnn);
  Write(root / "stream" / "events_by_hand.tstream", EventsStream());

  const fs::path f = root / "frame";
  Write(f / "hello_host", Hello(fb::PeerRole::Host, 0, "secret"));
  Write(f / "hello_device", Hello(fb::PeerRole::Device, 3, ""));
  Write(f / "hello_peer", Hello(fb::PeerRole::Device, 1, "", 0x5eed5eed5eedull));
  Write(f / "load_program", LoadProgram(Bytes(96, 1)));
  Write(f / "loaded", Loaded());
  Write(f / "push_batch", PushBatch(0, 5));
  Write(f / "credit", Credit(1, 3));
  Write(f / "run_sink", RunSink());
  Write(f / "sink_done", SinkDone());
  Write(f / "error", Error());
  Write(f / "join_world", Simple(fb::MessageBody::JoinWorld, [](auto& fbb) {
          std::vector<flatbuffers::Offset<fb::WorldMember>> members = {
              fb::CreateWorldMemberDirect(fbb, "127.0.0.1:7100", "boot-a/host"),
              fb::CreateWorldMemberDirect(fbb, "127.0.0.1:7101", "boot-a/host"),
              fb::CreateWorldMemberDirect(fbb, "10.0.0.2:7100", "boot-b/other")};
          return fb::CreateJoinWorldDirect(fbb, 0x5eed5eed5eedull, 1, &members);
        }));
  Write(f / "joined", Simple(fb::MessageBody::Joined, [](auto& fbb) {
          std::vector<flatbuffers::Offset<flatbuffers::String>> t = {fbb.CreateString("shm"), fbb.CreateString("self"),
                                                                     fbb.CreateString("tcp")};
          return fb::CreateJoined(fbb, 21.5, fbb.CreateVector(t));
        }));
  Write(f / "set_profiling", Simple(fb::MessageBody::SetProfiling,
                                    [](auto& fbb) { return fb::CreateSetProfiling(fbb, true, 4, 40, 2, 16); }));
  Write(f / "read_clock", Simple(fb::MessageBody::ReadClock, [](auto& fbb) { return fb::CreateReadClock(fbb); }));
  Write(f / "clock_reading",
        Simple(fb::MessageBody::ClockReading, [](auto& fbb) { return fb::CreateClockReading(fbb, 123456789012345); }));
  // A profiled sink: one 4-byte report, then three 40-byte records.
  Write(f / "sink_done_profiled",
        Simple(
            fb::MessageBody::SinkDone,
            [](auto& fbb) {
              std::vector<flatbuffers::Offset<fb::ReportedBuffer>> reports = {fb::CreateReportedBuffer(fbb, 7, 4)};
              return fb::CreateSinkDone(fbb, 2, fbb.CreateVector(reports), 1.0, 0, 0, 0, 0, 0, 3);
            },
            Bytes(4 + 3 * 40, 5)));
  Write(f / "tensor_data",
        Simple(
            fb::MessageBody::TensorData, [](auto& fbb) { return fb::CreateTensorData(fbb, 2); }, Bytes(24, 9)));
  // A host's side of a whole job, back to back as on the socket.
  Write(f / "host_conversation",
        Cat({Hello(fb::PeerRole::Host, -1, ""), LoadProgram(inl), PushBatch(0, 0), PushBatch(0, 1), RunSink(),
             Simple(fb::MessageBody::ReadTensor, [](auto& fbb) { return fb::CreateReadTensor(fbb, 1); }),
             Simple(
                 fb::MessageBody::WriteTensor, [](auto& fbb) { return fb::CreateWriteTensor(fbb, 1); }, Bytes(48, 5)),
             Simple(fb::MessageBody::ClearQueue, [](auto& fbb) { return fb::CreateClearQueue(fbb, 0); }),
             Simple(fb::MessageBody::Shutdown, [](auto& fbb) { return fb::CreateShutdown(fbb); })}));
  // The daemon's answers.
  Write(f / "device_conversation",
        Cat({Hello(fb::PeerRole::Device, 0, ""), Loaded(), Credit(0, 2), SinkDone(),
             Simple(fb::MessageBody::Ack, [](auto& fbb) { return fb::CreateAck(fbb); }), Error()}));
  return 0;
}
