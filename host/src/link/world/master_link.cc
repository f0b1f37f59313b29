#include "host/src/link/world/master_link.h"

#include <unistd.h>

#include <thread>

#include "host/src/link/world/join_frames.h"
#include "host/src/link/world/master.h"
#include "runtime/src/auth.h"
#include "runtime/src/hello.h"

namespace sinkrt::host {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::string Seconds(milliseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", static_cast<double>(d.count()) / 1000.0);
  return buf;
}

// How long a rank other than 0 waits for the master's answer: longer than
// the master waits for the ranks, so that the master's verdict (which
// ranks did not come) reaches it first. A master that dies closes the
// connection, which ends the wait at once.
milliseconds MemberWait(milliseconds timeout) { return timeout + std::max(milliseconds(2000), timeout / 10); }

const char* kPortAdvice =
    "give this job a master port of its own (MS_SCHED_PORT or MASTER_PORT, sinkrun launch --master-port)";

// One dial: the connection with round 0's RankJoin sent, or why not. A
// ResourceExhausted status means "the master made room: dial again".
class Attempt {
 public:
  Attempt(const ProcessGroup::Options& o, const TlsContext* tls, std::string* job_id)
      : o_(o),
        tls_(tls),
        job_id_(*job_id),
        out_job_id_(job_id),
        me_("init(): rank " + std::to_string(o.rank)),
        where_(o.master.ToString()) {}

  bool retry() const { return retry_; }

  Result<std::unique_ptr<FrameSocket>> Run(Clock::time_point deadline) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    auto dialed = FrameSocket::Connect(o_.master, std::max(left, milliseconds(1)));
    if (!dialed.ok())
      return Status(dialed.status().code(), me_ + " cannot reach the master (rank 0) at " + where_ + " within " +
                                                Seconds(o_.timeout) + ": " + dialed.status().message());
    std::unique_ptr<FrameSocket> s = std::move(dialed).value();
    // An answer within this, or the port is held by a stranger: a master
    // answers at once, and closes a silent connection after its hello deadline.
    const Deadline answer = DeadlineIn(std::min(o_.timeout, o_.hello_timeout + milliseconds(2000)));
    if (tls_) SINKRT_RETURN_IF_ERROR(StartTls(*s, answer));
    SINKRT_ASSIGN_OR_RETURN(const Nonce client, FreshNonce(), me_);
    HelloFields hello;
    hello.role = fb::PeerRole::Rank;
    hello.rank = static_cast<int32_t>(o_.rank);
    hello.pid = static_cast<uint32_t>(::getpid());
    hello.nonce.assign(client.begin(), client.end());
    flatbuffers::FlatBufferBuilder fbb(256);
    BuildHello(fbb, hello);
    SINKRT_RETURN_IF_ERROR(s->Send(fbb), me_ + ": the master at " + where_);
    InFrame frame;
    Status st = s->Receive(&frame, answer);
    // Closed or reset unanswered: perhaps a master that formed its world
    // just then (another job's, on this port), after which this job's own
    // rank 0 may get the port; dial again, and say this if it persists.
    retry_ = st.code() == StatusCode::kUnavailable;
    // In TLS 1.3 the master checks this rank's certificate after the
    // rank's handshake is done: its refusal arrives here, as an alert.
    if (tls_ && st.message().find("refused the TLS session") != std::string::npos) {
      retry_ = false;
      return PermissionDenied(me_ + ": TLS with the master at " + where_ + ": " + st.message() +
                              " (the master's CA must have signed this rank's certificate, SINKRT_TLS_CERT)");
    }
    if (!st.ok()) return NotAMaster(st);
    if (frame.type() == fb::MessageBody::Error) {
      Status refusal = Refusal(*frame.message->body_as_Error());
      // Over its quotas, or formed and gone: a master, but not now.
      retry_ = refusal.code() == StatusCode::kResourceExhausted || refusal.code() == StatusCode::kUnavailable;
      if (retry_) return refusal;
      // A refusal of this rank's credentials (token, TLS) is the master's
      // own sentence.
      if (refusal.code() == StatusCode::kPermissionDenied)
        return PermissionDenied(me_ + ": the master at " + where_ + " refused it: " + refusal.message());
      return FailedPrecondition(me_ + ": " + where_ + " is not a sinkrt rendezvous master that takes this rank; it " +
                                "answered: " + refusal.message() + ". " + Capitalised(kPortAdvice));
    }
    if (frame.type() != fb::MessageBody::Challenge)
      return FailedPrecondition(me_ + ": " + where_ + " is not a sinkrt rendezvous master: it answered a rank's " +
                                "Hello with " + MessageName(frame.type()) + ". " + Capitalised(kPortAdvice));
    const fb::Challenge& challenge = *frame.message->body_as_Challenge();
    const std::string master_job = challenge.job_id() ? challenge.job_id()->str() : "";
    JoinMessage join;
    join.rank = o_.rank;
    join.world_size = o_.world_size;
    join.job_id = job_id_.empty() ? master_job : job_id_;
    if (!job_id_.empty() && job_id_ != master_job) {
      // Tell the master who came, without a proof: it refuses this join
      // naming both jobs, and so does this rank.
      (void)SendJoin(*s, join);
      return FailedPrecondition(me_ + " of job " + job_id_ + " reached the master at " + where_ +
                                ", which serves job " + master_job + ": two jobs use one master port; " + kPortAdvice);
    }
    std::span<const uint8_t> nonce_bytes;
    if (challenge.nonce()) nonce_bytes = {challenge.nonce()->data(), challenge.nonce()->size()};
    auto server = NonceFrom(nonce_bytes, "the master's Challenge");
    if (!server.ok()) return Status(server.status().code(), me_ + ": " + where_ + ": " + server.status().message());
    std::span<const uint8_t> proof;
    if (challenge.proof()) proof = {challenge.proof()->data(), challenge.proof()->size()};
    // The master proves the token first: a rank proves itself only to a
    // master that holds it.
    if (!ProofMatches(proof, ProveToken(o_.token, kMasterAuthLabel, AuthSide::kServer, client, *server)))
      return PermissionDenied(me_ + ": the master at " + where_ +
                              " holds another token: wrong token (every rank needs the master's --token / "
                              "SINKRT_TOKEN)");
    const Proof mine = ProveToken(o_.token, kMasterAuthLabel, AuthSide::kClient, client, *server);
    join.proof = mine;
    SINKRT_RETURN_IF_ERROR(SendJoin(*s, join), me_ + ": the master at " + where_);
    *out_job_id_ = join.job_id;
    return s;
  }

