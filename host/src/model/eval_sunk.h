// Sunk eval (Model::eval with dataset_sink_mode; docs/design/compiler.md): the full
// batches of an eval pass run as one RunSink(EvalStep, N) per device while
// a Feeder per device pushes them, and eval_step sums the metrics on the
// device (the compiler's MetricSum, into an accumulator the device zeroes
// when the sink starts). One control round trip per pass instead of one per
// batch; MindSpore launches eval one step at a time, so this goes beyond it.
// A partial last batch still goes the per-batch way after the sink.
//
// The figures are today's to the bit: the device adds f64(mean loss) x rows
// and f64(count) per step, in batch order, which is exactly what the host
// added per batch (device/src/kernels/metric_sum.cc says why the product is
// exact), and the partial batch is added last, as before. A per-step report
// array the host summed would give the same figures, but needs a bound on
// the steps of a sink planned into the arena; the running sum needs 16
// bytes whatever the pass's length.
//
// Sharded eval (SEMI_AUTO_PARALLEL, eval_sharded.h) stays per batch: it
// averages the ranks' per-batch losses on the host before it weights them,
// which per-rank device sums would reorder, and its global batch is several
// dataset batches cut per rank, which the Feeder does not assemble.
#pragma once

#include <cstdint>
#include <vector>

#include "host/src/model/model_impl.h"
#include "sinkrt/host/dataset.h"

namespace sinkrt::host {

// The dataset batches at the start of a pass of `batches` that are full for
// `col` (a column of the eval queue): all of them, or all but a partial last
// one, which is read here to tell.
Result<int64_t> FullBatches(const Dataset& dataset, int64_t batches, const ColumnSpec& col);

struct MetricSums {
  double loss_rows = 0;  // sum over the steps of mean loss x rows
  double correct = 0;    // sum of the correct counts (0 without the metric)
};

// Runs eval_step over dataset batches [0, full) as one sink on each of
// `ranks` together (a pipeline's stages; one rank otherwise), a Feeder
// pushing `queues[k]`'s columns to ranks[k] (index -1: fed nothing), and
// returns the sums the last of `ranks` reports.
Result<MetricSums> RunSunkEval(Model::Impl& m, const Dataset& dataset, const std::vector<uint32_t>& ranks,
                               const std::vector<QueueInfo>& queues, int64_t full);

// The sunk front of an eval pass of `batches`: its full batches (for `col`)
// as one sink on `ranks` (RunSunkEval; none when the only batch is
// partial). The per-batch loop goes on from `batches_run`.
struct SunkPart {
  int64_t batches_run = 0;
  MetricSums sums;
};
Result<SunkPart> RunSunkPart(Model::Impl& m, const Dataset& dataset, int64_t batches, const ColumnSpec& col,
                             const std::vector<uint32_t>& ranks, const std::vector<QueueInfo>& queues);

}  // namespace sinkrt::host
