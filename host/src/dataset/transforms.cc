// The built-in per-sample transforms (MindSpore's dataset.vision and
// dataset.transforms ops). Each checks its arguments and input spec in
// output_spec, so a bad pipeline fails at Map(); apply() re-checks what a
// sample can still get wrong (a value, a dim the spec left open).
//
// A transform whose output differs in size writes into a per-thread scratch
// buffer and swaps it with the column's storage: after the first few samples
// both buffers have grown to their largest size and nothing is allocated.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "sinkrt/host/dataset.h"

namespace sinkrt::host {
namespace {

std::vector<uint8_t>& Scratch(size_t bytes) {
  thread_local std::vector<uint8_t> scratch;
  scratch.resize(bytes);
  return scratch;
}

// Makes `t` hold the scratch contents as `dtype` elements; the scratch keeps
// t's old buffer for the next transform on this thread.
void TakeScratch(Tensor& t, std::vector<uint8_t>& scratch, DType dtype) {
  t.data.swap(scratch);
  t.dtype = dtype;
}

std::string Dt(DType t) { return DTypeName(t); }

bool IsInteger(DType t) { return t == DType::U8 || t == DType::I32 || t == DType::I64; }

bool IsCastable(DType t) {
  return t == DType::U8 || t == DType::I32 || t == DType::I64 || t == DType::F32 || t == DType::F64;
}

// Calls fn(T*) with the column's elements typed by its dtype (the types
// TypeCast supports); false for any other dtype.
template <typename Fn>
bool Visit(DType dtype, const uint8_t* data, Fn&& fn) {
  switch (dtype) {
    case DType::U8:
      fn(reinterpret_cast<const uint8_t*>(data));
      return true;
    case DType::I32:
      fn(reinterpret_cast<const int32_t*>(data));
      return true;
    case DType::I64:
      fn(reinterpret_cast<const int64_t*>(data));
      return true;
    case DType::F32:
      fn(reinterpret_cast<const float*>(data));
      return true;
    case DType::F64:
      fn(reinterpret_cast<const double*>(data));
      return true;
    default:
      return false;
  }
}

template <typename To, typename From>
To Convert(From v) {
  if constexpr (std::is_floating_point_v<To> || std::is_integral_v<From>) {
    // integer -> integer wraps as numpy's astype; anything -> float rounds.
    return static_cast<To>(v);
  } else {
    if (std::isnan(v)) return 0;
    const double d = std::trunc(static_cast<double>(v));
    if (d <= static_cast<double>(std::numeric_limits<To>::min())) return std::numeric_limits<To>::min();
    if (d >= static_cast<double>(std::numeric_limits<To>::max())) return std::numeric_limits<To>::max();
    return static_cast<To>(d);
  }
}

template <typename From>
void CastTo(DType to, const From* in, int64_t n, uint8_t* out) {
  auto loop = [&](auto* o) {
    using To = std::remove_pointer_t<decltype(o)>;
    for (int64_t i = 0; i < n; ++i) o[i] = Convert<To>(in[i]);
  };
  switch (to) {
    case DType::U8:
      loop(reinterpret_cast<uint8_t*>(out));
      break;
    case DType::I32:
      loop(reinterpret_cast<int32_t*>(out));
      break;
    case DType::I64:
      loop(reinterpret_cast<int64_t*>(out));
      break;
    case DType::F32:
      loop(reinterpret_cast<float*>(out));
      break;
    case DType::F64:
      loop(reinterpret_cast<double*>(out));
      break;
    default:
      break;
  }
}

Status BadDType(const char* op, DType got, const char* expected) {
  return InvalidArgument(std::string(op) + ": input dtype " + Dt(got) + " is not supported; expected " + expected);
}

// An output_spec that always fails: how a factory reports a bad argument.
std::function<Result<ColumnSpec>(const ColumnSpec&)> Refuse(Status status) {
  return [status](const ColumnSpec&) -> Result<ColumnSpec> { return status; };
}

}  // namespace

Transform Transform::Rescale(double scale, double shift) {
  Transform t;
  t.name = "Rescale";
  t.fusion = Transform::Fusion::kPerValue;
  t.output_spec = [](const ColumnSpec& in) -> Result<ColumnSpec> {
    if (in.dtype != DType::U8 && in.dtype != DType::I32 && in.dtype != DType::F32)
      return BadDType("Rescale", in.dtype, "u8, i32 or f32");
    ColumnSpec out = in;
    out.dtype = DType::F32;
    return out;
  };
  // u8 images are the common case: a table of the 256 results, computed in
  // double and rounded once, is both exact and the fastest loop.
  auto table = std::make_shared<std::array<float, 256>>();
  for (int v = 0; v < 256; ++v) (*table)[v] = static_cast<float>(v * scale + shift);
  t.apply = [scale, shift, table](Tensor& x) -> Status {
    const int64_t n = x.numel();
    switch (x.dtype) {
      case DType::U8: {
        auto& scratch = Scratch(static_cast<size_t>(n) * sizeof(float));
        const uint8_t* in = x.data.data();
        float* out = reinterpret_cast<float*>(scratch.data());
        const float* lut = table->data();
        for (int64_t i = 0; i < n; ++i) out[i] = lut[in[i]];
        TakeScratch(x, scratch, DType::F32);
        return Status::Ok();
      }
      case DType::I32: {
        auto& scratch = Scratch(static_cast<size_t>(n) * sizeof(float));
        const int32_t* in = x.as<int32_t>();
        float* out = reinterpret_cast<float*>(scratch.data());
        for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(in[i] * scale + shift);
        TakeScratch(x, scratch, DType::F32);
        return Status::Ok();
      }
      case DType::F32: {
        float* p = x.as<float>();
        for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(p[i] * scale + shift);
        return Status::Ok();
      }
      default:
        return BadDType("Rescale", x.dtype, "u8, i32 or f32");
    }
  };
  return t;
}

Transform Transform::Normalize(std::vector<float> mean, std::vector<float> std) {
  Transform t;
  t.name = "Normalize";
  t.fusion = Transform::Fusion::kPerValue;
  t.channels = static_cast<int64_t>(std::max<size_t>(1, mean.size()));
  if (mean.empty() || mean.size() != std.size()) {
    t.output_spec = Refuse(InvalidArgument("Normalize: mean and std must be non-empty and of one length, got " +
                                           std::to_string(mean.size()) + " and " + std::to_string(std.size())));
  } else {
    for (size_t c = 0; c < std.size(); ++c)
      if (!(std[c] > 0) || !std::isfinite(std[c]) || !std::isfinite(mean[c])) {
        t.output_spec = Refuse(InvalidArgument("Normalize: std[" + std::to_string(c) + "] = " + std::to_string(std[c]) +
                                               " and mean[" + std::to_string(c) + "] = " + std::to_string(mean[c]) +
                                               "; std must be > 0 and both finite"));
        break;
      }
  }
  const size_t channels = mean.size();
  if (!t.output_spec) {
    t.output_spec = [channels](const ColumnSpec& in) -> Result<ColumnSpec> {
      if (in.dtype != DType::U8 && in.dtype != DType::I32 && in.dtype != DType::F32)
        return BadDType("Normalize", in.dtype, "u8, i32 or f32");
      if (channels > 1 &&
          (in.shape.empty() || (in.shape.back() != -1 && in.shape.back() != static_cast<int64_t>(channels))))
        return InvalidArgument("Normalize: " + std::to_string(channels) +
                               " channels of mean/std but the input's last dim is " +
                               (in.shape.empty() ? std::string("absent (a scalar)") : std::to_string(in.shape.back())));
      ColumnSpec out = in;
      out.dtype = DType::F32;
      return out;
    };
  }
  // Multiply by 1/std: one rounding more than a division, and several times
  // faster; MindSpore's CPU kernel does the same.
  std::vector<float> inv(std.size());
  for (size_t c = 0; c < std.size(); ++c) inv[c] = 1.0f / std[c];
  t.apply = [mean = std::move(mean), inv = std::move(inv)](Tensor& x) -> Status {
    const int64_t n = x.numel();
    const int64_t c = x.shape.empty() ? 1 : x.shape.back();
    if (mean.size() > 1 && c != static_cast<int64_t>(mean.size()))
      return InvalidArgument("Normalize: " + std::to_string(mean.size()) +
                             " channels of mean/std but the sample's last dim is " + std::to_string(c));
    if (x.dtype != DType::U8 && x.dtype != DType::I32 && x.dtype != DType::F32)
      return BadDType("Normalize", x.dtype, "u8, i32 or f32");
    auto& scratch = Scratch(static_cast<size_t>(n) * sizeof(float));
    float* out = reinterpret_cast<float*>(scratch.data());
    Visit(x.dtype, x.data.data(), [&](const auto* in) {
      if (mean.size() == 1) {
        for (int64_t i = 0; i < n; ++i) out[i] = (static_cast<float>(in[i]) - mean[0]) * inv[0];
        return;
      }
      for (int64_t i = 0; i < n; i += c)
        for (int64_t k = 0; k < c; ++k) out[i + k] = (static_cast<float>(in[i + k]) - mean[k]) * inv[k];
    });
    TakeScratch(x, scratch, DType::F32);
    return Status::Ok();
  };
  return t;
}

Transform Transform::TypeCast(DType to) {
  Transform t;
  t.name = "TypeCast";
  t.fusion = Transform::Fusion::kPerValue;
  const char* kSupported = "u8, i32, i64, f32 or f64";
  if (!IsCastable(to)) {
    t.output_spec = Refuse(
        InvalidArgument(std::string("TypeCast: target dtype ") + Dt(to) + " is not supported; expected " + kSupported));
  } else {
    t.output_spec = [to, kSupported](const ColumnSpec& in) -> Result<ColumnSpec> {
      if (!IsCastable(in.dtype)) return BadDType("TypeCast", in.dtype, kSupported);
      ColumnSpec out = in;
      out.dtype = to;
      return out;
    };
  }
  t.apply = [to, kSupported](Tensor& x) -> Status {
    if (x.dtype == to) return Status::Ok();
    if (!IsCastable(to)) return InvalidArgument(std::string("TypeCast: target dtype ") + Dt(to) + " is not supported");
    const int64_t n = x.numel();
    auto& scratch = Scratch(static_cast<size_t>(n) * DTypeSize(to));
    if (!Visit(x.dtype, x.data.data(), [&](const auto* in) { CastTo(to, in, n, scratch.data()); }))
      return BadDType("TypeCast", x.dtype, kSupported);
    TakeScratch(x, scratch, to);
    return Status::Ok();
  };
  return t;
}

Transform Transform::OneHot(int num_classes) {
  Transform t;
  t.name = "OneHot";
  if (num_classes < 1) {
    t.output_spec = Refuse(InvalidArgument("OneHot: num_classes must be >= 1, got " + std::to_string(num_classes)));
  } else {
    t.output_spec = [num_classes](const ColumnSpec& in) -> Result<ColumnSpec> {
      if (!IsInteger(in.dtype)) return BadDType("OneHot", in.dtype, "an integer label (u8, i32 or i64)");
      ColumnSpec out = in;
      out.dtype = DType::F32;
      out.shape.push_back(num_classes);
      return out;
    };
  }
  t.apply = [num_classes](Tensor& x) -> Status {
    const int64_t n = x.numel();
    auto& scratch = Scratch(static_cast<size_t>(n) * num_classes * sizeof(float));
    std::memset(scratch.data(), 0, scratch.size());
    float* out = reinterpret_cast<float*>(scratch.data());
    Status status;
    auto fill = [&](const auto* in) {
      for (int64_t i = 0; i < n; ++i) {
        const int64_t label = static_cast<int64_t>(in[i]);
        if (label < 0 || label >= num_classes) {
          status = OutOfRange("OneHot: label " + std::to_string(label) + " is outside [0, " +
                              std::to_string(num_classes) + ")");
          return;
        }
        out[i * num_classes + label] = 1.0f;
      }
    };
    switch (x.dtype) {
      case DType::U8:
        fill(x.as<uint8_t>());
        break;
      case DType::I32:
        fill(x.as<int32_t>());
        break;
      case DType::I64:
        fill(x.as<int64_t>());
        break;
      default:
        return BadDType("OneHot", x.dtype, "an integer label (u8, i32 or i64)");
    }
    if (!status.ok()) return status;
    TakeScratch(x, scratch, DType::F32);
    x.shape.push_back(num_classes);
    return Status::Ok();
  };
  return t;
}

namespace {

// `target` with its -1 resolved for `numel` elements, into *out (reusing
// its storage: this runs once per sample), or why it cannot be.
Status ResolveReshape(const Shape& target, int64_t numel, const Shape& from, Shape* out) {
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] == -1) {
      infer = static_cast<int>(i);
    } else {
      known *= target[i];
    }
  }
  if (infer >= 0 ? (known == 0 || numel % known != 0) : known != numel)
    return InvalidArgument("Reshape: cannot reshape " + ShapeToString(from) + " (" + std::to_string(numel) +
                           " elements) to " + ShapeToString(target) +
                           (infer >= 0 ? std::string() : " (" + std::to_string(known) + ")"));
  out->assign(target.begin(), target.end());
  if (infer >= 0) (*out)[infer] = numel / known;
  return Status::Ok();
}

}  // namespace

