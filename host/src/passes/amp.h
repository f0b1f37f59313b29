// The mixed-precision pass (docs/guide/amp.md): a forward graph rewritten so that
// its ops compute in the dtype `level` gives them, with Cast ops inserted
// where a tensor meets an op of the other dtype. Runs before autodiff, so
// the backward pass follows the same dtypes (Cast's gradient casts back):
// parameters stay f32 and their gradients arrive f32.
#pragma once

#include "sinkrt/host/amp.h"
#include "sinkrt/host/graph.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host::passes {

// Every tensor of `forward` keeps its id, name and shape (so that layouts
// and slices indexed by id stay valid) and takes the dtype of the op that
// writes it; the loss and the outputs stay f32 (a bf16 op writing one
// writes "<name>/bf16", cast back into it). Casts are new tensors after
// them: "<name>/to_bf16" and "<name>/to_f32", one per tensor and dtype,
// carrying the recompute segment of their first reader. O0 returns
// `forward` unchanged.
Result<Graph> ApplyAmp(const Graph& forward, AmpLevel level);

}  // namespace sinkrt::host::passes
