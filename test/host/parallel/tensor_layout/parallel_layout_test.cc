// Tensor layouts (host/src/parallel/tensor_layout/layout.h) and the redistribution plans
// between them (redistribution.h): each transition emits exactly its
// expected primitives with the expected byte counts.
#include <gtest/gtest.h>

#include "host/src/parallel/tensor_layout/layout.h"
#include "host/src/parallel/tensor_layout/redistribution.h"

namespace sinkrt::host::parallel {
namespace {

TensorLayout L(DeviceMatrix dm, std::vector<int> map, Shape shape, std::vector<int> partial = {}) {
  return TensorLayout{std::move(dm), std::move(map), std::move(partial), std::move(shape)};
}

// MindSpore's worked example (sharding_propagation.md): MatMul X[64,64] by
// W[64,64] with strategy ((2,1),(1,4)) on 8 devices: device matrix [2,1,4],
// X's map [2,1], W's [1,0]; X's rows go to ranks 0-3 and 4-7, W's column
// block j to ranks j and j+4.
TEST(LayoutTest, MindSporeMatMulExample) {
  const TensorLayout x = L({2, 1, 4}, {2, 1}, {64, 64});
  const TensorLayout w = L({2, 1, 4}, {1, 0}, {64, 64});
  ASSERT_TRUE(CheckLayout(x).ok());
  ASSERT_TRUE(CheckLayout(w).ok());
  EXPECT_EQ(SliceShape(x), (Shape{32, 64}));
  EXPECT_EQ(SliceShape(w), (Shape{64, 16}));
  for (int64_t r = 0; r < 8; ++r) {
    EXPECT_EQ(SliceOffset(x, r), (std::vector<int64_t>{r < 4 ? 0 : 32, 0})) << r;
    EXPECT_EQ(SliceOffset(w, r), (std::vector<int64_t>{0, (r % 4) * 16})) << r;
  }
  // W's slice is repeated along axis 2 (axis 1, of extent 1, splits its dim 0 into one).
  EXPECT_EQ(ReplicaAxes(w), (std::vector<int>{2}));
  EXPECT_EQ(ReplicaAxes(x), (std::vector<int>{0}));
}

TEST(LayoutTest, GroupsAlongAxes) {
  const DeviceMatrix dm = {2, 1, 4};
  const int axis2[] = {2}, axis0[] = {0}, both[] = {0, 2};
  EXPECT_EQ(GroupAlong(dm, axis2, 1), (std::vector<int64_t>{1, 5}));
  EXPECT_EQ(GroupAlong(dm, axis0, 5), (std::vector<int64_t>{4, 5, 6, 7}));
  EXPECT_EQ(GroupAlong(dm, both, 3), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(GroupAlong(dm, {}, 6), (std::vector<int64_t>{6}));
  EXPECT_EQ(AxisCoordinate(dm, 0, 6), 2);
  EXPECT_EQ(AxisCoordinate(dm, 2, 6), 1);
}

TEST(LayoutTest, RefusesMalformedLayoutsNamingTheProblem) {
  auto error = [](const TensorLayout& l) { return CheckLayout(l).ToString(); };
  EXPECT_NE(error(L({4}, {0, -1}, {6, 8})).find("dim 0 (6) is not divisible by axis 0's 4 devices"), std::string::npos);
  EXPECT_NE(error(L({2, 2}, {0, 0}, {4, 4})).find("axis 0 splits more than one dim"), std::string::npos);
  EXPECT_NE(error(L({2, 2}, {0}, {4, 4})).find("the tensor map has 1 entries for a tensor of rank 2"),
            std::string::npos);
  EXPECT_NE(error(L({2, 2}, {2, -1}, {4, 4})).find("dim 0 maps to axis 2, outside [-1, 2)"), std::string::npos);
  EXPECT_NE(error(L({2, 2}, {0, -1}, {4, 4}, {0})).find("axis 0 both splits a dim and is partial"), std::string::npos);
  EXPECT_NE(error(L({2, 0}, {-1}, {4})).find("has an extent below 1"), std::string::npos);
  EXPECT_NE(error(L({4}, {0, -1}, {6, 8})).find("layout dm[4] map[0,-1] shape[6,8]"), std::string::npos);
}

TEST(LayoutTest, CommonMeshMergesCutPoints) {
  EXPECT_EQ(*CommonMesh({2, 4}, {4, 2}), (DeviceMatrix{2, 2, 2}));
  EXPECT_EQ(*CommonMesh({8}, {2, 4}), (DeviceMatrix{2, 4}));
  EXPECT_EQ(*CommonMesh({2, 1, 4}, {8}), (DeviceMatrix{2, 4}));
  EXPECT_EQ(*CommonMesh({1}, {1, 1}), (DeviceMatrix{1}));
  Result<DeviceMatrix> none = CommonMesh({2, 3}, {3, 2});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().ToString().find("no common refinement"), std::string::npos);
  EXPECT_FALSE(CommonMesh({2, 2}, {8}).ok());
}

TEST(LayoutTest, ToMeshListsFineAxesMajorFirst) {
  // dm [2,4]: axis 1 (extent 2) is mesh axis 2, axis 0 (extent 4) mesh axes 1 and 0.
  Result<MeshLayout> m = ToMesh(L({2, 4}, {1, 0}, {8, 8}, {}), {2, 2, 2});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->dims, (std::vector<std::vector<int>>{{2}, {1, 0}}));
  EXPECT_EQ(SliceShape(*m), (Shape{4, 2}));
  Result<MeshLayout> p = ToMesh(L({2, 4}, {-1, 1}, {8, 8}, {0}), {2, 2, 2});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->partial, (std::vector<int>{0, 1}));
  EXPECT_FALSE(ToMesh(L({2, 4}, {1, 0}, {8, 8}), {4, 2}).ok());
}

