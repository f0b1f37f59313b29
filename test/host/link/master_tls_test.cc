// TLS on the rendezvous master (init()): a world whose ranks hold the CA's
// certificates forms and runs its rounds encrypted; a rank without TLS, one
// with a certificate of another CA, and a TLS rank at a plain master are
// each refused with a sentence that names TLS, while the real ranks still
// join; silent connections that never start their handshake do not hold
// up the world. Ranks are threads of this process.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "sinkrt/host/communication.h"
#include "support/raw_frames.h"
#include "support/tcp_recorder.h"
#include "support/tls_certs.h"

namespace sinkrt::host {
namespace {

using ::testing::HasSubstr;

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class MasterTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    dir_ = fs::temp_directory_path() / ("master_tls_test_" + std::to_string(::getpid()) + "_" + name);
    fs::create_directories(dir_);
    files_ = testing::WriteTlsTestFiles(dir_.string());
    auto port = FreeLoopbackPort();
    ASSERT_TRUE(port.ok()) << port.status().message();
    port_ = *port;
  }
  void TearDown() override { fs::remove_all(dir_); }

  ProcessGroup::Options Rank(uint32_t rank, uint32_t size, TlsConfig tls, uint16_t port = 0) const {
    ProcessGroup::Options o;
    o.rank = rank;
    o.world_size = size;
    o.master = Address{"127.0.0.1", port ? port : port_};
    o.timeout = 20s;
    o.job_id = "job-tls";
    o.token = "secret";
    o.tls = std::move(tls);
    return o;
  }
  // Rank 0 serves with the server certificate and asks for client ones.
  TlsConfig Master() const { return {files_.server_cert, files_.server_key, files_.ca_cert}; }
  TlsConfig Member() const { return {files_.client_cert, files_.client_key, files_.ca_cert}; }
  TlsConfig Rogue() const { return {files_.rogue_cert, files_.rogue_key, files_.ca_cert}; }

  // Joins ranks 1..n-1 with Member(); fails the test for any that did not.
  void JoinMembers(uint32_t n) {
    std::vector<std::thread> threads;
    std::vector<Status> got(n);
    for (uint32_t r = 1; r < n; ++r)
      threads.emplace_back([&, r] { got[r] = ProcessGroup::Join(Rank(r, n, Member())).status(); });
    for (auto& t : threads) t.join();
    for (uint32_t r = 1; r < n; ++r) EXPECT_TRUE(got[r].ok()) << "rank " << r << ": " << got[r].message();
  }

  fs::path dir_;
  testing::TlsTestFiles files_;
  uint16_t port_ = 0;
};

// A world of 3 forms over TLS, and a later round (what Model::Create and
// train send) travels over the same encrypted connections; an eavesdropper
// between rank 1 and the master sees neither the job id nor the fields.
TEST_F(MasterTlsTest, AWorldFormsAndRunsItsRoundsOverTls) {
  constexpr uint32_t n = 3;
  testing::Recorder recorder(port_);
  std::vector<Result<FormedWorld>> worlds(n, Unavailable("not run"));
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      auto group = ProcessGroup::Join(Rank(r, n, r == 0 ? Master() : Member(), r == 1 ? recorder.port() : 0));
      if (!group.ok()) {
        worlds[r] = group.status();
        return;
      }
      PeerEndpoint self;
      self.address = "127.0.0.1:" + std::to_string(7000 + r);
      worlds[r] = (*group)->Round("round-one", {{"batch", "field-value-64"}}, self);
    });
  for (auto& t : threads) t.join();
  for (uint32_t r = 0; r < n; ++r) {
    ASSERT_TRUE(worlds[r].ok()) << "rank " << r << ": " << worlds[r].status().message();
    ASSERT_EQ(worlds[r]->members.size(), n);
    EXPECT_EQ(worlds[r]->members[2].address, "127.0.0.1:7002");
    EXPECT_EQ(worlds[r]->job, worlds[0]->job);
  }
  const std::vector<uint8_t> captured = recorder.Captured();
  EXPECT_FALSE(captured.empty());
  EXPECT_FALSE(testing::Holds(captured, "job-tls")) << "the join travelled in clear";
  EXPECT_FALSE(testing::Holds(captured, "field-value-64")) << "the round travelled in clear";
}

