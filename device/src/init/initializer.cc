#include "initializer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>
#include <string>

namespace sinkrt::device {
namespace {

// Box–Muller on the uniforms of pair k: (r cos θ, r sin θ). Double so that the
// f32 results are correctly rounded on any libm accurate to a few double ulps.
void NormalPair(uint64_t seed, uint64_t k, double* even, double* odd) {
  const double u1 = UniformAt(seed, 2 * k), u2 = UniformAt(seed, 2 * k + 1);
  const double r = std::sqrt(-2.0 * std::log(1.0 - u1));
  const double theta = 2.0 * std::numbers::pi * u2;
  *even = r * std::cos(theta);
  *odd = r * std::sin(theta);
}

}  // namespace

float NormalAt(uint64_t seed, uint64_t i) {
  double even, odd;
  NormalPair(seed, i / 2, &even, &odd);
  return static_cast<float>((i & 1) ? odd : even);
}

namespace {

std::string Prefix(const fb::InitDef& def) {
  return std::string("initializer ") + fb::EnumNameInitKind(def.kind()) + ": ";
}

Status Error(const fb::InitDef& def, const std::string& message) {
  return InvalidArgument(Prefix(def) + message);
}

Status RequireF32(const fb::InitDef& def, const TensorRef& out) {
  if (out.dtype == DType::F32) return Status::Ok();
  return Error(def, std::string("buffer has dtype ") + DTypeName(out.dtype) +
                        ", random kinds fill f32 only");
}

Status RequireFinite(const fb::InitDef& def, const char* name, double v) {
  if (std::isfinite(v)) return Status::Ok();
  return Error(def, std::string(name) + " is " + std::to_string(v) + ", expected a finite value");
}

void FillUniform(const TensorRef& out, uint64_t seed, float low, float high) {
  float* y = out.f32();
  const float range = high - low;
  for (int64_t i = 0; i < out.numel; ++i) y[i] = low + range * UniformAt(seed, i);
}

// Same values as NormalAt, one Box–Muller per pair.
void FillNormal(const TensorRef& out, uint64_t seed, float mean, float stddev) {
  float* y = out.f32();
  for (int64_t i = 0; i < out.numel; i += 2) {
    double even, odd;
    NormalPair(seed, static_cast<uint64_t>(i) / 2, &even, &odd);
    y[i] = mean + stddev * static_cast<float>(even);
    if (i + 1 < out.numel) y[i + 1] = mean + stddev * static_cast<float>(odd);
  }
}

Status Constant(const fb::InitDef& def, const TensorRef& out) {
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
  return Error(def, std::string("buffer has dtype ") + DTypeName(out.dtype) +
                        ", expected f32 or i32");
}

Status Inline(const fb::InitDef& def, const TensorRef& out, std::span<const uint8_t> blobs) {
  const uint64_t offset = def.data_offset(), bytes = def.data_bytes();
  const uint64_t want = static_cast<uint64_t>(out.numel) * DTypeSize(out.dtype);
  if (offset > blobs.size() || bytes > blobs.size() - offset) {
    return Error(def, "bytes [" + std::to_string(offset) + ", +" + std::to_string(bytes) +
                          ") lie outside the " + std::to_string(blobs.size()) +
                          "-byte blob section");
  }
  if (bytes != want) {
    return Error(def, std::to_string(bytes) + " bytes for a buffer of " + std::to_string(want) +
                          " (" + ShapeToString(out.shape) + " " + DTypeName(out.dtype) + ")");
  }
  if (bytes > 0) std::memcpy(out.data, blobs.data() + offset, bytes);
  return Status::Ok();
}

}  // namespace

Status FillInitializer(const fb::InitDef& def, const TensorRef& out, std::span<const uint8_t> blobs) {
  if (NumElements(out.shape) != out.numel || DTypeSize(out.dtype) == 0 ||
      (out.data == nullptr && out.numel > 0)) {
    return Error(def, "buffer " + ShapeToString(out.shape) + " " + DTypeName(out.dtype) +
                          " is not a valid tensor");
  }
  using fb::InitKind;
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
        return Error(def, "high " + std::to_string(def.high()) + " is below low " +
                              std::to_string(def.low()));
      }
      FillUniform(out, def.seed(), def.low(), def.high());
      return Status::Ok();
    case InitKind::Normal:
      SINKRT_RETURN_IF_ERROR(RequireF32(def, out));
      SINKRT_RETURN_IF_ERROR(RequireFinite(def, "mean", def.mean()));
      SINKRT_RETURN_IF_ERROR(RequireFinite(def, "stddev", def.stddev()));
      if (def.stddev() < 0) return Error(def, "stddev " + std::to_string(def.stddev()) + " < 0");
      FillNormal(out, def.seed(), def.mean(), def.stddev());
      return Status::Ok();
    case InitKind::XavierUniform:
    case InitKind::XavierNormal:
    case InitKind::HeUniform:
    case InitKind::HeNormal: {
      SINKRT_RETURN_IF_ERROR(RequireF32(def, out));
      const bool xavier =
          def.kind() == InitKind::XavierUniform || def.kind() == InitKind::XavierNormal;
      if (def.fan_in() <= 0 || (xavier && def.fan_out() <= 0)) {
        return Error(def, "fan_in " + std::to_string(def.fan_in()) + " and fan_out " +
                              std::to_string(def.fan_out()) +
                              (xavier ? " must both be > 0" : ": fan_in must be > 0"));
      }
      const double fan = xavier ? fan_in + fan_out : fan_in;
      if (def.kind() == InitKind::XavierUniform || def.kind() == InitKind::HeUniform) {
        const float limit = static_cast<float>(std::sqrt(6.0 / fan));
        FillUniform(out, def.seed(), -limit, limit);
      } else {
        FillNormal(out, def.seed(), 0.0f, static_cast<float>(std::sqrt(2.0 / fan)));
      }
      return Status::Ok();
    }
    case InitKind::Inline:
      return Inline(def, out, blobs);
  }
  return InvalidArgument("initializer: unknown kind " +
                         std::to_string(static_cast<int>(def.kind())));
}

}  // namespace sinkrt::device
