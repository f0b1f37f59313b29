// Model::eval through pipeline stages (docs/design/pipeline.md).
#pragma once

#include "host/src/model/model_impl.h"
#include "sinkrt/host/dataset.h"

namespace sinkrt::host {

// One eval step per dataset batch on the first replica's pipeline (the
// ranks at place 0 of every stage; the other replicas hold the same
// parameters): the first stage takes the inputs, the last the labels, and
// every stage runs eval_step, which forwards each micro-batch through the
// stages. The last stage reports the batch's mean loss and correct count.
// A partial last batch is zero-padded and scored on the host from the
// logits the last stage reports, over its real rows only. `sunk`
// (dataset_sink_mode): the full batches run as one sink on every stage
// first (model/eval_sunk.h).
Result<EvalResult> PipelineEval(Model::Impl& m, const Dataset& dataset, bool sunk);

}  // namespace sinkrt::host
