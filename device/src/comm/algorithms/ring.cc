// The pipelined ring: reduce-scatter then all-gather, as one stream of
// segments per neighbour.
//
// The group's data is cut into n chunks of whole elements, each chunk into
// the same K segments. Step t < n-1 (reduce-scatter): position p sends
// chunk p-t-1 to p+1 and adds chunk p-t-2 from p-1 into its own, so chunk c
// is summed in ring order starting at position c+1 and ends complete at
// position c. Steps n-1.. (all-gather) pass the complete chunks on
// unchanged, so every rank ends with the same bytes.
//
// Items (step, segment) run block by block: a block is W = kBlockSegments
// consecutive segments k (the same ones in every chunk; the last block
// takes the remainder, so it holds W to 2W-1), taken through every step
// before the next block starts, so item j of block b (of Kb segments) is
// (t = first + r / Kb, k = b * W + r % Kb) with r = j - b * W * steps.
// Why blocks: step-major order (all of
// the reduce-scatter, then all of the all-gather) touches each segment again
// only after the whole chunk has streamed through the cache, so a large
// AllReduce ran from memory while the same bytes as several smaller ones
// ran from cache, and fusing lost (issue 21: a fused 16 MiB took 1.1-1.4x
// the time of its 2-8 MiB pieces). Blocks reuse a segment within a few
// segments' traffic. The order of the items changes nothing in what is
// summed in which order: chunk c is still summed from position c+1 around
// the ring, as a ReduceScatter sums it.
//
// The send of an item depends only on the receive of the same segment one
// step earlier, an earlier item of its block; sends run up to
// `segments_in_flight` items ahead of the receives. A post waits only for
// the receiver to release item j - window, which it does in its own loop
// before waiting on anything later, so no cycle of waits can form even
// when every rank sends before it receives.
#include <algorithm>
#include <cstring>

#include "device/src/comm/algorithms/op.h"
#include "device/src/comm/algorithms/partners.h"
#include "device/src/comm/algorithms/reduce.h"

namespace sinkrt::device {
namespace {

constexpr const char* kReduceScatter = "ring reduce-scatter";
constexpr const char* kAllGather = "ring all-gather";

// Two segments per block keep the reuse distance short (a 1 MiB block per
// chunk at the default 512 KiB segments) while the next block's first
// sends, which wait on nothing, fill the window as this block drains; the
// remainder folds into the last block, since a block of one segment runs
// its steps one after another (one early, noisy 3-rank run suggested 2 + 1
// blocks lost at 4 MiB; the later runs showed 1 and 4 MiB unchanged within
// noise). 3-rank ring over shm, step-major -> blocks: 16 MiB 8.8-11.0 ->
// 8.4-9.2 ms, 64 MiB 40-49 -> 30-39 ms (`allreduce_bench --compare
// --ranks 3 --algos ring`, loaded 2-core VM).
constexpr size_t kBlockSegments = 2;

uint32_t Mod(int64_t v, uint32_t n) { return static_cast<uint32_t>(((v % n) + n) % n); }

// The block order of a pass of `steps` steps over K segments per chunk,
// in blocks of W segments (the last one W to 2W-1, or all K when K < 2W).
struct Blocks {
  size_t K;
  uint32_t steps;
  size_t W;
  struct Item {
    uint32_t t;  // step, from 0 (the caller adds first_step)
    size_t k;    // segment
  };
  size_t count() const { return std::max<size_t>(1, K / W); }
  size_t width(size_t b) const { return b + 1 == count() ? K - b * W : W; }
  Item at(uint64_t j) const {
    const size_t b = std::min<uint64_t>(j / (uint64_t{W} * steps), count() - 1);
    const uint64_t r = j - uint64_t{b} * W * steps;
    const size_t kb = width(b);
    return {static_cast<uint32_t>(r / kb), b * W + r % kb};
  }
  uint64_t index(uint32_t t, size_t k) const {
    const size_t b = std::min(k / W, count() - 1);
    return uint64_t{b} * W * steps + uint64_t{t} * width(b) + (k - b * W);
  }
};

}  // namespace

void RingPartners(const GroupView& g, std::vector<uint32_t>& positions) {
  positions.push_back((g.pos + 1) % g.n());
  positions.push_back((g.pos + g.n() - 1) % g.n());
}

Status RingPass(Op& op, std::span<uint8_t> data, size_t elem, DType dtype, ReduceOp rop, uint32_t first_step,
                uint32_t end_step) {
  const uint32_t n = op.n();
  if (n == 1 || end_step <= first_step) return Status::Ok();
  const uint32_t p = op.pos;
  const uint32_t next = (p + 1) % n, prev = (p + n - 1) % n;
  const Split chunks{data.size() / elem, n};
  const size_t K = SegmentsFor(chunks.size(0), elem, op.segment_bytes());
  const Blocks order{K, end_step - first_step, kBlockSegments};
  const uint64_t total = static_cast<uint64_t>(end_step - first_step) * K;
  const uint64_t window = op.window();
  const uint64_t base = op.Posted(next);

  auto send_chunk = [&](uint32_t t) {
    return t < n - 1 ? Mod(int64_t(p) - t - 1, n) : Mod(int64_t(p) - (t - (n - 1)), n);
  };
  auto recv_chunk = [&](uint32_t t) {
    return t < n - 1 ? Mod(int64_t(p) - t - 2, n) : Mod(int64_t(p) - (t - (n - 1)) - 1, n);
  };
  // Byte range of segment k of chunk c.
  auto segment = [&](uint32_t c, size_t k) {
    const Split segs{chunks.size(c), K};
    return data.subspan((chunks.begin(c) + segs.begin(k)) * elem, segs.size(k) * elem);
  };

  uint64_t sent = 0;
  for (uint64_t j = 0; j < total; ++j) {
    while (sent < total && sent < j + window) {
      const Blocks::Item s = order.at(sent);
      // Step t's send carries what step t-1 received into the same segment.
      if (s.t > 0 && order.index(s.t - 1, s.k) >= j) break;
      const uint32_t t = first_step + s.t;
      op.phase = t < n - 1 ? kReduceScatter : kAllGather;
      SINKRT_RETURN_IF_ERROR(op.Post(next, static_cast<uint32_t>(sent), segment(send_chunk(t), s.k)).status());
      ++sent;
    }
    const Blocks::Item item = order.at(j);
    const uint32_t t = first_step + item.t;
    const size_t k = item.k;
    const uint32_t c = recv_chunk(t);
    std::span<uint8_t> dst = segment(c, k);
    op.phase = t < n - 1 ? kReduceScatter : kAllGather;
    SINKRT_ASSIGN_OR_RETURN(std::span<const uint8_t> in, op.Receive(prev, static_cast<uint32_t>(j), dst.size()));
    if (t < n - 1) {
      ReduceRaw(dst.data(), in.data(), dst.size() / elem, dtype, rop, false);
    } else {
      if (first_step == 0) {
        // This segment left in our reduce-scatter; by causality it has been
        // consumed long ago, but never overwrite what a send may still read.
        const uint32_t step = Mod(int64_t(p) - c - 1, n);
        SINKRT_RETURN_IF_ERROR(op.WaitSent(next, base + order.index(step, k) + 1));
      }
      if (!dst.empty()) std::memcpy(dst.data(), in.data(), dst.size());
    }
    op.Release(prev);
  }
  return Status::Ok();
}

}  // namespace sinkrt::device
