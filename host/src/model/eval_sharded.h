// Model::eval and Model::predict when the ranks hold slices
// (SEMI_AUTO_PARALLEL): every rank runs the step on its part of the batch,
// as training does, since a model-parallel model may not fit one rank.
#pragma once

#include <cstdint>

#include "host/src/model/model_impl.h"
#include "sinkrt/host/dataset.h"
#include "sinkrt/runtime/device_link.h"

namespace sinkrt::host {

// A batch of up to the compiled batch size for `col`: same dtype, same
// per-row shape. Returns its row count. `api` names the caller.
Result<int64_t> CheckRows(const char* api, const Tensor& t, const ColumnSpec& col);

// Runs predict_step once on `inputs` (the predict queue's columns, in
// order, of equal row counts, zero-padded here when short) and returns the
// logits report, still padded.
Result<ReportedTensor> RunPredict(Model::Impl& m, const std::vector<const Tensor*>& inputs);

// Sum over the real rows of -log softmax(logits)[label], and the number of
// rows whose argmax (the first on ties, as the device's ArgMaxAccuracy)
// equals the label; in double.
Status ScoreRows(const ReportedTensor& logits, const Tensor& labels, int64_t rows, double* loss_sum, double* correct);

// Model.eval's result from the sums over its samples (NaN accuracy when
// the stream counts none).
EvalResult FinishEval(const Model::Impl& m, double loss_sum, double correct, int64_t samples,
                      uint64_t round_trips_before);

// The global batch is the data-parallel shards' batches side by side: one
// eval step takes as many dataset batches as the batch has shards (the
// dataset's batch is one shard's, as in training), and each rank cuts its
// part. A last, short group runs predict_step zero-padded on every rank,
// and the host scores its real rows from the logits gathered from the
// ranks' slices.
Result<EvalResult> ShardedEval(Model::Impl& m, const Dataset& dataset);
// Up to the global batch's rows of inputs; the logits come back whole.
Result<Tensor> ShardedPredict(Model::Impl& m, const Row& inputs);

}  // namespace sinkrt::host
