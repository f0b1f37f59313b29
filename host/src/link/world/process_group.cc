// ProcessGroup: the host processes of one job meet at rank 0's (a star:
// rank 0 keeps one connection per rank, every other rank one). Rounds are
// synchronous: rank 0 reads every rank's RankJoin in rank order, checks
// it against its own, and answers all of them alike: WorldFormed, or the
// one Error that names the first rank and field that differ. So every
// rank fails with the same message, whichever of them is wrong. Round 0
// (init()) is the master's admission of the ranks' connections
// (master.cc) and each rank's dial (master_link.cc).
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <asio/ip/tcp.hpp>
#include <cstring>
#include <random>

#include "host/src/link/world/join_frames.h"
#include "host/src/link/world/master.h"
#include "host/src/link/world/master_link.h"
#include "runtime/src/wire.h"
#include "runtime/src/wire_socket.h"
#include "sinkrt/host/communication.h"

namespace sinkrt::host {
namespace {

std::string RankText(uint32_t r) { return "rank " + std::to_string(r); }
std::string Seconds(std::chrono::milliseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", static_cast<double>(d.count()) / 1000.0);
  return buf;
}

// The first difference between rank `r`'s fields and rank 0's, as the
// error every rank reports; Ok when they agree.
Status CompareFields(const std::string& what, uint32_t r, const std::vector<JoinField>& theirs,
                     const std::vector<JoinField>& mine) {
  for (size_t i = 0; i < std::max(theirs.size(), mine.size()); ++i) {
    if (i >= theirs.size())
      return FailedPrecondition(what + ": " + RankText(r) + " sends no '" + mine[i].name + "' (rank 0 has " +
                                mine[i].value + "): the ranks run different builds or programs");
    if (i >= mine.size() || theirs[i].name != mine[i].name)
      return FailedPrecondition(what + ": " + RankText(r) + " sends '" + theirs[i].name + "' where rank 0 sends '" +
                                (i < mine.size() ? mine[i].name : std::string("nothing")) +
                                "': the ranks run different builds or programs");
    if (theirs[i].value != mine[i].value)
      return FailedPrecondition(what + ": " + RankText(r) + " differs from rank 0 in " + mine[i].name + ": " +
                                theirs[i].value + " on " + RankText(r) + ", " + mine[i].value + " on rank 0");
  }
  return Status::Ok();
}

// How long a rank other than 0 waits for the master's answer: longer than
// the master waits for the ranks, so that the master's verdict (which
// ranks did not come) reaches it first. A master that dies closes the
// connection, which ends the wait at once.
std::chrono::milliseconds MemberWait(std::chrono::milliseconds timeout) {
  return timeout + std::max(std::chrono::milliseconds(2000), timeout / 10);
}

std::string LocalHostOf(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "127.0.0.1";
  char buf[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET)
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&addr)->sin_addr, buf, sizeof buf);
  else if (addr.ss_family == AF_INET6)
    ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&addr)->sin6_addr, buf, sizeof buf);
  return buf[0] ? buf : "127.0.0.1";
}

uint64_t FreshJob() {
  std::random_device entropy;
  return (uint64_t{entropy()} << 32 | entropy()) | 1;
}

// Rank 0's job id when the launcher chose none: unique enough to tell two
// jobs on one port apart.
std::string FreshJobId() {
  char buf[24];
  std::snprintf(buf, sizeof buf, "job-%016llx", static_cast<unsigned long long>(FreshJob()));
  return buf;
}

}  // namespace

struct ProcessGroup::Impl {
  Options options;
  std::string local_host;
  std::string job_id;  // the world's: the launcher's or rank 0's
  uint32_t round = 0;
  // Declared before the sockets: the master's accepted sockets live on it.
  std::unique_ptr<asio::io_context> context = std::make_unique<asio::io_context>();
  std::vector<std::unique_ptr<FrameSocket>> ranks;  // rank 0: by rank (0 empty)
  std::unique_ptr<FrameSocket> master;              // the others: to rank 0

  // Rank 0: tells every connected rank `st` and returns it.
  Status FailAll(const Status& st) {
    for (auto& s : ranks)
      if (s) SendFailure(*s, st);
    return st;
  }
  Status Listen();
  Status Connect();
};

