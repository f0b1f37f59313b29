#include "host/src/model/job_checks.h"

#include <string>
#include <utility>

#include "host/src/model/join_world.h"
#include "host/src/model/validate.h"

namespace sinkrt::host {

Result<JobRanks> SelectJobRanks(CompiledJob& job, uint32_t n, ModelOptions& options, const std::string& context) {
  JobRanks out{.per_rank = nullptr, .first = 0, .world = n};
  if (ProcessGroup* pg = process_group();
      pg && pg->world_size() > 1 && n == 1 && job.options.world_size == pg->world_size()) {
    ParallelContext asked = options.context;
    asked.mode = job.options.parallel_mode;
    asked.device_num = static_cast<int>(job.options.world_size);
    asked.pipeline_stages = job.options.pipeline.stages;
    asked.enable_parallel_optimizer = job.options.enable_parallel_optimizer;
    SINKRT_ASSIGN_OR_RETURN(out.per_rank, PerRankGroup(asked, n, context));
    out.first = out.per_rank->rank();
    out.world = out.per_rank->world_size();
    if (job.ranks.size() == out.world) {
      CompiledStream mine = std::move(job.ranks[out.first]);
      job.ranks.clear();
      job.ranks.push_back(std::move(mine));
    } else if (job.ranks.size() != 1) {
      return InvalidArgument(context + " holds " + std::to_string(job.ranks.size()) +
                             " streams: one process per rank "
                             "takes its own, or every rank's of " +
                             std::to_string(out.world));
    }
    options.context.global_rank = 0;  // checked above; the Model's own checks count local ranks
  } else if (n != job.world_size()) {
    return InvalidArgument(context + " was compiled for " + std::to_string(job.world_size()) +
                           (job.world_size() == 1 ? " rank" : " ranks") + ", but got " + std::to_string(n) +
                           (n == 1 ? " device" : " devices"));
  }
  return out;
}

Status CheckJobStreams(const CompiledJob& job, std::span<DeviceLink* const> devices, const JobRanks& ranks,
                       const std::string& context) {
  const uint32_t n = static_cast<uint32_t>(devices.size());
  for (uint32_t r = 0; r < n; ++r)
    if (!devices[r]) return InvalidArgument(context + ": device " + std::to_string(r) + " is null");
  // A job put together by hand may hold streams of different compiles: each
  // must be the rank it stands for, in a world of this size.
  for (uint32_t r = 0; r < n; ++r) {
    const fb::Header& h = *job.ranks[r].stream.root()->header();
    if (h.rank() != ranks.first + r || h.world_size() != ranks.world)
      return InvalidArgument(context + ": the stream for rank " + std::to_string(ranks.first + r) + " is rank " +
                             std::to_string(h.rank()) + " of " + std::to_string(h.world_size()) + ", not of " +
                             std::to_string(ranks.world));
  }
  return Status::Ok();
}

Status CheckJobMatchesOptions(const CompiledJob& job, const ModelOptions& options, const std::string& context) {
  const CompileOptions& co = job.options;
  const ParallelContext& asked = options.context;
  SINKRT_RETURN_IF_ERROR(asked.Validate(kModelModes));
  SINKRT_RETURN_IF_ERROR(CheckModelGlobalRank(asked));
  // A job searched under auto_parallel holds semi-auto streams and its plan.
  const bool planned = job.auto_parallel.has_value();
  const ParallelMode compiled_mode = planned ? ParallelMode::AutoParallel : co.parallel_mode;
  if (asked.mode != ParallelMode::StandAlone || asked.device_num != 1) {
    if (asked.mode == ParallelMode::AutoParallel && co.parallel_mode == ParallelMode::SemiAutoParallel && !planned)
      return InvalidArgument(context + " holds semi_auto_parallel streams without the search that chose them (" +
                             "streams read from disk keep no plan): ask for semi_auto_parallel on " +
                             std::to_string(co.world_size) + " devices");
    // A searched job is also what semi_auto_parallel runs: its streams are.
    const bool same_mode = asked.mode == compiled_mode || (planned && asked.mode == co.parallel_mode);
    if (asked.pipeline_stages != co.pipeline.stages)
      return InvalidArgument(context + " was compiled for pipeline_stages " + std::to_string(co.pipeline.stages) +
                             ", but the context asks for " + std::to_string(asked.pipeline_stages));
    if (!same_mode || asked.device_num != static_cast<int>(co.world_size))
      return InvalidArgument(context + " was compiled for " + ParallelModeName(compiled_mode) + " on " +
                             std::to_string(co.world_size) + " devices, but the context asks for " +
                             ParallelModeName(asked.mode) + " on " + std::to_string(asked.device_num));
  }
  // A job's streams fix its accumulation; a context that names another
  // one is a mistake (1, the default, takes the job's).
  if (asked.grad_accumulation_step != 1 && asked.grad_accumulation_step != co.grad_accumulation)
    return InvalidArgument(context + " was compiled for grad_accumulation_step " +
                           std::to_string(co.grad_accumulation) + ", but the context asks for " +
                           std::to_string(asked.grad_accumulation_step));
  if (asked.enable_parallel_optimizer && asked.mode != ParallelMode::StandAlone &&
      (!co.enable_parallel_optimizer || asked.parallel_optimizer_config != co.parallel_optimizer_config))
    return InvalidArgument(context + " was compiled " +
                           (co.enable_parallel_optimizer ? "with another parallel_optimizer_config"
                                                         : std::string("without enable_parallel_optimizer")) +
                           ", but the context asks for it");
  if (options.loss_scale_manager.enabled() && options.loss_scale_manager != co.loss_scale)
    return InvalidArgument(context + " was compiled with " + LossScaleManagerText(co.loss_scale) +
                           ", but the options ask for " + LossScaleManagerText(options.loss_scale_manager));
  if (options.amp_level != AmpLevel::O0 && options.amp_level != co.amp_level)
    return InvalidArgument(context + " was compiled for amp_level " + AmpLevelName(co.amp_level) +
                           ", but the options ask for " + AmpLevelName(options.amp_level));
  return Status::Ok();
}

ParallelContext JobContext(const CompiledJob& job) {
  const CompileOptions& co = job.options;
  const bool planned = job.auto_parallel.has_value();
  ParallelContext pc;
  pc.mode = planned ? ParallelMode::AutoParallel : co.parallel_mode;
  pc.device_num = static_cast<int>(co.world_size);
  pc.gradients_mean = co.gradients_mean;
  pc.parameter_broadcast = co.parameter_broadcast;
  pc.comm_fusion = co.comm_fusion;
  pc.full_batch = co.full_batch;
  pc.dataset_strategy = co.dataset_strategy;
  pc.pipeline_stages = co.pipeline.stages;
  pc.pipeline_scheduler = co.pipeline.scheduler;
  pc.grad_accumulation_step = co.grad_accumulation;
  pc.enable_parallel_optimizer = co.enable_parallel_optimizer;
  pc.parallel_optimizer_config = co.parallel_optimizer_config;
  if (planned) {
    pc.search_mode = job.auto_parallel->search_mode;
    pc.device_memory_capacity = co.device_memory;
    pc.calibration_file = co.calibration;
  }
  return pc;
}

}  // namespace sinkrt::host
