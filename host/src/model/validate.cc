#include "host/src/model/validate.h"

#include <cstdlib>
#include <optional>
#include <string>

#include "runtime/src/env.h"

namespace sinkrt::host {
namespace {

// Validator.check_non_negative_int without an argument name.
Status CheckNonNegativeInt(int value) {
  if (value >= 0) return Status::Ok();
  return InvalidArgument("The input value must be int and must >= 0, but got '" + std::to_string(value) +
                         "' with type 'int'.");
}

std::string Describe(const ColumnSpec& c) { return std::string(DTypeName(c.dtype)) + " " + ShapeToString(c.shape); }

std::string Names(const std::vector<ColumnSpec>& columns) {
  std::string out;
  for (const ColumnSpec& c : columns) out += (out.empty() ? "" : ", ") + c.name;
  return out.empty() ? "none" : out;
}

}  // namespace

Result<uint32_t> SinkQueueCapacity(uint32_t configured) {
  const char* env = std::getenv("MS_DATASET_SINK_QUEUE");
  if (!env || !*env) return configured;
  // MindSpore reads it with atoi, so anything that is not a number reads as
  // 0 and gets the "> 0" message (a negative one too).
  const std::optional<long long> parsed = ParseNonNegativeInteger(env);
  const long long v = parsed.value_or(0);
  if (v <= 0)
    return InvalidArgument(
        "Invalid data queue capacity. Expect env variable MS_DATASET_SINK_QUEUE > 0, "
        "but got '" +
        std::string(env) + "'.");
  if (v > 128)
    return InvalidArgument(
        "Invalid data queue capacity. Expect env variable MS_DATASET_SINK_QUEUE in "
        "1~128, but got '" +
        std::string(env) + "'.");
  return static_cast<uint32_t>(v);
}

Result<TrainPlan> ValidateTrainArgs(int epoch, const Dataset& dataset, bool dataset_sink_mode, int sink_size,
                                    int initial_epoch, int64_t batches_per_step) {
  SINKRT_RETURN_IF_ERROR(CheckNonNegativeInt(epoch));
  SINKRT_RETURN_IF_ERROR(CheckNonNegativeInt(initial_epoch));
  if (initial_epoch >= epoch)
    return InvalidArgument(
        "For 'Model.train', the parameter 'epoch' must bigger than parameter "
        "'initial_epoch', but got the parameter 'epoch' is " +
        std::to_string(epoch) + ", 'initial_epoch' is " + std::to_string(initial_epoch) + ".");
  SINKRT_RETURN_IF_ERROR(dataset.status(), "For 'Model.train', train_dataset");
  TrainPlan plan;
  plan.dataset_size = dataset.get_dataset_size();
  if (plan.dataset_size <= 0)
    return InvalidArgument("There is no valid data in dataset, please check dataset file firstly.");
  if (batches_per_step > 1) {
    if (plan.dataset_size < batches_per_step)
      return InvalidArgument("For 'Model.train', the dataset has " + std::to_string(plan.dataset_size) +
                             " batches, fewer than grad_accumulation_step " + std::to_string(batches_per_step) +
                             ": one step needs that many.");
    plan.dataset_size /= batches_per_step;
  }
  // MindSpore checks sink_size in both modes, after replacing -1.
  const int64_t sink = sink_size == -1 ? plan.dataset_size : sink_size;
  if (sink < -1 || sink == 0)
    return InvalidArgument("For 'Model.train', The argument 'sink_size' must be -1 or positive, but got " +
                           std::to_string(sink_size) + ".");
  plan.steps_per_epoch = dataset_sink_mode ? sink : plan.dataset_size;
  plan.epochs = epoch - initial_epoch;
  if (plan.steps_per_epoch > UINT32_MAX)
    return InvalidArgument("For 'Model.train', one sink runs at most " + std::to_string(UINT32_MAX) +
                           " steps, but an epoch has " + std::to_string(plan.steps_per_epoch));
  return plan;
}

int64_t FindColumn(const std::vector<ColumnSpec>& columns, const std::string& name) {
  for (size_t i = 0; i < columns.size(); ++i)
    if (columns[i].name == name) return static_cast<int64_t>(i);
  return -1;
}

Status CheckDatasetColumns(const char* api, const Dataset& dataset, const QueueInfo& queue) {
  const std::string where = std::string("For '") + api + "', ";
  const std::vector<ColumnSpec> have = dataset.output_columns();
  for (const ColumnSpec& want : queue.columns) {
    const int64_t i = FindColumn(have, want.name);
    if (i < 0)
      return InvalidArgument(where + "the network reads the input '" + want.name +
                             "', but the dataset has no such column (its columns: " + Names(have) + ").");
    const ColumnSpec& got = have[i];
    if (got.dtype != want.dtype || got.shape != want.shape)
      return InvalidArgument(where + "the dataset column '" + want.name + "' gives batches of " + Describe(got) +
                             ", but the network was compiled for " + Describe(want) +
                             " (the batch size and dtypes are part of the compiled graph).");
  }
  for (const ColumnSpec& c : have)
    if (FindColumn(queue.columns, c.name) < 0)
      return InvalidArgument(where + "the dataset column '" + c.name +
                             "' is not an input of the network (its inputs: " + Names(queue.columns) + ").");
  return Status::Ok();
}

QueueInfo DatasetView(const QueueInfo& queue, const RankFeed* feed) {
  QueueInfo out = queue;
  if (!feed) return out;
  for (size_t c = 0; c < out.columns.size() && c < feed->dataset_shapes.size(); ++c)
    out.columns[c].shape = feed->dataset_shapes[c];
  return out;
}

}  // namespace sinkrt::host
