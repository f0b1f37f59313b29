// Gradient accumulation (MindSpore's grad_accumulation_step;
// docs/guide/grad_accumulation.md): train_step as K micro-steps, each forward and
// backward on its own batch, with one optimizer update after them.
//
// From a training graph whose backward was seeded with loss_seed / K:
// micro-step 0 is the graph's own forward and backward, writing the Grad
// tensors; micro-step m >= 1 is a copy of them ("mb<m>/<op>") reading its
// own Input tensors ("mb<m>/<input>", K batches per queue entry), whose
// gradients are added into the Grad tensors (AccumulateGrad, an in-place
// AddN) as each is written. The optimizer update runs once, after the last
// micro-step. The step's reported loss is the micro-steps' mean
// ("loss/accumulated"), which with the 1/K seed makes the step equal to
// one on a batch of K·b. Micro-step m's activations die before m + 1
// starts, so the memory plan reuses them: the arena grows by the extra
// batches' inputs and one transient per gradient, not K times the
// activations. A data-parallel reduction finds each gradient's last write
// in the last micro-step: one reduction per optimizer step.
//
// eval_step and predict_step are untouched: they read one batch.
#pragma once

#include "host/src/passes/training_graph.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host::passes {

// Rewrites `tg`'s train_step for `steps` micro-steps (steps >= 2).
Status AccumulateGradients(TrainingGraph& tg, int steps);

}  // namespace sinkrt::host::passes
