// BatchWriter: a dataset's batches built on the calling thread, straight
// into memory the caller lends (a device queue slot, a frame payload).
//
// What a feeder uses instead of a BatchIterator when every column of the
// pipeline fuses (SamplePlan::all_fused) and the source holds its samples
// in memory (FromArrays, Mnist): a batch is then written once,
// where the device will read it, with no sample rows, no batch tensor to
// copy again and no worker thread to hand it over. The order is the
// iterator's: batch g is the same whichever of the two builds it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "host/src/dataset/batch_builder.h"
#include "host/src/dataset/pass_order.h"
#include "sinkrt/host/dataset.h"

namespace sinkrt::host {

class BatchWriter {
 public:
  // Null when the pipeline does not fully fuse or its source computes its
  // samples (iterate it instead); an error where Dataset::Iterate would fail.
  static Result<std::unique_ptr<BatchWriter>> Make(const Dataset& dataset);

  // Per dataset column: what one sample of the batch holds.
  const std::vector<FusedColumn>& columns() const { return plan_.fused; }
  // Samples in global batch g (a pass's last batch is short without
  // drop_remainder).
  int64_t samples(int64_t g);
  // Global batch g into dst: one span per dataset column of samples(g)
  // samples, or empty to skip the column.
  Status Write(int64_t g, std::span<const std::span<uint8_t>> dst);

 private:
  BatchWriter(SamplePlan plan, const Dataset::Node* order_root, int64_t dataset_size);
  const PassOrder& OrderFor(int64_t g);

  const SamplePlan plan_;
  const Dataset::Node* const order_root_;
  const int64_t units_;         // of order_root_, per pass
  const int64_t dataset_size_;  // for errors
  BatchBuilder builder_;
  int64_t pass_ = -1;  // of order_
  PassOrder order_;
};

}  // namespace sinkrt::host
