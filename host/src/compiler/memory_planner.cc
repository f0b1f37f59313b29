#include "host/src/compiler/memory_planner.h"

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <queue>
#include <set>
#include <string>
#include <string_view>
#include <utility>

namespace sinkrt::host::compiler {
namespace {

// Sizes past this are refused so that no sum or rounding below can overflow.
constexpr uint64_t kMaxTotalBytes = uint64_t{1} << 62;

uint64_t AlignUp(uint64_t value, uint64_t alignment) { return (value + alignment - 1) & ~(alignment - 1); }

bool LiveTogether(const BufferLifetime& a, const BufferLifetime& b) {
  if (a.persistent || b.persistent) return true;
  return a.first_use <= b.last_use && b.first_use <= a.last_use;
}

enum class Fit { kFirst, kBest };

struct Strategy {
  const char* name;
  // Strict weak order on transient buffer indices; the index breaks ties so
  // every strategy is a total order and the plan is deterministic.
  bool (*before)(const BufferLifetime& a, const BufferLifetime& b);
};

int64_t Lifetime(const BufferLifetime& b) { return int64_t{b.last_use} - b.first_use + 1; }

const Strategy kStrategies[] = {
    {"size", [](const BufferLifetime& a, const BufferLifetime& b) { return a.bytes > b.bytes; }},
    {"size+first_use",
     [](const BufferLifetime& a, const BufferLifetime& b) {
       if (a.bytes != b.bytes) return a.bytes > b.bytes;
       return a.first_use < b.first_use;
     }},
    {"area",
     [](const BufferLifetime& a, const BufferLifetime& b) {
       // bytes < 2^62 and lifetimes < 2^32, so compare in 128 bits.
       unsigned __int128 x = static_cast<unsigned __int128>(a.bytes) * static_cast<uint64_t>(Lifetime(a));
       unsigned __int128 y = static_cast<unsigned __int128>(b.bytes) * static_cast<uint64_t>(Lifetime(b));
       if (x != y) return x > y;
       return a.bytes > b.bytes;
     }},
    {"lifetime",
     [](const BufferLifetime& a, const BufferLifetime& b) {
       if (Lifetime(a) != Lifetime(b)) return Lifetime(a) > Lifetime(b);
       return a.bytes > b.bytes;
     }},
    {"first_use",
     [](const BufferLifetime& a, const BufferLifetime& b) {
       if (a.first_use != b.first_use) return a.first_use < b.first_use;
       return a.bytes > b.bytes;
     }},
};

struct Placement {
  std::vector<uint64_t> offsets;
  uint64_t end = 0;   // highest aligned end of a transient buffer (or the region start)
  uint64_t work = 0;  // buffers and gaps looked at (MemoryPlan::placement_work)
};

// One greedy pass: places `order` (indices of transient buffers) one by one
// into [base, ...), each in a gap among the already placed buffers that are
// live at the same time.
Placement PlaceGreedy(const std::vector<BufferLifetime>& buffers, const std::vector<size_t>& order, uint64_t base,
                      uint64_t alignment, Fit fit) {
  Placement p;
  p.offsets.assign(buffers.size(), base);
  p.end = base;
  std::vector<size_t> placed;
  placed.reserve(order.size());
  struct Taken {
    uint64_t begin, end;
  };
  std::vector<Taken> taken;
  for (size_t i : order) {
    const BufferLifetime& b = buffers[i];
    const uint64_t size = AlignUp(b.bytes, alignment);
    taken.clear();
    p.work += placed.size();
    for (size_t j : placed)
      if (LiveTogether(b, buffers[j]))
        taken.push_back({p.offsets[j], p.offsets[j] + AlignUp(buffers[j].bytes, alignment)});
    std::sort(taken.begin(), taken.end(),
              [](const Taken& x, const Taken& y) { return x.begin != y.begin ? x.begin < y.begin : x.end < y.end; });
    // Walk the taken ranges in offset order; `cursor` is the lowest offset
    // not covered by any range seen so far. Ranges may overlap each other
    // (they need not be live together), hence the max.
    uint64_t cursor = base;
    uint64_t chosen = UINT64_MAX, chosen_gap = UINT64_MAX;
    for (const Taken& t : taken) {
      if (t.begin >= cursor + size) {
        const uint64_t gap = t.begin - cursor;
        if (fit == Fit::kFirst) {
          chosen = cursor;
          break;
        }
        if (gap < chosen_gap) {
          chosen = cursor;
          chosen_gap = gap;
        }
      }
      cursor = std::max(cursor, t.end);
    }
    if (chosen == UINT64_MAX) chosen = cursor;  // above every overlapping buffer
    p.offsets[i] = chosen;
    p.end = std::max(p.end, chosen + size);
    placed.push_back(i);
  }
  return p;
}

// PlaceGreedy for an order by first use, in O(N log N + gaps visited): a
// sweep over time. Taken in first-use order, the placed buffers live
// together with the next one are exactly those not yet dead at its first
// use, and they are live together with each other too, so their ranges
// never overlap: the free space below the highest of them is a set of
// disjoint gaps, kept ordered by offset (first fit) and by (length, offset)
// (best fit). The choice is PlaceGreedy's: the lowest (first fit) or the
// smallest, then lowest (best fit) gap that holds the buffer, else the end
// of the highest range. PlaceGreedy walks every placed buffer per
// placement, which made a deep network's compile quadratic in its depth.
class Sweep {
 public:
  Sweep(uint64_t base, Fit fit) : base_(base), fit_(fit) {}

