// Turns one unit of a pass order (a sample, or the samples of a batch) into
// an output row: read from the source, run the maps, stack. One builder per
// worker thread; it keeps the sample row between calls so that reading and
// transforming reuse the same storage.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "dataset/node.h"

namespace sinkrt::host {

// What every worker shares: the source, the Map nodes from the source up,
// and the per-sample specs the maps produce.
struct SamplePlan {
  std::shared_ptr<const Dataset::Node> root;  // keeps the nodes below alive
  const Source* source = nullptr;
  std::vector<const Dataset::Node*> maps;     // in application order
  std::vector<ColumnSpec> columns;            // per sample, after the maps
  bool batched = false;
};

SamplePlan MakeSamplePlan(std::shared_ptr<const Dataset::Node> root);

class BatchBuilder {
 public:
  explicit BatchBuilder(const SamplePlan& plan);

  // Sample `index` of the source, mapped, into *row.
  Status ReadSample(int64_t index, Row* row);
  // The samples stacked into [samples.size(), ...] per column, into *out
  // (reusing its storage). Unbatched plans take exactly one sample.
  Status Build(std::span<const int64_t> samples, Row* out);

 private:
  const SamplePlan& plan_;
  Row sample_;
};

}  // namespace sinkrt::host
