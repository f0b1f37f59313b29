// TLS between hosts and real sinkd daemons on 127.0.0.1 (docs/guide/tls.md): a
// host with the right certificate trains, with the same bits as an
// in-process device; hosts without it, with another CA's, or in plain
// frames are refused with a message that says why, and the daemon serves
// the next. The daemons of a world link to each other over TLS too (a
// data-parallel world over TCP trains with the bits of its plain twin),
// refuse a peer whose certificate their CA did not sign or that speaks
// plain frames, and need --tls-ca to verify their peers at all.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <thread>

#include "sinkrt/device/in_process_device.h"
#include "sinkrt/host/model.h"
#include "sinkrt/host/remote_device.h"
#include "support/compare.h"
#include "support/model_fixtures.h"
#include "support/sinkd_process.h"
#include "support/test_models.h"
#include "support/test_util.h"
#include "support/tls_certs.h"

namespace sinkrt {
namespace {

using ::testing::HasSubstr;

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::SinkdProcess;

constexpr int64_t kBatch = 8;

std::string TestName() { return ::testing::UnitTest::GetInstance()->current_test_info()->name(); }

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
    std::vector<std::string> a = {"--tls-cert",      files_.server_cert, "--tls-key",
                                  files_.server_key, "--tls-ca",         files_.ca_cert};
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
  SINKRT_ASSIGN_OR_RETURN(auto model,
                          host::Model::Create(testing::MlpNetwork(kBatch), host::LossSpec::SparseSoftmaxCrossEntropy(),
                                              host::OptimizerSpec::Momentum(0.05f, 0.9f), device, options));
  SINKRT_RETURN_IF_ERROR(model->train(2, testing::MakeDataset(data, kBatch).Shuffle(3), {}, true, -1));
  return model->ReadState();
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
  testing::ExpectSameTensors(*over_tls, *reference);
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
      {"another CA's certificate",
       {files_.rogue_cert, files_.rogue_key, files_.ca_cert},
       {"refused the TLS session", "unknown ca"}},
      {"a CA that did not sign sinkd's",
       {files_.client_cert, files_.client_key, files_.other_ca_cert},
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
      EXPECT_THAT(refused.status().message(), HasSubstr(e)) << refused.status().ToString();
  }
  // The daemon says why in its log, and takes a good host afterwards.
  auto probe = host::ProbeDevice(daemon.address(), 10s, "", GoodClient());
  SINKRT_ASSERT_OK(probe);
  auto remote = host::RemoteDevice::Connect(daemon.address(), Host(GoodClient()));
  SINKRT_ASSERT_OK(remote);
  remote->reset();
  const std::string log = daemon.ReadLog();
  EXPECT_THAT(log, HasSubstr("peer did not return a certificate")) << log;
  EXPECT_THAT(log, HasSubstr("certificate verify failed")) << log;
  EXPECT_THAT(log, HasSubstr("requires TLS")) << log;
}

TEST_F(SinkdTlsTest, TlsHostAtAPlainSinkdIsToldSo) {
  SinkdProcess daemon;
  SINKRT_ASSERT_OK(daemon.Start(SINKD_PATH, {}, Log("sinkd")));
  host::RemoteOptions o = Host(GoodClient());
  o.connect_timeout = 10s;
  auto refused = host::RemoteDevice::Connect(daemon.address(), o);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("answered without TLS")) << refused.status().ToString();
}

TEST_F(SinkdTlsTest, BadTlsFilesStopTheDaemonBeforeItListens) {
  SinkdProcess daemon;
  Status st =
      daemon.Start(SINKD_PATH, {"--tls-cert", files_.server_cert, "--tls-key", files_.client_key}, Log("sinkd"), 10s);
  EXPECT_FALSE(st.ok());
  EXPECT_THAT(daemon.ReadLog(), HasSubstr("does not belong to the certificate")) << daemon.ReadLog();
}

// The daemons of a world, each with `args_of(rank)` plus its rank and a
// peer timeout, over TCP only (SINKRT_COMM_SHM=0: the links carry every
// AllReduce), and a TLS host on each.
struct TlsWorld {
  std::vector<std::unique_ptr<SinkdProcess>> daemons;
  std::vector<std::unique_ptr<host::RemoteDevice>> remotes;
  std::vector<DeviceLink*> links;
};