// ---- redistribution ------------------------------------------------------------

struct Expect {
  RedistKind kind;
  int axis, dim, to_dim;
  int64_t in_bytes, out_bytes;
};

void ExpectPlan(const TensorLayout& from, const TensorLayout& to, const std::vector<Expect>& want) {
  Result<RedistPlan> plan = PlanRedistribution(from, to, DType::F32);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  std::string got;
  for (const RedistStep& s : plan->steps) got += s.ToString() + "\n";
  ASSERT_EQ(plan->steps.size(), want.size()) << LayoutToString(from) << " -> " << LayoutToString(to) << ":\n" << got;
  for (size_t i = 0; i < want.size(); ++i) {
    const RedistStep& s = plan->steps[i];
    EXPECT_EQ(s.kind, want[i].kind) << got;
    EXPECT_EQ(s.axis, want[i].axis) << got;
    EXPECT_EQ(s.dim, want[i].dim) << got;
    EXPECT_EQ(s.to_dim, want[i].to_dim) << got;
    EXPECT_EQ(s.in_bytes, want[i].in_bytes) << got;
    EXPECT_EQ(s.out_bytes, want[i].out_bytes) << got;
  }
}

// One axis of 4 ranks, an f32 [8,16] tensor (512 bytes whole).
TEST(RedistributionTest, EachTransitionOnOneAxis) {
  const DeviceMatrix dm = {4};
  const TensorLayout rep = L(dm, {-1, -1}, {8, 16});
  const TensorLayout rows = L(dm, {0, -1}, {8, 16});
  const TensorLayout cols = L(dm, {-1, 0}, {8, 16});
  const TensorLayout partial = L(dm, {-1, -1}, {8, 16}, {0});
  ExpectPlan(rows, rep, {{RedistKind::AllGather, 0, 0, -1, 128, 512}});
  ExpectPlan(cols, rep, {{RedistKind::AllGather, 0, 1, -1, 128, 512}});
  ExpectPlan(rep, cols, {{RedistKind::Slice, 0, 1, -1, 512, 128}});
  ExpectPlan(rows, cols, {{RedistKind::AllToAll, 0, 0, 1, 128, 128}});
  ExpectPlan(partial, rep, {{RedistKind::AllReduce, 0, -1, -1, 512, 512}});
  ExpectPlan(partial, rows, {{RedistKind::ReduceScatter, 0, 0, -1, 512, 128}});
  ExpectPlan(rows, rows, {});
  ExpectPlan(partial, partial, {});
  Result<RedistPlan> plan = PlanRedistribution(rows, rep, DType::F32);
  EXPECT_EQ(plan->CommBytes(), 128);
  EXPECT_EQ(plan->steps[0].group_size, 4);
  EXPECT_EQ(PlanRedistribution(rep, cols, DType::F32)->CommBytes(), 0);
  EXPECT_EQ(PlanRedistribution(rows, rep, DType::BF16)->steps[0].in_bytes, 64);
}

