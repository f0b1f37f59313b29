// TLS between hosts and real sinkd daemons on 127.0.0.1 (docs/tls.md): a
// host with the right certificate trains, with the same bits as an
// in-process device; hosts without it, with another CA's, or in plain
// frames are refused with a message that says why, and the daemon serves
// the next; a world of TLS daemons forms only with --tls-plain-peers.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "sinkrt/device/in_process_device.h"
#include "sinkrt/host/model.h"
#include "sinkrt/host/remote_device.h"
#include "support/model_fixtures.h"
#include "support/sinkd_process.h"
#include "support/test_models.h"
#include "support/test_util.h"
#include "support/tls_certs.h"

namespace sinkrt {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::SinkdProcess;

constexpr int64_t kBatch = 8;

std::string TestName() { return ::testing::UnitTest::GetInstance()->current_test_info()->name(); }

bool Contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

class SinkdTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("sinkd_tls_test_" + std::to_string(::getpid()) + "_" + TestName());
    fs::create_directories(dir_);
    files_ = testing::WriteTlsTestFiles(dir_.string());
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Log(const std::string& name) const { return (dir_ / (name + ".log")).string(); }
  // sinkd's flags for TLS with client certificates, plus `more`.
  std::vector<std::string> TlsArgs(std::vector<std::string> more = {}) const {
    std::vector<std::string> a = {"--tls-cert", files_.server_cert, "--tls-key", files_.server_key,
                                  "--tls-ca", files_.ca_cert};
    a.insert(a.end(), more.begin(), more.end());
    return a;
  }
  host::RemoteOptions Host(TlsConfig tls) const {
    host::RemoteOptions o;
    o.connect_timeout = 20s;
    o.reply_timeout = 60s;
    o.push_timeout = 60s;
    o.tls = std::move(tls);
    return o;
  }
  TlsConfig GoodClient() const { return {files_.client_cert, files_.client_key, files_.ca_cert}; }

  fs::path dir_;
  testing::TlsTestFiles files_;
};

// Two epochs of the small MLP on `device`; its parameters and optimizer state.
Result<std::vector<std::pair<std::string, host::Tensor>>> Train(DeviceLink& device) {
  const testing::SyntheticData data = testing::MakeSyntheticData(64, 16, 4, 7);
  host::ModelOptions options;
  options.queue_capacity = 2;
  SINKRT_ASSIGN_OR_RETURN(auto model, host::Model::Create(testing::MlpNetwork(kBatch), host::LossSpec::SparseSoftmaxCrossEntropy(),
                                                          host::OptimizerSpec::Momentum(0.05f, 0.9f), device, options));
  SINKRT_RETURN_IF_ERROR(model->train(2, testing::MakeDataset(data, kBatch).Shuffle(3), {}, true, -1));
  return model->ReadState();
}

void ExpectSameState(const std::vector<std::pair<std::string, host::Tensor>>& a,
                     const std::vector<std::pair<std::string, host::Tensor>>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_EQ(a[i].second.data, b[i].second.data) << a[i].first;
  }
}

TEST_F(SinkdTlsTest, HostWithTheRightCertificateTrainsWithTheSameBits) {
  SinkdProcess daemon;
  SINKRT_ASSERT_OK(daemon.Start(SINKD_PATH, TlsArgs(), Log("sinkd")));
  auto remote = host::RemoteDevice::Connect(daemon.address(), Host(GoodClient()));
  SINKRT_ASSERT_OK(remote);
  auto over_tls = Train(**remote);
  SINKRT_ASSERT_OK(over_tls);

  device::DeviceOptions o = device::DeviceOptions::FromEnvironment();
  o.threads = 1;
  device::InProcessDevice local(o);
  auto reference = Train(local);
  SINKRT_ASSERT_OK(reference);
  ExpectSameState(*over_tls, *reference);
}

