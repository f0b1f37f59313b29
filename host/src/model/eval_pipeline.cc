// Model::eval through pipeline stages (model/eval_pipeline.h).
#include "host/src/model/eval_pipeline.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "host/src/model/eval_sharded.h"
#include "host/src/model/eval_sunk.h"
#include "host/src/model/fan_out.h"
#include "host/src/model/validate.h"

namespace sinkrt::host {

Result<EvalResult> PipelineEval(Model::Impl& m, const Dataset& dataset, bool sunk) {
  const uint32_t n = static_cast<uint32_t>(m.devices.size());
  const uint32_t stages = static_cast<uint32_t>(m.pipeline_stages);
  const uint32_t per_stage = n / stages;
  // Data parallel: replica 0's pipeline, stage by stage. SEMI_AUTO_PARALLEL
  // inside the stages: every rank (a stage's collectives need all of its
  // ranks); the last stage's reports are whole on each.
  std::vector<uint32_t> ranks;
  for (uint32_t k = 0; k < stages; ++k)
    for (uint32_t j = 0; j < (m.stage_sharded ? per_stage : 1); ++j) ranks.push_back(k * per_stage + j);
  const uint32_t last = ranks.back();
  const QueueInfo& first = m.rank_eval_queues[ranks.front()];
  if (first.index < 0 || first.columns.empty() || first.columns.front().shape.empty() || m.loss_report < 0)
    return FailedPrecondition("For 'Model.eval', the compiled streams have no eval_step (compile with eval)");
  QueueInfo wanted = first;
  for (uint32_t r : ranks)
    for (const ColumnSpec& c : m.rank_eval_queues[r].columns)
      if (FindColumn(wanted.columns, c.name) < 0) wanted.columns.push_back(c);
  SINKRT_RETURN_IF_ERROR(dataset.status(), "For 'Model.eval', valid_dataset");
  const int64_t batches = dataset.get_dataset_size();
  if (batches <= 0) return InvalidArgument("There is no valid data in dataset, please check dataset file firstly.");
  SINKRT_RETURN_IF_ERROR(CheckDatasetColumns("Model.eval", dataset, wanted));
  const std::vector<ColumnSpec> have = dataset.output_columns();
  const int64_t label_source = m.label_column.empty() ? -1 : FindColumn(have, m.label_column);
  const int64_t batch = first.columns.front().shape[0];
  const ColumnSpec first_column = first.columns.front();

  const uint64_t round_trips_before = m.device->control_round_trips();
  auto clear = [&] {
    for (uint32_t r : ranks)
      if (m.rank_eval_queues[r].index >= 0)
        (void)m.devices[r]->ClearQueue(static_cast<uint32_t>(m.rank_eval_queues[r].index));
  };
  double loss_sum = 0, correct = 0;
  int64_t samples = 0;
  // Sunk (model/eval_sunk.h): the full batches in one sink on every stage,
  // the last stage summing; then the loop below for a partial last one.
  int64_t full = 0;
  if (sunk) {
    std::vector<QueueInfo> queues;
    for (uint32_t r : ranks) queues.push_back(m.rank_eval_queues[r]);
    SINKRT_ASSIGN_OR_RETURN(const SunkPart part, RunSunkPart(m, dataset, batches, first_column, ranks, queues));
    full = part.batches_run;
    loss_sum = part.sums.loss_rows;
    correct = part.sums.correct;
    samples = full * batch;
    if (full == batches) return FinishEval(m, loss_sum, correct, samples, round_trips_before);
  }
  IteratorOptions from;
  from.start_batch = full;
  SINKRT_ASSIGN_OR_RETURN(auto it, dataset.Iterate(from), "For 'Model.eval', starting the dataset pipeline");
  Row row;
  for (int64_t b = full; b < batches; ++b) {
    const std::string where = "For 'Model.eval', batch " + std::to_string(b);
    SINKRT_RETURN_IF_ERROR(it->Next(&row), where);
    int64_t rows = -1;
    for (const ColumnSpec& c : wanted.columns) {
      const size_t s = static_cast<size_t>(FindColumn(have, c.name));
      if (s >= row.size()) return InvalidArgument(where + " lacks column '" + c.name + "'");
      SINKRT_ASSIGN_OR_RETURN(const int64_t k, CheckRows("Model.eval", row[s], c), where);
      if (rows >= 0 && k != rows) return InvalidArgument(where + ": its columns have different row counts");
      rows = k;
    }
    if (rows != batch && b + 1 != batches)
      return InvalidArgument(where + " has " + std::to_string(rows) + " rows; only the last batch may be partial");
    if (rows != batch && (label_source < 0 || m.accuracy_report < 0))
      return Unimplemented(where + " is partial (" + std::to_string(rows) + " of " + std::to_string(batch) +
                           " rows): scoring it on the host needs the loss to be SparseSoftmaxCrossEntropy of "
                           "outputs()[0]; batch the dataset with drop_remainder=true");
    // Each stage's queue its columns, zero-padded to the batch when short.
    std::vector<std::vector<uint8_t>> padded;
    padded.reserve(wanted.columns.size());
    for (uint32_t r : ranks) {
      const QueueInfo& q = m.rank_eval_queues[r];
      if (q.index < 0) continue;
      std::vector<ConstBytes> spans;
      for (const ColumnSpec& c : q.columns) {
        const Tensor& t = row[static_cast<size_t>(FindColumn(have, c.name))];
        if (rows == batch) {
          spans.push_back(t.bytes());
          continue;
        }
        padded.emplace_back(static_cast<size_t>(NumElements(c.shape)) * DTypeSize(c.dtype), 0);
        std::memcpy(padded.back().data(), t.data.data(), std::min(padded.back().size(), t.data.size()));
        spans.push_back(padded.back());
      }
      Status pushed = m.devices[r]->PushBatch(static_cast<uint32_t>(q.index), spans);
      if (!pushed.ok()) {
        clear();
        return pushed.WithContext(where + ", rank " + std::to_string(r));
      }
    }
    std::vector<SinkResult> results(ranks.size());
    Status ran = CombineRankStatuses(OnEveryRank(static_cast<uint32_t>(ranks.size()),
                                                 [&](uint32_t k) -> Status {
                                                   auto res = m.devices[ranks[k]]->RunSink(ProgramKind::EvalStep, 1);
                                                   if (!res.ok()) return res.status();
                                                   results[k] = std::move(res).value();
                                                   return Status::Ok();
                                                 }),
                                     "eval_step");
    if (!ran.ok()) {
      clear();
      return ran.WithContext(where);
    }
    const std::vector<ReportedTensor>& reports = results.back().reports;
    const size_t need = static_cast<size_t>(std::max(m.loss_report, m.accuracy_report)) + 1;
    if (reports.size() < need)
      return Internal(where + ": the last stage's eval_step (rank " + std::to_string(last) + ") reported " +
                      std::to_string(reports.size()) + " tensors");
    if (rows == batch) {
      loss_sum += reports[static_cast<size_t>(m.loss_report)].scalar() * static_cast<double>(batch);
      if (m.accuracy_report >= 0) correct += reports[static_cast<size_t>(m.accuracy_report)].scalar();
    } else {
      // The logits: the last report but for the metric sums that follow it.
      const size_t logits = reports.size() - 1 - (m.metric_sums_report >= 0 ? 1 : 0);
      SINKRT_RETURN_IF_ERROR(
          ScoreRows(reports[logits], row[static_cast<size_t>(label_source)], rows, &loss_sum, &correct), where);
    }
    samples += rows;
  }
  return FinishEval(m, loss_sum, correct, samples, round_trips_before);
}

}  // namespace sinkrt::host
