// ProcessGroup: the host processes of one job meet at rank 0's (a star:
// rank 0 keeps one connection per rank, every other rank one). Rounds are
// synchronous: rank 0 reads every rank's RankJoin in rank order, checks
// it against its own, and answers all of them alike: WorldFormed, or the
// one Error that names the first rank and field that differ. So every
// rank fails with the same message, whichever of them is wrong.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <asio/ip/tcp.hpp>
#include <cerrno>
#include <cstring>
#include <random>

#include "sinkrt/host/communication.h"
#include "sinkrt/runtime/wire.h"
#include "sinkrt/runtime/wire_socket.h"

namespace sinkrt::host {
namespace {

using Clock = std::chrono::steady_clock;

std::string RankText(uint32_t r) { return "rank " + std::to_string(r); }
std::string Seconds(std::chrono::milliseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", static_cast<double>(d.count()) / 1000.0);
  return buf;
}

Status SendJoin(FrameSocket& s, uint32_t round, const ProcessGroup::Options& o, const std::vector<JoinField>& fields,
                const PeerEndpoint& endpoint) {
  flatbuffers::FlatBufferBuilder fbb(512);
  std::vector<flatbuffers::Offset<fb::JoinField>> fv;
  for (const JoinField& f : fields) fv.push_back(fb::CreateJoinFieldDirect(fbb, f.name.c_str(), f.value.c_str()));
  auto member = fb::CreateWorldMemberDirect(fbb, endpoint.address.c_str(), endpoint.host_id.c_str());
  auto body = fb::CreateRankJoin(fbb, round, o.rank, o.world_size, fbb.CreateString(o.token), member,
                                 fbb.CreateVector(fv), static_cast<uint32_t>(::getpid()));
  FinishMessage(fbb, fb::MessageBody::RankJoin, body.Union());
  return s.Send(fbb);
}

Status SendFormed(FrameSocket& s, uint32_t round, const FormedWorld& world) {
  flatbuffers::FlatBufferBuilder fbb(512);
  std::vector<flatbuffers::Offset<fb::WorldMember>> mv;
  for (const PeerEndpoint& m : world.members)
    mv.push_back(fb::CreateWorldMemberDirect(fbb, m.address.c_str(), m.host_id.c_str()));
  FinishMessage(fbb, fb::MessageBody::WorldFormed,
                fb::CreateWorldFormed(fbb, round, world.job, fbb.CreateVector(mv)).Union());
  return s.Send(fbb);
}

void SendFailure(FrameSocket& s, const Status& st) {
  flatbuffers::FlatBufferBuilder fbb(512);
  ErrorContext context;
  context.rank = 0;
  BuildError(fbb, st, context);
  (void)s.Send(fbb);
}

// The master's refusal as the master worded it: it already names the
// rank at fault, and every rank must report the same words.
Status Refusal(const fb::Error& error) {
  StatusCode code = static_cast<StatusCode>(error.code());
  if (code == StatusCode::kOk || error.code() > static_cast<uint8_t>(StatusCode::kPermissionDenied))
    code = StatusCode::kInternal;
  return Status(code, error.message() ? error.message()->str() : "(no message)");
}

// A received RankJoin, copied out of the frame.
struct Joined {
  uint32_t round = 0, rank = 0, world_size = 0, pid = 0;
  std::string token;
  PeerEndpoint member;
  std::vector<JoinField> fields;
};

Result<Joined> ReadJoin(FrameSocket& s, Deadline deadline, const std::string& who) {
  InFrame frame;
  Status st = s.Receive(&frame, deadline);
  if (!st.ok()) return st;
  if (frame.type() != fb::MessageBody::RankJoin || frame.payload_left != 0)
    return Unavailable(who + " sent " + MessageName(frame.type()) + ", not RankJoin");
  const fb::RankJoin& j = *frame.message->body_as_RankJoin();
  Joined out;
  out.round = j.round();
  out.rank = j.rank();
  out.world_size = j.world_size();
  out.pid = j.pid();
  if (j.token()) out.token = j.token()->str();
  if (j.member()) {
    if (j.member()->address()) out.member.address = j.member()->address()->str();
    if (j.member()->host_id()) out.member.host_id = j.member()->host_id()->str();
  }
  if (j.fields())
    for (const fb::JoinField* f : *j.fields())
      out.fields.push_back({f->name() ? f->name()->str() : "", f->value() ? f->value()->str() : ""});
  return out;
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

}  // namespace

struct ProcessGroup::Impl {
  Options options;
  std::string local_host;
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
  if (!ec) acceptor.non_blocking(true, ec);
  if (ec)
    return Unavailable("init(): rank 0 cannot listen at the master address " + where + ": " + ec.message() +
                       " (MS_SCHED_PORT or MASTER_PORT chooses another port)");
  local_host = endpoint.address().to_string();
  ranks.resize(o.world_size);
  const auto deadline = Clock::now() + o.timeout;
  uint32_t joined = 1;
  while (joined < o.world_size) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    pollfd fd{acceptor.native_handle(), POLLIN, 0};
    const int ready = left.count() > 0 ? ::poll(&fd, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000))) : 0;
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      if (Clock::now() < deadline) continue;
      std::string missing;
      for (uint32_t r = 1; r < o.world_size; ++r)
        if (!ranks[r]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      return FailAll(DeadlineExceeded("init(): rank(s) " + missing + " did not join the master at " + where +
                                      " within " + Seconds(o.timeout) + " (" + std::to_string(joined) + " of " +
                                      std::to_string(o.world_size) + " ranks joined)"));
    }
    asio::ip::tcp::socket socket(*context);
    acceptor.accept(socket, ec);
    if (ec) continue;
    socket.non_blocking(false, ec);
    TuneSocket(socket);
    auto s = std::make_unique<FrameSocket>(std::move(socket), WireLimits{});
    // A stranger (a port scan, a stale process) must not hold up the
    // others for long: its first frame gets a few seconds.
    auto hello = ReadJoin(*s, DeadlineIn(std::min(o.timeout, std::chrono::milliseconds(10000))),
                          "a process at " + s->peer());
    if (!hello.ok()) continue;
    const Joined& j = *hello;
    if (j.token != o.token) {
      SendFailure(*s, PermissionDenied("init(): the master at " + where + " refused " + RankText(j.rank) +
                                       ": wrong token (every rank needs the master's --token / SINKRT_TOKEN)"));
      continue;
    }
    Status bad;
    if (j.round != 0)
      bad = FailedPrecondition("init(): " + RankText(j.rank) + " (pid " + std::to_string(j.pid) + ") is at round " +
                               std::to_string(j.round) + " of an earlier world");
    else if (j.world_size != o.world_size)
      bad = FailedPrecondition("init(): " + RankText(j.rank) + " (pid " + std::to_string(j.pid) + ") is in a world of " +
                               std::to_string(j.world_size) + " ranks, rank 0 in one of " +
                               std::to_string(o.world_size));
    else if (j.rank == 0 || j.rank >= o.world_size)
      bad = FailedPrecondition("init(): a second process (pid " + std::to_string(j.pid) + ") claims " +
                               RankText(j.rank) + (j.rank == 0 ? "" : ", outside the world of " +
                                                                       std::to_string(o.world_size)));
    else if (ranks[j.rank])
      bad = FailedPrecondition("init(): two processes claim " + RankText(j.rank) + " (the second is pid " +
                               std::to_string(j.pid) + ")");
    if (!bad.ok()) {
      SendFailure(*s, bad);
      return FailAll(bad);
    }
    ranks[j.rank] = std::move(s);
    ++joined;
  }
  for (uint32_t r = 1; r < o.world_size; ++r) {
    Status sent = SendFormed(*ranks[r], 0, FormedWorld{});
    if (!sent.ok()) return FailAll(Unavailable("init(): " + RankText(r) + " left before the world formed: " + sent.message()));
  }
  return Status::Ok();
}

