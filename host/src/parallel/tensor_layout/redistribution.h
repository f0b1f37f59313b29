// Redistribution: the collectives and local slices that turn a tensor laid
// out one way (its producer's output layout) into another (what its
// consumer needs), as MindSpore's TensorRedistribution does.
//
// Both layouts are put on their common mesh (layout.h, CommonMesh), where a
// tensor dim is split by a list of mesh axes, major first. Every primitive
// changes one mesh axis at the minor end of one dim's list:
//
//   split(d) -> replicated     AllGather along the axis, concatenating on d
//   replicated -> split(d)     Slice: local, no communication
//   split(d) -> split(d')      AllToAll: gathers d, splits d'
//   partial -> replicated      AllReduce
//   partial -> split(d)        ReduceScatter, scattering on d
//   replicated -> partial      refused (the forward never needs it)
//
// The plan removes unwanted axes first (an AllToAll where the axis moves to
// the minor end of another dim, else an AllGather), then resolves pending
// sums (a ReduceScatter where the consumer wants the axis to split a dim
// next, else an AllReduce), then slices. When the two device matrices have
// no common refinement the tensor goes through the replicated layout:
// gathered on the producer's matrix, sliced on the consumer's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "host/src/parallel/tensor_layout/layout.h"
#include "sinkrt/runtime/dtype.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host::parallel {

enum class RedistKind : uint8_t { Slice, AllGather, AllToAll, ReduceScatter, AllReduce };
const char* RedistKindName(RedistKind kind);

struct RedistStep {
  RedistKind kind = RedistKind::Slice;
  DeviceMatrix mesh;  // the mesh `axis` counts on
  int axis = 0;       // the mesh axis (from the right) it runs along
  int dim = -1;       // Slice, ReduceScatter: the dim it splits; AllGather, AllToAll: the dim it gathers
  int to_dim = -1;    // AllToAll: the dim it splits
  int64_t group_size = 1;
  bool mean = false;          // AllReduce, ReduceScatter: the pending reduction is a mean
  Shape in_slice, out_slice;  // this rank's shapes before and after
  int64_t in_bytes = 0, out_bytes = 0;

  // "AllGather axis 0 (2 ranks) dim 1: [32,16] -> [32,32], 2048 -> 4096 bytes"
  std::string ToString() const;
};

struct RedistPlan {
  std::vector<RedistStep> steps;  // in order; empty when the layouts agree
  // Bytes the collectives take in on each rank (Slice counts nothing).
  int64_t CommBytes() const;
};

// The steps from `from` to `to` (same shape, same device count) for a
// tensor of `dtype`.
Result<RedistPlan> PlanRedistribution(const TensorLayout& from, const TensorLayout& to, DType dtype);

}  // namespace sinkrt::host::parallel
