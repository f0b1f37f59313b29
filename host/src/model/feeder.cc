#include "model/feeder.h"

#include <algorithm>
#include <chrono>
#include <span>
#include <system_error>

#include "model/validate.h"
#include "profile/profile_session.h"
#include "sinkrt/runtime/clock.h"

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

Status CheckBatch(const FeedPlan& plan, const Row& row, int64_t global_batch) {
  const std::string where = "dataset batch " + std::to_string(global_batch);
  for (size_t c = 0; c < plan.columns.size(); ++c) {
    const ColumnSpec& want = plan.columns[c];
    if (plan.source[c] >= row.size())
      return InvalidArgument(where + " has " + std::to_string(row.size()) + " columns, column '" +
                             want.name + "' is missing");
    const Tensor& t = row[plan.source[c]];
    if (t.dtype != want.dtype || t.shape != want.shape) {
      std::string hint;
      if (t.dtype == want.dtype && t.shape.size() == want.shape.size() && !t.shape.empty() &&
          t.shape[0] < want.shape[0])
        hint = " (a partial batch: training runs full batches only; batch the dataset with "
               "drop_remainder=true)";
      return InvalidArgument(where + ": column '" + want.name + "' is " + Describe(t.dtype, t.shape) +
                             ", the network was compiled for " + Describe(want.dtype, want.shape) + hint);
    }
    const uint64_t bytes = static_cast<uint64_t>(NumElements(want.shape)) * DTypeSize(want.dtype);
    if (t.data.size() != bytes)
      return InvalidArgument(where + ": column '" + want.name + "' holds " + std::to_string(t.data.size()) +
                             " bytes, its shape needs " + std::to_string(bytes));
  }
  return Status::Ok();
}

Result<std::unique_ptr<Feeder>> Feeder::Start(DeviceLink& device, const Dataset& dataset, FeedPlan plan) {
  IteratorOptions options;
  options.start_batch = plan.start_batch;
  SINKRT_ASSIGN_OR_RETURN(auto it, dataset.Iterate(options), "starting the dataset pipeline");
  std::unique_ptr<Feeder> f(new Feeder(device, std::move(plan), std::move(it)));
  try {
    f->thread_ = std::thread([p = f.get()] { p->Run(); });
  } catch (const std::system_error& e) {
    return ResourceExhausted(std::string("cannot start the feeder thread: ") + e.what());
  }
  return f;
}

Feeder::Feeder(DeviceLink& device, FeedPlan plan, std::unique_ptr<BatchIterator> it)
    : device_(device),
      plan_(std::move(plan)),
      it_(std::move(it)),
      wait_ns_(static_cast<size_t>(
          plan_.batches_per_epoch > 0 ? (plan_.count + plan_.batches_per_epoch - 1) / plan_.batches_per_epoch : 1)) {}

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
  const size_t width = plan_.columns.size();
  const size_t group = static_cast<size_t>(std::max<int64_t>(1, plan_.group));
  std::vector<Row> rows(group);
  std::vector<ConstBytes> spans(width * group);
  std::vector<std::vector<uint8_t>> cut(width * group);
  for (int64_t i = 0; i < plan_.count && !stop_.load(); ++i) {
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
    if (plan_.profile) {
      HostEvent e;
      e.kind = HostEvent::Kind::kPush;
      e.rank = plan_.rank;
      e.queue = plan_.queue;
      e.begin_ns = push_start;
      e.end_ns = NowNs();
      e.arg = static_cast<uint64_t>(first);
      plan_.profile->AddHost(e);
    }
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

}  // namespace sinkrt::host
