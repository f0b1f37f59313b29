#include "host/src/model/eval_sharded.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "host/src/model/fan_out.h"
#include "host/src/model/slices.h"
#include "host/src/model/validate.h"

namespace sinkrt::host {
namespace {

// `queue`'s columns at the global batch's shapes: the shard's batch (the
// dataset's) times the shards.
std::vector<ColumnSpec> GlobalColumns(const QueueInfo& queue, const RankFeed& feed) {
  std::vector<ColumnSpec> out = DatasetView(queue, &feed).columns;
  for (ColumnSpec& c : out)
    if (!c.shape.empty()) c.shape[0] *= feed.parts;
  return out;
}

// `parts` (each of equal per-row shape, rows in order) as one column of
// `col`'s shape, zero-padded after the last real row.
Tensor Concat(const std::vector<const Tensor*>& parts, const ColumnSpec& col) {
  Tensor out{col.dtype, col.shape, {}};
  out.data.assign(static_cast<size_t>(NumElements(col.shape)) * DTypeSize(col.dtype), 0);
  size_t at = 0;
  for (const Tensor* t : parts) {
    const size_t n = std::min(t->data.size(), out.data.size() - at);
    std::memcpy(out.data.data() + at, t->data.data(), n);
    at += n;
  }
  return out;
}

// Rank `feed`'s part of global column `global` (queue column `c`, of local
// shape `local`): its shard's rows, and its block inside a row.
std::vector<uint8_t> RankColumn(const Tensor& global, const RankFeed& feed, size_t c, const ColumnSpec& local) {
  Block b;
  b.whole = global.shape;
  b.part = local.shape;
  b.offset.assign(local.shape.size(), 0);
  if (feed.columns[c]) b.offset = feed.columns[c]->offset;
  if (!b.offset.empty()) b.offset[0] = feed.index * local.shape[0];
  b.element_bytes = DTypeSize(local.dtype);
  return ExtractBlock(global.data.data(), b);
}

// Pushes every rank its part of `batch` into `queue` and runs `kind` once on
// all ranks together; each rank's reports.
Result<std::vector<std::vector<ReportedTensor>>> RunOnRanks(Model::Impl& m, ProgramKind kind, const QueueInfo& queue,
                                                            RankFeed RankPlan::*which, const std::vector<Tensor>& batch,
                                                            const char* what) {
  const uint32_t n = static_cast<uint32_t>(m.devices.size());
  const uint32_t q = static_cast<uint32_t>(queue.index);
  std::vector<std::vector<ReportedTensor>> out(n);
  SINKRT_RETURN_IF_ERROR(CombineRankStatuses(OnEveryRank(n,
                                                         [&](uint32_t r) -> Status {
                                                           const RankFeed& feed = m.ranks[r].*which;
                                                           std::vector<std::vector<uint8_t>> parts;
                                                           std::vector<ConstBytes> spans;
                                                           for (size_t c = 0; c < batch.size(); ++c)
                                                             parts.push_back(
                                                                 RankColumn(batch[c], feed, c, queue.columns[c]));
                                                           for (const auto& p : parts) spans.push_back(p);
                                                           SINKRT_RETURN_IF_ERROR(m.devices[r]->PushBatch(q, spans));
                                                           auto res = m.devices[r]->RunSink(kind, 1);
                                                           if (!res.ok()) {
                                                             (void)m.devices[r]->ClearQueue(q);
                                                             return res.status();
                                                           }
                                                           out[r] = std::move(res->reports);
                                                           return Status::Ok();
                                                         }),
                                             what));
  for (uint32_t r = 0; r < n; ++r)
    if (out[r].empty()) return Internal(std::string(what) + " reported nothing on rank " + std::to_string(r));
  return out;
}

// predict_step's output as a whole tensor, from the ranks' slices of it.
Result<Tensor> GatherOutput(const Model::Impl& m, const std::vector<std::vector<ReportedTensor>>& reports) {
  const ReportedTensor& first = reports[0][0];
  const std::optional<job::StreamSlice>& s0 = m.ranks[0].predict_output;
  if (!s0) return Tensor{first.dtype, first.shape, first.data};
  if (!s0->partial.empty())
    return Unimplemented(
        "predict_step's output is a pending sum on each rank (its last op's reduction is split): "
        "give that op a strategy that does not split its reduction dim");
  Tensor whole{first.dtype, s0->global_shape, {}};
  whole.data.assign(static_cast<size_t>(NumElements(whole.shape)) * DTypeSize(whole.dtype), 0);
  std::vector<std::vector<int64_t>> placed;
  for (size_t r = 0; r < reports.size(); ++r) {
    const std::optional<job::StreamSlice>& s = m.ranks[r].predict_output;
    const ReportedTensor& t = reports[r][0];
    if (!s || s->global_shape != whole.shape ||
        t.data.size() != static_cast<size_t>(NumElements(t.shape)) * DTypeSize(t.dtype))
      return Internal("predict_step's output on rank " + std::to_string(r) + " is not a slice of rank 0's");
    if (std::find(placed.begin(), placed.end(), s->offset) != placed.end()) continue;
    PlaceBlock(whole.data.data(), t.data.data(), BlockOf(*s, t.shape, DTypeSize(t.dtype)));
    placed.push_back(s->offset);
  }
  return whole;
}

ReportedTensor AsReport(Tensor t) {
  ReportedTensor r;
  r.dtype = t.dtype;
  r.shape = std::move(t.shape);
  r.data = std::move(t.data);
  return r;
}

}  // namespace

Result<EvalResult> ShardedEval(Model::Impl& m, const Dataset& dataset) {
  if (m.eval_queue.index < 0 || m.eval_queue.columns.front().shape.empty())
    return FailedPrecondition("For 'Model.eval', the compiled stream has no eval_step queue of batches");
  SINKRT_RETURN_IF_ERROR(dataset.status(), "For 'Model.eval', valid_dataset");
  const int64_t batches = dataset.get_dataset_size();
  if (batches <= 0) return InvalidArgument("There is no valid data in dataset, please check dataset file firstly.");
  const RankFeed& feed = m.ranks[0].eval;
  const QueueInfo want = DatasetView(m.eval_queue, &feed);
  SINKRT_RETURN_IF_ERROR(CheckDatasetColumns("Model.eval", dataset, want));
  const std::vector<ColumnSpec> have = dataset.output_columns();
  const std::vector<ColumnSpec> eval_global = GlobalColumns(m.eval_queue, feed);
  std::vector<size_t> eval_source, predict_source;
  for (const ColumnSpec& c : want.columns) eval_source.push_back(static_cast<size_t>(FindColumn(have, c.name)));
  std::vector<ColumnSpec> predict_global;
  if (m.predict_queue.index >= 0) {
    predict_global = GlobalColumns(m.predict_queue, m.ranks[0].predict);
    for (const ColumnSpec& c : predict_global) predict_source.push_back(static_cast<size_t>(FindColumn(have, c.name)));
  }
  const int64_t label_source = m.label_column.empty() ? -1 : FindColumn(have, m.label_column);
  const int64_t shard_rows = want.columns.front().shape[0];
  const int64_t global_rows = shard_rows * feed.parts;
  // The ranks that hold the same rows of the counted logits all count them.
  const RankPlan& r0 = m.ranks[0];
  const double count_scale = r0.accuracy_rows > 0 ? static_cast<double>(r0.accuracy_global_rows) /
                                                        (static_cast<double>(m.devices.size()) * r0.accuracy_rows)
                                                  : 0;

  SINKRT_ASSIGN_OR_RETURN(auto it, dataset.Iterate(), "For 'Model.eval', starting the dataset pipeline");
  const uint64_t round_trips_before = m.device->control_round_trips();
  double loss_sum = 0, correct = 0;
  int64_t samples = 0;
  std::vector<Row> group;  // the shards' batches of one global batch
  int64_t group_rows = 0;
  for (int64_t b = 0; b < batches; ++b) {
    const std::string where = "For 'Model.eval', batch " + std::to_string(b);
    Row row;
    SINKRT_RETURN_IF_ERROR(it->Next(&row), where);
    int64_t rows = -1;
    for (size_t c = 0; c < eval_source.size(); ++c) {
      if (eval_source[c] >= row.size()) return InvalidArgument(where + " lacks column '" + want.columns[c].name + "'");
      SINKRT_ASSIGN_OR_RETURN(const int64_t k, CheckRows("Model.eval", row[eval_source[c]], want.columns[c]), where);
      if (rows >= 0 && k != rows) return InvalidArgument(where + ": its columns have different row counts");
      rows = k;
    }
    if (rows != shard_rows && b + 1 != batches)
      return InvalidArgument(where + " has " + std::to_string(rows) + " rows; only the last batch may be partial");
    group.push_back(std::move(row));
    group_rows += rows;
    if (group_rows == global_rows) {
      std::vector<Tensor> batch;
      for (size_t c = 0; c < eval_source.size(); ++c) {
        std::vector<const Tensor*> parts;
        for (const Row& g : group) parts.push_back(&g[eval_source[c]]);
        batch.push_back(Concat(parts, eval_global[c]));
      }
      SINKRT_ASSIGN_OR_RETURN(
          auto reports, RunOnRanks(m, ProgramKind::EvalStep, m.eval_queue, &RankPlan::eval, batch, "eval_step"), where);
      double loss = 0;
      for (const auto& rep : reports) {
        if (rep.size() <= static_cast<size_t>(std::max(m.loss_report, m.accuracy_report)))
          return Internal(where + ": eval_step reported " + std::to_string(rep.size()) + " tensors");
        loss += rep[static_cast<size_t>(m.loss_report)].scalar();
        if (m.accuracy_report >= 0) correct += rep[static_cast<size_t>(m.accuracy_report)].scalar() * count_scale;
      }
      loss_sum += loss / static_cast<double>(reports.size()) * static_cast<double>(global_rows);
      samples += global_rows;
      group.clear();
      group_rows = 0;
    }
  }
  if (group_rows > 0) {
    const std::string where = "For 'Model.eval', the last " + std::to_string(group_rows) + " rows";
    if (m.predict_queue.index < 0 || label_source < 0)
      return Unimplemented(where + " are a partial batch (" + std::to_string(group_rows) + " of " +
                           std::to_string(global_rows) +
                           " rows): scoring it on the host needs the loss to be SparseSoftmaxCrossEntropy of "
                           "outputs()[0]; batch the dataset with drop_remainder=true");
    std::vector<Tensor> batch;
    for (size_t c = 0; c < predict_source.size(); ++c) {
      std::vector<const Tensor*> parts;
      for (const Row& g : group) parts.push_back(&g[predict_source[c]]);
      batch.push_back(Concat(parts, predict_global[c]));
    }
    std::vector<const Tensor*> label_parts;
    for (const Row& g : group) label_parts.push_back(&g[static_cast<size_t>(label_source)]);
    ColumnSpec label_col{m.label_column, DType::I32, {global_rows}};
    const Tensor labels = Concat(label_parts, label_col);
    SINKRT_ASSIGN_OR_RETURN(
        auto reports,
        RunOnRanks(m, ProgramKind::PredictStep, m.predict_queue, &RankPlan::predict, batch, "predict_step"), where);
    SINKRT_ASSIGN_OR_RETURN(Tensor logits, GatherOutput(m, reports), where);
    SINKRT_RETURN_IF_ERROR(ScoreRows(AsReport(std::move(logits)), labels, group_rows, &loss_sum, &correct), where);
    samples += group_rows;
  }
  return FinishEval(m, loss_sum, correct, samples, round_trips_before);
}

Result<Tensor> ShardedPredict(Model::Impl& m, const Row& inputs) {
  if (m.predict_queue.index < 0)
    return FailedPrecondition(
        "For 'Model.predict', the network has no predict program: it needs an output "
        "(AddOutput) that depends on at least one Input");
  const std::vector<ColumnSpec> cols = GlobalColumns(m.predict_queue, m.ranks[0].predict);
  if (inputs.size() != cols.size()) {
    std::string names;
    for (const ColumnSpec& c : cols) names += (names.empty() ? "" : ", ") + c.name;
    return InvalidArgument("For 'Model.predict', the network's prediction reads " + std::to_string(cols.size()) +
                           " inputs (" + names + "), but got " + std::to_string(inputs.size()));
  }
  int64_t rows = -1;
  std::vector<Tensor> batch;
  for (size_t c = 0; c < cols.size(); ++c) {
    SINKRT_ASSIGN_OR_RETURN(const int64_t k, CheckRows("Model.predict", inputs[c], cols[c]));
    if (rows >= 0 && k != rows) return InvalidArgument("For 'Model.predict', the inputs have different row counts");
    rows = k;
    batch.push_back(Concat({&inputs[c]}, cols[c]));
  }
  SINKRT_ASSIGN_OR_RETURN(auto reports, RunOnRanks(m, ProgramKind::PredictStep, m.predict_queue, &RankPlan::predict,
                                                   batch, "predict_step"));
  SINKRT_ASSIGN_OR_RETURN(Tensor logits, GatherOutput(m, reports));
  if (logits.shape.empty() || logits.shape[0] < rows) return Internal("predict_step's output has no batch dimension");
  logits.shape[0] = rows;
  logits.data.resize(static_cast<size_t>(NumElements(logits.shape)) * DTypeSize(logits.dtype));
  return logits;
}

}  // namespace sinkrt::host