Status ProcessGroup::Impl::Connect() {
  const Options& o = options;
  const std::string where = "the master (rank 0) at " + o.master.ToString();
  auto s = FrameSocket::Connect(o.master, o.timeout);
  if (!s.ok())
    return Status(s.status().code(), "init(): " + RankText(o.rank) + " cannot reach " + where + " within " +
                                         Seconds(o.timeout) + ": " + s.status().message());
  master = std::move(s).value();
  local_host = LocalHostOf(master->native_handle());
  SINKRT_RETURN_IF_ERROR(SendJoin(*master, 0, o, {}, {}), "init(): " + where);
  InFrame frame;
  Status st = master->Receive(&frame, DeadlineIn(MemberWait(o.timeout)));
  if (st.code() == StatusCode::kDeadlineExceeded)
    return DeadlineExceeded("init(): " + where + " did not form the world within " + Seconds(MemberWait(o.timeout)) +
                            " (are all " + std::to_string(o.world_size) + " ranks started?)");
  if (!st.ok()) return Status(st.code(), "init(): " + where + ": " + st.message());
  if (frame.type() == fb::MessageBody::Error) return Refusal(*frame.message->body_as_Error());
  if (frame.type() != fb::MessageBody::WorldFormed)
    return Unavailable("init(): " + where + " answered " + MessageName(frame.type()) + ", not WorldFormed");
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
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->local_host = options.master.host;
  if (options.world_size > 1) SINKRT_RETURN_IF_ERROR(options.rank == 0 ? impl->Listen() : impl->Connect());
  return std::unique_ptr<ProcessGroup>(new ProcessGroup(std::move(impl)));
}

uint32_t ProcessGroup::rank() const { return impl_->options.rank; }
uint32_t ProcessGroup::world_size() const { return impl_->options.world_size; }
uint32_t ProcessGroup::local_rank() const { return impl_->options.local_rank; }
uint32_t ProcessGroup::local_world_size() const { return impl_->options.local_world_size; }
const ProcessGroup::Options& ProcessGroup::options() const { return impl_->options; }
const std::string& ProcessGroup::local_host() const { return impl_->local_host; }

Result<FormedWorld> ProcessGroup::Round(const std::string& what, const std::vector<JoinField>& fields,
                                        const PeerEndpoint& endpoint) {
  Impl& m = *impl_;
  const Options& o = m.options;
  const uint32_t round = ++m.round;
  if (o.world_size == 1) return FormedWorld{FreshJob(), {endpoint}};
  const Deadline deadline = DeadlineIn(o.rank == 0 ? o.timeout : MemberWait(o.timeout));
  if (o.rank != 0) {
    SINKRT_RETURN_IF_ERROR(SendJoin(*m.master, round, o, fields, endpoint),
                           what + ": the master (rank 0) at " + o.master.ToString());
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
      return m.FailAll(Status(e.code(), what + ": " + RankText(r) + " did not join: " +
                                            (e.code() == StatusCode::kDeadlineExceeded
                                                 ? "nothing within " + Seconds(o.timeout)
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
