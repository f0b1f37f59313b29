// Turns one unit of a pass order (a sample, or the samples of a batch) into
// an output row: read from the source, run the maps, stack. One builder per
// worker thread; it keeps the sample row between calls so that reading and
// transforming reuse the same storage.
//
// Columns whose maps fuse (dataset/fused_column.h) skip the sample row: each
// sample goes from the source's bytes to its place in the batch in one pass,
// and Write puts a whole batch straight into the caller's memory (a device
// queue slot, a frame payload).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "host/src/dataset/fused_column.h"
#include "host/src/dataset/node.h"

namespace sinkrt::host {

// What every worker shares: the source, the Map nodes from the source up,
// and the per-sample specs the maps produce.
struct SamplePlan {
  std::shared_ptr<const Dataset::Node> root;  // keeps the nodes below alive
  const Source* source = nullptr;
  std::vector<const Dataset::Node*> maps;  // in application order
  std::vector<ColumnSpec> columns;         // per sample, after the maps
  bool batched = false;
  // Per column: its maps fused into one pass, or kUnfused (then the maps
  // run on the sample row as written).
  std::vector<FusedColumn> fused;
  bool all_fused = false;  // batched and every column fused: Write works
  // The source holds its samples in memory (Source::SampleBytes): reading
  // one costs a few cache misses, not a user's function.
  bool in_memory = false;
};

// `fuse` false: every column unfused, the pipeline as it ran before fusion
// (tests and benchmarks compare the two).
SamplePlan MakeSamplePlan(std::shared_ptr<const Dataset::Node> root, bool fuse = true);

// Dataset::Iterate, with `fuse` as for MakeSamplePlan.
Result<std::unique_ptr<BatchIterator>> IterateDataset(const Dataset& dataset, IteratorOptions options, bool fuse);

class BatchBuilder {
 public:
  explicit BatchBuilder(const SamplePlan& plan);

  // Sample `index` of the source, mapped, into *row.
  Status ReadSample(int64_t index, Row* row);
  // The samples stacked into [samples.size(), ...] per column, into *out
  // (reusing its storage). Unbatched plans take exactly one sample.
  Status Build(std::span<const int64_t> samples, Row* out);
  // The samples of one batch written straight into dst[c], column c's
  // samples.size() * out_bytes, for a plan with all_fused; an empty dst[c]
  // skips column c.
  Status Write(std::span<const int64_t> samples, std::span<const std::span<uint8_t>> dst);

 private:
  // ReadSample; `only_unfused`: fused columns keep the source's bytes.
  Status ReadMapped(int64_t index, Row* row, bool only_unfused);

  const SamplePlan& plan_;
  Row sample_;
};

}  // namespace sinkrt::host
