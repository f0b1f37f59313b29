// LrSchedule <-> schemas/common.fbs's LrScheduleOptions: one mapping for the
// task stream's LrSchedule op and the graph file's Optimizer.schedule.
#pragma once

#include "sinkrt/fb/common_generated.h"
#include "sinkrt/host/lr_schedule.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host {

// Only the fields the kind reads travel: equal schedules give equal bytes.
flatbuffers::Offset<fb::LrScheduleOptions> WriteLrSchedule(flatbuffers::FlatBufferBuilder& fbb,
                                                           const LrSchedule& schedule);

// The schedule a table holds (null: none). An unknown kind is an error;
// the arguments are not checked here (ValidateLrSchedule does).
Result<LrSchedule> ReadLrSchedule(const fb::LrScheduleOptions* options);

}  // namespace sinkrt::host
