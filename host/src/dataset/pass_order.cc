#include "host/src/dataset/pass_order.h"

#include <numeric>
#include <utility>

namespace sinkrt::host {
namespace {

using Node = Dataset::Node;

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

// Units of `in` picked by `pick`, in that order.
PassOrder Gather(const PassOrder& in, const std::vector<int64_t>& pick) {
  PassOrder out;
  if (!in.batched()) {
    out.samples.resize(pick.size());
    for (size_t i = 0; i < pick.size(); ++i) out.samples[i] = in.samples[pick[i]];
    return out;
  }
  out.offsets.reserve(pick.size() + 1);
  out.offsets.push_back(0);
  for (int64_t u : pick) {
    auto unit = in.unit(u);
    out.samples.insert(out.samples.end(), unit.begin(), unit.end());
    out.offsets.push_back(static_cast<int64_t>(out.samples.size()));
  }
  return out;
}

template <typename T>
void FisherYates(std::vector<T>& v, ShuffleRng& rng) {
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[rng.Below(i)]);
}

}  // namespace

ShuffleRng::ShuffleRng(uint64_t seed, uint64_t pass) {
  // splitmix64 expands (seed, pass) into the 256-bit state. The seed is
  // mixed before the pass is folded in, so that neighbouring seeds and
  // passes start from unrelated states.
  uint64_t state = seed;
  state = SplitMix64(state) ^ pass;
  for (uint64_t& s : s_) s = SplitMix64(state);
}

uint64_t ShuffleRng::Next() {
  const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = Rotl(s_[3], 45);
  return result;
}

uint64_t ShuffleRng::Below(uint64_t n) {
  unsigned __int128 m = static_cast<unsigned __int128>(Next()) * n;
  uint64_t low = static_cast<uint64_t>(m);
  if (low < n) {
    const uint64_t threshold = (0 - n) % n;
    while (low < threshold) {
      m = static_cast<unsigned __int128>(Next()) * n;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

PassOrder ComputePassOrder(const Node& node, int64_t pass) {
  switch (node.kind) {
    case Node::Kind::Source: {
      PassOrder o;
      o.samples.resize(node.units);
      std::iota(o.samples.begin(), o.samples.end(), int64_t{0});
      return o;
    }
    case Node::Kind::Map:
      return ComputePassOrder(*node.up, pass);
    case Node::Kind::Shuffle: {
      PassOrder o = ComputePassOrder(*node.up, pass);
      ShuffleRng rng(node.seed, static_cast<uint64_t>(pass));
      if (!o.batched()) {
        FisherYates(o.samples, rng);
        return o;
      }
      std::vector<int64_t> perm(o.units());
      std::iota(perm.begin(), perm.end(), int64_t{0});
      FisherYates(perm, rng);
      return Gather(o, perm);
    }
    case Node::Kind::Shard: {
      PassOrder o = ComputePassOrder(*node.up, pass);
      const int64_t n = o.units();
      std::vector<int64_t> pick(node.units);
      for (int64_t j = 0; j < node.units; ++j) pick[j] = (node.shard_id + j * node.num_shards) % n;
      return Gather(o, pick);
    }
    case Node::Kind::Batch: {
      PassOrder o = ComputePassOrder(*node.up, pass);
      const int64_t n = static_cast<int64_t>(o.samples.size());
      o.offsets.resize(node.units + 1);
      for (int64_t u = 0; u < node.units; ++u) o.offsets[u] = u * node.batch_size;
      o.offsets[node.units] = std::min(node.units * node.batch_size, n);
      o.samples.resize(o.offsets.back());  // drop_remainder leaves a tail unused
      return o;
    }
    case Node::Kind::Repeat: {
      PassOrder out;
      for (int r = 0; r < node.count; ++r) {
        PassOrder o = ComputePassOrder(*node.up, pass * node.count + r);
        if (o.batched()) {
          const int64_t base = static_cast<int64_t>(out.samples.size());
          if (out.offsets.empty()) out.offsets.push_back(0);
          for (size_t u = 1; u < o.offsets.size(); ++u) out.offsets.push_back(base + o.offsets[u]);
        }
        out.samples.insert(out.samples.end(), o.samples.begin(), o.samples.end());
      }
      return out;
    }
  }
  return {};
}

}  // namespace sinkrt::host