// A rank without TLS hears what the master needs; a rank whose certificate
// another CA signed is refused in the handshake. Neither ends the world:
// the real rank 1 joins after them.
TEST_F(MasterTlsTest, RanksWithoutTheRightCertificateAreRefusedAndTheWorldForms) {
  Status master;
  std::thread zero([&] { master = ProcessGroup::Join(Rank(0, 2, Master())).status(); });
  Status plain = ProcessGroup::Join(Rank(1, 2, TlsConfig{})).status();
  EXPECT_EQ(plain.code(), StatusCode::kPermissionDenied) << plain.ToString();
  EXPECT_THAT(plain.message(), HasSubstr("refused it: it requires TLS")) << plain.message();
  EXPECT_THAT(plain.message(), HasSubstr("SINKRT_TLS_CA")) << plain.message();
  Status rogue = ProcessGroup::Join(Rank(1, 2, Rogue())).status();
  EXPECT_FALSE(rogue.ok());
  EXPECT_THAT(rogue.message(), HasSubstr("TLS with the master at 127.0.0.1:" + std::to_string(port_)))
      << rogue.message();
  EXPECT_THAT(rogue.message(), HasSubstr("refused the TLS session")) << rogue.message();
  JoinMembers(2);
  zero.join();
  EXPECT_TRUE(master.ok()) << master.message();
}

// The reverse mistake: a TLS rank at a master started without TLS.
TEST_F(MasterTlsTest, ATlsRankAtAPlainMasterIsToldTheMasterHasNoTls) {
  Status master;
  std::thread zero([&] {
    ProcessGroup::Options o = Rank(0, 2, TlsConfig{});
    o.timeout = 1s;
    master = ProcessGroup::Join(o).status();
  });
  ProcessGroup::Options o = Rank(1, 2, Member());
  o.timeout = 1s;
  Status st = ProcessGroup::Join(o).status();
  zero.join();
  EXPECT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("TLS with the master")) << st.message();
  EXPECT_THAT(st.message(), HasSubstr("answered without TLS")) << st.message();
  EXPECT_EQ(master.code(), StatusCode::kDeadlineExceeded) << master.ToString();
}

// Connections that never start their handshake are pending ones like any
// other: they neither delay the world nor get a plain answer they could
// not read.
TEST_F(MasterTlsTest, SilentConnectionsDoNotDelayATlsWorld) {
  Status master;
  std::thread zero([&] {
    ProcessGroup::Options o = Rank(0, 3, Master());
    o.hello_timeout = 600s;
    master = ProcessGroup::Join(o).status();
  });
  std::vector<std::unique_ptr<FrameSocket>> silent;
  for (int i = 0; i < 16; ++i) {
    silent.push_back(testing::Dial(Address{"127.0.0.1", port_}));
    ASSERT_TRUE(silent.back());
  }
  const auto start = Clock::now();
  JoinMembers(3);
  const auto took = Clock::now() - start;
  zero.join();
  EXPECT_TRUE(master.ok()) << master.message();
  EXPECT_LT(took, 5s);
}

// Rank 0's files are checked before it listens, naming the variables.
TEST_F(MasterTlsTest, AMasterWithoutItsKeyIsNamed) {
  Status st = ProcessGroup::Join(Rank(0, 2, TlsConfig{files_.server_cert, "", files_.ca_cert})).status();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_THAT(st.message(), HasSubstr("SINKRT_TLS_KEY")) << st.message();
}

}  // namespace
}  // namespace sinkrt::host