class SinkdTlsWorldTest : public SinkdTlsTest {
 protected:
  // TlsArgs, plus --tls-plain-peers when `plain`.
  std::vector<std::string> PeerArgs(bool plain) const { return plain ? TlsArgs({"--tls-plain-peers"}) : TlsArgs(); }

  // `rogue`: the rank whose daemon holds a certificate of the other CA; its
  // host trusts that CA.
  template <typename ArgsOf>
  Status StartWorld(int n, ArgsOf args_of, TlsWorld* w, const std::string& name, int rogue = -1) {
    for (int r = 0; r < n; ++r) {
      std::vector<std::string> args = args_of(r);
      args.insert(args.end(), {"--rank", std::to_string(r), "--peer-timeout-ms", "5000"});
      w->daemons.push_back(std::make_unique<SinkdProcess>());
      SINKRT_RETURN_IF_ERROR(
          w->daemons.back()->Start(SINKD_PATH, args, Log(name + "-r" + std::to_string(r)), 30s, {"SINKRT_COMM_SHM=0"}));
      TlsConfig host = GoodClient();
      if (r == rogue) host.ca_file = files_.other_ca_cert;
      SINKRT_ASSIGN_OR_RETURN(auto remote, host::RemoteDevice::Connect(w->daemons.back()->address(), Host(host)));
      w->links.push_back(remote.get());
      w->remotes.push_back(std::move(remote));
    }
    return Status::Ok();
  }

  // Every rank's JoinWorld of one world, at once (each blocks until its
  // peers come); rank r's outcome at [r].
  static std::vector<Status> JoinAll(TlsWorld& w, uint64_t job) {
    std::vector<PeerEndpoint> members;
    for (DeviceLink* d : w.links) {
      auto e = d->Endpoint();
      if (!e.ok()) return std::vector<Status>(w.links.size(), e.status());
      members.push_back(*e);
    }
    std::vector<Status> joined(w.links.size());
    std::vector<std::thread> threads;
    for (uint32_t r = 0; r < w.links.size(); ++r)
      threads.emplace_back([&, r] { joined[r] = w.links[r]->JoinWorld(WorldSpec{job, r, members}); });
    for (auto& t : threads) t.join();
    return joined;
  }
};

// Two epochs of the MLP, data parallel over `links`; the parameters and
// optimizer state.
Result<std::vector<std::pair<std::string, host::Tensor>>> TrainDataParallel(const std::vector<DeviceLink*>& links) {
  host::ModelOptions o;
  o.context.mode = host::ParallelMode::DataParallel;
  o.context.device_num = static_cast<int>(links.size());
  o.context.gradients_mean = true;
  o.queue_capacity = 2;
  SINKRT_ASSIGN_OR_RETURN(auto model,
                          host::Model::Create(testing::MlpNetwork(kBatch), host::LossSpec::SparseSoftmaxCrossEntropy(),
                                              host::OptimizerSpec::Momentum(0.05f, 0.9f), links, o));
  // 12 batches: whole sinks for 2 and for 3 ranks.
  const testing::SyntheticData data = testing::MakeSyntheticData(12 * kBatch, 16, 4, 5);
  SINKRT_RETURN_IF_ERROR(model->train(2, testing::MakeDataset(data, kBatch).Shuffle(3), {}, true, -1));
  return model->ReadState();
}

// TLS daemons link to each other over TLS by default: the world forms
// without --tls-plain-peers, its AllReduces cross TLS links (TCP only), and
// it trains to the same bits as the same world with plain links.
void ExpectTlsWorldMatchesPlain(int n, const std::function<Status(int, bool, TlsWorld*)>& start) {
  std::vector<std::pair<std::string, host::Tensor>> results[2];
  for (const bool plain_peers : {false, true}) {
    SCOPED_TRACE(plain_peers ? "--tls-plain-peers" : "TLS links");
    TlsWorld w;
    SINKRT_ASSERT_OK(start(n, plain_peers, &w));
    auto state = TrainDataParallel(w.links);
    SINKRT_ASSERT_OK(state);
    results[plain_peers] = std::move(state).value();
  }
  testing::ExpectSameTensors(results[0], results[1]);
}

