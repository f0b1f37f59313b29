#include "host/src/dataset/fused_column.h"

#include <algorithm>
#include <cstring>

namespace sinkrt::host {
namespace {

bool Static(const Shape& shape) {
  for (int64_t d : shape)
    if (d < 0) return false;
  return true;
}

// The looked-up values go through a 1 KiB chunk on the stack and then to
// the batch with memcpy. Stored one by one straight into a batch far larger
// than L1, they waited on the store queue: feeder_bench's fused build took
// 35-38 us per batch of 64 that way against 22-25 us through the chunk.
template <typename T>
void Lookup(const T* table, int64_t channels, int64_t n, const uint8_t* in, uint8_t* out_bytes) {
  constexpr int64_t kChunk = 1024 / sizeof(T);
  T chunk[kChunk];
  if (channels == 1) {
    for (int64_t i = 0; i < n; i += kChunk) {
      const int64_t m = std::min(kChunk, n - i);
      for (int64_t j = 0; j < m; ++j) chunk[j] = table[in[i + j]];
      std::memcpy(out_bytes + i * sizeof(T), chunk, static_cast<size_t>(m) * sizeof(T));
    }
    return;
  }
  T* out = reinterpret_cast<T*>(out_bytes);
  if (channels > kChunk) {
    for (int64_t i = 0; i < n; i += channels)
      for (int64_t k = 0; k < channels; ++k) out[i + k] = table[k * 256 + in[i + k]];
    return;
  }
  // Whole pixels per chunk, so that a chunk starts at channel 0.
  const int64_t step = kChunk / channels * channels;
  for (int64_t i = 0; i < n; i += step) {
    const int64_t m = std::min(step, n - i);
    for (int64_t j = 0; j < m; j += channels)
      for (int64_t k = 0; k < channels; ++k) chunk[j + k] = table[k * 256 + in[i + j + k]];
    std::memcpy(out + i, chunk, static_cast<size_t>(m) * sizeof(T));
  }
}

}  // namespace

FusedColumn FuseColumn(const ColumnSpec& source, std::span<const Transform* const> transforms,
                       std::span<const ColumnSpec* const> specs) {
  FusedColumn f;
  const ColumnSpec& last = specs.empty() ? source : *specs.back();
  if (!Static(source.shape) || !Static(last.shape) || DTypeSize(source.dtype) == 0 || DTypeSize(last.dtype) == 0)
    return f;
  int64_t channels = 1;
  bool per_value = false;
  for (const Transform* t : transforms) {
    if (t->fusion == Transform::Fusion::kNone) return f;
    if (t->fusion != Transform::Fusion::kPerValue) continue;
    per_value = true;
    if (t->channels < 1 || (t->channels > 1 && channels > 1 && t->channels != channels)) return f;
    if (t->channels > 1) channels = t->channels;
  }
  f.elements = NumElements(source.shape);
  if (NumElements(last.shape) != f.elements) return f;
  f.in_bytes = static_cast<size_t>(f.elements) * DTypeSize(source.dtype);
  f.out_bytes = static_cast<size_t>(f.elements) * DTypeSize(last.dtype);
  f.out_dtype = last.dtype;
  f.out_shape = last.shape;
  if (!per_value) {
    if (source.dtype != last.dtype) return FusedColumn{};
    f.kind = FusedColumn::Kind::kCopy;
    return f;
  }
  if (source.dtype != DType::U8 || f.elements % channels != 0) return FusedColumn{};
  // Every value 0..255 in every channel, laid out as a [256, channels]
  // image so that per-channel transforms see channel k at index % channels.
  Tensor values{DType::U8, channels == 1 ? Shape{256} : Shape{256, channels}, {}};
  values.data.resize(static_cast<size_t>(256 * channels));
  for (int64_t v = 0; v < 256; ++v)
    for (int64_t k = 0; k < channels; ++k) values.data[v * channels + k] = static_cast<uint8_t>(v);
  for (const Transform* t : transforms) {
    if (t->fusion != Transform::Fusion::kPerValue) continue;
    if (!t->apply(values).ok()) return FusedColumn{};  // the sample path reports it
  }
  f.out_size = DTypeSize(values.dtype);
  const bool lookup_size = f.out_size == 1 || f.out_size == 2 || f.out_size == 4 || f.out_size == 8;
  if (!lookup_size || values.dtype != last.dtype ||
      values.data.size() != static_cast<size_t>(256 * channels) * f.out_size)
    return FusedColumn{};
  // Stored channel-major so that a channel's 256 entries are contiguous.
  f.table.resize(values.data.size());
  for (int64_t v = 0; v < 256; ++v)
    for (int64_t k = 0; k < channels; ++k)
      std::memcpy(&f.table[(k * 256 + v) * f.out_size], &values.data[(v * channels + k) * f.out_size], f.out_size);
  f.channels = channels;
  f.kind = FusedColumn::Kind::kTable;
  return f;
}

void WriteFused(const FusedColumn& f, const uint8_t* in, uint8_t* out) {
  if (f.kind == FusedColumn::Kind::kCopy) {
    std::memcpy(out, in, f.in_bytes);
    return;
  }
  const uint8_t* table = f.table.data();
  switch (f.out_size) {
    case 1:
      Lookup(table, f.channels, f.elements, in, out);
      break;
    case 2:
      Lookup(reinterpret_cast<const uint16_t*>(table), f.channels, f.elements, in, out);
      break;
    case 4:
      Lookup(reinterpret_cast<const uint32_t*>(table), f.channels, f.elements, in, out);
      break;
    case 8:
      Lookup(reinterpret_cast<const uint64_t*>(table), f.channels, f.elements, in, out);
      break;
    default:
      break;  // FuseColumn makes no other table
  }
}

}  // namespace sinkrt::host
