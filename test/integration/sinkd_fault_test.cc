// Fault tests of the daemon: hosts that die, frames that are malformed or
// sent at the wrong time, wrong tokens and versions. Each gets a clear
// error, the daemon lives on, and a good job running beside them is not
// disturbed (its parameters end bitwise equal to an undisturbed run).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <future>
#include <thread>

#include "runtime/src/hello.h"
#include "runtime/src/wire_socket.h"
#include "sinkrt/device/in_process_device.h"
#include "sinkrt/host/compiler.h"
#include "sinkrt/host/model.h"
#include "sinkrt/host/remote_device.h"
#include "support/model_fixtures.h"
#include "support/raw_frames.h"
#include "support/sinkd_process.h"
#include "support/test_models.h"

namespace sinkrt {
namespace {

using testing::SinkdProcess;
using namespace testing;  // raw frames
using namespace std::chrono_literals;

constexpr int64_t kBatch = 8;

std::string LogPath(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("sinkd_fault_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  return (dir / (name + ".log")).string();
}

std::string TestName() { return ::testing::UnitTest::GetInstance()->current_test_info()->name(); }

// The small MLP's task stream and the bytes of one train batch.
struct SmallJob {
  std::vector<uint8_t> stream;
  uint64_t batch_bytes = 0;
  uint32_t capacity = 0;
};
SmallJob MakeSmallJob(uint32_t capacity = 4) {
  host::Graph g = testing::MakeMlp(kBatch, {16, 12, 4});
  host::CompileOptions opts;
  opts.queue_capacity = capacity;
  auto compiled = host::Compile(g, opts);
  EXPECT_TRUE(compiled.ok()) << compiled.status().ToString();
  SmallJob job;
  job.stream = compiled->stream.bytes();           // raw bytes: several cases send them by hand
  job.batch_bytes = kBatch * 16 * 4 + kBatch * 4;  // image f32 [8,16] + label i32 [8]
  job.capacity = capacity;
  return job;
}

// ---- the good job that runs beside the faults -----------------------------

struct TrainOutcome {
  std::vector<std::pair<std::string, host::Tensor>> state;
};

// Holds training at the start of epoch `at` until released, so faults can
// be staged while a job is certainly in the middle of its run (its feeder
// pushing the next epoch's batches).
class PauseAt : public host::Callback {
 public:
  explicit PauseAt(int at) : at_(at) {}
  Status on_train_epoch_begin(host::RunContext& ctx) override {
    if (ctx.original_args().cur_epoch_num == at_) {
      reached_.set_value();
      release_.get_future().wait();
    }
    return Status::Ok();
  }
  std::future<void> reached() { return reached_.get_future(); }
  void release() { release_.set_value(); }

 private:
  int at_;
  std::promise<void> reached_, release_;
};

Result<TrainOutcome> Train(DeviceLink& device, int epochs, host::Callback* callback = nullptr) {
  testing::SyntheticData data = testing::MakeSyntheticData(64, 16, 4, 7);
  host::ModelOptions options;
  options.queue_capacity = 2;
  SINKRT_ASSIGN_OR_RETURN(auto model,
                          host::Model::Create(testing::MlpNetwork(kBatch), host::LossSpec::SparseSoftmaxCrossEntropy(),
                                              host::OptimizerSpec::Momentum(0.05f, 0.9f), device, options));
  std::vector<host::Callback*> callbacks;
  if (callback) callbacks.push_back(callback);
  SINKRT_RETURN_IF_ERROR(model->train(epochs, testing::MakeDataset(data, kBatch).Shuffle(3), callbacks, true, -1));
  TrainOutcome out;
  SINKRT_ASSIGN_OR_RETURN(out.state, model->ReadState());
  return out;
}

host::RemoteOptions Options(const std::string& token = "") {
  host::RemoteOptions o;
  o.connect_timeout = 20s;
  o.reply_timeout = 60s;
  o.push_timeout = 60s;
  o.token = token;
  return o;
}

// ---- tests ------------------------------------------------------------------

TEST(SinkdFaultTest, MalformedConnectionsAreRefusedWhileAGoodJobRunsUndisturbed) {
  SinkdProcess daemon;
  ASSERT_TRUE(daemon.Start(SINKD_PATH, {}, LogPath(TestName())).ok());
  auto remote = host::RemoteDevice::Connect(daemon.address(), Options());
  ASSERT_TRUE(remote.ok()) << remote.status().ToString();
  // The good job pauses at the start of epoch 3 while every bad peer below
  // comes and goes.
  PauseAt pause(3);
  auto reached = pause.reached();
  auto good = std::async(std::launch::async, [&] { return Train(**remote, 6, &pause); });
  ASSERT_EQ(reached.wait_for(60s), std::future_status::ready);

  struct Case {
    std::string name;
    std::function<void(FrameSocket&)> send;
    std::string expect;  // in the Error the daemon answers with
  };
  const uint8_t garbage[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  uint8_t zero[16] = {'S', 'K', 'W', 'F'};
  uint8_t huge[16] = {'S', 'K', 'W', 'F', 16, 0, 0, 0};
  uint64_t four_gib = 4ull << 30;
  std::memcpy(huge + 8, &four_gib, 8);
  std::vector<Case> cases = {
      {"garbage", [&](FrameSocket& s) { (void)SendRaw(s, garbage, sizeof garbage - 1); }, "not a sinkrt frame"},
      {"zero-length frame", [&](FrameSocket& s) { (void)SendRaw(s, zero, sizeof zero); }, "zero-length frame"},
      {"4 GiB length prefix", [&](FrameSocket& s) { (void)SendRaw(s, huge, sizeof huge); }, "exceeds the limit"},
      {"RunSink before Hello", [&](FrameSocket& s) { (void)SendRunSink(s, 1); }, "first frame must be Hello"},
      {"protocol version 9", [&](FrameSocket& s) { (void)SendHello(s, fb::PeerRole::Host, "", 9); },
       "protocol version 9." + std::to_string(kProtocolMinor) + " is not supported"},
      {"second host", [&](FrameSocket& s) { (void)SendHello(s); }, "device busy"},
      {"device role", [&](FrameSocket& s) { (void)SendHello(s, fb::PeerRole::Device); }, "may not connect"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto s = Dial(daemon.address());
    ASSERT_TRUE(s);
    c.send(*s);
    Status err = NextError(*s);
    EXPECT_NE(err.message().find(c.expect), std::string::npos) << err.message();
    EXPECT_NE(err.message().find("rank 0"), std::string::npos) << err.message();
    EXPECT_TRUE(Closed(*s));
  }
  // A truncated frame: the header promises a message that never comes.
  {
    auto s = Dial(daemon.address());
    uint8_t partial[20] = {'S', 'K', 'W', 'F', 64, 0, 0, 0};
    ASSERT_TRUE(SendRaw(*s, partial, sizeof partial).ok());
    ::shutdown(s->native_handle(), SHUT_WR);  // the peer is gone mid-frame
    EXPECT_TRUE(Closed(*s) || NextError(*s).code() != StatusCode::kOk);
  }
  // Probes are answered while the job runs.
  auto probe = host::ProbeDevice(daemon.address(), 10s);
  ASSERT_TRUE(probe.ok()) << probe.status().ToString();
  EXPECT_TRUE(probe->busy);

  pause.release();
  auto got = good.get();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  device::DeviceOptions opts = device::DeviceOptions::FromEnvironment();
  opts.threads = 1;
  device::InProcessDevice local(opts);
  auto reference = Train(local, 6);
  ASSERT_TRUE(reference.ok());
  ASSERT_EQ(got->state.size(), reference->state.size());
  for (size_t i = 0; i < got->state.size(); ++i)
    EXPECT_EQ(got->state[i].second.data, reference->state[i].second.data) << got->state[i].first;
  // None of the refusals ended the job.
  std::string log = daemon.ReadLog();
  EXPECT_EQ(log.find("ended"), std::string::npos) << log;
  EXPECT_NE(log.find("refused"), std::string::npos) << log;
}

TEST(SinkdFaultTest, WrongOrMissingTokenIsRefused) {
  SinkdProcess daemon;
  ASSERT_TRUE(daemon.Start(SINKD_PATH, {"--token", "s3cret"}, LogPath(TestName())).ok());
  auto none = host::RemoteDevice::Connect(daemon.address(), Options());
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("missing token"), std::string::npos) << none.status().message();
  EXPECT_EQ(none.status().code(), StatusCode::kPermissionDenied);
  auto wrong = host::RemoteDevice::Connect(daemon.address(), Options("guess"));
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("wrong token"), std::string::npos) << wrong.status().message();
  auto probe = host::ProbeDevice(daemon.address(), 10s, "guess");
  EXPECT_FALSE(probe.ok());
  auto right = host::RemoteDevice::Connect(daemon.address(), Options("s3cret"));
  ASSERT_TRUE(right.ok()) << right.status().ToString();
  auto got = Train(**right, 1);
  EXPECT_TRUE(got.ok()) << got.status().ToString();
}

TEST(SinkdFaultTest, ListeningBeyondLoopbackRequiresAToken) {
  SinkdProcess daemon;
  Status st = daemon.Start(SINKD_PATH, {"--listen", "0.0.0.0:0"}, LogPath(TestName()), 20s);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(daemon.ReadLog().find("--token"), std::string::npos) << daemon.ReadLog();
}

TEST(SinkdFaultTest, FramesAtTheWrongTimeEndTheJobAndTheDaemonTakesTheNext) {
  SinkdProcess daemon;
  ASSERT_TRUE(daemon.Start(SINKD_PATH, {}, LogPath(TestName())).ok());
  SmallJob job = MakeSmallJob(/*capacity=*/2);
  std::vector<uint8_t> batch(job.batch_bytes, 0);
  struct Case {
    std::string name;
    std::function<void(FrameSocket&)> act;
    std::string expect;
  };
  std::vector<Case> cases = {
      {"RunSink before LoadProgram", [&](FrameSocket& s) { (void)SendRunSink(s, 1); }, "RunSink before LoadProgram"},
      {"PushBatch before LoadProgram", [&](FrameSocket& s) { (void)SendPush(s, 0, 0, batch); },
       "PushBatch before LoadProgram"},
      {"a device's message from the host",
       [&](FrameSocket& s) {
         (void)SendMessage(s, fb::MessageBody::Credit,
                           [](flatbuffers::FlatBufferBuilder& fbb) { return fb::CreateCredit(fbb, 0, 1).Union(); });
       },
       "a host may not send it"},
      {"Hello twice", [&](FrameSocket& s) { (void)SendHello(s); }, "Hello after the handshake"},
      {"push without a credit",
       [&](FrameSocket& s) {
         (void)SendLoad(s, job.stream);
         for (uint64_t i = 0; i < 3; ++i) (void)SendPush(s, 0, i, batch);  // capacity 2
       },
       "flow control violated"},
      {"sequence gap",
       [&](FrameSocket& s) {
         (void)SendLoad(s, job.stream);
         (void)SendPush(s, 0, 1, batch);
       },
       "has sequence 1, expected 0"},
      {"batch of the wrong size",
       [&](FrameSocket& s) {
         (void)SendLoad(s, job.stream);
         (void)SendPush(s, 0, 0, std::span<const uint8_t>(batch).first(10));
       },
       "a batch is"},
      {"RunSink while a sink runs",
       [&](FrameSocket& s) {
         (void)SendLoad(s, job.stream);
         (void)SendRunSink(s, 5);  // waits for batches
         (void)SendRunSink(s, 5);
       },
       "one sink at a time"},
      // A request that needs the device idle is refused during a job's
      // first sink and during a later one.
      {"ReadTensor during the first sink",
       [&](FrameSocket& s) {
         (void)SendLoad(s, job.stream);
         (void)SendRunSink(s, 5);
         (void)SendReadTensor(s, 0);
       },
       "ReadTensor while a sink runs"},
      {"a device's message during a sink",
       [&](FrameSocket& s) {
         (void)SendLoad(s, job.stream);
         (void)SendRunSink(s, 5);
         (void)SendMessage(s, fb::MessageBody::Credit,
                           [](flatbuffers::FlatBufferBuilder& fbb) { return fb::CreateCredit(fbb, 0, 1).Union(); });
       },
       "a host may not send it"},
      {"ReadTensor during the second sink",
       [&](FrameSocket& s) {
         (void)SendLoad(s, job.stream);
         if (!ReadUntil(s, fb::MessageBody::Loaded)) return;
         (void)SendPush(s, 0, 0, batch);
         (void)SendRunSink(s, 1);
         if (!ReadUntil(s, fb::MessageBody::SinkDone)) return;
         (void)SendRunSink(s, 5);
         (void)SendReadTensor(s, 0);
       },
       "ReadTensor while a sink runs"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto s = Dial(daemon.address());
    ASSERT_TRUE(s);
    ASSERT_TRUE(SendHello(*s).ok());
    auto hello = Next(*s);
    ASSERT_TRUE(hello.ok() && *hello == fb::MessageBody::Hello);
    c.act(*s);
    Status err = NextError(*s);
    EXPECT_NE(err.message().find(c.expect), std::string::npos) << err.message();
    EXPECT_NE(err.message().find("protocol error"), std::string::npos) << err.message();
    EXPECT_TRUE(Closed(*s));
    // The daemon frees the job and takes the next host at once.
    auto next = host::RemoteDevice::Connect(daemon.address(), Options());
    ASSERT_TRUE(next.ok()) << next.status().ToString();
  }
}

TEST(SinkdFaultTest, BadRequestsGetAnErrorAndTheJobGoesOn) {
  SinkdProcess daemon;
  ASSERT_TRUE(daemon.Start(SINKD_PATH, {"--getnext-timeout-ms", "500"}, LogPath(TestName())).ok());
  SmallJob job = MakeSmallJob();
  {
    // A corrupt and a truncated task stream, sent raw (DeviceLink::Load
    // takes only a VerifiedStream): each refused with the verifier's reason,
    // and the connection goes on to load the good one.
    auto s = Dial(daemon.address());
    ASSERT_TRUE(s);
    ASSERT_TRUE(SendHello(*s).ok());
    auto hello = Next(*s);
    ASSERT_TRUE(hello.ok() && *hello == fb::MessageBody::Hello);
    std::vector<uint8_t> corrupt = job.stream;
    corrupt[4 + 4] ^= 0xFF;  // the identifier "SKTS"
    ASSERT_TRUE(SendLoad(*s, corrupt).ok());
    Status refused = NextError(*s);
    EXPECT_NE(refused.message().find("rank 0"), std::string::npos) << refused.message();
    EXPECT_NE(refused.message().find("LoadProgram"), std::string::npos) << refused.message();
    EXPECT_NE(refused.message().find("not a sinkrt task stream"), std::string::npos) << refused.message();
    ASSERT_TRUE(SendLoad(*s, std::span<const uint8_t>(job.stream).first(job.stream.size() / 2)).ok());
    refused = NextError(*s);
    EXPECT_NE(refused.message().find("LoadProgram"), std::string::npos) << refused.message();
    ASSERT_TRUE(SendLoad(*s, job.stream).ok());
    auto loaded = Next(*s);
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    EXPECT_EQ(*loaded, fb::MessageBody::Loaded);
  }
  auto remote = host::RemoteDevice::Connect(daemon.address(), Options());
  for (int i = 0; i < 100 && !remote.ok() && remote.status().message().find("device busy") != std::string::npos; ++i) {
    // Teardown of the raw host's job is asynchronous to our connect: retry briefly.
    std::this_thread::sleep_for(20ms);
    remote = host::RemoteDevice::Connect(daemon.address(), Options());
  }
  ASSERT_TRUE(remote.ok()) << remote.status().ToString();
  auto verified = VerifyTaskStream(job.stream);
  ASSERT_TRUE(verified.ok()) << verified.status().ToString();
  // Reading a buffer that does not exist, before and after a good load.
  ASSERT_TRUE((*remote)->Load(*verified).ok());
  auto bad = (*remote)->ReadTensor(100000);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("buffer index 100000"), std::string::npos) << bad.status().message();
  std::vector<uint8_t> three(3);
  EXPECT_FALSE((*remote)->WriteTensor(0, three).ok());
  // A sink whose queue stays dry fails with GetNext's error, naming the
  // program and task, and the job is still usable afterwards.
  auto dry = (*remote)->RunSink(ProgramKind::EvalStep, 1);
  ASSERT_FALSE(dry.ok());
  auto ok = (*remote)->ReadTensor(0);
  EXPECT_TRUE(ok.ok()) << ok.status().ToString();
  auto got = Train(**remote, 1);
  EXPECT_TRUE(got.ok()) << got.status().ToString();
}

TEST(SinkdFaultTest, HostKilledMidSinkFreesTheDeviceForTheNextJob) {
  SinkdProcess daemon;
  ASSERT_TRUE(daemon.Start(SINKD_PATH, {}, LogPath(TestName())).ok());
  SmallJob job = MakeSmallJob();
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // A host process: hello, load, start a long sink, tell the parent, wait
    // to be killed. Only the socket calls of FrameSocket; no threads.
    auto s = FrameSocket::Connect(daemon.address(), 10s);
    if (!s.ok() || !SendHello(**s).ok()) _exit(1);
    InFrame f;
    if (!(*s)->Receive(&f, DeadlineIn(10s)).ok() || f.type() != fb::MessageBody::Hello) _exit(2);
    if (!SendLoad(**s, job.stream).ok()) _exit(3);
    if (!(*s)->Receive(&f, DeadlineIn(30s)).ok() || f.type() != fb::MessageBody::Loaded) _exit(4);
    if (!SendRunSink(**s, 1000).ok()) _exit(5);
    char c = 'x';
    if (write(ready[1], &c, 1) != 1) _exit(6);
    pause();
    _exit(0);
  }
  close(ready[1]);
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1) << "the host child failed before its sink";
  close(ready[0]);
  kill(child, SIGKILL);
  int st;
  waitpid(child, &st, 0);
  // The daemon notices the closed connection, cancels the sink waiting for
  // batches and frees the job; the next host gets the device.
  auto next = host::RemoteDevice::Connect(daemon.address(), Options());
  for (int i = 0; i < 100 && !next.ok() && next.status().message().find("device busy") != std::string::npos; ++i) {
    // Teardown of the dead job is asynchronous to our connect: retry briefly.
    std::this_thread::sleep_for(20ms);
    next = host::RemoteDevice::Connect(daemon.address(), Options());
  }
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  auto got = Train(**next, 2);
  EXPECT_TRUE(got.ok()) << got.status().ToString();
  std::string log = daemon.ReadLog();
  EXPECT_NE(log.find("job 1 from"), std::string::npos) << log;
  EXPECT_NE(log.find("device freed"), std::string::npos) << log;
}

TEST(SinkdFaultTest, MemoryStaysFlatOverAHundredJobs) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer's quarantine keeps freed memory resident by design";
#endif
  SinkdProcess daemon;
  ASSERT_TRUE(daemon.Start(SINKD_PATH, {"--quiet"}, LogPath(TestName())).ok());
  SmallJob job = MakeSmallJob();
  testing::SyntheticData data = testing::MakeSyntheticData(64, 16, 4, 7);
  long rss_at_10 = 0, rss_at_100 = 0;
  for (int j = 1; j <= 100; ++j) {
    auto remote = host::RemoteDevice::Connect(daemon.address(), Options());
    ASSERT_TRUE(remote.ok()) << "job " << j << ": " << remote.status().ToString();
    auto model = host::Model::Create(testing::MlpNetwork(kBatch), host::LossSpec::SparseSoftmaxCrossEntropy(),
                                     host::OptimizerSpec::Adam(0.01f), **remote);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    ASSERT_TRUE((*model)->train(1, testing::MakeDataset(data, kBatch), {}, true, -1).ok());
    model->reset();
    remote->reset();  // Shutdown; the daemon frees the job
    if (j == 10 || j == 100) {
      // The daemon frees a job after the host's Shutdown; a probe is served
      // after it (one connection at a time is enough to order them).
      auto probe = host::ProbeDevice(daemon.address(), 10s);
      for (int i = 0; i < 100 && probe.ok() && probe->busy; ++i) {
        std::this_thread::sleep_for(10ms);
        probe = host::ProbeDevice(daemon.address(), 10s);
      }
      (j == 10 ? rss_at_10 : rss_at_100) = daemon.RssKiB();
    }
  }
  std::printf("sinkd RSS after job 10: %ld KiB, after job 100: %ld KiB (%+ld KiB)\n", rss_at_10, rss_at_100,
              rss_at_100 - rss_at_10);
  ASSERT_GT(rss_at_10, 0);
  // 90 more jobs, each mapping and freeing an arena and its queues: the
  // resident set may wobble by allocator pages, never by a job's worth.
  EXPECT_LT(rss_at_100 - rss_at_10, 1024) << "daemon memory grew over 90 jobs";
}

}  // namespace
}  // namespace sinkrt