TEST_F(SinkdTlsWorldTest, TwoDaemonsTrainOverTlsLinksWithThePlainLinksBits) {
  ExpectTlsWorldMatchesPlain(2, [&](int n, bool plain, TlsWorld* w) {
    return StartWorld(
        n, [&](int) { return PeerArgs(plain); }, w, plain ? "plain" : "tls");
  });
}

TEST_F(SinkdTlsWorldTest, ThreeDaemonsTrainOverTlsLinksWithThePlainLinksBits) {
  ExpectTlsWorldMatchesPlain(3, [&](int n, bool plain, TlsWorld* w) {
    return StartWorld(
        n, [&](int) { return PeerArgs(plain); }, w, plain ? "plain" : "tls");
  });
}

// A daemon whose certificate another CA signed is refused by its peer,
// whether it dials (rank 0: its peer rejects its certificate) or is dialed
// (rank 1: the dialer finds its certificate unverifiable); the dialer's
// error names TLS and OpenSSL's reason.
TEST_F(SinkdTlsWorldTest, PeerWithACertificateTheCaDidNotSignIsRefused) {
  for (const int rogue : {0, 1}) {
    SCOPED_TRACE("rogue rank " + std::to_string(rogue));
    TlsWorld w;
    SINKRT_ASSERT_OK(StartWorld(
        2,
        [&](int r) {
          if (r != rogue) return TlsArgs();
          return std::vector<std::string>{"--tls-cert",     files_.rogue_cert, "--tls-key",
                                          files_.rogue_key, "--tls-ca",        files_.ca_cert};
        },
        &w, "rogue" + std::to_string(rogue), rogue));
    const std::vector<Status> joined = JoinAll(w, 40 + rogue);
    for (const Status& st : joined) EXPECT_FALSE(st.ok());
    // Rank 0 dials rank 1; the other side only sees a peer that never came.
    const std::string& m = joined[0].message();
    EXPECT_THAT(m, HasSubstr("TLS")) << joined[0].ToString();
    EXPECT_THAT(m, HasSubstr(rogue == 0 ? "unknown ca" : "certificate verify failed")) << joined[0].ToString();
  }
}

// A TLS daemon without --tls-plain-peers refuses a peer that dials in plain
// frames (one with --tls-plain-peers), saying that it requires TLS.
TEST_F(SinkdTlsWorldTest, PlainPeerAtATlsDaemonIsRefusedNamingTls) {
  TlsWorld w;
  SINKRT_ASSERT_OK(StartWorld(
      2, [&](int r) { return PeerArgs(r == 0); }, &w, "mixed"));
  const std::vector<Status> joined = JoinAll(w, 50);
  for (const Status& st : joined) EXPECT_FALSE(st.ok());
  EXPECT_THAT(joined[0].message(), HasSubstr("requires TLS")) << joined[0].ToString();
  EXPECT_THAT(joined[0].message(), HasSubstr("--tls-plain-peers")) << joined[0].ToString();
  EXPECT_THAT(w.daemons[1]->ReadLog(), HasSubstr("requires TLS")) << w.daemons[1]->ReadLog();
}

// A TLS daemon without a CA cannot verify its peers: its JoinWorld of more
// than one member is refused at once, naming the two ways out. Alone it
// still runs (a world of one needs no peer).
TEST_F(SinkdTlsWorldTest, TlsDaemonWithoutACaRefusesToJoinAWorldByName) {
  TlsWorld w;
  SINKRT_ASSERT_OK(StartWorld(
      2,
      [&](int) {
        return std::vector<std::string>{"--tls-cert", files_.server_cert, "--tls-key", files_.server_key};
      },
      &w, "noca"));
  const std::vector<Status> joined = JoinAll(w, 60);
  for (uint32_t r = 0; r < joined.size(); ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(joined[r].code(), StatusCode::kFailedPrecondition) << joined[r].ToString();
    EXPECT_THAT(joined[r].message(), HasSubstr("without --tls-ca")) << joined[r].ToString();
    EXPECT_THAT(joined[r].message(), HasSubstr("--tls-plain-peers")) << joined[r].ToString();
  }
  auto alone = w.links[0]->Endpoint();
  SINKRT_ASSERT_OK(alone);
  SINKRT_ASSERT_OK(w.links[0]->JoinWorld(WorldSpec{61, 0, {*alone}}));
}

}  // namespace
}  // namespace sinkrt
