#include "host/src/model/slices.h"

#include <cstring>

namespace sinkrt::host {
namespace {

// Calls copy(whole_byte_offset, part_byte_offset, bytes) once per run of
// contiguous bytes: the block's innermost dims that span the whole tensor's
// are copied together.
template <typename Copy>
void ForEachRun(const Block& b, Copy copy) {
  const size_t rank = b.part.size();
  if (rank == 0) {
    copy(0, 0, b.element_bytes);
    return;
  }
  // Fold trailing dims the block covers whole into the run.
  size_t inner = rank;
  uint64_t run = b.element_bytes;
  while (inner > 0 && b.part[inner - 1] == b.whole[inner - 1]) {
    run *= static_cast<uint64_t>(b.part[inner - 1]);
    --inner;
  }
  if (inner > 0) run *= static_cast<uint64_t>(b.part[inner - 1]);  // the first partial dim runs too
  const size_t outer = inner == 0 ? 0 : inner - 1;                 // dims iterated one by one
  std::vector<uint64_t> whole_stride(rank, b.element_bytes);
  for (size_t d = rank - 1; d-- > 0;) whole_stride[d] = whole_stride[d + 1] * static_cast<uint64_t>(b.whole[d + 1]);
  std::vector<int64_t> idx(outer, 0);
  uint64_t part_at = 0;
  for (;;) {
    uint64_t whole_at = 0;
    for (size_t d = 0; d < rank; ++d) {
      const int64_t i = d < outer ? idx[d] : 0;
      whole_at += static_cast<uint64_t>(b.offset[d] + i) * whole_stride[d];
    }
    copy(whole_at, part_at, run);
    part_at += run;
    size_t d = outer;
    while (d > 0) {
      --d;
      if (++idx[d] < b.part[d]) break;
      idx[d] = 0;
      if (d == 0) return;
    }
    if (outer == 0) return;
  }
}

int64_t Elements(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

}  // namespace

std::vector<uint8_t> ExtractBlock(const uint8_t* whole, const Block& block) {
  std::vector<uint8_t> out(static_cast<size_t>(Elements(block.part)) * block.element_bytes);
  if (out.empty()) return out;
  ForEachRun(block, [&](uint64_t w, uint64_t p, uint64_t n) { std::memcpy(out.data() + p, whole + w, n); });
  return out;
}

void PlaceBlock(uint8_t* whole, const uint8_t* part, const Block& block) {
  if (Elements(block.part) == 0) return;
  ForEachRun(block, [&](uint64_t w, uint64_t p, uint64_t n) { std::memcpy(whole + w, part + p, n); });
}

Block BlockOf(const job::StreamSlice& slice, const Shape& shape, size_t element_bytes) {
  return Block{.whole = slice.global_shape, .part = shape, .offset = slice.offset, .element_bytes = element_bytes};
}

Result<RankFeed> PlanRankFeed(const std::vector<ColumnSpec>& columns,
                              const std::vector<std::optional<job::StreamSlice>>& slices, const std::string& context) {
  RankFeed feed;
  std::string first;  // the column that fixed parts/index
  for (size_t c = 0; c < columns.size(); ++c) {
    const ColumnSpec& col = columns[c];
    const std::optional<job::StreamSlice>* s = c < slices.size() ? &slices[c] : nullptr;
    int64_t parts = 1, index = 0;
    std::optional<Block> block;
    Shape dataset_shape = col.shape;
    if (s && *s && !col.shape.empty()) {
      const job::StreamSlice& sl = **s;
      const int64_t rows = col.shape[0];
      if (rows < 1 || sl.global_shape[0] % rows != 0 || sl.offset[0] % rows != 0)
        return InvalidArgument(context + ": column '" + col.name + "' holds rows [" + std::to_string(sl.offset[0]) +
                               ", +" + std::to_string(rows) + ") of " + std::to_string(sl.global_shape[0]) +
                               ", not an equal shard");
      parts = sl.global_shape[0] / rows;
      index = sl.offset[0] / rows;
      bool inner = false;
      for (size_t d = 1; d < col.shape.size(); ++d) inner |= col.shape[d] != sl.global_shape[d];
      if (inner) {
        dataset_shape = sl.global_shape;
        dataset_shape[0] = rows;
        std::vector<int64_t> offset = sl.offset;
        offset[0] = 0;
        block =
            Block{.whole = dataset_shape, .part = col.shape, .offset = offset, .element_bytes = DTypeSize(col.dtype)};
      }
    }
    if (c == 0) {
      feed.parts = parts;
      feed.index = index;
      first = col.name;
    } else if (parts != feed.parts || index != feed.index) {
      return InvalidArgument(context + ": the inputs split the batch differently: column '" + first + "' takes shard " +
                             std::to_string(feed.index) + " of " + std::to_string(feed.parts) + ", column '" +
                             col.name + "' shard " + std::to_string(index) + " of " + std::to_string(parts) +
                             " (give every Input the same batch split, or use full_batch)");
    }
    feed.columns.push_back(std::move(block));
    feed.dataset_shapes.push_back(std::move(dataset_shape));
  }
  return feed;
}

}  // namespace sinkrt::host
