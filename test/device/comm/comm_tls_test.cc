// Collectives over TLS links (CommOptions::tls, inboxes with a server
// context): ranks as threads, loopback TCP only. The TLS session sits
// between the links and the socket, with OpenSSL reading ahead records that
// poll cannot see; every op must still complete, with the same bits as over
// plain links.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <vector>

#include "device/src/comm/communicator.h"
#include "support/comm_cluster.h"
#include "support/tls_certs.h"

namespace sinkrt::device {
namespace {

namespace fs = std::filesystem;
using testing::Cluster;
using testing::OnEachRank;

struct TlsContexts {
  std::shared_ptr<const TlsContext> server, client;
};

// The certificates of test/support/tls_certs.cc, loaded; the files go.
TlsContexts MakeContexts() {
  const fs::path dir = fs::temp_directory_path() / ("comm_tls_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const testing::TlsTestFiles f = testing::WriteTlsTestFiles(dir.string());
  auto server = MakeTlsContext({f.server_cert, f.server_key, f.ca_cert}, TlsRole::kServer);
  auto client = MakeTlsContext({f.client_cert, f.client_key, f.ca_cert}, TlsRole::kClient);
  fs::remove_all(dir);
  EXPECT_TRUE(server.ok()) << server.status().ToString();
  EXPECT_TRUE(client.ok()) << client.status().ToString();
  if (!server.ok() || !client.ok()) return {};
  return {*server, *client};
}

// What every rank ends with after a run of collectives: large and odd-sized
// AllReduces (many segments, records split across reads), an AllGather,
// small AllReduces back to back, and a Barrier.
using Outputs = std::vector<std::vector<uint8_t>>;

Outputs RunCollectives(uint32_t n, size_t segment_bytes, const TlsContexts* tls) {
  CommOptions o;
  o.peer_timeout = std::chrono::seconds(20);
  o.use_shared_memory = false;
  o.segment_bytes = segment_bytes;
  o.small_allreduce_bytes = 16 << 10;
  o.pair_allreduce_bytes = 0;  // pairs take the ring too
  if (tls) o.tls = tls->client;
  Cluster cluster(
      n, [&](uint32_t) { return o; }, [](uint32_t) { return uint64_t{7}; }, [](uint32_t) { return LocalHostId(); },
      tls ? tls->server : nullptr);
  for (uint32_t r = 0; r < n; ++r) EXPECT_TRUE(cluster.create_status(r).ok()) << cluster.create_status(r).ToString();
  if (!cluster.ok()) return {};
  Outputs out(n);
  const Group world = Group::World(n);
  OnEachRank(n, [&](uint32_t r) {
    std::mt19937 rng(100 + r);
    std::uniform_real_distribution<float> real(-1.0f, 1.0f);
    std::vector<uint8_t>& mine = out[r];
    for (size_t floats : {size_t{(3u << 20) / 4 + 5}, size_t{1000}, size_t{3}, size_t{70001}}) {
      std::vector<float> v(floats);
      for (float& x : v) x = real(rng);
      Status st = cluster[r].AllReduce(std::span(reinterpret_cast<uint8_t*>(v.data()), floats * 4), DType::F32,
                                       ReduceOp::Sum, world);
      ASSERT_TRUE(st.ok()) << "rank " << r << ": " << st.ToString();
      mine.insert(mine.end(), reinterpret_cast<uint8_t*>(v.data()), reinterpret_cast<uint8_t*>(v.data() + floats));
    }
    std::vector<uint8_t> piece(300001, static_cast<uint8_t>(r + 1)), all(piece.size() * n);
    Status st = cluster[r].AllGather(piece, all, world);
    ASSERT_TRUE(st.ok()) << "rank " << r << ": " << st.ToString();
    mine.insert(mine.end(), all.begin(), all.end());
    st = cluster[r].Barrier(world);
    ASSERT_TRUE(st.ok()) << "rank " << r << ": " << st.ToString();
  });
  return out;
}

void ExpectTlsMatchesPlain(uint32_t n, size_t segment_bytes) {
  const TlsContexts tls = MakeContexts();
  ASSERT_TRUE(tls.server && tls.client);
  const Outputs plain = RunCollectives(n, segment_bytes, nullptr);
  const Outputs secured = RunCollectives(n, segment_bytes, &tls);
  ASSERT_EQ(plain.size(), n);
  ASSERT_EQ(secured.size(), n);
  for (uint32_t r = 0; r < n; ++r) {
    ASSERT_FALSE(plain[r].empty());
    EXPECT_TRUE(secured[r] == plain[r]) << "rank " << r << " got other bytes over TLS";
    EXPECT_TRUE(plain[r] == plain[0]) << "rank " << r << " differs from rank 0";
  }
}

TEST(CommTls, ThreeRanksOverTlsLinksMatchPlainLinksBitwiseInSmallSegments) { ExpectTlsMatchesPlain(3, 4096); }

TEST(CommTls, TwoRanksOverTlsLinksMatchPlainLinksBitwiseInLargeSegments) { ExpectTlsMatchesPlain(2, 512 << 10); }

// A dialer whose client context trusts another CA refuses the inbox's
// certificate: the rendezvous fails naming TLS, never hangs.
TEST(CommTls, DialerThatCannotVerifyThePeerFailsNamingTls) {
  const fs::path dir = fs::temp_directory_path() / ("comm_tls_test_rogue_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const testing::TlsTestFiles f = testing::WriteTlsTestFiles(dir.string());
  auto server = MakeTlsContext({f.server_cert, f.server_key, f.ca_cert}, TlsRole::kServer);
  auto client = MakeTlsContext({f.client_cert, f.client_key, f.other_ca_cert}, TlsRole::kClient);
  fs::remove_all(dir);
  ASSERT_TRUE(server.ok() && client.ok());
  CommOptions o;
  o.peer_timeout = std::chrono::seconds(3);
  o.use_shared_memory = false;
  o.tls = *client;
  Cluster cluster(
      2, [&](uint32_t) { return o; }, [](uint32_t) { return uint64_t{8}; }, [](uint32_t) { return LocalHostId(); },
      *server);
  ASSERT_FALSE(cluster.create_status(0).ok());
  EXPECT_NE(cluster.create_status(0).message().find("rendezvous (TLS): rank 1"), std::string::npos)
      << cluster.create_status(0).ToString();
  EXPECT_NE(cluster.create_status(0).message().find("certificate verify failed"), std::string::npos)
      << cluster.create_status(0).ToString();
  EXPECT_FALSE(cluster.create_status(1).ok());
}

}  // namespace
}  // namespace sinkrt::device
