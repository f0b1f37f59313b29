// Tensor layouts of the sharding modes (SEMI_AUTO_PARALLEL, AUTO_PARALLEL):
// which slice of a tensor each rank of a stage holds.
//
// A layout is MindSpore's: a device matrix (the stage's ranks arranged as a
// row-major array, rank r at the mixed-radix coordinate of r) and a tensor
// map (per tensor dim, the device-matrix axis that splits it, counted from
// the right as MindSpore counts them; -1 = not split). We add the state
// MindSpore keeps inside an op's forward communication: `partial`, the axes
// along which the ranks hold addends of a sum still to be taken. Making it
// part of the layout lets the consumer choose between AllReduce (it wants
// the tensor whole) and ReduceScatter (it wants it split), as GSPMD and
// DTensor do. Axes that neither split the tensor nor hold a partial sum
// are replicas: ranks that differ only along them hold the same bytes
// (MindSpore's repeated calculation).
//
// Redistribution (redistribution.h) compares two layouts on one finer
// "mesh" in which a tensor dim may be split by several axes, major first;
// MeshLayout is that form. Every function here is pure and names what is
// wrong in its error.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "sinkrt/runtime/dtype.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host::parallel {

// Extents of the device matrix, leftmost the most significant; the product
// is the number of ranks of the stage.
using DeviceMatrix = std::vector<int64_t>;

struct TensorLayout {
  DeviceMatrix device_matrix;
  std::vector<int> tensor_map;  // one per tensor dim: an axis counted from the right, or -1
  std::vector<int> partial;     // axes counted from the right, ascending
  Shape shape;                  // the whole tensor's shape
  // The pending reduction over `partial` is a mean, not a sum (a loss or a
  // ReduceMean over a split dim: each rank holds the mean of its slice).
  bool partial_mean = false;

  bool operator==(const TensorLayout&) const = default;
};

// A layout on which every rank holds the whole tensor.
TensorLayout ReplicatedLayout(DeviceMatrix device_matrix, Shape shape);

// Ranks of the device matrix (its product).
int64_t DeviceCount(const DeviceMatrix& dm);
// The extent of axis `axis` counted from the right.
int64_t AxisSize(const DeviceMatrix& dm, int axis);
// Rank r's coordinate along `axis` (counted from the right).
int64_t AxisCoordinate(const DeviceMatrix& dm, int axis, int64_t rank);

// A layout is well formed: a valid device matrix (every extent >= 1), one
// map entry per dim, each axis in range and used by one dim at most, each
// split dim divisible by its axis, partial axes in range, ascending, unique
// and splitting no dim.
Status CheckLayout(const TensorLayout& layout);

// The shape of every rank's slice (CheckLayout must hold).
Shape SliceShape(const TensorLayout& layout);
// Where rank `rank`'s slice starts in the whole tensor, per dim.
std::vector<int64_t> SliceOffset(const TensorLayout& layout, int64_t rank);
// Axes along which the ranks hold the same slice (neither split nor partial).
std::vector<int> ReplicaAxes(const TensorLayout& layout);

// The ranks that differ from `rank` only along `axes` (counted from the
// right), ascending: the group of a collective over those axes. Ascending
// rank order is coordinate order along one axis, so an AllGather over the
// group concatenates slices in tensor order.
std::vector<int64_t> GroupAlong(const DeviceMatrix& dm, std::span<const int> axes, int64_t rank);

// "dm[2,1,4] map[2,0] partial[1] shape[64,64]" (partial only when set;
// "partial-mean" for a pending mean).
std::string LayoutToString(const TensorLayout& layout);

// ---- the finer form redistribution works on ---------------------------------

// A layout on a mesh: per tensor dim the mesh axes (counted from the right)
// that split it, major first (the first axis picks the coarsest block).
struct MeshLayout {
  DeviceMatrix mesh;
  std::vector<std::vector<int>> dims;  // one list per tensor dim
  std::vector<int> partial;            // ascending
  Shape shape;
  bool partial_mean = false;

  bool operator==(const MeshLayout&) const = default;
};

// The coarsest device matrix that refines both `a` and `b` (the same ranks
// in the same order): the cut points of each (products of its rightmost
// extents) merged. Two matrices over different rank counts, or whose cuts
// do not divide one another ([2,3] and [3,2]), have none: the error says so.
Result<DeviceMatrix> CommonMesh(const DeviceMatrix& a, const DeviceMatrix& b);

// `layout` on `mesh`, which must refine its device matrix (CommonMesh).
Result<MeshLayout> ToMesh(const TensorLayout& layout, const DeviceMatrix& mesh);

Shape SliceShape(const MeshLayout& layout);
std::string LayoutToString(const MeshLayout& layout);

}  // namespace sinkrt::host::parallel