TEST(RedistributionTest, RefusesMakingATensorPartial) {
  Result<RedistPlan> plan = PlanRedistribution(L({4}, {-1}, {8}), L({4}, {-1}, {8}, {0}), DType::F32);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().ToString().find("mesh axis 0 would become partial"), std::string::npos);
  EXPECT_FALSE(PlanRedistribution(L({4}, {-1}, {8}), L({4}, {-1}, {4}), DType::F32).ok());
  EXPECT_FALSE(PlanRedistribution(L({4}, {0}, {8}), L({2}, {0}, {8}), DType::F32).ok());
}

// Two axes of 2 (ranks 0-3), an f32 [8,8] tensor (256 bytes whole).
TEST(RedistributionTest, TwoAxes) {
  const DeviceMatrix dm = {2, 2};
  // Megatron's row-parallel output: rows split on axis 1, partial on axis 0.
  ExpectPlan(L(dm, {1, -1}, {8, 8}, {0}), L(dm, {1, -1}, {8, 8}), {{RedistKind::AllReduce, 0, -1, -1, 128, 128}});
  // ... or scattered on its columns (sequence parallel).
  ExpectPlan(L(dm, {1, -1}, {8, 8}, {0}), L(dm, {1, 0}, {8, 8}), {{RedistKind::ReduceScatter, 0, 1, -1, 128, 64}});
  // A dim split by both axes, major axis 1: gathering the whole dim takes
  // the minor axis first.
  ExpectPlan(L({4}, {0, -1}, {8, 8}), L({4}, {-1, -1}, {8, 8}), {{RedistKind::AllGather, 0, 0, -1, 64, 256}});
  ExpectPlan(L(dm, {1, 0}, {8, 8}), L(dm, {-1, -1}, {8, 8}),
             {{RedistKind::AllGather, 1, 0, -1, 64, 128}, {RedistKind::AllGather, 0, 1, -1, 128, 256}});
  // Swapping the axes of two dims: gather one, move the other, slice.
  ExpectPlan(L(dm, {1, 0}, {8, 8}), L(dm, {0, 1}, {8, 8}),
             {{RedistKind::AllGather, 1, 0, -1, 64, 128},
              {RedistKind::AllToAll, 0, 1, 0, 128, 128},
              {RedistKind::Slice, 1, 1, -1, 128, 64}});
  // Data parallel to model parallel on a [2,2] mesh: rows on axis 1 kept,
  // columns sliced on axis 0.
  ExpectPlan(L(dm, {1, -1}, {8, 8}), L(dm, {1, 0}, {8, 8}), {{RedistKind::Slice, 0, 1, -1, 128, 64}});
}

TEST(RedistributionTest, AcrossDeviceMatrices) {
  // [2,4] to [8]: the common mesh is [2,4]; dim 0 goes from axis 1 alone to
  // axes (1, 0): one slice, no communication.
  ExpectPlan(L({2, 4}, {1, -1}, {16, 4}), L({8}, {0, -1}, {16, 4}), {{RedistKind::Slice, 0, 0, -1, 128, 32}});
  // [2,3] and [3,2] have no common refinement: gathered on the first,
  // sliced on the second.
  Result<RedistPlan> plan = PlanRedistribution(L({2, 3}, {1, -1}, {6, 6}), L({3, 2}, {1, -1}, {6, 6}), DType::F32);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->steps.size(), 2u);
  EXPECT_EQ(plan->steps[0].kind, RedistKind::AllGather);
  EXPECT_EQ(plan->steps[0].mesh, (DeviceMatrix{2, 3}));
  EXPECT_EQ(plan->steps[0].group_size, 2);
  EXPECT_EQ(plan->steps[1].kind, RedistKind::Slice);
  EXPECT_EQ(plan->steps[1].mesh, (DeviceMatrix{3, 2}));
  EXPECT_EQ(plan->steps[1].out_slice, (Shape{2, 6}));
}