Transform Transform::Reshape(Shape shape) {
  Transform t;
  t.name = "Reshape";
  t.fusion = Transform::Fusion::kBytesUnchanged;
  int inferred = 0;
  bool bad_dim = false;
  for (int64_t d : shape) {
    if (d == -1) ++inferred;
    if (d < -1) bad_dim = true;
  }
  if (inferred > 1 || bad_dim) {
    t.output_spec = Refuse(
        InvalidArgument("Reshape: target shape " + ShapeToString(shape) + " must have dims >= 0 and at most one -1"));
  } else {
    t.output_spec = [shape](const ColumnSpec& in) -> Result<ColumnSpec> {
      ColumnSpec out = in;
      bool open = false;
      for (int64_t d : in.shape) open |= d == -1;
      if (open) {
        out.shape = shape;  // a -1 left in the target stays open: resolved per sample
        return out;
      }
      SINKRT_RETURN_IF_ERROR(ResolveReshape(shape, NumElements(in.shape), in.shape, &out.shape));
      return out;
    };
  }
  t.apply = [shape](Tensor& x) -> Status {
    // ResolveReshape reads x.shape (for its error) before it overwrites it.
    if (x.shape == shape) return Status::Ok();
    return ResolveReshape(shape, x.numel(), x.shape, &x.shape);
  };
  return t;
}

