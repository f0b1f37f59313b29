// Dataset::SyntheticImages: a generated stand-in for Fashion-MNIST, for
// demos and tests that must not depend on a download.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "host/src/dataset/node.h"
#include "sinkrt/host/dataset.h"

namespace sinkrt::host {
namespace {

constexpr int64_t kImageSide = 28;
constexpr int kClasses = 10;

uint64_t Mix(uint64_t z) {  // one SplitMix64 step from state z: a good 64-bit hash
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The samples are generated on demand, but a pass's order is not: it holds
// an int64 index per sample, and a shuffle or a shard works on a copy and a
// permutation of it, so one pass can need three of them at once.
constexpr uint64_t kOrderBytesPerSample = 3 * sizeof(int64_t);

uint64_t PhysicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return uint64_t{1} << 40;  // unknown: a bound no test machine reaches
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
}

std::string GiB(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

// A size whose pass order cannot fit in this machine's memory is refused
// here, saying how much it needs, rather than as std::bad_alloc at the first
// pass.
Status CheckSize(int64_t size) {
  if (size < 0) return Status::Ok();  // FromGenerator names a negative size
  const uint64_t memory = PhysicalMemoryBytes();
  if (static_cast<uint64_t>(size) <= memory / kOrderBytesPerSample) return Status::Ok();
  const double needed = static_cast<double>(size) * static_cast<double>(kOrderBytesPerSample);
  char exact[32];
  std::snprintf(exact, sizeof exact, "%.0f", needed);
  return ResourceExhausted("SyntheticImages: size " + std::to_string(size) + " needs up to " + exact + " bytes (" +
                           GiB(needed) + ") for the sample order of one pass (" + std::to_string(kOrderBytesPerSample) +
                           " bytes a sample), more than this machine's " + GiB(static_cast<double>(memory)) +
                           " of memory");
}

}  // namespace

Dataset Dataset::SyntheticImages(int64_t size, uint64_t split) {
  if (Status st = CheckSize(size); !st.ok()) return MakeSourceDataset(st);
  constexpr int64_t kPixels = kImageSide * kImageSide;
  auto templates = std::make_shared<std::vector<uint8_t>>(kClasses * kPixels);
  for (int64_t i = 0; i < kClasses * kPixels; ++i) (*templates)[i] = static_cast<uint8_t>(Mix(0x7E3A11 + i) >> 56);
  std::vector<ColumnSpec> columns = {{"image", DType::U8, {kImageSide, kImageSide, 1}}, {"label", DType::I32, {}}};
  Dataset d = FromGenerator(columns, size, [templates, split](int64_t index, Row* row) {
    row->resize(2);
    const uint64_t key = Mix(split * 0x100000000ull + static_cast<uint64_t>(index));
    const int32_t label = static_cast<int32_t>(key % kClasses);
    Tensor& image = (*row)[0];
    image.dtype = DType::U8;
    image.shape = {kImageSide, kImageSide, 1};
    image.data.resize(kPixels);
    const uint8_t* t = templates->data() + label * kPixels;
    for (int64_t p = 0; p < kPixels; ++p) {
      const uint64_t noise = Mix(key ^ static_cast<uint64_t>(p) * 0xD1B54A32D192ED03ull) >> 56;
      image.data[p] = static_cast<uint8_t>((t[p] + noise * 3) / 4);
    }
    Tensor& y = (*row)[1];
    y.dtype = DType::I32;
    y.shape = {};
    y.data.resize(sizeof(int32_t));
    std::memcpy(y.data.data(), &label, sizeof label);
    return Status::Ok();
  });
  return d;
}

}  // namespace sinkrt::host
