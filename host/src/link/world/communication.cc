// init(), get_rank(), get_group_size(): the process's one ProcessGroup.
#include <algorithm>
#include <cstdlib>
#include <mutex>

#include "runtime/src/env.h"
#include "sinkrt/host/communication.h"
#include "sinkrt/runtime/rank_table.h"

namespace sinkrt::host {
namespace {

std::mutex& Mu() {
  static std::mutex mu;
  return mu;
}
std::unique_ptr<ProcessGroup>& Group() {
  static std::unique_ptr<ProcessGroup> group;
  return group;
}

const char* Env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

// MS_SCHED_HOST:MS_SCHED_PORT, else MASTER_ADDR:MASTER_PORT, each part
// falling back on its own, else 127.0.0.1:8118.
Result<Address> MasterFromEnvironment() {
  Address a{"127.0.0.1", kDefaultMasterPort};
  if (const char* h = Env("MS_SCHED_HOST"))
    a.host = h;
  else if (const char* h2 = Env("MASTER_ADDR"))
    a.host = h2;
  for (const char* name : {"MS_SCHED_PORT", "MASTER_PORT"}) {
    const char* v = Env(name);
    if (!v) continue;
    auto n = EnvNonNegativeInteger(name);
    if (!n || *n < 1 || *n > 65535) return InvalidArgument(std::string(name) + "='" + v + "' is not a port (1..65535)");
    a.port = static_cast<uint16_t>(*n);
    break;
  }
  return a;
}

}  // namespace

Result<ProcessGroup::Options> ProcessGroupOptionsFromEnvironment(const InitOptions& in) {
  ProcessGroup::Options o;
  SINKRT_ASSIGN_OR_RETURN(LaunchRank launch, LaunchRankFromEnvironment(), "init()");
  o.source = launch.source;
  if (in.rank) o.source = "InitOptions::rank";
  o.rank = in.rank.value_or(launch.rank.value_or(0));
  o.world_size = in.world_size.value_or(launch.world_size.value_or(launch.rank ? *launch.rank + 1 : 1));
  if (launch.rank && !launch.world_size && !in.world_size)
    return InvalidArgument("init(): " + launch.source + " names rank " + std::to_string(*launch.rank) +
                           " but no world size is set (RANK_SIZE, OMPI_COMM_WORLD_SIZE, PMI_SIZE or SLURM_NTASKS)");
  if (o.rank >= o.world_size)
    return InvalidArgument("init(): rank " + std::to_string(o.rank) + " is outside a world of " +
                           std::to_string(o.world_size));
  o.local_world_size = launch.local_size.value_or(o.world_size);
  o.local_rank = launch.local_rank.value_or(o.rank % o.local_world_size);
  if (in.master) {
    o.master = *in.master;
  } else {
    SINKRT_ASSIGN_OR_RETURN(o.master, MasterFromEnvironment(), "init()");
  }
  o.token = in.token;
  if (o.token.empty())
    if (const char* t = Env("SINKRT_TOKEN")) o.token = t;
  o.job_id = in.job_id;
  if (o.job_id.empty())
    if (const char* j = Env("SINKRT_JOB_ID")) o.job_id = j;
  if (!o.job_id.empty())
    SINKRT_RETURN_IF_ERROR(CheckJobId(o.job_id, in.job_id.empty() ? "SINKRT_JOB_ID" : "InitOptions::job_id"), "init()");
  o.tls = in.tls.enabled() ? in.tls : TlsConfig::FromEnvironment();
  if (auto ms = EnvPositiveMilliseconds("SINKRT_HELLO_TIMEOUT_MS")) o.hello_timeout = *ms;
  o.timeout = in.timeout.count() > 0 ? in.timeout : PeerTimeoutsFromEnvironment({}).effective_rendezvous();
  return o;
}

Status CheckJobId(const std::string& id, const std::string& what) {
  constexpr size_t kMaxJobId = 64;
  auto allowed = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
           c == ':' || c == '-';
  };
  const bool ok = !id.empty() && id.size() <= kMaxJobId && std::all_of(id.begin(), id.end(), allowed);
  if (ok) return Status::Ok();
  const std::string shown = id.size() > kMaxJobId ? id.substr(0, kMaxJobId) + "..." : id;
  return InvalidArgument(what + "='" + shown + "' is not a job id: 1 to 64 letters, digits, '.', '_', ':' or '-'");
}

Status init(const InitOptions& options) {
  std::lock_guard<std::mutex> lk(Mu());
  if (Group()) return FailedPrecondition("init(): this process has joined its world already (release() first)");
  SINKRT_RETURN_IF_ERROR(CheckEnvironment(), "init()");
  SINKRT_ASSIGN_OR_RETURN(ProcessGroup::Options o, ProcessGroupOptionsFromEnvironment(options));
  SINKRT_ASSIGN_OR_RETURN(Group(), ProcessGroup::Join(o));
  return Status::Ok();
}

bool initialized() {
  std::lock_guard<std::mutex> lk(Mu());
  return Group() != nullptr;
}

uint32_t get_rank() {
  std::lock_guard<std::mutex> lk(Mu());
  return Group() ? Group()->rank() : 0;
}

uint32_t get_group_size() {
  std::lock_guard<std::mutex> lk(Mu());
  return Group() ? Group()->world_size() : 1;
}

uint32_t get_local_rank() {
  std::lock_guard<std::mutex> lk(Mu());
  return Group() ? Group()->local_rank() : 0;
}

uint32_t get_local_rank_size() {
  std::lock_guard<std::mutex> lk(Mu());
  return Group() ? Group()->local_world_size() : 1;
}

ProcessGroup* process_group() {
  std::lock_guard<std::mutex> lk(Mu());
  return Group().get();
}

void release() {
  std::lock_guard<std::mutex> lk(Mu());
  Group().reset();
}

}  // namespace sinkrt::host
