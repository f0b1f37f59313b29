#include "device/src/init/initializer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>
#include <string>
#include <vector>

namespace sinkrt::device {

namespace {

std::string Prefix(const fb::Init& def) {
  return std::string("initializer ") + fb::EnumNameInitKind(def.kind()) + ": ";
}

Status Error(const fb::Init& def, const std::string& message) { return InvalidArgument(Prefix(def) + message); }

Status RequireF32(const fb::Init& def, const TensorRef& out) {
  if (out.dtype == DType::F32) return Status::Ok();
  return Error(def, std::string("buffer has dtype ") + DTypeName(out.dtype) + ", random kinds fill f32 only");
}

Status RequireFinite(const fb::Init& def, const char* name, double v) {
  if (std::isfinite(v)) return Status::Ok();
  return Error(def, std::string(name) + " is " + std::to_string(v) + ", expected a finite value");
}

// Where a buffer's elements sit in the tensor whose values they take: the
// buffer itself, or (fb::Init.global_shape) a slice of a larger tensor, whose
// element i is drawn at its index in the whole so that every rank's slice
// holds what one device would hold there.
struct Placement {
  std::vector<int64_t> whole, offset;  // empty: the buffer is the whole

  // Calls fn(i, index in the whole) for every element i, in order.
  template <typename Fn>
  void ForEach(const TensorRef& out, Fn fn) const {
    if (whole.empty()) {
      for (int64_t i = 0; i < out.numel; ++i) fn(i, static_cast<uint64_t>(i));
      return;
    }
    const size_t rank = out.shape.size();
    std::vector<int64_t> idx(rank, 0);
    for (int64_t i = 0; i < out.numel; ++i) {
      uint64_t flat = 0;
      for (size_t d = 0; d < rank; ++d) flat = flat * whole[d] + static_cast<uint64_t>(offset[d] + idx[d]);
      fn(i, flat);
      for (size_t d = rank; d-- > 0;) {
        if (++idx[d] < out.shape[d]) break;
        idx[d] = 0;
      }
    }
  }
};

Result<Placement> PlacementOf(const fb::Init& def, const TensorRef& out) {
  Placement p;
  if (!def.global_shape() && !def.slice_offset()) return p;
  if (!def.global_shape() || !def.slice_offset()) return Error(def, "a slice needs both global_shape and slice_offset");
  p.whole.assign(def.global_shape()->begin(), def.global_shape()->end());
  p.offset.assign(def.slice_offset()->begin(), def.slice_offset()->end());
  if (p.whole.size() != out.shape.size() || p.offset.size() != out.shape.size()) {
    return Error(def, "slice of " + ShapeToString(p.whole) + " at " + ShapeToString(p.offset) +
                          " does not match the buffer's rank " + std::to_string(out.shape.size()));
  }
  for (size_t d = 0; d < p.whole.size(); ++d) {
    if (p.offset[d] < 0 || out.shape[d] > p.whole[d] || p.offset[d] > p.whole[d] - out.shape[d]) {
      return Error(def, "slice " + ShapeToString(out.shape) + " at " + ShapeToString(p.offset) + " lies outside " +
                            ShapeToString(p.whole) + " (dim " + std::to_string(d) + ")");
    }
  }
  return p;
}

void FillUniform(const TensorRef& out, const Placement& at, uint64_t seed, float low, float high) {
  float* y = out.f32();
  const float range = high - low;
  at.ForEach(out, [&](int64_t i, uint64_t g) { y[i] = low + range * UniformAt(seed, g); });
}

// Same values as NormalAt, one Box–Muller per pair (a slice: one per element).
void FillNormal(const TensorRef& out, const Placement& at, uint64_t seed, float mean, float stddev) {
  float* y = out.f32();
  if (!at.whole.empty()) {
    at.ForEach(out, [&](int64_t i, uint64_t g) { y[i] = mean + stddev * NormalAt(seed, g); });
    return;
  }
  for (int64_t i = 0; i < out.numel; i += 2) {
    double even, odd;
    NormalPair(seed, static_cast<uint64_t>(i) / 2, &even, &odd);
    y[i] = mean + stddev * static_cast<float>(even);
    if (i + 1 < out.numel) y[i + 1] = mean + stddev * static_cast<float>(odd);
  }
}

Status Constant(const fb::Init& def, const TensorRef& out) {
  const float v = def.value();
  if (out.dtype == DType::F32) {
    std::fill(out.f32(), out.f32() + out.numel, v);
    return Status::Ok();
  }
  if (out.dtype == DType::I32) {
    if (!(v >= -2147483648.0f && v < 2147483648.0f) || std::trunc(v) != v) {
      return Error(def, "value " + std::to_string(v) + " is not an i32");
    }
    std::fill(out.i32(), out.i32() + out.numel, static_cast<int32_t>(v));
    return Status::Ok();
  }
  return Error(def, std::string("buffer has dtype ") + DTypeName(out.dtype) + ", expected f32 or i32");
}

Status Inline(const fb::Init& def, const TensorRef& out, std::span<const uint8_t> blobs) {
  const uint64_t offset = def.data_offset(), bytes = def.data_bytes();
  const uint64_t want = static_cast<uint64_t>(out.numel) * DTypeSize(out.dtype);
  if (offset > blobs.size() || bytes > blobs.size() - offset) {
    return Error(def, "bytes [" + std::to_string(offset) + ", +" + std::to_string(bytes) + ") lie outside the " +
                          std::to_string(blobs.size()) + "-byte blob section");
  }
  if (bytes != want) {
    return Error(def, std::to_string(bytes) + " bytes for a buffer of " + std::to_string(want) + " (" +
                          ShapeToString(out.shape) + " " + DTypeName(out.dtype) + ")");
  }
  if (bytes > 0) std::memcpy(out.data, blobs.data() + offset, bytes);
  return Status::Ok();
}

}  // namespace

Status FillInitializer(const fb::Init& def, const TensorRef& out, std::span<const uint8_t> blobs) {
  if (NumElements(out.shape) != out.numel || DTypeSize(out.dtype) == 0 || (out.data == nullptr && out.numel > 0)) {
    return Error(def, "buffer " + ShapeToString(out.shape) + " " + DTypeName(out.dtype) + " is not a valid tensor");
  }
  using fb::InitKind;
  SINKRT_ASSIGN_OR_RETURN(const Placement at, PlacementOf(def, out));
  const double fan_in = static_cast<double>(def.fan_in());
  const double fan_out = static_cast<double>(def.fan_out());
  switch (def.kind()) {
    case InitKind::None:
      return Status::Ok();
    case InitKind::Zeros:
      // All-zero bytes are zero in every dtype we have.
      if (out.numel > 0) std::memset(out.data, 0, out.numel * DTypeSize(out.dtype));
      return Status::Ok();
    case InitKind::Constant:
      return Constant(def, out);
    case InitKind::Uniform:
      SINKRT_RETURN_IF_ERROR(RequireF32(def, out));
      SINKRT_RETURN_IF_ERROR(RequireFinite(def, "low", def.low()));
      SINKRT_RETURN_IF_ERROR(RequireFinite(def, "high", def.high()));
      if (def.high() < def.low()) {
        return Error(def, "high " + std::to_string(def.high()) + " is below low " + std::to_string(def.low()));
      }
      FillUniform(out, at, def.seed(), def.low(), def.high());
      return Status::Ok();
    case InitKind::Normal:
      SINKRT_RETURN_IF_ERROR(RequireF32(def, out));
      SINKRT_RETURN_IF_ERROR(RequireFinite(def, "mean", def.mean()));
      SINKRT_RETURN_IF_ERROR(RequireFinite(def, "stddev", def.stddev()));
      if (def.stddev() < 0) return Error(def, "stddev " + std::to_string(def.stddev()) + " < 0");
      FillNormal(out, at, def.seed(), def.mean(), def.stddev());
      return Status::Ok();
    case InitKind::XavierUniform:
    case InitKind::XavierNormal:
    case InitKind::HeUniform:
    case InitKind::HeNormal: {
      SINKRT_RETURN_IF_ERROR(RequireF32(def, out));
      const bool xavier = def.kind() == InitKind::XavierUniform || def.kind() == InitKind::XavierNormal;
      if (def.fan_in() <= 0 || (xavier && def.fan_out() <= 0)) {
        return Error(def, "fan_in " + std::to_string(def.fan_in()) + " and fan_out " + std::to_string(def.fan_out()) +
                              (xavier ? " must both be > 0" : ": fan_in must be > 0"));
      }
      const double fan = xavier ? fan_in + fan_out : fan_in;
      if (def.kind() == InitKind::XavierUniform || def.kind() == InitKind::HeUniform) {
        const float limit = static_cast<float>(std::sqrt(6.0 / fan));
        FillUniform(out, at, def.seed(), -limit, limit);
      } else {
        FillNormal(out, at, def.seed(), 0.0f, static_cast<float>(std::sqrt(2.0 / fan)));
      }
      return Status::Ok();
    }
    case InitKind::Inline:
      return Inline(def, out, blobs);
  }
  return InvalidArgument("initializer: unknown kind " + std::to_string(static_cast<int>(def.kind())));
}

}  // namespace sinkrt::device
