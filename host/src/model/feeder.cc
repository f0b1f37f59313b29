#include "host/src/model/feeder.h"

#include <algorithm>
#include <chrono>
#include <span>
#include <system_error>

#include "host/src/dataset/batch_writer.h"
#include "host/src/model/validate.h"
#include "host/src/profile/profile_session.h"
#include "runtime/src/clock.h"

namespace sinkrt::host {
namespace {

std::string Describe(DType dtype, const Shape& shape) {
  return std::string(DTypeName(dtype)) + " " + ShapeToString(shape);
}

}  // namespace

FeedPlan MakeFeedPlan(const QueueInfo& queue, const Dataset& dataset) {
  FeedPlan plan;
  plan.queue = static_cast<uint32_t>(queue.index);
  plan.columns = queue.columns;
  const std::vector<ColumnSpec> have = dataset.output_columns();
  for (const ColumnSpec& c : queue.columns) plan.source.push_back(static_cast<size_t>(FindColumn(have, c.name)));
  return plan;
}

namespace {

// Why column `want` of dataset batch `global_batch` cannot go to the queue,
// a batch column of `dtype` and `shape`.
Status ColumnMismatch(const ColumnSpec& want, DType dtype, const Shape& shape, int64_t global_batch) {
  std::string hint;
  if (dtype == want.dtype && shape.size() == want.shape.size() && !shape.empty() && shape[0] < want.shape[0])
    hint =
        " (a partial batch: training runs full batches only; batch the dataset with "
        "drop_remainder=true)";
  return InvalidArgument("dataset batch " + std::to_string(global_batch) + ": column '" + want.name + "' is " +
                         Describe(dtype, shape) + ", the network was compiled for " + Describe(want.dtype, want.shape) +
                         hint);
}

}  // namespace

Status CheckBatch(const FeedPlan& plan, const Row& row, int64_t global_batch) {
  // Strings only on an error: this runs once per batch.
  auto where = [global_batch] { return "dataset batch " + std::to_string(global_batch); };
  for (size_t c = 0; c < plan.columns.size(); ++c) {
    const ColumnSpec& want = plan.columns[c];
    if (plan.source[c] >= row.size())
      return InvalidArgument(where() + " has " + std::to_string(row.size()) + " columns, column '" + want.name +
                             "' is missing");
    const Tensor& t = row[plan.source[c]];
    if (t.dtype != want.dtype || t.shape != want.shape) return ColumnMismatch(want, t.dtype, t.shape, global_batch);
    const uint64_t bytes = static_cast<uint64_t>(NumElements(want.shape)) * DTypeSize(want.dtype);
    if (t.data.size() != bytes)
      return InvalidArgument(where() + ": column '" + want.name + "' holds " + std::to_string(t.data.size()) +
                             " bytes, its shape needs " + std::to_string(bytes));
  }
  return Status::Ok();
}

Result<std::unique_ptr<Feeder>> Feeder::Start(DeviceLink& device, const Dataset& dataset, FeedPlan plan) {
  std::unique_ptr<BatchWriter> writer;
  const bool blocks = std::any_of(plan.blocks.begin(), plan.blocks.end(), [](const auto& b) { return b.has_value(); });
  if (plan.fuse && !blocks) {
    SINKRT_ASSIGN_OR_RETURN(writer, BatchWriter::Make(dataset), "starting the dataset pipeline");
  }
  std::unique_ptr<BatchIterator> it;
  if (!writer) {
    IteratorOptions options;
    options.start_batch = plan.start_batch;
    SINKRT_ASSIGN_OR_RETURN(it, IterateDataset(dataset, options, plan.fuse), "starting the dataset pipeline");
  }
  std::unique_ptr<Feeder> f(new Feeder(device, dataset, std::move(plan), std::move(writer), std::move(it)));
  try {
    f->thread_ = std::thread([p = f.get()] { p->Run(); });
  } catch (const std::system_error& e) {
    return ResourceExhausted(std::string("cannot start the feeder thread: ") + e.what());
  }
  return f;
}

Feeder::Feeder(DeviceLink& device, const Dataset& dataset, FeedPlan plan, std::unique_ptr<BatchWriter> writer,
               std::unique_ptr<BatchIterator> it)
    : device_(device),
      dataset_(dataset),
      plan_(std::move(plan)),
      writer_(std::move(writer)),
      it_(std::move(it)),
      wait_ns_(static_cast<size_t>(
          plan_.batches_per_epoch > 0 ? (plan_.count + plan_.batches_per_epoch - 1) / plan_.batches_per_epoch : 1)) {
  if (writer_) {
    filler_ = [this](std::span<const std::span<uint8_t>> slot) { return FillEntry(slot); };
    fill_dst_.resize(writer_->columns().size());
  }
}

Feeder::~Feeder() { (void)Stop(); }

void Feeder::Fail(Status st) {
  std::lock_guard<std::mutex> lk(mu_);
  if (status_.ok()) status_ = std::move(st);
}

Status Feeder::status() const {
  std::lock_guard<std::mutex> lk(mu_);
  return status_;
}

double Feeder::wait_ms(int64_t index) const {
  if (index < 0 || static_cast<size_t>(index) >= wait_ns_.size()) return 0;
  return wait_ns_[static_cast<size_t>(index)].load() / 1e6;
}

void Feeder::Run() {
  int64_t next = 0;
  if (writer_ && !RunFilling(&next)) return;
  RunIterating(next);
}

void Feeder::RecordPush(int64_t begin_ns, int64_t first) {
  if (!plan_.profile) return;
  HostEvent e;
  e.kind = HostEvent::Kind::kPush;
  e.rank = plan_.rank;
  e.queue = plan_.queue;
  e.begin_ns = begin_ns;
  e.end_ns = NowNs();
  e.arg = static_cast<uint64_t>(first);
  plan_.profile->AddHost(e);
}

Status Feeder::FillEntry(std::span<const std::span<uint8_t>> slot) {
  const size_t width = plan_.columns.size();
  const int64_t group = std::max<int64_t>(1, plan_.group);
  if (slot.size() != width * static_cast<size_t>(group))
    return fill_error_ = Internal("the queue has " + std::to_string(slot.size()) + " columns, the feeder " +
                                  std::to_string(width * group));
  const int64_t t0 = NowNs();
  for (int64_t k = 0; k < group; ++k) {
    const int64_t global = fill_first_ + k;
    // What CheckBatch checks of an iterated batch, from the fused columns'
    // static specs: only the batch dim can differ (a pass's short last batch).
    const int64_t rows = writer_->samples(global);
    std::fill(fill_dst_.begin(), fill_dst_.end(), std::span<uint8_t>());
    for (size_t c = 0; c < width; ++c) {
      const ColumnSpec& want = plan_.columns[c];
      if (plan_.source[c] >= writer_->columns().size())
        return fill_error_ = InvalidArgument("dataset batch " + std::to_string(global) + " has " +
                                             std::to_string(writer_->columns().size()) + " columns, column '" +
                                             want.name + "' is missing");
      const FusedColumn& have = writer_->columns()[plan_.source[c]];
      const bool fits = have.out_dtype == want.dtype && want.shape.size() == have.out_shape.size() + 1 &&
                        want.shape[0] == rows &&
                        std::equal(have.out_shape.begin(), have.out_shape.end(), want.shape.begin() + 1);
      if (!fits) {
        Shape shape{rows};
        shape.insert(shape.end(), have.out_shape.begin(), have.out_shape.end());
        return fill_error_ = ColumnMismatch(want, have.out_dtype, shape, global);
      }
      fill_dst_[plan_.source[c]] = slot[static_cast<size_t>(k) * width + c];
    }
    Status st = writer_->Write(global, fill_dst_);
    if (!st.ok()) return fill_error_ = st.WithContext("dataset batch " + std::to_string(global));
  }
  wait_ns_[static_cast<size_t>(fill_epoch_)] += NowNs() - t0;
  return Status::Ok();
}

bool Feeder::RunFilling(int64_t* next) {
  const int64_t group = std::max<int64_t>(1, plan_.group);
  for (int64_t i = *next; i < plan_.count && !stop_.load(); ++i) {
    fill_first_ = plan_.start_batch + i * group;
    fill_epoch_ = i / plan_.batches_per_epoch;
    const int64_t push_start = NowNs();
    Status st = device_.FillBatch(plan_.queue, filler_);
    if (st.code() == StatusCode::kUnimplemented && fill_error_.ok() && i == 0) {
      *next = i;
      return true;  // the device lends no memory: iterate and push
    }
    RecordPush(push_start, fill_first_);
    if (!fill_error_.ok()) {
      Fail(fill_error_);
      return false;
    }
    if (!st.ok()) {
      // A fill refused because Stop cleared the queue is the stop itself.
      if (!stop_.load()) Fail(st.WithContext("pushing dataset batch " + std::to_string(fill_first_)));
      return false;
    }
    ++pushed_;
  }
  return false;
}

void Feeder::RunIterating(int64_t next) {
  const size_t width = plan_.columns.size();
  const size_t group = static_cast<size_t>(std::max<int64_t>(1, plan_.group));
  if (!it_) {
    IteratorOptions options;
    options.start_batch = plan_.start_batch + next * static_cast<int64_t>(group);
    auto it = IterateDataset(dataset_, options, plan_.fuse);
    if (!it.ok()) {
      Fail(it.status().WithContext("starting the dataset pipeline"));
      return;
    }
    it_ = std::move(it).value();
  }
  std::vector<Row> rows(group);
  std::vector<ConstBytes> spans(width * group);
  std::vector<std::vector<uint8_t>> cut(width * group);
  for (int64_t i = next; i < plan_.count && !stop_.load(); ++i) {
    const int64_t first = plan_.start_batch + i * static_cast<int64_t>(group);
    for (size_t k = 0; k < group; ++k) {
      const int64_t global = first + static_cast<int64_t>(k);
      Row& row = rows[k];
      const int64_t t0 = NowNs();
      Status st = it_->Next(&row);
      wait_ns_[static_cast<size_t>(i / plan_.batches_per_epoch)] += NowNs() - t0;
      if (!st.ok()) {
        Fail(st.WithContext("dataset batch " + std::to_string(global)));
        return;
      }
      st = CheckBatch(plan_, row, global);
      if (!st.ok()) {
        Fail(st);
        return;
      }
      for (size_t c = 0; c < width; ++c) {
        const Tensor& t = row[plan_.source[c]];
        const size_t at = k * width + c;
        if (c < plan_.blocks.size() && plan_.blocks[c]) {
          cut[at] = ExtractBlock(t.data.data(), *plan_.blocks[c]);
          spans[at] = cut[at];
        } else {
          spans[at] = t.bytes();
        }
      }
    }
    const int64_t push_start = NowNs();
    Status st = device_.PushBatch(plan_.queue, spans);
    RecordPush(push_start, first);
    if (!st.ok()) {
      // A push refused because Stop cleared the queue is the stop itself.
      if (!stop_.load()) Fail(st.WithContext("pushing dataset batch " + std::to_string(first)));
      return;
    }
    ++pushed_;
  }
}

Status Feeder::Finish() {
  if (thread_.joinable()) thread_.join();
  return status();
}

Status Feeder::Stop() {
  Status own = status();
  if (!thread_.joinable()) return own;
  stop_ = true;
  Status cleared = device_.ClearQueue(plan_.queue);
  thread_.join();
  if (cleared.ok()) cleared = device_.ClearQueue(plan_.queue);
  own = status();
  if (!own.ok()) return own;
  return cleared;
}

Status StopAll(const std::vector<std::unique_ptr<Feeder>>& feeders) {
  Status first;
  for (const auto& f : feeders) {
    Status st = f->Stop();
    if (first.ok() && !st.ok()) first = st;
  }
  return first;
}

}  // namespace sinkrt::host
