/// \file
/// Tensor: a host-side owned array (dataset samples, batches, checkpoints).
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "sinkrt/runtime/dtype.h"

namespace sinkrt::host {

/// A host tensor: dtype, shape and its bytes.
struct Tensor {
  DType dtype = DType::Invalid;  ///< element type
  Shape shape;                   ///< its dims
  std::vector<uint8_t> data;     ///< row-major, NumElements(shape) * DTypeSize(dtype) bytes

  /// A tensor of zeros.
  static Tensor Zeros(DType dtype, Shape shape) {
    Tensor t{dtype, std::move(shape), {}};
    t.data.assign(static_cast<size_t>(NumElements(t.shape)) * DTypeSize(dtype), 0);
    return t;
  }
  /// Elements: the product of the dims.
  int64_t numel() const { return NumElements(shape); }
  /// The bytes as elements of T (T must match dtype).
  /// @{
  template <typename T>
  T* as() {
    return reinterpret_cast<T*>(data.data());
  }
  template <typename T>
  const T* as() const {
    return reinterpret_cast<const T*>(data.data());
  }
  /// @}
  std::span<const uint8_t> bytes() const { return data; }  ///< the bytes, read-only
};

/// One sample or one batch: a tensor per column, in column order.
using Row = std::vector<Tensor>;

/// One column a dataset yields: its name, element type and shape.
struct ColumnSpec {
  std::string name;              ///< the column's name
  DType dtype = DType::Invalid;  ///< element type
  Shape shape;                   ///< per sample for a source; per batch (batch dim first) after Batch()
};

}  // namespace sinkrt::host