Transform Transform::HWC2CHW() {
  Transform t;
  t.name = "HWC2CHW";
  t.output_spec = [](const ColumnSpec& in) -> Result<ColumnSpec> {
    if (in.shape.size() == 2) return in;
    if (in.shape.size() != 3)
      return InvalidArgument("HWC2CHW: expected an image of shape [H, W, C] or [H, W], got " + ShapeToString(in.shape));
    ColumnSpec out = in;
    out.shape = {in.shape[2], in.shape[0], in.shape[1]};
    return out;
  };
  t.apply = [](Tensor& x) -> Status {
    if (x.shape.size() == 2) return Status::Ok();
    if (x.shape.size() != 3)
      return InvalidArgument("HWC2CHW: expected an image of shape [H, W, C] or [H, W], got " + ShapeToString(x.shape));
    const int64_t h = x.shape[0], w = x.shape[1], c = x.shape[2];
    const int64_t hw = h * w;
    if (c > 1 && hw > 1) {  // otherwise the bytes are already in CHW order
      const size_t es = DTypeSize(x.dtype);
      auto& scratch = Scratch(x.data.size());
      const uint8_t* in = x.data.data();
      uint8_t* out = scratch.data();
      for (int64_t p = 0; p < hw; ++p)
        for (int64_t k = 0; k < c; ++k) std::memcpy(out + (k * hw + p) * es, in + (p * c + k) * es, es);
      TakeScratch(x, scratch, x.dtype);
    }
    x.shape = {c, h, w};
    return Status::Ok();
  };
  return t;
}

}  // namespace sinkrt::host
