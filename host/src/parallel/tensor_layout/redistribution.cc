#include "host/src/parallel/tensor_layout/redistribution.h"

#include <algorithm>

namespace sinkrt::host::parallel {
namespace {

bool Contains(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

bool IsPrefix(const std::vector<int>& p, const std::vector<int>& of) {
  return p.size() <= of.size() && std::equal(p.begin(), p.end(), of.begin());
}

int64_t Numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t e : s) n *= e;
  return n;
}

// Builds a plan on one mesh, moving `cur` toward `want` a step at a time.
class Planner {
 public:
  Planner(MeshLayout cur, const MeshLayout& want, DType dtype, RedistPlan* plan)
      : cur_(std::move(cur)), want_(want), item_(static_cast<int64_t>(DTypeSize(dtype))), plan_(plan) {}

  Status Run() {
    for (const int a : want_.partial) {
      if (!Contains(cur_.partial, a)) {
        return InvalidArgument("cannot redistribute " + LayoutToString(cur_) + " to " + LayoutToString(want_) +
                               ": mesh axis " + std::to_string(a) + " would become partial");
      }
    }
    if (!want_.partial.empty() && want_.partial_mean != cur_.partial_mean) {
      return InvalidArgument("cannot redistribute " + LayoutToString(cur_) + " to " + LayoutToString(want_) +
                             ": a pending sum and a pending mean");
    }
    // Each step fixes one axis of one dim for good, or moves one toward its
    // place, so the loop ends; the bound only guards against a planner bug.
    for (int guard = 0; guard < 4 * static_cast<int>(cur_.mesh.size() * (cur_.shape.size() + 1)) + 8; ++guard) {
      if (cur_ == want_) return Status::Ok();
      if (MoveOne() || GatherOne() || ResolvePartial() || SliceOne()) continue;
      break;
    }
    return Internal("redistribution from " + LayoutToString(cur_) + " to " + LayoutToString(want_) +
                    " made no progress");
  }

 private:
  // Axes of dim d beyond the prefix it shares with what is wanted.
  size_t Kept(size_t d) const {
    size_t k = 0;
    while (k < cur_.dims[d].size() && k < want_.dims[d].size() && cur_.dims[d][k] == want_.dims[d][k]) ++k;
    return k;
  }
  bool Excess(size_t d) const { return Kept(d) < cur_.dims[d].size(); }
  // The axis dim d should be split by next, or -1.
  int NextWanted(size_t d) const {
    if (!IsPrefix(cur_.dims[d], want_.dims[d]) || cur_.dims[d].size() == want_.dims[d].size()) return -1;
    return want_.dims[d][cur_.dims[d].size()];
  }
  bool Used(int a) const {
    for (const auto& dim : cur_.dims)
      if (Contains(dim, a)) return true;
    return Contains(cur_.partial, a);
  }

  void Emit(RedistKind kind, int axis, int dim, int to_dim, const Shape& before, bool mean = false) {
    RedistStep s;
    s.mean = mean;
    s.kind = kind;
    s.mesh = cur_.mesh;
    s.axis = axis;
    s.dim = dim;
    s.to_dim = to_dim;
    s.group_size = AxisSize(cur_.mesh, axis);
    s.in_slice = before;
    s.out_slice = SliceShape(cur_);
    s.in_bytes = Numel(s.in_slice) * item_;
    s.out_bytes = Numel(s.out_slice) * item_;
    plan_->steps.push_back(std::move(s));
  }

  // An excess minor-most axis that another dim wants next: AllToAll.
  bool MoveOne() {
    for (size_t d = 0; d < cur_.dims.size(); ++d) {
      if (!Excess(d)) continue;
      const int a = cur_.dims[d].back();
      for (size_t to = 0; to < cur_.dims.size(); ++to) {
        if (to == d || NextWanted(to) != a) continue;
        const Shape before = SliceShape(cur_);
        cur_.dims[d].pop_back();
        cur_.dims[to].push_back(a);
        Emit(RedistKind::AllToAll, a, static_cast<int>(d), static_cast<int>(to), before);
        return true;
      }
    }
    return false;
  }

  bool GatherOne() {
    for (size_t d = 0; d < cur_.dims.size(); ++d) {
      if (!Excess(d)) continue;
      const int a = cur_.dims[d].back();
      const Shape before = SliceShape(cur_);
      cur_.dims[d].pop_back();
      Emit(RedistKind::AllGather, a, static_cast<int>(d), -1, before);
      return true;
    }
    return false;
  }