// Every step's group size and mesh too (ExpectPlan checks the rest).
void ExpectGroups(const TensorLayout& from, const TensorLayout& to, const DeviceMatrix& mesh,
                  const std::vector<int64_t>& groups) {
  Result<RedistPlan> plan = PlanRedistribution(from, to, DType::F32);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->steps.size(), groups.size());
  for (size_t i = 0; i < groups.size(); ++i) {
    EXPECT_EQ(plan->steps[i].group_size, groups[i]) << plan->steps[i].ToString();
    EXPECT_EQ(plan->steps[i].mesh, mesh) << plan->steps[i].ToString();
  }
}

// Pending sums together with other changes, on two axes of 2 (ranks 0-3),
// an f32 [8,8] tensor (256 bytes whole): unwanted axes go first, then the
// sums, then the slices.
TEST(RedistributionTest, PartialCombinedWithOtherChanges) {
  const DeviceMatrix dm = {2, 2};
  // Rows on axis 1, partial on axis 0 -> replicated: gather, then reduce
  // the gathered (whole) tensor.
  ExpectPlan(L(dm, {1, -1}, {8, 8}, {0}), L(dm, {-1, -1}, {8, 8}),
             {{RedistKind::AllGather, 1, 0, -1, 128, 256}, {RedistKind::AllReduce, 0, -1, -1, 256, 256}});
  ExpectGroups(L(dm, {1, -1}, {8, 8}, {0}), L(dm, {-1, -1}, {8, 8}), dm, {2, 2});
  // Rows on axis 1, partial on axis 0 -> columns on axis 1: the rows move
  // to the columns, then the sum is reduced.
  ExpectPlan(L(dm, {1, -1}, {8, 8}, {0}), L(dm, {-1, 1}, {8, 8}),
             {{RedistKind::AllToAll, 1, 0, 1, 128, 128}, {RedistKind::AllReduce, 0, -1, -1, 128, 128}});
  // Partial on both axes -> replicated: one AllReduce per axis.
  ExpectPlan(L(dm, {-1, -1}, {8, 8}, {0, 1}), L(dm, {-1, -1}, {8, 8}),
             {{RedistKind::AllReduce, 0, -1, -1, 256, 256}, {RedistKind::AllReduce, 1, -1, -1, 256, 256}});
  // Partial on both -> rows on axis 1: the ReduceScatter first, so that
  // the AllReduce moves half the bytes.
  ExpectPlan(L(dm, {-1, -1}, {8, 8}, {0, 1}), L(dm, {1, -1}, {8, 8}),
             {{RedistKind::ReduceScatter, 1, 0, -1, 256, 128}, {RedistKind::AllReduce, 0, -1, -1, 128, 128}});
  // ... and rows on axis 1, columns on axis 0: two ReduceScatters.
  ExpectPlan(L(dm, {-1, -1}, {8, 8}, {0, 1}), L(dm, {1, 0}, {8, 8}),
             {{RedistKind::ReduceScatter, 0, 1, -1, 256, 128}, {RedistKind::ReduceScatter, 1, 0, -1, 128, 64}});
  // Partial on axis 0 -> rows on axis 1 and columns on axis 0: reduce
  // along axis 0 scattering the columns, slice the rows locally.
  ExpectPlan(L(dm, {-1, -1}, {8, 8}, {0}), L(dm, {1, 0}, {8, 8}),
             {{RedistKind::ReduceScatter, 0, 1, -1, 256, 128}, {RedistKind::Slice, 1, 0, -1, 128, 64}});
}

// A pending mean stays a mean through the collective that resolves it.
TEST(RedistributionTest, PendingMeanIsCarriedByItsCollective) {
  TensorLayout mean = L({4}, {-1, -1}, {8, 16}, {0});
  mean.partial_mean = true;
  Result<RedistPlan> all = PlanRedistribution(mean, L({4}, {-1, -1}, {8, 16}), DType::F32);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->steps.size(), 1u);
  EXPECT_EQ(all->steps[0].kind, RedistKind::AllReduce);
  EXPECT_TRUE(all->steps[0].mean);
  Result<RedistPlan> scatter = PlanRedistribution(mean, L({4}, {0, -1}, {8, 16}), DType::F32);
  ASSERT_TRUE(scatter.ok()) << scatter.status().ToString();
  ASSERT_EQ(scatter->steps.size(), 1u);
  EXPECT_EQ(scatter->steps[0].kind, RedistKind::ReduceScatter);
  EXPECT_TRUE(scatter->steps[0].mean);
  EXPECT_EQ(scatter->CommBytes(), 512);
  // A sum is not a mean.
  EXPECT_FALSE(
      PlanRedistribution(L({4}, {-1, -1}, {8, 16}, {0}), L({4}, {-1, -1}, {8, 16}), DType::F32)->steps[0].mean);
}

