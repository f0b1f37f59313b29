// What Model::Create checks of a compiled job before it reads a stream:
// the ranks this process drives (all, or its own one under one process per
// rank), that each stream is the rank it stands for, and that the context
// and options the caller asked for agree with what the job was compiled
// for. The compiled plan is the job's context; a context that says
// otherwise is a mistake worth naming, not something to override silently.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "sinkrt/host/communication.h"
#include "sinkrt/host/compiler.h"
#include "sinkrt/host/model.h"
#include "sinkrt/host/parallel_context.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host {

// What a Model runs (auto_parallel as semi_auto_parallel, once searched).
inline const std::vector<ParallelMode> kModelModes = {ParallelMode::StandAlone, ParallelMode::DataParallel,
                                                      ParallelMode::SemiAutoParallel, ParallelMode::AutoParallel};

// The ranks of the world this Model drives: [first, first + devices) of
// `world`.
struct JobRanks {
  ProcessGroup* per_rank = nullptr;  // one process per rank: this process's group
  uint32_t first = 0;
  uint32_t world = 1;
};

// One process per rank (communication.h): this Model drives rank `first`
// of `world` alone; the job holds that rank's stream (or every rank's, of
// which it keeps its own, and options' global_rank becomes 0). Otherwise
// the job has one stream per device.
Result<JobRanks> SelectJobRanks(CompiledJob& job, uint32_t devices, ModelOptions& options, const std::string& context);

// No device is null, and each stream is the rank it stands for in a world
// of this size (a job put together by hand may hold streams of different
// compiles).
Status CheckJobStreams(const CompiledJob& job, std::span<DeviceLink* const> devices, const JobRanks& ranks,
                       const std::string& context);

// The context and options against the job's compile options: mode and
// device_num, pipeline stages, accumulation, the parallel optimizer, the
// loss scale and the amp level.
Status CheckJobMatchesOptions(const CompiledJob& job, const ModelOptions& options, const std::string& context);

// The job's own parallel context, which the Model reports.
ParallelContext JobContext(const CompiledJob& job);

}  // namespace sinkrt::host
