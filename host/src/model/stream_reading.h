// What a Model reads from its compiled streams (model_impl.h): the
// queues it feeds, where eval_step reports the loss and the accuracy,
// each rank's feed and state for a sharded job, a pipeline's ranks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "host/src/model/model_impl.h"
#include "sinkrt/runtime/status.h"
#include "sinkrt/runtime/task_stream_verifier.h"

namespace sinkrt::host {

// The queue `name` of the stream; index -1 when it has none.
QueueInfo FindQueue(const VerifiedStream& view, const std::string& name);

// The buffers program `kind` reports, in order; none without that program.
std::vector<uint32_t> Reports(const VerifiedStream& view, ProgramKind kind);

// Positions of the loss and of the accuracy count among eval_step's reports.
// The loss is train_step's report; the count is what the ArgMaxAccuracy task
// writes (buffer names may be the tensors' own when "loss"/"accuracy" are
// taken).
void FindEvalReports(const VerifiedStream& view, int* loss_report, int* accuracy_report);

// Position among eval_step's reports of the MetricSum task's sums (the
// compiler's sunk-eval accumulator, compiler/metric_sums.h), or -1.
int FindMetricSumsReport(const VerifiedStream& view);

// How the host drives rank r of a sharded job (model_impl.h).
Result<RankPlan> PlanRank(const VerifiedStream& view, uint32_t r);

// A pipeline's ranks (model_impl.h): each one's train queue, which of them
// report the loss, and where each piece of the state lives.
Status PlanPipeline(Model::Impl& m, const std::string& context);

}  // namespace sinkrt::host
