/// \file
/// MindSpore's nn cells that are compositions of graph ops: the losses
/// nn.MSELoss, nn.L1Loss and nn.SoftmaxCrossEntropyWithLogits(sparse=False),
/// and nn.Embedding. Each builds ordinary ops under a name scope (the cell's
/// name), so their gradients, sharding and graph files are those of the ops.
///
/// ~~~
///   TensorId loss = MSELoss(g, g.outputs()[0], g.Input("target", {64, 1}));
///   g.SetLoss(loss);
/// ~~~
///
/// Errors (shapes, dtypes, a bad size) are in the graph's status(), naming
/// the cell, as the op builders' are.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sinkrt/host/graph.h"

namespace sinkrt::host {

/// A loss's `reduction` (MindSpore's 'mean', 'sum', 'none').
enum class Reduction {
  kMean,  ///< the mean over every element: a scalar
  kSum,   ///< the sum over every element: a scalar
  kNone,  ///< no reduction: the elementwise (or per-row) loss
};

/// nn.MSELoss: (logits − labels)², reduced. logits and labels f32 that
/// broadcast together (kNone gives their broadcast shape).
TensorId MSELoss(Graph& g, TensorId logits, TensorId labels, Reduction reduction = Reduction::kMean);

/// nn.L1Loss: |logits − labels|, reduced, as MSELoss. The gradient at
/// logits = labels is 0 (MindSpore's AbsGrad).
TensorId L1Loss(Graph& g, TensorId logits, TensorId labels, Reduction reduction = Reduction::kMean);

/// nn.SoftmaxCrossEntropyWithLogits(sparse=False): per row n of logits
/// [N, C], −Σ_c labels[n, c]·log_softmax(logits)[n, c], with f32 labels
/// [N, C] (one-hot or soft); kNone (MindSpore's default) gives [N], kMean
/// and kSum a scalar. The gradient w.r.t. logits is softmax·Σlabels −
/// labels per row (MindSpore's softmax − labels when each row of labels
/// sums to 1).
TensorId SoftmaxCrossEntropyWithLogits(Graph& g, TensorId logits, TensorId labels,
                                       Reduction reduction = Reduction::kNone);

/// nn.Embedding(vocab_size, embedding_size, padding_idx=None) on i32
/// `indices` [...]: the rows of a Param "<name>.embedding_table" [vocab_size,
/// embedding_size] (MindSpore's parameter name), initialised as MindSpore's
/// default embedding_table='normal', Normal(0, 0.01), from `seed`; the output
/// is [..., embedding_size] (a Gather, whose gradient scatter-adds into the
/// table). An index outside [0, vocab_size) fails the step naming it.
///
/// `padding_idx` (in [0, vocab_size)) does what MindSpore's does: that row of
/// the initial table is zero, and nothing else. Its gradient is not masked,
/// so the row trains like any other once an index selects it (PyTorch's
/// nn.Embedding masks it and the row stays zero). The table is then drawn on
/// the host from the same generator (the other rows equal the table without
/// padding_idx bit for bit) and held inline in the graph, as MindSpore
/// materialises it with init_data().
TensorId Embedding(Graph& g, TensorId indices, int64_t vocab_size, int64_t embedding_size,
                   const std::string& name = "embedding", uint64_t seed = 1,
                   std::optional<int64_t> padding_idx = std::nullopt);

/// ops.OneHot as a cell: `indices` i32 [...] -> f32 [..., depth], on_value 1
/// and off_value 0 (MindSpore's nn.OneHot defaults), as Graph::OneHot.
TensorId OneHot(Graph& g, TensorId indices, int64_t depth, float on_value = 1.0f, float off_value = 0.0f,
                int axis = -1);

/// nn.Pad(paddings, mode): `paddings` (before, after) per axis of x; mode
/// "CONSTANT" (zeros, MindSpore's nn.Pad), "REFLECT" or "SYMMETRIC" (any
/// case, as ops.pad's lower-case names). Another mode fails naming it.
TensorId Pad(Graph& g, TensorId x, std::vector<std::pair<int64_t, int64_t>> paddings,
             const std::string& mode = "CONSTANT");

}  // namespace sinkrt::host