  // A sum the consumer wants scattered goes first (a ReduceScatter, which
  // also shrinks what any AllReduce after it moves), then the others.
  bool ResolvePartial() {
    for (const bool scatter_only : {true, false}) {
      for (const int a : cur_.partial) {
        if (Contains(want_.partial, a)) continue;
        int scatter_dim = -1;
        for (size_t d = 0; d < cur_.dims.size() && scatter_dim < 0; ++d)
          if (NextWanted(d) == a) scatter_dim = static_cast<int>(d);
        if (scatter_only && scatter_dim < 0) continue;
        const Shape before = SliceShape(cur_);
        const bool mean = cur_.partial_mean;
        cur_.partial.erase(std::find(cur_.partial.begin(), cur_.partial.end(), a));
        if (cur_.partial.empty()) cur_.partial_mean = false;
        if (scatter_dim >= 0) {
          cur_.dims[scatter_dim].push_back(a);
          Emit(RedistKind::ReduceScatter, a, scatter_dim, -1, before, mean);
        } else {
          Emit(RedistKind::AllReduce, a, -1, -1, before, mean);
        }
        return true;
      }
    }
    return false;
  }

  bool SliceOne() {
    for (size_t d = 0; d < cur_.dims.size(); ++d) {
      const int a = NextWanted(d);
      if (a < 0 || Used(a)) continue;
      const Shape before = SliceShape(cur_);
      cur_.dims[d].push_back(a);
      Emit(RedistKind::Slice, a, static_cast<int>(d), -1, before);
      return true;
    }
    return false;
  }

  MeshLayout cur_;
  const MeshLayout& want_;
  int64_t item_;
  RedistPlan* plan_;
};

Status PlanOnMesh(const TensorLayout& from, const TensorLayout& to, const DeviceMatrix& mesh, DType dtype,
                  RedistPlan* plan) {
  SINKRT_ASSIGN_OR_RETURN(MeshLayout a, ToMesh(from, mesh));
  SINKRT_ASSIGN_OR_RETURN(MeshLayout b, ToMesh(to, mesh));
  return Planner(std::move(a), b, dtype, plan).Run();
}

}  // namespace

const char* RedistKindName(RedistKind kind) {
  switch (kind) {
    case RedistKind::Slice:
      return "Slice";
    case RedistKind::AllGather:
      return "AllGather";
    case RedistKind::AllToAll:
      return "AllToAll";
    case RedistKind::ReduceScatter:
      return "ReduceScatter";
    case RedistKind::AllReduce:
      return "AllReduce";
  }
  return "?";
}

std::string RedistStep::ToString() const {
  auto shape = [](const Shape& s) { return ShapeToString(s); };
  std::string s = std::string(RedistKindName(kind)) + (mean ? "(mean)" : "") + " axis " + std::to_string(axis) + " (" +
                  std::to_string(group_size) + " ranks)";
  if (dim >= 0) s += " dim " + std::to_string(dim);
  if (to_dim >= 0) s += "->" + std::to_string(to_dim);
  return s + ": " + shape(in_slice) + " -> " + shape(out_slice) + ", " + std::to_string(in_bytes) + " -> " +
         std::to_string(out_bytes) + " bytes";
}

int64_t RedistPlan::CommBytes() const {
  int64_t n = 0;
  for (const RedistStep& s : steps)
    if (s.kind != RedistKind::Slice) n += s.in_bytes;
  return n;
}

Result<RedistPlan> PlanRedistribution(const TensorLayout& from, const TensorLayout& to, DType dtype) {
  SINKRT_RETURN_IF_ERROR(CheckLayout(from));
  SINKRT_RETURN_IF_ERROR(CheckLayout(to));
  if (from.shape != to.shape) {
    return InvalidArgument("cannot redistribute " + LayoutToString(from) + " to " + LayoutToString(to) +
                           ": the shapes differ");
  }
  RedistPlan plan;
  Result<DeviceMatrix> mesh = CommonMesh(from.device_matrix, to.device_matrix);
  if (mesh.ok()) {
    SINKRT_RETURN_IF_ERROR(PlanOnMesh(from, to, *mesh, dtype, &plan));
    return plan;
  }
  if (DeviceCount(from.device_matrix) != DeviceCount(to.device_matrix)) return mesh.status();
  // No common refinement: whole on the producer's matrix, then sliced on the
  // consumer's (MindSpore goes through a repeated layout the same way).
  if (!to.partial.empty()) {
    return InvalidArgument("cannot redistribute " + LayoutToString(from) + " to " + LayoutToString(to) +
                           ": a partial layout on another device matrix");
  }
  SINKRT_RETURN_IF_ERROR(
      PlanOnMesh(from, ReplicatedLayout(from.device_matrix, from.shape), from.device_matrix, dtype, &plan));
  SINKRT_RETURN_IF_ERROR(PlanOnMesh(ReplicatedLayout(to.device_matrix, to.shape), to, to.device_matrix, dtype, &plan));
  return plan;
}

}  // namespace sinkrt::host::parallel
