#include "host/src/model/eval_sunk.h"

#include <atomic>
#include <cstring>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <system_error>
#include <thread>

#include "host/src/model/eval_sharded.h"
#include "host/src/model/fan_out.h"
#include "host/src/model/feeder.h"
#include "host/src/model/validate.h"

namespace sinkrt::host {

Result<int64_t> FullBatches(const Dataset& dataset, int64_t batches, const ColumnSpec& col) {
  const std::string where = "For 'Model.eval', batch " + std::to_string(batches - 1);
  IteratorOptions options;
  options.start_batch = batches - 1;
  options.num_workers = 1;  // one batch is wanted: no team, no read-ahead
  options.prefetch = 1;
  SINKRT_ASSIGN_OR_RETURN(auto it, dataset.Iterate(options), where);
  Row row;
  SINKRT_RETURN_IF_ERROR(it->Next(&row), where);
  const int64_t source = FindColumn(dataset.output_columns(), col.name);
  if (source < 0 || static_cast<size_t>(source) >= row.size())
    return InvalidArgument(where + " lacks column '" + col.name + "'");
  SINKRT_ASSIGN_OR_RETURN(const int64_t rows, CheckRows("Model.eval", row[static_cast<size_t>(source)], col), where);
  return rows == col.shape[0] ? batches : batches - 1;
}

namespace {

// The device as a feeder sees it: its pushes refused once `stop` is set.
// When the sink fails, the host sets it and clears the queue: the feeder's
// next push then fails at once rather than fill the queue again and wait
// out the push timeout, and the feeder ends by itself (only the watcher
// thread joins it; Feeder::Stop would join it a second time).
class StoppablePushes final : public DeviceLink {
 public:
  StoppablePushes(DeviceLink& device, const std::atomic<bool>& stop) : device_(device), stop_(stop) {}
  Result<LoadInfo> Load(const VerifiedStream& stream) override { return device_.Load(stream); }
  Status PushBatch(uint32_t queue, std::span<const ConstBytes> columns) override {
    if (stop_.load()) return Aborted("the eval sink ended");
    return device_.PushBatch(queue, columns);
  }
  Result<SinkResult> RunSink(ProgramKind program, uint32_t steps) override { return device_.RunSink(program, steps); }
  Status ClearQueue(uint32_t queue) override { return device_.ClearQueue(queue); }
  Result<std::vector<uint8_t>> ReadTensor(uint32_t buffer) override { return device_.ReadTensor(buffer); }
  Status WriteTensor(uint32_t buffer, ConstBytes bytes) override { return device_.WriteTensor(buffer, bytes); }
  uint64_t control_round_trips() const override { return device_.control_round_trips(); }

