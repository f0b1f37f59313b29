// MindSpore's argument checks for Model, with its messages (reference
// mindspore-semantics.md §1.1, §2.3), and the dataset-against-graph checks
// that a compiled graph adds (its batch size and dtypes are fixed).
#pragma once

#include <cstdint>

#include "host/src/model/model_impl.h"
#include "sinkrt/host/dataset.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host {

struct TrainPlan {
  int64_t dataset_size = 0;     // batches per pass
  int64_t steps_per_epoch = 0;  // sink: sink_size (or dataset_size); non-sink: dataset_size
  int64_t epochs = 0;           // epoch - initial_epoch
  int64_t total_batches() const { return epochs * steps_per_epoch; }
};

// Model.train's checks in MindSpore's order: epoch and initial_epoch, the
// dataset, its size, sink_size. With gradient accumulation a step takes
// `batches_per_step` dataset batches: dataset_size and the steps count
// steps (a pass's leftover batches join the next pass's first step).
Result<TrainPlan> ValidateTrainArgs(int epoch, const Dataset& dataset, bool dataset_sink_mode, int sink_size,
                                    int initial_epoch, int64_t batches_per_step = 1);

// Every column of `queue` must be a dataset column of the same dtype and
// per-batch shape, and every dataset column a column of `queue`. `api`
// names the caller in messages ("Model.train").
Status CheckDatasetColumns(const char* api, const Dataset& dataset, const QueueInfo& queue);

// `queue` as the dataset must feed it: with a sharded rank's `feed`, each
// column at the shape of the shard's batch (which the rank cuts its block
// from); without, the queue as it is.
QueueInfo DatasetView(const QueueInfo& queue, const RankFeed* feed);

// Index in `columns` of the column called `name`, or -1.
int64_t FindColumn(const std::vector<ColumnSpec>& columns, const std::string& name);

}  // namespace sinkrt::host
