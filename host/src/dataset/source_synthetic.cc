// Dataset::SyntheticImages: a generated stand-in for Fashion-MNIST, for
// demos and tests that must not depend on a download.
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

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

}  // namespace

Dataset Dataset::SyntheticImages(int64_t size, uint64_t split) {
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