  // Where a buffer of `size` aligned bytes goes.
  uint64_t Choose(uint64_t size, uint64_t& work) const {
    if (fit_ == Fit::kBest) {
      ++work;
      auto it = by_length_.lower_bound({size, 0});
      if (it != by_length_.end()) return it->second;
    } else {
      for (const auto& [begin, length] : by_offset_) {
        ++work;
        if (length >= size) return begin;
      }
    }
    return active_.empty() ? base_ : std::prev(active_.end())->second;
  }

  void Insert(uint64_t begin, uint64_t end) {
    auto next = active_.lower_bound(begin);
    const uint64_t lo = next == active_.begin() ? base_ : std::prev(next)->second;
    if (next != active_.end()) {
      RemoveGap(lo, next->first);
      AddGap(end, next->first);
    }
    AddGap(lo, begin);
    active_.emplace(begin, end);
  }

  void Remove(uint64_t begin) {
    auto it = active_.find(begin);
    const uint64_t lo = it == active_.begin() ? base_ : std::prev(it)->second;
    auto next = std::next(it);
    RemoveGap(lo, begin);
    if (next != active_.end()) {
      RemoveGap(it->second, next->first);
      AddGap(lo, next->first);
    }
    active_.erase(it);
  }

 private:
  void AddGap(uint64_t lo, uint64_t hi) {
    if (hi <= lo) return;
    by_offset_.emplace(lo, hi - lo);
    by_length_.emplace(hi - lo, lo);
  }
  void RemoveGap(uint64_t lo, uint64_t hi) {
    if (hi <= lo) return;
    by_offset_.erase(lo);
    by_length_.erase({hi - lo, lo});
  }