 private:
  DeviceLink& device_;
  const std::atomic<bool>& stop_;
};

// Pushes `count` zero batches into `queue` of `device`, stopping early once
// `sink_over` (the sink no longer pops them) or at the first refused push.
// Zeros are valid input: class 0 is every label's lowest.
void FillQueue(DeviceLink& device, const QueueInfo* queue, int64_t count, const std::atomic<bool>& sink_over) {
  std::vector<std::vector<uint8_t>> zeros;
  std::vector<ConstBytes> spans;
  for (const ColumnSpec& c : queue->columns)
    zeros.emplace_back(static_cast<size_t>(NumElements(c.shape)) * DTypeSize(c.dtype), 0);
  for (const auto& z : zeros) spans.emplace_back(z);
  for (int64_t i = 0; i < count && !sink_over.load(); ++i)
    if (!device.PushBatch(static_cast<uint32_t>(queue->index), spans).ok()) return;
}

// Drops whatever the fed queues hold (no sink may run on them).
void ClearFedQueues(Model::Impl& m, const std::vector<uint32_t>& ranks, const std::vector<const QueueInfo*>& queues) {
  for (size_t i = 0; i < ranks.size(); ++i)
    (void)m.devices[ranks[i]]->ClearQueue(static_cast<uint32_t>(queues[i]->index));
}

}  // namespace

Result<MetricSums> RunSunkEval(Model::Impl& m, const Dataset& dataset, const std::vector<uint32_t>& ranks,
                               const std::vector<QueueInfo>& queues, int64_t full) {
  if (full > std::numeric_limits<uint32_t>::max())
    return InvalidArgument("For 'Model.eval', the pass has " + std::to_string(full) +
                           " full batches, more than one sink runs (2^32 - 1): evaluate it without "
                           "dataset_sink_mode");
  const uint32_t steps = static_cast<uint32_t>(full);
  std::atomic<bool> sink_over{false};
  std::vector<std::unique_ptr<StoppablePushes>> links;  // outlive the feeders (declared first)
  std::vector<std::unique_ptr<Feeder>> feeders;
  std::vector<uint32_t> fed_rank;           // per feeder: its rank
  std::vector<const QueueInfo*> fed_queue;  // and its queue
  for (size_t k = 0; k < ranks.size(); ++k) {
    if (queues[k].index < 0) continue;  // a pipeline's middle stage
    FeedPlan plan = MakeFeedPlan(queues[k], dataset);
    plan.count = full;
    plan.batches_per_epoch = full;
    plan.rank = static_cast<int>(ranks[k]);
    links.push_back(std::make_unique<StoppablePushes>(*m.devices[ranks[k]], sink_over));
    auto feeder = Feeder::Start(*links.back(), dataset, std::move(plan));
    if (!feeder.ok()) {
      (void)StopAll(feeders);  // the start failure is the error to report
      return feeder.status().WithContext("For 'Model.eval'");
    }
    feeders.push_back(std::move(feeder).value());
    fed_rank.push_back(ranks[k]);
    fed_queue.push_back(&queues[k]);
  }

  // The feeders end by themselves: every batch pushed, or an error (a bad
  // batch). One that failed leaves its queue short of the sink's steps, and
  // the device would wait at GetNext for its timeout (minutes): so a
  // watcher joins them while the sink runs and fills a failed one's queue
  // with zero batches up to the sink's steps, which ends the sink now; its
  // figures are then dropped and the feeder's error reported.
  std::vector<Status> fed(feeders.size());
  std::vector<bool> fed_first(feeders.size(), false);  // failed while the sink still ran: the cause
  auto watch = [&] {
    for (size_t i = 0; i < feeders.size(); ++i) {
      fed[i] = feeders[i]->Finish();
      if (fed[i].ok()) continue;
      fed_first[i] = !sink_over.load();
      FillQueue(*m.devices[fed_rank[i]], fed_queue[i], full - feeders[i]->pushed(), sink_over);
    }
  };
  std::thread watcher;
  try {
    watcher = std::thread(watch);
  } catch (const std::system_error& e) {
    (void)StopAll(feeders);
    return ResourceExhausted(std::string("For 'Model.eval', cannot start the feeders' watcher thread: ") + e.what());
  }

  std::vector<SinkResult> results(ranks.size());
  Status ran = CombineRankStatuses(OnEveryRank(static_cast<uint32_t>(ranks.size()),
                                               [&](uint32_t k) -> Status {
                                                 auto res = m.devices[ranks[k]]->RunSink(ProgramKind::EvalStep, steps);
                                                 if (!res.ok()) return res.status();
                                                 results[k] = std::move(res).value();
                                                 return Status::Ok();
                                               }),
                                   "eval_step");
  // A failed sink leaves feeders (or the watcher) blocked on full queues:
  // clearing them, now that no sink runs, frees those pushes, and
  // sink_over refuses the next ones.
  sink_over = true;
  if (!ran.ok()) ClearFedQueues(m, fed_rank, fed_queue);
  watcher.join();
  Status cause, echo;
  for (size_t i = 0; i < fed.size(); ++i) {
    if (fed[i].ok()) continue;
    if (fed_first[i] && cause.ok()) cause = fed[i];
    if (echo.ok()) echo = fed[i];
  }
  // Batches pushed for steps that never ran must not reach the next eval.
  if (!ran.ok() || !echo.ok()) ClearFedQueues(m, fed_rank, fed_queue);
  if (!cause.ok())
    return Status(cause.code(), "For 'Model.eval' (dataset_sink_mode), feeding the device failed: " + cause.message() +
                                    (ran.ok() ? "" : " (the device then reported: " + ran.message() + ")"));
  if (!ran.ok()) return ran.WithContext("For 'Model.eval'");
  SINKRT_RETURN_IF_ERROR(echo, "For 'Model.eval', feeding the device");

  const SinkResult& last = results.back();
  const size_t at = static_cast<size_t>(m.metric_sums_report);
  if (last.steps_run != steps || last.reports.size() <= at)
    return Internal("For 'Model.eval': eval_step ran " + std::to_string(last.steps_run) + " of " +
                    std::to_string(steps) + " steps and reported " + std::to_string(last.reports.size()) + " tensors");
  const ReportedTensor& sums = last.reports[at];
  const size_t want = m.accuracy_report >= 0 ? 2 : 1;
  if (sums.dtype != DType::F64 || sums.data.size() < want * sizeof(double))
    return Internal("For 'Model.eval': eval_step's metric sums are " + std::string(DTypeName(sums.dtype)) + " " +
                    ShapeToString(sums.shape) + ", expected f64 [" + std::to_string(want) + "]");
  MetricSums out;
  std::memcpy(&out.loss_rows, sums.data.data(), sizeof(double));
  if (want == 2) std::memcpy(&out.correct, sums.data.data() + sizeof(double), sizeof(double));
  return out;
}

Result<SunkPart> RunSunkPart(Model::Impl& m, const Dataset& dataset, int64_t batches, const ColumnSpec& col,
                             const std::vector<uint32_t>& ranks, const std::vector<QueueInfo>& queues) {
  SunkPart part;
  SINKRT_ASSIGN_OR_RETURN(part.batches_run, FullBatches(dataset, batches, col));
  if (part.batches_run > 0) {
    SINKRT_ASSIGN_OR_RETURN(part.sums, RunSunkEval(m, dataset, ranks, queues, part.batches_run));
  }
  return part;
}

}  // namespace sinkrt::host