Status ProcessGroup::Impl::Listen() {
  const Options& o = options;
  const std::string where = o.master.ToString();
  asio::error_code ec;
  asio::ip::tcp::resolver resolver(*context);
  auto found = resolver.resolve(o.master.host, std::to_string(o.master.port), ec);
  if (ec || found.empty())
    return Unavailable("init(): rank 0 cannot resolve the master address " + where + ": " + ec.message());
  const asio::ip::tcp::endpoint endpoint = found.begin()->endpoint();
  asio::ip::tcp::acceptor acceptor(*context);
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    return Unavailable("init(): rank 0 cannot listen at the master address " + where + ": " + ec.message() +
                       (ec == asio::error::address_in_use
                            ? " (another job's master, or another program, holds it: give each job its own port with "
                              "MS_SCHED_PORT or MASTER_PORT, sinkrun launch --master-port)"
                            : " (MS_SCHED_PORT or MASTER_PORT chooses another port)"));
  local_host = endpoint.address().to_string();
  MasterSetup setup;
  if (o.tls.enabled()) {
    SINKRT_ASSIGN_OR_RETURN(setup.tls, MakeTlsContext(o.tls, TlsRole::kServer),
                            "init(): rank 0: SINKRT_TLS_CERT, SINKRT_TLS_KEY, SINKRT_TLS_CA");
  }
  setup.where = where;
  setup.token = o.token;
  setup.job_id = job_id;
  setup.world_size = o.world_size;
  setup.timeout = o.timeout;
  setup.hello_timeout = std::min(o.timeout, o.hello_timeout);
  // The ranks themselves may all come from one address (one host): they
  // must fit the quotas even when they dial at once.
  const int others = static_cast<int>(o.world_size) - 1;
  setup.quotas.max_pending_per_address = std::max(o.pending.max_pending_per_address, others);
  setup.quotas.max_pending = std::max(o.pending.max_pending, others + o.pending.max_pending_per_address);
  Status gathered = GatherRanks(*context, acceptor, setup, ranks);
  if (!gathered.ok()) return FailAll(gathered);
  for (uint32_t r = 1; r < o.world_size; ++r) {
    Status sent = SendFormed(*ranks[r], 0, FormedWorld{});
    if (!sent.ok())
      return FailAll(Unavailable("init(): " + RankText(r) + " left before the world formed: " + sent.message()));
  }
  return Status::Ok();
}

Status ProcessGroup::Impl::Connect() {
  SINKRT_ASSIGN_OR_RETURN(master, JoinMaster(options, &job_id));
  local_host = LocalHostOf(master->native_handle());
  return Status::Ok();
}

