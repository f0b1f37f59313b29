#include "host/src/model/join_world.h"

#include <cstdio>
#include <random>
#include <string>
#include <utility>

#include "host/src/job/stream_report.h"
#include "host/src/model/fan_out.h"
#include "host/src/model/validate.h"
#include "sinkrt/runtime/version.h"

namespace sinkrt::host {
namespace {

std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// What every rank's process must hold equal for their devices to run one
// job: refused at the round, by field, instead of hanging in the first
// collective whose sizes differ.
std::vector<JoinField> JobFields(const Model::Impl& m, const CompileOptions& co) {
  const CompileReport& report = m.compiled.report;
  std::string columns, buckets;
  for (const ColumnSpec& c : m.train_queue.columns)
    columns += (columns.empty() ? "" : ", ") + c.name + " " + DTypeName(c.dtype) + " " + ShapeToString(c.shape);
  for (const auto& b : report.buckets) buckets += (buckets.empty() ? "" : ", ") + std::to_string(b.bytes);
  const int64_t batch =
      m.train_queue.columns.empty() || m.train_queue.columns[0].shape.empty() ? 0 : m.train_queue.columns[0].shape[0];
  std::string optimizer =
      std::string(OptimizerKindName(co.optimizer.kind)) + " lr " + std::to_string(co.optimizer.learning_rate);
  if (co.optimizer.kind == OptimizerKind::Momentum) optimizer += " momentum " + std::to_string(co.optimizer.momentum);
  if (co.optimizer.weight_decay != 0) optimizer += " weight_decay " + std::to_string(co.optimizer.weight_decay);
  if (!co.optimizer.groups.empty()) optimizer += " groups " + std::to_string(co.optimizer.groups.size());
  return {
      // One release for every rank: the bootstrap has no Hello of its own,
      // and another release may compile the same graph differently.
      {"sinkrt", SINKRT_VERSION_STRING},
      {"world_size", std::to_string(co.world_size)},
      {"parallel_mode", ParallelModeName(co.parallel_mode)},
      {"network", m.network_name},
      {"graph_hash", Hex(m.network_hash)},
      {"batch", std::to_string(batch)},
      {"train_columns", columns},
      {"optimizer", optimizer},
      {"gradients_mean", co.gradients_mean ? "true" : "false"},
      {"parameter_broadcast", co.parameter_broadcast ? "true" : "false"},
      {"fusion_buckets", buckets},
      {"grad_accumulation", std::to_string(co.grad_accumulation)},
      {"amp_level", AmpLevelName(co.amp_level)},
      {"loss_scale", LossScaleManagerText(co.loss_scale)},
      {"queue_capacity", std::to_string(co.queue_capacity)},
      {"arena_bytes", std::to_string(report.arena_bytes)},
  };
}

}  // namespace

Status JoinWorld(const std::vector<DeviceLink*>& devices, const std::vector<const VerifiedStream*>& streams,
                 const std::string& context) {
  const uint32_t n = static_cast<uint32_t>(devices.size());
  WorldSpec world;
  // A fresh id per world, so a straggler of an earlier world can never join this one.
  std::random_device entropy;
  world.job = (uint64_t{entropy()} << 32 | entropy()) | 1;
  for (uint32_t r = 0; r < n; ++r) {
    SINKRT_ASSIGN_OR_RETURN(PeerEndpoint endpoint, devices[r]->Endpoint(),
                            context + ": rank " + std::to_string(r) + " has no peer endpoint");
    world.members.push_back(std::move(endpoint));
  }
  return CombineRankStatuses(OnEveryRank(n,
                                         [&](uint32_t r) {
                                           WorldSpec mine = world;
                                           mine.rank = r;
                                           mine.groups = CollectiveUses(*streams[r], r);
                                           return devices[r]->JoinWorld(mine);
                                         }),
                             context + ": joining the devices' world");
}

Result<ProcessGroup*> PerRankGroup(const ParallelContext& pc, uint32_t devices, const std::string& context) {
  ProcessGroup* pg = process_group();
  if (devices != 1 || pc.device_num <= 1 || !pg || pg->world_size() == 1) {
    SINKRT_RETURN_IF_ERROR(CheckModelGlobalRank(pc));
    return nullptr;
  }
  const std::string why = context + ": one process per rank (init() formed rank " + std::to_string(pg->rank()) +
                          " of " + std::to_string(pg->world_size()) + ")";
  if (static_cast<uint32_t>(pc.device_num) != pg->world_size())
    return InvalidArgument(why + ", but device_num is " + std::to_string(pc.device_num));
  if (pc.global_rank != 0 && static_cast<uint32_t>(pc.global_rank) != pg->rank())
    return InvalidArgument(why + ", but the context's global_rank is " + std::to_string(pc.global_rank));
  if (pc.mode != ParallelMode::DataParallel)
    return Unimplemented(why + ": runs data_parallel, not " + std::string(ParallelModeName(pc.mode)) +
                         " (its ranks' slices are planned, read and merged together: drive every rank from one "
                         "process)");
  if (pc.pipeline_stages > 1 || pc.enable_parallel_optimizer)
    return Unimplemented(why + ": runs data_parallel without " +
                         std::string(pc.pipeline_stages > 1 ? "pipeline stages" : "the parallel optimizer") +
                         " for now: drive every rank from one process");
  return pg;
}

Status JoinWorldOfProcesses(Model::Impl& m, const CompileOptions& co, const std::string& context) {
  ProcessGroup& pg = *m.group;
  SINKRT_ASSIGN_OR_RETURN(PeerEndpoint endpoint, m.device->Endpoint(),
                          context + ": rank " + std::to_string(pg.rank()) + " has no peer endpoint");
  SINKRT_ASSIGN_OR_RETURN(FormedWorld formed, pg.Round("Model.Create", JobFields(m, co), endpoint));
  WorldSpec world;
  world.job = formed.job;
  world.rank = pg.rank();
  world.members = std::move(formed.members);
  // Only the links this rank's collectives need (connection_plan.h).
  world.groups = CollectiveUses(m.compiled.stream, pg.rank());
  return m.device->JoinWorld(world).WithContext(context + ": joining the devices' world as rank " +
                                                std::to_string(pg.rank()));
}

}  // namespace sinkrt::host
