// How a Model's devices join one world: all of them at once when this
// process drives every rank, or this rank's one device among the other
// processes' (one process per rank, communication.h), the job's fields
// checked equal at the round.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "host/src/model/model_impl.h"
#include "sinkrt/host/communication.h"
#include "sinkrt/host/compiler.h"
#include "sinkrt/host/parallel_context.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host {

// The devices' world: every member's endpoint, then JoinWorld on all at
// once, each told the groups its stream (`streams[r]`, loaded next) runs
// collectives on, so that the rendezvous connects only what they need.
Status JoinWorld(const std::vector<DeviceLink*>& devices, const std::vector<const VerifiedStream*>& streams,
                 const std::string& context);

// The process group when this Model is one rank of a world of host
// processes (communication.h): one device, device_num > 1, and init()
// formed a world of that size. Null when it drives every rank itself.
Result<ProcessGroup*> PerRankGroup(const ParallelContext& pc, uint32_t devices, const std::string& context);

// This rank's device joins the world the other processes' devices form:
// the endpoints travel through the master, with the job's fields.
Status JoinWorldOfProcesses(Model::Impl& m, const CompileOptions& co, const std::string& context);

}  // namespace sinkrt::host