TEST_F(SinkdTlsTest, HostsWithoutTheRightCertificateAreRefusedAndTheDaemonServesTheNext) {
  SinkdProcess daemon;
  SINKRT_ASSERT_OK(daemon.Start(SINKD_PATH, TlsArgs(), Log("sinkd")));
  struct Case {
    const char* what;
    TlsConfig tls;
    std::vector<std::string> expected;  // all in the host's error
  };
  const std::vector<Case> cases = {
      // TLS 1.3: the server judges the client's certificate after the
      // client's handshake is done, so the client meets its alert reading.
      {"no certificate", {"", "", files_.ca_cert}, {"refused the TLS session", "certificate required"}},
      {"another CA's certificate", {files_.rogue_cert, files_.rogue_key, files_.ca_cert},
       {"refused the TLS session", "unknown ca"}},
      {"a CA that did not sign sinkd's", {files_.client_cert, files_.client_key, files_.other_ca_cert},
       {"certificate verify failed"}},
      {"plain frames", {}, {"requires TLS", "--tls-ca"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    host::RemoteOptions o = Host(c.tls);
    o.connect_timeout = 10s;
    auto refused = host::RemoteDevice::Connect(daemon.address(), o);
    ASSERT_FALSE(refused.ok());
    for (const std::string& e : c.expected)
      EXPECT_TRUE(Contains(refused.status().message(), e)) << refused.status().ToString();
  }
  // The daemon says why in its log, and takes a good host afterwards.
  auto probe = host::ProbeDevice(daemon.address(), 10s, "", GoodClient());
  SINKRT_ASSERT_OK(probe);
  auto remote = host::RemoteDevice::Connect(daemon.address(), Host(GoodClient()));
  SINKRT_ASSERT_OK(remote);
  remote->reset();
  const std::string log = daemon.ReadLog();
  EXPECT_TRUE(Contains(log, "peer did not return a certificate")) << log;
  EXPECT_TRUE(Contains(log, "certificate verify failed")) << log;
  EXPECT_TRUE(Contains(log, "requires TLS")) << log;
}

TEST_F(SinkdTlsTest, TlsHostAtAPlainSinkdIsToldSo) {
  SinkdProcess daemon;
  SINKRT_ASSERT_OK(daemon.Start(SINKD_PATH, {}, Log("sinkd")));
  host::RemoteOptions o = Host(GoodClient());
  o.connect_timeout = 10s;
  auto refused = host::RemoteDevice::Connect(daemon.address(), o);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(Contains(refused.status().message(), "answered without TLS")) << refused.status().ToString();
}

TEST_F(SinkdTlsTest, BadTlsFilesStopTheDaemonBeforeItListens) {
  SinkdProcess daemon;
  Status st = daemon.Start(SINKD_PATH, {"--tls-cert", files_.server_cert, "--tls-key", files_.client_key},
                           Log("sinkd"), 10s);
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(Contains(daemon.ReadLog(), "does not belong to the certificate")) << daemon.ReadLog();
}

// The links between the daemons of a world carry no TLS yet: without
// --tls-plain-peers the JoinWorld says so; with it the world trains.
TEST_F(SinkdTlsTest, WorldOfTlsDaemonsFormsOnlyWithPlainPeers) {
  for (const bool plain_peers : {false, true}) {
    SCOPED_TRACE(plain_peers ? "--tls-plain-peers" : "TLS only");
    std::vector<std::unique_ptr<SinkdProcess>> daemons;
    std::vector<std::unique_ptr<host::RemoteDevice>> remotes;
    std::vector<DeviceLink*> links;
    for (int r = 0; r < 2; ++r) {
      auto args = TlsArgs({"--rank", std::to_string(r), "--peer-timeout-ms", "10000"});
      if (plain_peers) args.push_back("--tls-plain-peers");
      daemons.push_back(std::make_unique<SinkdProcess>());
      SINKRT_ASSERT_OK(daemons.back()->Start(SINKD_PATH, args, Log(std::string("r") + std::to_string(r)), 30s,
                                             {"SINKRT_COMM_SHM=0"}));
      auto remote = host::RemoteDevice::Connect(daemons.back()->address(), Host(GoodClient()));
      SINKRT_ASSERT_OK(remote);
      links.push_back(remote->get());
      remotes.push_back(std::move(remote).value());
    }
    host::ModelOptions o;
    o.context.mode = host::ParallelMode::DataParallel;
    o.context.device_num = 2;
    o.context.gradients_mean = true;
    auto model = host::Model::Create(testing::MlpNetwork(kBatch), host::LossSpec::SparseSoftmaxCrossEntropy(),
                                     host::OptimizerSpec::Sgd(0.05f), links, o);
    if (!plain_peers) {
      ASSERT_FALSE(model.ok());
      EXPECT_TRUE(Contains(model.status().message(), "--tls-plain-peers")) << model.status().ToString();
      continue;
    }
    SINKRT_ASSERT_OK(model);
    const testing::SyntheticData data = testing::MakeSyntheticData(128, 16, 4, 5);
    SINKRT_ASSERT_OK((*model)->train(1, testing::MakeDataset(data, kBatch), {}, true, -1));
  }
}

}  // namespace
}  // namespace sinkrt
