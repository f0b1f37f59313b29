#include "host/src/dataset/batch_writer.h"

#include <string>
#include <utility>

namespace sinkrt::host {

using Node = Dataset::Node;

Result<std::unique_ptr<BatchWriter>> BatchWriter::Make(const Dataset& dataset) {
  SINKRT_RETURN_IF_ERROR(dataset.status());
  const std::shared_ptr<const Node>& root = DatasetAccess::node(dataset);
  if (root->units == 0)
    return FailedPrecondition("There is no valid data in dataset, please check dataset file firstly. (a pass has no " +
                              std::string(root->batch_size > 0 ? "batches" : "samples") + ")");
  SamplePlan plan = MakeSamplePlan(root);
  // A source that computes its samples (FromGenerator, SyntheticImages)
  // costs what its function costs: it keeps the iterator's worker threads
  // rather than run on the one thread that writes.
  if (!plan.all_fused || !plan.in_memory) return std::unique_ptr<BatchWriter>();
  // As Dataset::Iterate: Repeat at the top only relabels passes.
  const Node* order_root = root.get();
  while (order_root->kind == Node::Kind::Repeat) order_root = order_root->up.get();
  return std::unique_ptr<BatchWriter>(new BatchWriter(std::move(plan), order_root, root->units));
}

BatchWriter::BatchWriter(SamplePlan plan, const Node* order_root, int64_t dataset_size)
    : plan_(std::move(plan)),
      order_root_(order_root),
      units_(order_root->units),
      dataset_size_(dataset_size),
      builder_(plan_) {}

// One pass order at a time: a feeder moves forward, so each is computed
// once (about a millisecond per 100k samples, once per pass).
const PassOrder& BatchWriter::OrderFor(int64_t g) {
  const int64_t pass = g / units_;
  if (pass != pass_) {
    order_ = ComputePassOrder(*order_root_, pass);
    pass_ = pass;
  }
  return order_;
}

int64_t BatchWriter::samples(int64_t g) { return static_cast<int64_t>(OrderFor(g).unit(g % units_).size()); }

Status BatchWriter::Write(int64_t g, std::span<const std::span<uint8_t>> dst) {
  const PassOrder& order = OrderFor(g);
  Status st = builder_.Write(order.unit(g % units_), dst);
  if (st.ok()) return st;
  // The iterator's context, so an error reads the same either way.
  return st.WithContext("Dataset iterator, batch " + std::to_string(g) + " (pass " + std::to_string(g / dataset_size_) +
                        ", batch " + std::to_string(g % dataset_size_) + " of " + std::to_string(dataset_size_) + ")");
}

}  // namespace sinkrt::host
