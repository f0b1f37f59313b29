#include "host/src/parallel/tensor_layout/layout.h"

#include <algorithm>
#include <set>

namespace sinkrt::host::parallel {
namespace {

std::string Join(std::span<const int64_t> v) { return ShapeToString(v); }

std::string Join(std::span<const int> v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  return s + "]";
}

// Ranks an axis (counted from the right) steps over: the product of the
// extents to its right.
int64_t AxisStride(const DeviceMatrix& dm, int axis) {
  int64_t stride = 1;
  for (int i = 0; i < axis; ++i) stride *= dm[dm.size() - 1 - i];
  return stride;
}

Status CheckDeviceMatrix(const DeviceMatrix& dm, const std::string& what) {
  if (dm.empty()) return InvalidArgument(what + ": the device matrix is empty");
  for (int64_t e : dm)
    if (e < 1) return InvalidArgument(what + ": device matrix " + Join(dm) + " has an extent below 1");
  return Status::Ok();
}

}  // namespace

TensorLayout ReplicatedLayout(DeviceMatrix device_matrix, Shape shape) {
  TensorLayout l;
  l.device_matrix = std::move(device_matrix);
  l.tensor_map.assign(shape.size(), -1);
  l.shape = std::move(shape);
  return l;
}

int64_t DeviceCount(const DeviceMatrix& dm) {
  int64_t n = 1;
  for (int64_t e : dm) n *= e;
  return n;
}

int64_t AxisSize(const DeviceMatrix& dm, int axis) { return dm[dm.size() - 1 - axis]; }

int64_t AxisCoordinate(const DeviceMatrix& dm, int axis, int64_t rank) {
  return rank / AxisStride(dm, axis) % AxisSize(dm, axis);
}

Status CheckLayout(const TensorLayout& l) {
  const std::string what = "layout " + LayoutToString(l);
  SINKRT_RETURN_IF_ERROR(CheckDeviceMatrix(l.device_matrix, what));
  const int axes = static_cast<int>(l.device_matrix.size());
  if (l.tensor_map.size() != l.shape.size()) {
    return InvalidArgument(what + ": the tensor map has " + std::to_string(l.tensor_map.size()) +
                           " entries for a tensor of rank " + std::to_string(l.shape.size()));
  }
  std::vector<bool> used(axes, false);
  for (size_t d = 0; d < l.tensor_map.size(); ++d) {
    const int a = l.tensor_map[d];
    if (a == -1) continue;
    if (a < 0 || a >= axes) {
      return InvalidArgument(what + ": dim " + std::to_string(d) + " maps to axis " + std::to_string(a) +
                             ", outside [-1, " + std::to_string(axes) + ")");
    }
    if (used[a]) {
      return InvalidArgument(what + ": axis " + std::to_string(a) + " splits more than one dim");
    }
    used[a] = true;
    if (l.shape[d] % AxisSize(l.device_matrix, a) != 0) {
      return InvalidArgument(what + ": dim " + std::to_string(d) + " (" + std::to_string(l.shape[d]) +
                             ") is not divisible by axis " + std::to_string(a) + "'s " +
                             std::to_string(AxisSize(l.device_matrix, a)) + " devices");
    }
  }
  for (size_t i = 0; i < l.partial.size(); ++i) {
    const int a = l.partial[i];
    if (a < 0 || a >= axes) {
      return InvalidArgument(what + ": partial axis " + std::to_string(a) + " is outside [0, " + std::to_string(axes) +
                             ")");
    }
    if (i > 0 && a <= l.partial[i - 1]) return InvalidArgument(what + ": partial axes must be ascending and unique");
    if (used[a]) return InvalidArgument(what + ": axis " + std::to_string(a) + " both splits a dim and is partial");
  }
  return Status::Ok();
}

Shape SliceShape(const TensorLayout& l) {
  Shape s = l.shape;
  for (size_t d = 0; d < s.size(); ++d)
    if (l.tensor_map[d] >= 0) s[d] /= AxisSize(l.device_matrix, l.tensor_map[d]);
  return s;
}

std::vector<int64_t> SliceOffset(const TensorLayout& l, int64_t rank) {
  const Shape slice = SliceShape(l);
  std::vector<int64_t> offset(l.shape.size(), 0);
  for (size_t d = 0; d < offset.size(); ++d)
    if (l.tensor_map[d] >= 0) offset[d] = AxisCoordinate(l.device_matrix, l.tensor_map[d], rank) * slice[d];
  return offset;
}

std::vector<int> ReplicaAxes(const TensorLayout& l) {
  std::vector<int> axes;
  for (int a = 0; a < static_cast<int>(l.device_matrix.size()); ++a) {
    const bool splits = std::find(l.tensor_map.begin(), l.tensor_map.end(), a) != l.tensor_map.end();
    const bool partial = std::find(l.partial.begin(), l.partial.end(), a) != l.partial.end();
    if (!splits && !partial) axes.push_back(a);
  }
  return axes;
}

std::vector<int64_t> GroupAlong(const DeviceMatrix& dm, std::span<const int> axes, int64_t rank) {
  std::vector<int64_t> group;
  const int n = static_cast<int>(dm.size());
  for (int64_t r = 0; r < DeviceCount(dm); ++r) {
    bool same = true;
    for (int a = 0; a < n && same; ++a) {
      if (std::find(axes.begin(), axes.end(), a) != axes.end()) continue;
      same = AxisCoordinate(dm, a, r) == AxisCoordinate(dm, a, rank);
    }
    if (same) group.push_back(r);
  }
  return group;
}

std::string LayoutToString(const TensorLayout& l) {
  std::string s = "dm" + Join(l.device_matrix) + " map" + Join(l.tensor_map);
  if (!l.partial.empty()) s += (l.partial_mean ? " partial-mean" : " partial") + Join(l.partial);
  return s + " shape" + Join(l.shape);
}

Result<DeviceMatrix> CommonMesh(const DeviceMatrix& a, const DeviceMatrix& b) {
  SINKRT_RETURN_IF_ERROR(CheckDeviceMatrix(a, "device matrix " + Join(a)));
  SINKRT_RETURN_IF_ERROR(CheckDeviceMatrix(b, "device matrix " + Join(b)));
  if (DeviceCount(a) != DeviceCount(b)) {
    return InvalidArgument("device matrices " + Join(a) + " and " + Join(b) + " arrange " +
                           std::to_string(DeviceCount(a)) + " and " + std::to_string(DeviceCount(b)) + " devices");
  }
  std::set<int64_t> cuts;
  for (const DeviceMatrix* dm : {&a, &b}) {
    int64_t c = 1;
    for (auto it = dm->rbegin(); it != dm->rend(); ++it) cuts.insert(c *= *it);
  }
  cuts.erase(1);
  DeviceMatrix mesh;  // built right to left
  int64_t below = 1;
  for (int64_t c : cuts) {
    if (c % below != 0) {
      return InvalidArgument("device matrices " + Join(a) + " and " + Join(b) + " have no common refinement (" +
                             std::to_string(below) + " ranks do not divide " + std::to_string(c) + ")");
    }
    mesh.push_back(c / below);
    below = c;
  }
  if (mesh.empty()) mesh.push_back(1);
  std::reverse(mesh.begin(), mesh.end());
  return mesh;
}

Result<MeshLayout> ToMesh(const TensorLayout& l, const DeviceMatrix& mesh) {
  SINKRT_RETURN_IF_ERROR(CheckLayout(l));
  if (DeviceCount(mesh) != DeviceCount(l.device_matrix)) {
    return InvalidArgument("mesh " + Join(mesh) + " does not arrange the " +
                           std::to_string(DeviceCount(l.device_matrix)) + " devices of layout " + LayoutToString(l));
  }
  // Original axis i covers the mesh axes whose strides lie in
  // [stride(i), stride(i) * extent(i)); each of its bounds must be a mesh cut.
  const int mesh_axes = static_cast<int>(mesh.size());
  auto covered = [&](int axis) -> Result<std::vector<int>> {
    const int64_t low = AxisStride(l.device_matrix, axis), high = low * AxisSize(l.device_matrix, axis);
    std::vector<int> fine;         // major first
    if (low == high) return fine;  // an axis of extent 1 splits nothing
    bool low_cut = false, high_cut = high == DeviceCount(mesh);
    for (int j = mesh_axes - 1; j >= 0; --j) {
      const int64_t s = AxisStride(mesh, j);
      low_cut |= s == low;
      high_cut |= s == high;
      if (s >= low && s < high && AxisSize(mesh, j) > 1) fine.push_back(j);
    }
    if (!low_cut || !high_cut) {
      return InvalidArgument("mesh " + Join(mesh) + " does not refine device matrix " + Join(l.device_matrix) +
                             " (axis " + std::to_string(axis) + ")");
    }
    return fine;
  };
  MeshLayout m;
  m.mesh = mesh;
  m.shape = l.shape;
  m.partial_mean = l.partial_mean && !l.partial.empty();
  m.dims.resize(l.shape.size());
  for (size_t d = 0; d < l.shape.size(); ++d) {
    if (l.tensor_map[d] < 0) continue;
    SINKRT_ASSIGN_OR_RETURN(m.dims[d], covered(l.tensor_map[d]));
  }
  for (int a : l.partial) {
    SINKRT_ASSIGN_OR_RETURN(std::vector<int> fine, covered(a));
    m.partial.insert(m.partial.end(), fine.begin(), fine.end());
  }
  std::sort(m.partial.begin(), m.partial.end());
  return m;
}

Shape SliceShape(const MeshLayout& l) {
  Shape s = l.shape;
  for (size_t d = 0; d < s.size(); ++d)
    for (int a : l.dims[d]) s[d] /= AxisSize(l.mesh, a);
  return s;
}

std::string LayoutToString(const MeshLayout& l) {
  std::string s = "mesh" + Join(l.mesh) + " dims[";
  for (size_t d = 0; d < l.dims.size(); ++d) {
    if (d) s += ',';
    s += l.dims[d].empty() ? "-" : Join(l.dims[d]);
  }
  s += "]";
  if (!l.partial.empty()) s += (l.partial_mean ? " partial-mean" : " partial") + Join(l.partial);
  return s + " shape" + Join(l.shape);
}

}  // namespace sinkrt::host::parallel
