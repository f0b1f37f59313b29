// Slices of row-major tensors, for a Model whose ranks hold slices
// (SEMI_AUTO_PARALLEL): the part of a batch each rank's queue takes, and the
// whole tensor a checkpoint or a prediction gathers from the ranks' parts.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "host/src/job/stream_report.h"
#include "sinkrt/runtime/dtype.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host {

// The block [offset, offset + part) of a tensor of shape `whole`; `bytes`
// per element. Both copy helpers assume the block lies inside the whole
// (the stream verifier has checked every slice it states).
struct Block {
  Shape whole;
  Shape part;
  std::vector<int64_t> offset;
  size_t element_bytes = 4;
};

// The block's bytes, row-major, out of the whole tensor's.
std::vector<uint8_t> ExtractBlock(const uint8_t* whole, const Block& block);
// Writes the block's bytes into the whole tensor's.
void PlaceBlock(uint8_t* whole, const uint8_t* part, const Block& block);

// The block a stream slice describes for a buffer or column of `shape`.
Block BlockOf(const job::StreamSlice& slice, const Shape& shape, size_t element_bytes);

// How rank r's queue takes the batch: the rows it reads (its data-parallel
// shard of the dataset, Dataset::ShardBelowBatch(parts, index)) and, per
// column, the block of the remaining dims it keeps (when a column is also
// split inside a row).
struct RankFeed {
  int64_t parts = 1;  // the data-parallel degree of the batch
  int64_t index = 0;  // this rank's shard
  // Per queue column: the block of one shard's batch the queue holds;
  // nullopt when it holds the shard's batch whole.
  std::vector<std::optional<Block>> columns;
  // Per queue column: the shape of the shard's batch (the dataset's).
  std::vector<Shape> dataset_shapes;
};

// From the queue's columns (local shapes) and their slices. Every column
// must split the batch the same way: `context` names the queue in errors.
Result<RankFeed> PlanRankFeed(const std::vector<ColumnSpec>& columns,
                              const std::vector<std::optional<job::StreamSlice>>& slices, const std::string& context);

}  // namespace sinkrt::host
