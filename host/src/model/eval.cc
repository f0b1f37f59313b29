// Model::eval and Model::predict.
//
// Without dataset_sink_mode, eval runs one step per launch, as MindSpore's
// eval does (it sets the dataset's loop size to 1): a full batch goes
// through eval_step, which reports the batch's mean loss and its count of
// correct rows. With it, the full batches run in one sink instead
// (model/eval_sunk.h), to the same figures. A partial
// last batch cannot: the graph's batch size is fixed and padding rows would
// count in the device's mean and accuracy. So it goes through predict_step
// zero-padded, and the host scores the real rows from the logits, in double.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "host/src/model/eval_pipeline.h"
#include "host/src/model/eval_sharded.h"
#include "host/src/model/eval_sunk.h"
#include "host/src/model/model_impl.h"
#include "host/src/model/validate.h"

namespace sinkrt::host {
namespace {

// `t` (rows <= the column's batch) as one full batch of `col`, zero-padded.
std::vector<uint8_t> Padded(const Tensor& t, const ColumnSpec& col) {
  std::vector<uint8_t> out(static_cast<size_t>(NumElements(col.shape)) * DTypeSize(col.dtype), 0);
  std::memcpy(out.data(), t.data.data(), std::min(out.size(), t.data.size()));
  return out;
}

}  // namespace

Result<int64_t> CheckRows(const char* api, const Tensor& t, const ColumnSpec& col) {
  const std::string where = std::string("For '") + api + "', input '" + col.name + "' ";
  const bool same_rank = t.shape.size() == col.shape.size() && !col.shape.empty();
  bool same_rows = same_rank;
  for (size_t i = 1; same_rank && i < col.shape.size(); ++i) same_rows = same_rows && t.shape[i] == col.shape[i];
  if (t.dtype != col.dtype || !same_rows || t.shape[0] < 1 || t.shape[0] > col.shape[0])
    return InvalidArgument(where + "is " + DTypeName(t.dtype) + " " + ShapeToString(t.shape) + ", the network takes " +
                           DTypeName(col.dtype) + " " + ShapeToString(col.shape) + " (at most " +
                           std::to_string(col.shape.empty() ? 0 : col.shape[0]) + " rows)");
  const uint64_t bytes = static_cast<uint64_t>(NumElements(t.shape)) * DTypeSize(t.dtype);
  if (t.data.size() != bytes)
    return InvalidArgument(where + "holds " + std::to_string(t.data.size()) + " bytes, its shape needs " +
                           std::to_string(bytes));
  return t.shape[0];
}

Result<ReportedTensor> RunPredict(Model::Impl& m, const std::vector<const Tensor*>& inputs) {
  std::vector<std::vector<uint8_t>> padded;
  std::vector<ConstBytes> spans;
  for (size_t c = 0; c < inputs.size(); ++c) {
    const ColumnSpec& col = m.predict_queue.columns[c];
    if (inputs[c]->shape[0] == col.shape[0]) {
      spans.push_back(inputs[c]->bytes());
    } else {
      padded.push_back(Padded(*inputs[c], col));
      spans.push_back(padded.back());
    }
  }
  const uint32_t q = static_cast<uint32_t>(m.predict_queue.index);
  SINKRT_RETURN_IF_ERROR(m.device->PushBatch(q, spans));
  auto r = m.device->RunSink(ProgramKind::PredictStep, 1);
  if (!r.ok()) {
    (void)m.device->ClearQueue(q);
    return r.status();
  }
  if (r->reports.empty()) return Internal("predict_step reported nothing");
  return std::move(r->reports.front());
}

Status ScoreRows(const ReportedTensor& logits, const Tensor& labels, int64_t rows, double* loss_sum, double* correct) {
  if (logits.dtype != DType::F32 || logits.shape.size() != 2)
    return Internal("predict_step's output is not f32 [N, C] logits");
  const int64_t classes = logits.shape[1];
  const float* x = reinterpret_cast<const float*>(logits.data.data());
  const int32_t* y = labels.as<int32_t>();
  for (int64_t i = 0; i < rows; ++i) {
    const float* row = x + i * classes;
    if (y[i] < 0 || y[i] >= classes)
      return InvalidArgument("For 'Model.eval', label " + std::to_string(y[i]) + " of row " + std::to_string(i) +
                             " of the last batch is outside [0, " + std::to_string(classes) + ")");
    int64_t argmax = 0;
    double max = row[0];
    for (int64_t c = 1; c < classes; ++c)
      if (row[c] > max) {
        max = row[c];
        argmax = c;
      }
    double sum = 0;
    for (int64_t c = 0; c < classes; ++c) sum += std::exp(static_cast<double>(row[c]) - max);
    *loss_sum += max + std::log(sum) - static_cast<double>(row[y[i]]);
    if (argmax == y[i]) *correct += 1;
  }
  return Status::Ok();
}

EvalResult FinishEval(const Model::Impl& m, double loss_sum, double correct, int64_t samples,
                      uint64_t round_trips_before) {
  EvalResult out;
  out.samples = samples;
  out.loss = loss_sum / static_cast<double>(samples);
  out.accuracy = m.accuracy_report >= 0 ? correct / static_cast<double>(samples) : std::nan("");
  out.round_trips = m.device->control_round_trips() - round_trips_before;
  return out;
}

Result<EvalResult> Model::eval(const Dataset& dataset, bool dataset_sink_mode) {
  Impl& m = *impl_;
  // Sunk where eval_step sums its metrics; sharded eval stays per batch
  // (eval_sunk.h says why).
  const bool sunk = dataset_sink_mode && m.metric_sums_report >= 0;
  if (m.pipeline_stages > 1) return PipelineEval(m, dataset, sunk);
  if (m.sharded) return ShardedEval(m, dataset);
  if (m.eval_queue.index < 0 || m.eval_queue.columns.front().shape.empty())
    return FailedPrecondition("For 'Model.eval', the compiled stream has no eval_step queue of batches");
  SINKRT_RETURN_IF_ERROR(dataset.status(), "For 'Model.eval', valid_dataset");
  const int64_t batches = dataset.get_dataset_size();
  if (batches <= 0) return InvalidArgument("There is no valid data in dataset, please check dataset file firstly.");
  SINKRT_RETURN_IF_ERROR(CheckDatasetColumns("Model.eval", dataset, m.eval_queue));
  const std::vector<ColumnSpec> have = dataset.output_columns();
  std::vector<size_t> eval_source, predict_source;
  for (const ColumnSpec& c : m.eval_queue.columns) eval_source.push_back(static_cast<size_t>(FindColumn(have, c.name)));
  for (const ColumnSpec& c : m.predict_queue.columns)
    predict_source.push_back(static_cast<size_t>(FindColumn(have, c.name)));
  const int64_t label_source = m.label_column.empty() ? -1 : FindColumn(have, m.label_column);

  const uint64_t round_trips_before = m.device->control_round_trips();
  const uint32_t q = static_cast<uint32_t>(m.eval_queue.index);
  const int64_t batch = m.eval_queue.columns.front().shape[0];
  double loss_sum = 0, correct = 0;
  int64_t samples = 0;
  // Sunk: the full batches in one sink on rank 0, then the per-batch loop
  // below for a partial last one.
  int64_t full = 0;
  if (sunk) {
    const ColumnSpec& first_column = m.eval_queue.columns.front();
    SINKRT_ASSIGN_OR_RETURN(const SunkPart part, RunSunkPart(m, dataset, batches, first_column, {0}, {m.eval_queue}));
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
  std::vector<ConstBytes> spans(eval_source.size());
  for (int64_t b = full; b < batches; ++b) {
    const std::string where = "For 'Model.eval', batch " + std::to_string(b);
    SINKRT_RETURN_IF_ERROR(it->Next(&row), where);
    int64_t rows = -1;
    for (size_t c = 0; c < eval_source.size(); ++c) {
      if (eval_source[c] >= row.size())
        return InvalidArgument(where + " lacks column '" + m.eval_queue.columns[c].name + "'");
      SINKRT_ASSIGN_OR_RETURN(const int64_t n, CheckRows("Model.eval", row[eval_source[c]], m.eval_queue.columns[c]),
                              where);
      if (rows >= 0 && n != rows) return InvalidArgument(where + ": its columns have different row counts");
      rows = n;
    }
    if (rows == batch) {
      for (size_t c = 0; c < spans.size(); ++c) spans[c] = row[eval_source[c]].bytes();
      SINKRT_RETURN_IF_ERROR(m.device->PushBatch(q, spans));
      auto r = m.device->RunSink(ProgramKind::EvalStep, 1);
      if (!r.ok()) {
        (void)m.device->ClearQueue(q);
        return r.status().WithContext(where);
      }
      const auto& reports = r->reports;
      if (reports.size() <= static_cast<size_t>(std::max(m.loss_report, m.accuracy_report)))
        return Internal(where + ": eval_step reported " + std::to_string(reports.size()) + " tensors");
      loss_sum += reports[static_cast<size_t>(m.loss_report)].scalar() * static_cast<double>(batch);
      if (m.accuracy_report >= 0) correct += reports[static_cast<size_t>(m.accuracy_report)].scalar();
    } else {
      if (b + 1 != batches)
        return InvalidArgument(where + " has " + std::to_string(rows) + " rows; only the last batch may be partial");
      if (m.predict_queue.index < 0 || label_source < 0)
        return Unimplemented(where + " is partial (" + std::to_string(rows) + " of " + std::to_string(batch) +
                             " rows): scoring it on the host needs the loss to be SparseSoftmaxCrossEntropy of "
                             "outputs()[0]; batch the dataset with drop_remainder=true");
      std::vector<const Tensor*> inputs;
      for (size_t s : predict_source) inputs.push_back(&row[s]);
      SINKRT_ASSIGN_OR_RETURN(ReportedTensor logits, RunPredict(m, inputs));
      SINKRT_RETURN_IF_ERROR(ScoreRows(logits, row[static_cast<size_t>(label_source)], rows, &loss_sum, &correct));
    }
    samples += rows;
  }
  return FinishEval(m, loss_sum, correct, samples, round_trips_before);
}

Result<Tensor> Model::predict(const Row& inputs) {
  Impl& m = *impl_;
  if (m.pipeline_stages > 1)
    return Unimplemented("For 'Model.predict', the model runs " + std::to_string(m.pipeline_stages) +
                         " pipeline stages, and predict through pipeline stages is not built yet "
                         "(docs/design/pipeline.md)");
  if (m.sharded) return ShardedPredict(m, inputs);
  if (m.predict_queue.index < 0)
    return FailedPrecondition(
        "For 'Model.predict', the network has no predict program: it needs an output "
        "(AddOutput) that depends on at least one Input");
  const std::vector<ColumnSpec>& cols = m.predict_queue.columns;
  if (inputs.size() != cols.size()) {
    std::string names;
    for (const ColumnSpec& c : cols) names += (names.empty() ? "" : ", ") + c.name;
    return InvalidArgument("For 'Model.predict', the network's prediction reads " + std::to_string(cols.size()) +
                           " inputs (" + names + "), but got " + std::to_string(inputs.size()));
  }
  int64_t rows = -1;
  std::vector<const Tensor*> ptrs;
  for (size_t c = 0; c < cols.size(); ++c) {
    SINKRT_ASSIGN_OR_RETURN(const int64_t n, CheckRows("Model.predict", inputs[c], cols[c]));
    if (rows >= 0 && n != rows) return InvalidArgument("For 'Model.predict', the inputs have different row counts");
    rows = n;
    ptrs.push_back(&inputs[c]);
  }
  SINKRT_ASSIGN_OR_RETURN(ReportedTensor logits, RunPredict(m, ptrs));
  if (logits.shape.empty() || logits.shape[0] < rows) return Internal("predict_step's output has no batch dimension");
  Tensor out;
  out.dtype = logits.dtype;
  out.shape = logits.shape;
  out.shape[0] = rows;
  const size_t bytes = static_cast<size_t>(NumElements(out.shape)) * DTypeSize(out.dtype);
  out.data.assign(logits.data.begin(), logits.data.begin() + static_cast<std::ptrdiff_t>(bytes));
  return out;
}

}  // namespace sinkrt::host