ProcessGroup::ProcessGroup(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ProcessGroup::~ProcessGroup() = default;

Result<std::unique_ptr<ProcessGroup>> ProcessGroup::Join(const Options& options) {
  if (options.world_size == 0) return InvalidArgument("init(): a world has at least one rank");
  if (options.rank >= options.world_size)
    return InvalidArgument("init(): rank " + std::to_string(options.rank) + " is outside a world of " +
                           std::to_string(options.world_size));
  if (options.timeout.count() <= 0) return InvalidArgument("init(): the timeout must be positive");
  if (options.world_size > 1 && options.token.empty() && !IsLoopback(options.master.host))
    return InvalidArgument("init(): the master address " + options.master.ToString() +
                           " is reachable from other machines: give every rank a token (SINKRT_TOKEN), as "
                           "sinkd's non-loopback binds need");
  if (!options.job_id.empty())
    SINKRT_RETURN_IF_ERROR(CheckJobId(options.job_id, "ProcessGroup::Options::job_id"), "init()");
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->local_host = options.master.host;
  impl->job_id = options.job_id.empty() && options.rank == 0 ? FreshJobId() : options.job_id;
  if (options.world_size > 1) SINKRT_RETURN_IF_ERROR(options.rank == 0 ? impl->Listen() : impl->Connect());
  return std::unique_ptr<ProcessGroup>(new ProcessGroup(std::move(impl)));
}

uint32_t ProcessGroup::rank() const { return impl_->options.rank; }
uint32_t ProcessGroup::world_size() const { return impl_->options.world_size; }
uint32_t ProcessGroup::local_rank() const { return impl_->options.local_rank; }
uint32_t ProcessGroup::local_world_size() const { return impl_->options.local_world_size; }
const ProcessGroup::Options& ProcessGroup::options() const { return impl_->options; }
const std::string& ProcessGroup::local_host() const { return impl_->local_host; }
const std::string& ProcessGroup::job_id() const { return impl_->job_id; }

Result<FormedWorld> ProcessGroup::Round(const std::string& what, const std::vector<JoinField>& fields,
                                        const PeerEndpoint& endpoint) {
  Impl& m = *impl_;
  const Options& o = m.options;
  const uint32_t round = ++m.round;
  if (o.world_size == 1) return FormedWorld{FreshJob(), {endpoint}};
  const Deadline deadline = DeadlineIn(o.rank == 0 ? o.timeout : MemberWait(o.timeout));
  if (o.rank != 0) {
    JoinMessage join;
    join.round = round;
    join.rank = o.rank;
    join.world_size = o.world_size;
    join.job_id = m.job_id;
    join.fields = fields;
    join.member = endpoint;
    SINKRT_RETURN_IF_ERROR(SendJoin(*m.master, join), what + ": the master (rank 0) at " + o.master.ToString());
    InFrame frame;
    Status st = m.master->Receive(&frame, deadline);
    if (st.code() == StatusCode::kDeadlineExceeded)
      return DeadlineExceeded(what + ": the master (rank 0) did not answer within " + Seconds(MemberWait(o.timeout)));
    if (!st.ok())
      return Status(st.code(), what + ": lost the master (rank 0) at " + o.master.ToString() + ": " + st.message() +
                                   " (rank 0 failed or exited)");
    if (frame.type() == fb::MessageBody::Error) return Refusal(*frame.message->body_as_Error());
    if (frame.type() != fb::MessageBody::WorldFormed)
      return Unavailable(what + ": the master answered " + MessageName(frame.type()) + ", not WorldFormed");
    const fb::WorldFormed& w = *frame.message->body_as_WorldFormed();
    FormedWorld out;
    out.job = w.job();
    if (w.members())
      for (const fb::WorldMember* mm : *w.members())
        out.members.push_back({mm->address() ? mm->address()->str() : "", mm->host_id() ? mm->host_id()->str() : ""});
    if (w.round() != round || out.members.size() != o.world_size)
      return Internal(what + ": the master formed round " + std::to_string(w.round()) + " with " +
                      std::to_string(out.members.size()) + " members; expected round " + std::to_string(round) +
                      " with " + std::to_string(o.world_size));
    return out;
  }
  FormedWorld world;
  world.job = FreshJob();
  world.members.assign(o.world_size, PeerEndpoint{});
  world.members[0] = endpoint;
  for (uint32_t r = 1; r < o.world_size; ++r) {
    auto j = ReadJoin(*m.ranks[r], deadline, RankText(r));
    if (!j.ok()) {
      const Status& e = j.status();
      return m.FailAll(
          Status(e.code(), what + ": " + RankText(r) + " did not join: " +
                               (e.code() == StatusCode::kDeadlineExceeded ? "nothing within " + Seconds(o.timeout)
                                                                          : e.message() + " (it failed or exited)")));
    }
    if (j->round != round)
      return m.FailAll(FailedPrecondition(what + ": " + RankText(r) + " is at round " + std::to_string(j->round) +
                                          ", rank 0 at " + std::to_string(round) +
                                          ": the ranks run different programs"));
    if (Status same = CompareFields(what, r, j->fields, fields); !same.ok()) return m.FailAll(same);
    world.members[r] = j->member;
  }
  for (uint32_t r = 1; r < o.world_size; ++r) {
    Status sent = SendFormed(*m.ranks[r], round, world);
    if (!sent.ok()) return m.FailAll(Unavailable(what + ": " + RankText(r) + " left: " + sent.message()));
  }
  return world;
}

}  // namespace sinkrt::host
