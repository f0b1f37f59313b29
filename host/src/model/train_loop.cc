// Model::train: MindSpore's _train_dataset_sink_process and _train_process
// (reference mindspore-semantics.md §1.5, §8.1) over one DeviceLink, or
// over one per rank in data parallel (a feeder per rank, each sink on every
// rank at once).
//
// Sink mode, per epoch: epoch_begin, step_begin, one RunSink(TrainStep,
// steps), cur_step_num += steps, step_end, epoch_end, then the stop check —
// so request_stop() takes effect at the sink boundary. Non-sink mode: the
// same program one step per RunSink, step hooks every step, the stop check
// after every step and every epoch (epoch_end still runs for the epoch a
// step stopped). A feeder thread pushes the batches for all epochs ahead of
// the device in both modes.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "host/src/model/fan_out.h"
#include "host/src/model/feeder.h"
#include "host/src/model/model_impl.h"
#include "host/src/model/validate.h"
#include "host/src/profile/profile_session.h"
#include "runtime/src/clock.h"
#include "sinkrt/host/communication.h"
#include "sinkrt/host/profiler.h"

namespace sinkrt::host {
namespace {

using Clock = std::chrono::steady_clock;
using Hook = Status (Callback::*)(RunContext&);

double MsSince(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// A pass ends with a partial batch unless the dataset drops it; a compiled
// graph takes full batches only, and finding that out from the device would
// cost a GetNext timeout. The last batch of a pass is the one that can be
// short (with Repeat after Batch, the last of every repetition is, the last
// of the pass included).
Status CheckLastBatchFull(const Dataset& dataset, int64_t dataset_size, const FeedPlan& plan) {
  IteratorOptions options;
  options.start_batch = dataset_size - 1;
  options.num_workers = 1;
  options.prefetch = 1;
  SINKRT_ASSIGN_OR_RETURN(auto it, dataset.Iterate(options), "For 'Model.train', reading the last batch of a pass");
  Row row;
  SINKRT_RETURN_IF_ERROR(it->Next(&row), "For 'Model.train', reading the last batch of a pass");
  return CheckBatch(plan, row, dataset_size - 1).WithContext("For 'Model.train'");
}

class TrainLoop {
 public:
  TrainLoop(Model& model, Model::Impl& m, const std::vector<Callback*>& callbacks, const TrainPlan& plan,
            bool sink_mode, int initial_epoch, const std::vector<std::unique_ptr<Feeder>>& feeders,
            ProfileSession* profile)
      : model_(model),
        m_(m),
        callbacks_(callbacks),
        plan_(plan),
        sink_mode_(sink_mode),
        initial_epoch_(initial_epoch),
        feeders_(feeders),
        profile_(profile),
        ctx_(&p_) {}

  // Runs every epoch up to the stop check; on_train_end is the caller's,
  // after the feeder is done. Sets *stopped when a callback asked to stop.
  Status Run(bool* stopped);
  // Whether the last error came from the device (the feeder may explain it).
  bool device_failed() const { return device_failed_; }
  Status TrainEnd() { return Hooks(&Callback::on_train_end); }

 private:
  Status Hooks(Hook hook) {
    for (Callback* cb : callbacks_) SINKRT_RETURN_IF_ERROR((cb->*hook)(ctx_));
    return Status::Ok();
  }
  Status Sink(uint32_t steps);
  // Loss scaling: the scale and the overflowed steps from the last sink's
  // reports, which every rank must agree on.
  Status ReadLossScale();
  void ReadLearningRate();
  void RecordRunSink(uint32_t rank, int64_t begin_ns, uint32_t steps) {
    HostEvent e;
    e.kind = HostEvent::Kind::kRunSink;
    e.rank = static_cast<int>(rank);
    e.begin_ns = begin_ns;
    e.end_ns = NowNs();
    e.arg = steps;
    e.program = static_cast<uint8_t>(ProgramKind::TrainStep);
    profile_->AddHost(e);
  }
  void UpdateEpochTimes() {
    p_.epoch_ms = MsSince(epoch_start_);
    // Ranks wait for each other in every AllReduce: the slowest pipeline counts.
    p_.data_wait_ms = 0;
    for (const auto& f : feeders_)
      p_.data_wait_ms = std::max(p_.data_wait_ms, f->wait_ms(p_.cur_epoch_num - 1 - initial_epoch_));
  }

  Model& model_;
  Model::Impl& m_;
  const std::vector<Callback*>& callbacks_;
  const TrainPlan plan_;
  const bool sink_mode_;
  const int initial_epoch_;
  const std::vector<std::unique_ptr<Feeder>>& feeders_;
  ProfileSession* const profile_;    // the active Profiler's, or null
  std::vector<SinkResult> results_;  // per rank, of the last sink
  CallbackParams p_;
  RunContext ctx_;
  Clock::time_point epoch_start_;
  bool device_failed_ = false;
};

Status TrainLoop::Sink(uint32_t steps) {
  // A feeder that already failed would leave the device waiting for its
  // GetNext timeout: report the feeder's error instead of launching.
  for (const auto& f : feeders_) SINKRT_RETURN_IF_ERROR(f->status());
  const uint32_t n = static_cast<uint32_t>(m_.devices.size());
  results_.resize(n);
  Status st = CombineRankStatuses(OnEveryRank(n,
                                              [&](uint32_t r) -> Status {
                                                const int64_t t0 = NowNs();
                                                auto res = m_.devices[r]->RunSink(ProgramKind::TrainStep, steps);
                                                if (profile_) RecordRunSink(r, t0, steps);
                                                if (!res.ok()) return res.status();
                                                results_[r] = std::move(res).value();
                                                if (profile_) profile_->AddSink(static_cast<int>(r), results_[r]);
                                                return Status::Ok();
                                              }),
                                  "train_step");
  if (!st.ok()) {
    device_failed_ = true;
    return st;
  }
  p_.rank_losses.assign(n, 0);
  DeviceTiming sum;
  // Pipeline stages: only the last stage computes the loss; each rank is
  // given its pipeline's (the last stage's rank at its place).
  const bool pipelined = m_.pipeline_stages > 1;
  const uint32_t replicas = n / static_cast<uint32_t>(m_.pipeline_stages);
  for (uint32_t r = 0; r < n; ++r) {
    const SinkResult& res = results_[r];
    const bool reports = !pipelined || m_.reports_loss[r];
    if (res.steps_run != steps || (reports && res.reports.empty()))
      return Internal("train_step ran " + std::to_string(res.steps_run) + " of " + std::to_string(steps) +
                      " steps and reported " + std::to_string(res.reports.size()) + " tensors" +
                      (n > 1 ? " on rank " + std::to_string(r) : ""));
    if (reports) p_.rank_losses[r] = res.reports[0].scalar();  // the last step's loss
    sum.compute_ms += res.timing.compute_ms;
    sum.comm_ms += res.timing.comm_ms;
    sum.comm_wait_ms += res.timing.comm_wait_ms;
    sum.bubble_ms += res.timing.bubble_ms;
    sum.queue_wait_ms += res.timing.queue_wait_ms;
    sum.other_ms += res.timing.other_ms;
  }
  if (pipelined)
    for (uint32_t r = 0; r + replicas < n; ++r) p_.rank_losses[r] = p_.rank_losses[n - replicas + r % replicas];
  if (m_.loss_scaled) SINKRT_RETURN_IF_ERROR(ReadLossScale());
  if (m_.lr_scheduled) ReadLearningRate();
  double loss = 0;
  for (double l : p_.rank_losses) loss += l;
  p_.net_outputs = loss / n;  // the global batch's loss: the ranks' batches are equal
  p_.cur_step_num += steps;
  p_.global_batch += steps;
  p_.sink_steps = steps;
  p_.device.compute_ms += sum.compute_ms / n;
  p_.device.comm_ms += sum.comm_ms / n;
  p_.device.comm_wait_ms += sum.comm_wait_ms / n;
  p_.device.bubble_ms += sum.bubble_ms / n;
  p_.device.queue_wait_ms += sum.queue_wait_ms / n;
  p_.device.other_ms += sum.other_ms / n;
  p_.host_round_trips = m_.device->control_round_trips();
  UpdateEpochTimes();
  return Status::Ok();
}

// The schedule's rate, reported last by every rank that reports the loss
// (all ranks compute the same rate from the same step count).
void TrainLoop::ReadLearningRate() {
  for (const SinkResult& res : results_) {
    if (res.reports.size() < 2) continue;
    const ReportedTensor& lr = res.reports.back();
    if (lr.dtype != DType::F32 || lr.data.size() != sizeof(float)) continue;
    p_.learning_rate = lr.scalar();
    return;
  }
}

Status TrainLoop::ReadLossScale() {
  int32_t total = -1;
  for (uint32_t r = 0; r < results_.size(); ++r) {
    const std::vector<ReportedTensor>& reports = results_[r].reports;
    if (reports.size() < 3 || reports[2].dtype != DType::I32 || reports[2].data.size() != 3 * sizeof(int32_t))
      return Internal("train_step reported " + std::to_string(reports.size()) +
                      " tensors, not the loss scale and its counters" +
                      (results_.size() > 1 ? " on rank " + std::to_string(r) : ""));
    int32_t counters[3];
    std::memcpy(counters, reports[2].data.data(), sizeof counters);
    // The ranks checked the same reduced gradients: a rank that counts
    // other overflows than rank 0 would have updated while rank 0 skipped.
    if (r > 0 && counters[2] != total)
      return Internal("loss scaling: rank " + std::to_string(r) + " counts " + std::to_string(counters[2]) +
                      " overflowed steps, rank 0 " + std::to_string(total));
    if (r == 0) {
      total = counters[2];
      p_.loss_scale = reports[1].scalar();
    }
  }
  p_.overflow_steps = total - p_.total_overflow_steps;
  p_.total_overflow_steps = total;
  m_.overflow_steps_seen = total;
  return Status::Ok();
}

Status TrainLoop::Run(bool* stopped) {
  p_.epoch_num = static_cast<int>(plan_.epochs);
  p_.batch_num = plan_.steps_per_epoch;
  p_.dataset_sink_mode = sink_mode_;
  p_.batch_size = m_.train_queue.columns.front().shape.empty() ? 1 : m_.train_queue.columns.front().shape[0];
  p_.global_batch = int64_t{initial_epoch_} * plan_.steps_per_epoch;
  // The device's overflow count goes on from earlier runs and checkpoints.
  p_.total_overflow_steps = m_.overflow_steps_seen;
  p_.lr_scheduled = m_.lr_scheduled;
  p_.device_num = static_cast<int>(m_.world_size);  // one process per rank: the world's, not this process's one
  // Data parallel: each replica of the pipeline reads its own batch; the
  // ranks of a semi-auto stage read the same one.
  p_.global_batch_size =
      p_.batch_size * (m_.context.mode == ParallelMode::DataParallel ? p_.device_num / m_.pipeline_stages : 1);
  p_.host_round_trips = m_.device->control_round_trips();
  p_.model = &model_;
  SINKRT_RETURN_IF_ERROR(Hooks(&Callback::on_train_begin));
  const uint32_t steps = static_cast<uint32_t>(plan_.steps_per_epoch);
  for (int64_t e = 0; e < plan_.epochs; ++e) {
    p_.cur_epoch_num = initial_epoch_ + static_cast<int>(e) + 1;
    p_.epoch_ms = 0;
    p_.data_wait_ms = 0;
    p_.device = {};
    epoch_start_ = Clock::now();
    SINKRT_RETURN_IF_ERROR(Hooks(&Callback::on_train_epoch_begin));
    if (sink_mode_) {
      SINKRT_RETURN_IF_ERROR(Hooks(&Callback::on_train_step_begin));
      SINKRT_RETURN_IF_ERROR(Sink(steps));
      SINKRT_RETURN_IF_ERROR(Hooks(&Callback::on_train_step_end));
    } else {
      for (uint32_t s = 0; s < steps; ++s) {
        SINKRT_RETURN_IF_ERROR(Hooks(&Callback::on_train_step_begin));
        SINKRT_RETURN_IF_ERROR(Sink(1));
        SINKRT_RETURN_IF_ERROR(Hooks(&Callback::on_train_step_end));
        if (ctx_.get_stop_requested()) break;
      }
    }
    UpdateEpochTimes();
    SINKRT_RETURN_IF_ERROR(Hooks(&Callback::on_train_epoch_end));
    if (ctx_.get_stop_requested()) {
      *stopped = true;
      break;
    }
  }
  return Status::Ok();
}

}  // namespace

Status Model::train(int epoch, const Dataset& train_dataset, const std::vector<Callback*>& callbacks,
                    bool dataset_sink_mode, int sink_size, int initial_epoch) {
  Impl& m = *impl_;
  // Gradient accumulation: a step takes K dataset batches, and the train
  // queue one batch's columns for each of them in turn.
  const int64_t per_step = m.accumulation;
  SINKRT_ASSIGN_OR_RETURN(
      TrainPlan plan, ValidateTrainArgs(epoch, train_dataset, dataset_sink_mode, sink_size, initial_epoch, per_step));
  QueueInfo train_queue = m.train_queue;
  train_queue.columns.resize(train_queue.columns.size() / static_cast<size_t>(per_step));
  for (size_t i = 0; i < callbacks.size(); ++i)
    if (!callbacks[i]) return InvalidArgument("For 'Model.train', callbacks[" + std::to_string(i) + "] is null");
  // What the dataset must yield: the queue's columns, or under
  // SEMI_AUTO_PARALLEL the shard's batch of which each queue keeps a block.
  QueueInfo wanted = DatasetView(train_queue, m.sharded ? &m.ranks[0].train : nullptr);
  const bool pipelined = m.pipeline_stages > 1;
  if (pipelined) {
    // Every column some stage's queue takes: the inputs (first stage) and
    // the labels (last stage).
    for (const QueueInfo& q : m.rank_train_queues)
      for (const ColumnSpec& c : q.columns) {
        bool seen = false;
        for (const ColumnSpec& w : wanted.columns) seen = seen || w.name == c.name;
        if (!seen) wanted.columns.push_back(c);
      }
  }
  SINKRT_RETURN_IF_ERROR(CheckDatasetColumns("Model.train", train_dataset, wanted));

  // Data parallel: rank r trains on shard r of the pipeline (its batch size
  // is per rank). SEMI_AUTO_PARALLEL: on the shard its inputs' layout
  // names (ranks of one data-parallel slice read the same one). Stand-alone:
  // the dataset as it is.
  // Pipeline stages: the replicas of a stage split the data as data
  // parallel ranks do; the ranks at one place in every stage (one pipeline)
  // read the same shard.
  // One process per rank: this one's devices are ranks first_rank.. of
  // the world, and the shards count the world's ranks.
  const uint32_t n = static_cast<uint32_t>(m.devices.size());
  const uint32_t replicas = m.world_size / static_cast<uint32_t>(m.pipeline_stages);
  const bool data_parallel = m.context.mode == ParallelMode::DataParallel && replicas > 1;
  std::vector<Dataset> shards;
  for (uint32_t r = 0; r < n; ++r) {
    if (data_parallel) {
      shards.push_back(
          train_dataset.ShardBelowBatch(static_cast<int>(replicas), static_cast<int>((m.first_rank + r) % replicas)));
    } else if (m.sharded && m.ranks[r].train.parts > 1) {
      shards.push_back(train_dataset.ShardBelowBatch(static_cast<int>(m.ranks[r].train.parts),
                                                     static_cast<int>(m.ranks[r].train.index)));
    } else {
      shards.push_back(train_dataset);
    }
    SINKRT_RETURN_IF_ERROR(shards.back().status(), "For 'Model.train'");
  }
  if (data_parallel || (m.sharded && m.ranks[0].train.parts > 1)) {
    // Steps count the shard's batches.
    SINKRT_ASSIGN_OR_RETURN(plan,
                            ValidateTrainArgs(epoch, shards[0], dataset_sink_mode, sink_size, initial_epoch, per_step),
                            "For 'Model.train', rank 0's shard");
  }

  if (m.group) {
    // Every process must run the same sinks, or the first AllReduce of a
    // sink one of them skips waits out its timeout.
    const std::vector<JoinField> fields = {
        {"epochs", std::to_string(epoch)},
        {"initial_epoch", std::to_string(initial_epoch)},
        {"dataset_sink_mode", dataset_sink_mode ? "true" : "false"},
        {"sink_size", std::to_string(sink_size)},
        {"steps_per_epoch", std::to_string(plan.steps_per_epoch)},
        {"shard_batches", std::to_string(shards[0].get_dataset_size())},
    };
    SINKRT_RETURN_IF_ERROR(m.group->Round("Model.train", fields).status());
  }
  FeedPlan feed = MakeFeedPlan(wanted, shards[0]);
  SINKRT_RETURN_IF_ERROR(CheckLastBatchFull(shards[0], shards[0].get_dataset_size(), feed));
  feed.group = per_step;
  feed.start_batch = int64_t{initial_epoch} * plan.steps_per_epoch * per_step;
  feed.count = plan.total_batches();
  feed.batches_per_epoch = plan.steps_per_epoch;
  // An active Profiler records this train(): its devices' rings are sized
  // now, before any batch or sink, and recording stops when train() returns.
  ProfileSession* profile = nullptr;
  if (Profiler* profiler = Profiler::Active()) profile = &profiler->session();
  struct Detach {  // also after an Attach that failed half way
    ProfileSession* session;
    ~Detach() {
      if (session) (void)session->Detach();  // analyse() reports a device that cannot
    }
  } detach{profile};
  if (profile) {
    std::vector<const VerifiedStream*> streams;
    for (const VerifiedStream& s : m.streams) streams.push_back(&s);
    SINKRT_RETURN_IF_ERROR(profile->Attach(m.devices, streams, m.network_name), "For 'Model.train'");
  }

  std::vector<std::unique_ptr<Feeder>> feeders;
  for (uint32_t r = 0; r < n; ++r) {
    FeedPlan mine = feed;
    if (pipelined) {
      // Each stage's queue has its own columns; a middle stage has none.
      const QueueInfo& q = m.rank_train_queues[r];
      if (q.index < 0) continue;
      FeedPlan own = MakeFeedPlan(q, shards[r]);
      mine.queue = own.queue;
      mine.columns = std::move(own.columns);
      mine.source = std::move(own.source);
    }
    if (m.sharded) mine.blocks = m.ranks[r].train.columns;
    mine.profile = profile;
    mine.rank = static_cast<int>(r);
    auto feeder = Feeder::Start(*m.devices[r], shards[r], std::move(mine));
    if (!feeder.ok()) {
      (void)StopAll(feeders);  // the start failure is the error to report
      return n > 1 ? feeder.status().WithContext("For 'Model.train', rank " + std::to_string(r) + "'s data")
                   : feeder.status();
    }
    feeders.push_back(std::move(feeder).value());
  }

  TrainLoop loop(*this, m, callbacks, plan, dataset_sink_mode, initial_epoch, feeders, profile);
  bool stopped = false;
  Status st = loop.Run(&stopped);
  if (!st.ok()) {
    const Status fed = StopAll(feeders);
    // The device's error is often the echo of a feeder that failed first
    // (a dry queue, a bad batch): lead with the cause.
    if (loop.device_failed() && !fed.ok())
      return Status(fed.code(), "feeding the device failed: " + fed.message() +
                                    " (the device then reported: " + st.message() + ")");
    return st;
  }
  // Stopped early, the batches fed for epochs that never ran are dropped;
  // otherwise the device has taken every batch the feeder pushed.
  if (stopped) {
    (void)StopAll(feeders);  // their unfed batches were not needed
  } else {
    Status fed;
    for (auto& f : feeders) {
      Status one = f->Finish();
      if (fed.ok() && !one.ok()) fed = one;
    }
    SINKRT_RETURN_IF_ERROR(fed);
  }
  feeders.clear();
  return loop.TrainEnd();
}

}  // namespace sinkrt::host