 private:
  // The handshake with the master. A connection it closed meanwhile (over
  // its quotas, or a world formed) is dialed again; a refused certificate
  // or a master without TLS is the answer.
  Status StartTls(FrameSocket& s, Deadline deadline) {
    Status st = s.StartTls(*tls_, deadline);
    if (st.ok()) return st;
    retry_ = st.code() == StatusCode::kUnavailable && st.message().find("connection closed") != std::string::npos;
    return Status(st.code(), me_ + ": TLS with the master at " + where_ + ": " + st.message());
  }

  static std::string Capitalised(std::string text) {
    if (!text.empty()) text[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(text[0])));
    return text;
  }

  // The port answered a rank's Hello with nothing a master sends.
  Status NotAMaster(const Status& st) const {
    std::string what;
    if (st.code() == StatusCode::kDeadlineExceeded)
      what = "accepted the connection but did not answer this rank's Hello";
    else if (st.message().find("connection closed") != std::string::npos)
      what =
          "closed the connection without answering this rank's Hello (an older sinkrt's master, or another "
          "program)";
    else
      what = "answered what no sinkrt master sends (" + st.message() + ")";
    return FailedPrecondition(me_ + ": " + where_ + " is not a sinkrt rendezvous master (protocol " +
                              std::to_string(kProtocolMajor) + "." + std::to_string(kProtocolMinor) + "): it " + what +
                              ". " + Capitalised(kPortAdvice));
  }

  bool retry_ = false;  // the failure may pass: dial again while the timeout allows
  const ProcessGroup::Options& o_;
  const TlsContext* tls_;  // null: plain
  const std::string job_id_;
  std::string* out_job_id_;
  const std::string me_, where_;
};

}  // namespace

Result<std::unique_ptr<FrameSocket>> JoinMaster(const ProcessGroup::Options& o, std::string* job_id) {
  const std::string where = "the master (rank 0) at " + o.master.ToString();
  const auto deadline = Clock::now() + o.timeout;
  auto backoff = milliseconds(10);
  std::shared_ptr<const TlsContext> tls;
  if (o.tls.enabled()) {
    SINKRT_ASSIGN_OR_RETURN(
        tls, MakeTlsContext(o.tls, TlsRole::kClient),
        "init(): rank " + std::to_string(o.rank) + ": SINKRT_TLS_CERT, SINKRT_TLS_KEY, SINKRT_TLS_CA");
  }
  for (;;) {
    Attempt attempt(o, tls.get(), job_id);
    auto s = attempt.Run(deadline);
    Status st = s.ok() ? Status::Ok() : s.status();
    if (s.ok()) {
      InFrame frame;
      st = (*s)->Receive(&frame, DeadlineIn(MemberWait(o.timeout)));
      if (st.code() == StatusCode::kDeadlineExceeded)
        return DeadlineExceeded("init(): " + where + " did not form the world within " +
                                Seconds(MemberWait(o.timeout)) + " (are all " + std::to_string(o.world_size) +
                                " ranks started?)");
      if (!st.ok()) return Status(st.code(), "init(): " + where + ": " + st.message());
      if (frame.type() == fb::MessageBody::WorldFormed) return std::move(s).value();
      if (frame.type() != fb::MessageBody::Error)
        return Unavailable("init(): " + where + " answered " + MessageName(frame.type()) + ", not WorldFormed");
      st = Refusal(*frame.message->body_as_Error());
      // After the join only a master making room for newer connections
      // closes a rank, with ResourceExhausted.
      if (st.code() != StatusCode::kResourceExhausted) return st;
    } else if (!attempt.retry()) {
      return st;
    }
    if (Clock::now() + backoff >= deadline) return st;
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, milliseconds(200));
  }
}

}  // namespace sinkrt::host