// Byte counts follow the dtype for every primitive: bf16 halves them.
TEST(RedistributionTest, Bf16BytesForEveryPrimitive) {
  const DeviceMatrix dm = {4};
  const TensorLayout rep = L(dm, {-1, -1}, {8, 16}), rows = L(dm, {0, -1}, {8, 16}), cols = L(dm, {-1, 0}, {8, 16}),
                     partial = L(dm, {-1, -1}, {8, 16}, {0});
  auto bytes = [](const TensorLayout& a, const TensorLayout& b) {
    Result<RedistPlan> p = PlanRedistribution(a, b, DType::BF16);
    EXPECT_TRUE(p.ok() && p->steps.size() == 1u);
    return p.ok() && !p->steps.empty() ? std::pair{p->steps[0].in_bytes, p->steps[0].out_bytes} : std::pair{-1L, -1L};
  };
  EXPECT_EQ(bytes(rows, rep), std::pair(64L, 256L));
  EXPECT_EQ(bytes(rep, cols), std::pair(256L, 64L));
  EXPECT_EQ(bytes(rows, cols), std::pair(64L, 64L));
  EXPECT_EQ(bytes(partial, rep), std::pair(256L, 256L));
  EXPECT_EQ(bytes(partial, rows), std::pair(256L, 64L));
}

// Mesh refinement: layouts on different device matrices meet on their
// common refinement, where each step runs along one fine axis with that
// axis's group.
TEST(RedistributionTest, MeshRefinement) {
  // [4] rows -> [2,2] rows on the major axis only: the [4] axis is (1, 0)
  // on the mesh; dropping the minor fine axis is an AllGather of 2.
  ExpectPlan(L({4}, {0, -1}, {8, 8}), L({2, 2}, {1, -1}, {8, 8}), {{RedistKind::AllGather, 0, 0, -1, 64, 128}});
  ExpectGroups(L({4}, {0, -1}, {8, 8}), L({2, 2}, {1, -1}, {8, 8}), {2, 2}, {2});
  // [2,4] and [4,2] meet on [2,2,2]: rows split 2 (major axis of [2,4])
  // -> rows split 4 (major axis of [4,2]): one local slice on the middle
  // fine axis.
  ExpectPlan(L({2, 4}, {1, -1}, {16, 4}), L({4, 2}, {1, -1}, {16, 4}), {{RedistKind::Slice, 1, 0, -1, 128, 64}});
  ExpectGroups(L({2, 4}, {1, -1}, {16, 4}), L({4, 2}, {1, -1}, {16, 4}), {2, 2, 2}, {2});
  // ... and back: an AllGather of 2 along the same fine axis.
  ExpectPlan(L({4, 2}, {1, -1}, {16, 4}), L({2, 4}, {1, -1}, {16, 4}), {{RedistKind::AllGather, 1, 0, -1, 64, 128}});
  // [2,4] columns by axis 1 (2 ways) -> [8] columns 8 ways: the [8] axis
  // is (1, 0) on the mesh [2,4], which extends (1): one slice of 4.
  ExpectPlan(L({2, 4}, {-1, 1}, {4, 16}), L({8}, {-1, 0}, {4, 16}), {{RedistKind::Slice, 0, 1, -1, 128, 32}});
  ExpectGroups(L({2, 4}, {-1, 1}, {4, 16}), L({8}, {-1, 0}, {4, 16}), {2, 4}, {4});
  // Columns by axis 0 (4 ways) is not a prefix of (1, 0): rank 4·c1 + c0
  // holds block c0 of 4 but wants block 4·c1 + c0 of 8, so the plan
  // gathers and slices both fine axes.
  ExpectPlan(L({2, 4}, {-1, 0}, {4, 16}), L({8}, {-1, 0}, {4, 16}),
             {{RedistKind::AllGather, 0, 1, -1, 64, 256},
              {RedistKind::Slice, 1, 1, -1, 256, 128},
              {RedistKind::Slice, 0, 1, -1, 128, 32}});
}

}  // namespace
}  // namespace sinkrt::host::parallel