  uint64_t base_;
  Fit fit_;
  std::map<uint64_t, uint64_t> active_;                // begin -> end of the live ranges
  std::map<uint64_t, uint64_t> by_offset_;             // gap begin -> length
  std::set<std::pair<uint64_t, uint64_t>> by_length_;  // (length, begin)
};

// `order` sorted by first use.
Placement PlaceSweep(const std::vector<BufferLifetime>& buffers, const std::vector<size_t>& order, uint64_t base,
                     uint64_t alignment, Fit fit) {
  Placement p;
  p.offsets.assign(buffers.size(), base);
  p.end = base;
  Sweep sweep(base, fit);
  // (last_use, buffer) of the placed buffers, earliest death first.
  using Death = std::pair<int32_t, size_t>;
  std::priority_queue<Death, std::vector<Death>, std::greater<Death>> dying;
  for (size_t i : order) {
    const BufferLifetime& b = buffers[i];
    while (!dying.empty() && dying.top().first < b.first_use) {
      sweep.Remove(p.offsets[dying.top().second]);
      dying.pop();
      ++p.work;
    }
    const uint64_t size = AlignUp(b.bytes, alignment);
    const uint64_t at = sweep.Choose(size, p.work);
    p.offsets[i] = at;
    p.end = std::max(p.end, at + size);
    sweep.Insert(at, at + size);
    dying.push({b.last_use, i});
    ++p.work;
  }
  return p;
}

bool IsView(const BufferLifetime& b, size_t count) {
  return b.view_of >= 0 && static_cast<uint64_t>(b.view_of) < count;
}

// The requests with each view group's lifetime resolved: the root's interval
// grows to cover its views', and every view takes its root's.
std::vector<BufferLifetime> ResolveGroups(std::span<const BufferLifetime> buffers) {
  std::vector<BufferLifetime> out(buffers.begin(), buffers.end());
  for (const BufferLifetime& b : buffers) {
    if (!IsView(b, out.size()) || b.persistent) continue;
    BufferLifetime& root = out[b.view_of];
    root.first_use = std::min(root.first_use, b.first_use);
    root.last_use = std::max(root.last_use, b.last_use);
  }
  for (BufferLifetime& b : out)
    if (IsView(b, out.size())) {
      b.first_use = out[b.view_of].first_use;
      b.last_use = out[b.view_of].last_use;
    }
  return out;
}

Status CheckView(std::span<const BufferLifetime> buffers, size_t i, uint64_t alignment) {
  const BufferLifetime& v = buffers[i];
  const std::string what =
      "memory plan: buffer " + std::to_string(i) + ", a view of buffer " + std::to_string(v.view_of);
  if (static_cast<uint64_t>(v.view_of) >= buffers.size() || static_cast<size_t>(v.view_of) == i)
    return InvalidArgument(what + ", names no other buffer of the " + std::to_string(buffers.size()));
  const BufferLifetime& root = buffers[v.view_of];
  if (root.view_of >= 0) return InvalidArgument(what + ", which is a view itself: name the group's root");
  if (root.persistent != v.persistent) return InvalidArgument(what + ", differs from it in persistence");
  if (v.view_offset % alignment != 0)
    return InvalidArgument(what + ", is at offset " + std::to_string(v.view_offset) +
                           " in it, not a multiple of the alignment " + std::to_string(alignment));
  if (v.view_offset > root.bytes || v.bytes > root.bytes - v.view_offset)
    return InvalidArgument(what + ", takes bytes [" + std::to_string(v.view_offset) + ", +" + std::to_string(v.bytes) +
                           ") of its " + std::to_string(root.bytes));
  return Status::Ok();
}

}  // namespace

uint64_t LivenessLowerBound(std::span<const BufferLifetime> requests, uint64_t alignment) {
  const std::vector<BufferLifetime> buffers = ResolveGroups(requests);
  uint64_t persistent = 0;
  // (time, +bytes) at first use, (last_use + 1, -bytes) after the last use;
  // ends sort before starts at the same time, so a buffer that dies at t and
  // one born at t + 1 are never counted together.
  std::vector<std::pair<int64_t, int64_t>> events;
  for (const BufferLifetime& b : buffers) {
    if (b.bytes == 0 || IsView(b, buffers.size())) continue;  // a group counts as its root
    const uint64_t size = AlignUp(b.bytes, alignment);
    if (b.persistent) {
      persistent += size;
      continue;
    }
    events.push_back({b.first_use, static_cast<int64_t>(size)});
    events.push_back({int64_t{b.last_use} + 1, -static_cast<int64_t>(size)});
  }
  std::sort(events.begin(), events.end());
  int64_t live = 0, peak = 0;
  for (const auto& [time, delta] : events) {
    live += delta;
    peak = std::max(peak, live);
  }
  return persistent + static_cast<uint64_t>(peak);
}

Result<MemoryPlan> PlanMemory(std::vector<BufferLifetime> buffers, uint64_t alignment, size_t exhaustive_limit) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0)
    return InvalidArgument("memory plan: alignment " + std::to_string(alignment) + " is not a power of two");
  uint64_t total = 0;
  for (size_t i = 0; i < buffers.size(); ++i) {
    const BufferLifetime& b = buffers[i];
    if (!b.persistent && b.first_use > b.last_use)
      return InvalidArgument("memory plan: buffer " + std::to_string(i) + " has first_use " +
                             std::to_string(b.first_use) + " after last_use " + std::to_string(b.last_use));
    if (b.bytes > kMaxTotalBytes || total + b.bytes + alignment > kMaxTotalBytes)
      return ResourceExhausted("memory plan: buffer " + std::to_string(i) + " of " + std::to_string(b.bytes) +
                               " bytes takes the total past 2^62 bytes");
    total += AlignUp(b.bytes, alignment);
  }
  for (size_t i = 0; i < buffers.size(); ++i)
    if (buffers[i].view_of >= 0) SINKRT_RETURN_IF_ERROR(CheckView(buffers, i, alignment));
  buffers = ResolveGroups(buffers);

  MemoryPlan plan;
  plan.alignment = alignment;
  plan.offsets.assign(buffers.size(), 0);
  plan.liveness_lower_bound = LivenessLowerBound(buffers, alignment);

  // Step 1: persistent buffers back to back in the caller's order.
  uint64_t cursor = 0;
  std::vector<size_t> transient;
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (buffers[i].view_of >= 0) continue;  // placed with its root below
    if (!buffers[i].persistent) {
      if (buffers[i].bytes > 0) transient.push_back(i);
      continue;
    }
    plan.offsets[i] = cursor;
    cursor += AlignUp(buffers[i].bytes, alignment);
  }
  plan.persistent_bytes = cursor;

  // Steps 2 and 3: greedy placement under several orderings, keep the best;
  // past `exhaustive_limit` transients only the first-use order, swept.
  const bool sweep_only = transient.size() > exhaustive_limit;
  Placement best;
  bool have_best = false;
  for (const Strategy& s : kStrategies) {
    const bool first_use = std::string_view(s.name) == "first_use";
    if (sweep_only && !first_use) continue;
    std::vector<size_t> order = transient;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      if (s.before(buffers[a], buffers[b])) return true;
      if (s.before(buffers[b], buffers[a])) return false;
      return a < b;
    });
    for (Fit fit : {Fit::kFirst, Fit::kBest}) {
      Placement p = sweep_only ? PlaceSweep(buffers, order, plan.persistent_bytes, alignment, fit)
                               : PlaceGreedy(buffers, order, plan.persistent_bytes, alignment, fit);
      plan.placement_work += p.work;
      if (!have_best || p.end < best.end) {
        best = std::move(p);
        have_best = true;
        plan.strategy =
            std::string(s.name) + (fit == Fit::kFirst ? "/first-fit" : "/best-fit") + (sweep_only ? " (sweep)" : "");
      }
      if (best.end == plan.liveness_lower_bound) break;
    }
    if (best.end == plan.liveness_lower_bound) break;
  }

  plan.arena_bytes = plan.persistent_bytes;
  if (have_best) {
    plan.arena_bytes = best.end;
    for (size_t i : transient) plan.offsets[i] = best.offsets[i];
  }
  // Zero-byte transients sit at the region's start; they overlap nothing.
  for (size_t i = 0; i < buffers.size(); ++i)
    if (!buffers[i].persistent && buffers[i].bytes == 0 && buffers[i].view_of < 0)
      plan.offsets[i] = plan.persistent_bytes;
  for (size_t i = 0; i < buffers.size(); ++i)
    if (buffers[i].view_of >= 0) plan.offsets[i] = plan.offsets[buffers[i].view_of] + buffers[i].view_offset;
  if (plan.strategy.empty()) plan.strategy = "persistent-only";
  plan.buffers = std::move(buffers);
  return plan;
}

bool AnyLiveOverlap(const MemoryPlan& plan) {
  const auto& b = plan.buffers;
  auto group = [&](size_t i) { return IsView(b[i], b.size()) ? static_cast<size_t>(b[i].view_of) : i; };
  for (size_t i = 0; i < b.size(); ++i) {
    if (b[i].bytes == 0) continue;
    for (size_t j = i + 1; j < b.size(); ++j) {
      if (b[j].bytes == 0 || group(i) == group(j) || !LiveTogether(b[i], b[j])) continue;
      const uint64_t ai = plan.offsets[i], aj = plan.offsets[j];
      if (ai < aj + b[j].bytes && aj < ai + b[i].bytes) return true;
    }
  }
  return false;
}

}  // namespace sinkrt::host::compiler
