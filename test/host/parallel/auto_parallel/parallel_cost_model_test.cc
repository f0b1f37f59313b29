// AUTO_PARALLEL's cost model (host/src/parallel/auto_parallel/cost_model.h) on known
// shapes with a fixed calibration (flat GEMM rate, no launch cost, one α/β
// for every collective): hermetic, no timing. The Megatron and
// data-parallel splits of one MatMul cost what the α-β model says they do.
#include <gtest/gtest.h>

#include "host/src/parallel/auto_parallel/cost_model.h"

namespace sinkrt::host::parallel {
namespace {

constexpr double kFlops = 1e11;
constexpr double kAlpha = 1e-5, kBeta = 1e-9, kBandwidth = 1e10;

Calibration Fixed() {
  Calibration c;
  c.device_kind = "test";
  c.source = "fixed test calibration";
  c.gemm.m = c.gemm.n = c.gemm.k = {16, 4096};
  c.gemm.flops.assign(8, kFlops);
  c.memory_bandwidth = kBandwidth;
  c.kernel_launch = 0;
  TransportFits fits;
  for (auto& f : fits) f.fit = {kAlpha, kBeta};
  c.collectives["shm"] = fits;
  c.grad_hidden_fraction = 0.5;
  return c;
}

double AllReduce(int64_t n, double bytes) { return kAlpha + kBeta * 2.0 * (n - 1) / n * bytes; }

// X[256,1024] (data) · W[1024,4096]: the op is the graph's first.
struct OneMatMul {
  Graph g;
  Calibration c = Fixed();
  OneMatMul() {
    const TensorId x = g.Input("x", {256, 1024});
    const TensorId w = g.Param("w", {1024, 4096}, InitSpec::Zeros());
    g.MatMul(x, w);
  }
  OpCost Cost(const Strategy& s, int64_t devices, CostOptions options = {}) {
    Result<CostContext> ctx = MakeCostContext(g, c, options);
    EXPECT_TRUE(ctx.ok()) << ctx.status().ToString();
    Result<OpSharding> sh = ShardOp(g, g.ops().back(), s, devices);
    EXPECT_TRUE(sh.ok()) << sh.status().ToString();
    Result<OpCost> cost = CostOfOp(*ctx, g.ops().back(), *sh);
    EXPECT_TRUE(cost.ok()) << cost.status().ToString();
    return *cost;
  }
};

constexpr double kGemm = 2.0 * 256 * 1024 * 4096 / kFlops;  // one device's forward
constexpr double kWeightBytes = 1024.0 * 4096 * 4;
constexpr double kOutputBytes = 256.0 * 4096 * 4;

TEST(CostModelTest, OneDeviceMatMul) {
  OneMatMul m;
  const OpCost one = m.Cost({{1, 1}, {1, 1}}, 1);
  EXPECT_DOUBLE_EQ(one.compute_fwd_s, kGemm);
  EXPECT_DOUBLE_EQ(one.compute_bwd_s, kGemm);  // dW only: x is data and needs no gradient
  EXPECT_EQ(one.comm_fwd_s, 0);
  EXPECT_EQ(one.comm_bwd_s, 0);
  EXPECT_EQ(one.grad_sync_s, 0);
  EXPECT_EQ(one.param_bytes, kWeightBytes);
  EXPECT_EQ(one.grad_bytes, kWeightBytes);
  EXPECT_EQ(one.optimizer_bytes, kWeightBytes);     // Momentum
  EXPECT_EQ(one.activation_bytes, 256 * 1024 * 4);  // x, for dW
}

TEST(CostModelTest, ColumnSplitIsAQuarterOfTheComputeAndNoCommunication) {
  OneMatMul m;
  const OpCost col = m.Cost({{1, 1}, {1, 4}}, 4);
  EXPECT_DOUBLE_EQ(col.compute_fwd_s, kGemm / 4);
  EXPECT_DOUBLE_EQ(col.compute_bwd_s, kGemm / 4);
  EXPECT_EQ(col.comm_fwd_s, 0);
  EXPECT_EQ(col.comm_bwd_s, 0);
  EXPECT_EQ(col.grad_sync_s, 0);  // each rank owns its columns of W
  EXPECT_EQ(col.param_bytes, kWeightBytes / 4);
  EXPECT_EQ(col.MemoryBytes(), 3 * kWeightBytes / 4 + 256 * 1024 * 4);
}

TEST(CostModelTest, RowSplitAddsOneAllReduceOfTheOutput) {
  OneMatMul m;
  const OpCost row = m.Cost({{1, 4}, {4, 1}}, 4);
  EXPECT_DOUBLE_EQ(row.compute_fwd_s, kGemm / 4);
  EXPECT_DOUBLE_EQ(row.comm_fwd_s, AllReduce(4, kOutputBytes));
  EXPECT_EQ(row.comm_bwd_s, 0);
  EXPECT_EQ(row.grad_sync_s, 0);
  EXPECT_EQ(row.param_bytes, kWeightBytes / 4);
  EXPECT_EQ(row.activation_bytes, 256 * 1024 * 4 / 4);  // x's column block
}

TEST(CostModelTest, DataParallelAddsTheWeightGradientAllReduce) {
  OneMatMul m;
  const OpCost dp = m.Cost({{4, 1}, {1, 1}}, 4);
  EXPECT_DOUBLE_EQ(dp.compute_fwd_s, kGemm / 4);
  EXPECT_EQ(dp.comm_fwd_s, 0);
  EXPECT_DOUBLE_EQ(dp.grad_sync_s, AllReduce(4, kWeightBytes));
  EXPECT_DOUBLE_EQ(dp.exposed_grad_sync_s, 0.5 * dp.grad_sync_s);
  // Momentum's update reads W, its gradient and its state and writes two.
  EXPECT_DOUBLE_EQ(dp.update_s, 5 * kWeightBytes / kBandwidth);
  EXPECT_DOUBLE_EQ(dp.StepSeconds(), kGemm / 4 * 2 + 0.5 * AllReduce(4, kWeightBytes) + dp.update_s);
  EXPECT_EQ(dp.param_bytes, kWeightBytes);
  EXPECT_EQ(dp.activation_bytes, 256 * 1024 * 4 / 4);

  // Adam keeps twice the state; the model-parallel split keeps a quarter.
  const OpCost adam = m.Cost({{4, 1}, {1, 1}}, 4, CostOptions{.optimizer_state_factor = 2});
  EXPECT_EQ(adam.optimizer_bytes, 2 * kWeightBytes);
  EXPECT_LT(m.Cost({{1, 1}, {1, 4}}, 4, CostOptions{.optimizer_state_factor = 2}).MemoryBytes(),
            adam.MemoryBytes() / 3);
}

TEST(CostModelTest, RepeatedCalculationNeedsNoGradientSync) {
  OneMatMul m;
  // 2 of 4 ranks split the columns; the other factor repeats the op: both
  // copies compute W's whole gradient slice, so nothing is summed (the
  // partitioner's mirror group is the split loops that do not index W).
  const OpCost rep = m.Cost({{1, 1}, {1, 2}}, 4);
  EXPECT_DOUBLE_EQ(rep.compute_fwd_s, kGemm / 2);
  EXPECT_DOUBLE_EQ(rep.grad_sync_s, 0);
  // Splitting the rows too (the batch) makes the other half an addend.
  const OpCost both = m.Cost({{2, 1}, {1, 2}}, 4);
  // Half a fusion bucket of gradient: half its α.
  EXPECT_DOUBLE_EQ(both.grad_sync_s, AllReduce(2, kWeightBytes / 2) - kAlpha / 2);
}

// H = X·W1 then H·W2 column-split: H needs a gradient, whose column-split
// addends are summed in backward (Megatron's f), and backward is 2x forward.
TEST(CostModelTest, ColumnSplitOfAHiddenLayerReducesItsInputGradient) {
  Graph g;
  const TensorId x = g.Input("x", {256, 1024});
  const TensorId w1 = g.Param("w1", {1024, 1024}, InitSpec::Zeros());
  const TensorId w2 = g.Param("w2", {1024, 4096}, InitSpec::Zeros());
  g.MatMul(g.MatMul(x, w1), w2);
  const Calibration c = Fixed();
  Result<CostContext> ctx = MakeCostContext(g, c);
  ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
  Result<OpSharding> sh = ShardOp(g, g.ops().back(), {{1, 1}, {1, 4}}, 4);
  ASSERT_TRUE(sh.ok()) << sh.status().ToString();
  Result<OpCost> cost = CostOfOp(*ctx, g.ops().back(), *sh);
  ASSERT_TRUE(cost.ok()) << cost.status().ToString();
  EXPECT_DOUBLE_EQ(cost->compute_fwd_s, kGemm / 4);
  EXPECT_DOUBLE_EQ(cost->compute_bwd_s, 2 * kGemm / 4);
  EXPECT_EQ(cost->comm_fwd_s, 0);
  EXPECT_DOUBLE_EQ(cost->comm_bwd_s, AllReduce(4, 256.0 * 1024 * 4));
}

// MatMul → BiasAdd → Relu is one kernel (compiler/fusion.h): the bias add
// and the Relu cost nothing forward; a Split along axis 0 hands out views.
TEST(CostModelTest, FusedEpiloguesAndViewsCostNoForwardKernel) {
  Graph g;
  const TensorId x = g.Input("x", {256, 1024});
  const TensorId w = g.Param("w", {1024, 1024}, InitSpec::Zeros());
  const TensorId b = g.Param("b", {1024}, InitSpec::Zeros());
  const TensorId y = g.Relu(g.BiasAdd(g.MatMul(x, w), b));
  g.Split(y, 0, {128, 128});
  const Calibration c = Fixed();
  Result<CostContext> ctx = MakeCostContext(g, c);
  ASSERT_TRUE(ctx.ok());
  const double out = 256.0 * 1024 * 4;
  for (size_t i : {size_t{1}, size_t{2}, size_t{3}}) {
    const OpNode& op = g.ops()[i];
    Result<OpSharding> sh = ShardOp(g, op, DefaultStrategy(g, op, 1), 1);
    ASSERT_TRUE(sh.ok()) << sh.status().ToString();
    Result<OpCost> cost = CostOfOp(*ctx, op, *sh);
    ASSERT_TRUE(cost.ok());
    EXPECT_EQ(cost->compute_fwd_s, 0) << op.name;
    const double bwd = op.op == OpCode::BiasAdd ? out : op.op == OpCode::Relu ? 3 * out : 2 * out;
    EXPECT_DOUBLE_EQ(cost->compute_bwd_s, bwd / kBandwidth) << op.name;
  }
}

// A batch of products runs at the rate of the products stacked along M,
// not at the rate of one small product times the batch.
TEST(CostModelTest, BatchMatMulRunsAtTheStackedRate) {
  Graph g;
  const TensorId a = g.Input("a", {64, 16, 16});
  const TensorId b = g.Input("b", {64, 16, 16});
  g.BatchMatMul(a, b);
  Calibration c = Fixed();
  c.gemm.m = {16, 1024};
  c.gemm.n = c.gemm.k = {16, 4096};
  // Slow for 16 rows, fast for 1024.
  c.gemm.flops = {1e9, 1e9, 1e9, 1e9, kFlops, kFlops, kFlops, kFlops};
  Result<CostContext> ctx = MakeCostContext(g, c);
  ASSERT_TRUE(ctx.ok());
  Result<OpSharding> sh = ShardOp(g, g.ops().back(), {{1, 1, 1}, {1, 1, 1}}, 1);
  ASSERT_TRUE(sh.ok()) << sh.status().ToString();
  Result<OpCost> cost = CostOfOp(*ctx, g.ops().back(), *sh);
  ASSERT_TRUE(cost.ok());
  EXPECT_DOUBLE_EQ(cost->compute_fwd_s, 64.0 * 2 * 16 * 16 * 16 / kFlops);
}

TEST(CostModelTest, MemoryBoundOpsCostBytesOverBandwidth) {
  Graph g;
  const TensorId x = g.Input("x", {256, 1024});
  const TensorId w = g.Param("w", {1024, 1024}, InitSpec::Zeros());
  g.Relu(g.MatMul(x, w));
  const Calibration c = Fixed();
  Result<CostContext> ctx = MakeCostContext(g, c);
  ASSERT_TRUE(ctx.ok());
  Result<OpSharding> sh = ShardOp(g, g.ops().back(), {{4, 1}}, 4);
  ASSERT_TRUE(sh.ok()) << sh.status().ToString();
  Result<OpCost> cost = CostOfOp(*ctx, g.ops().back(), *sh);
  ASSERT_TRUE(cost.ok());
  const double slice = 64.0 * 1024 * 4;
  EXPECT_DOUBLE_EQ(cost->compute_fwd_s, 2 * slice / kBandwidth);
  EXPECT_DOUBLE_EQ(cost->compute_bwd_s, 4 * slice / kBandwidth);
  EXPECT_EQ(cost->activation_bytes, slice);  // Relu keeps its output
  EXPECT_EQ(cost->param_bytes, 0);
}

TEST(CostModelTest, RedistributionSumsItsSteps) {
  const Calibration c = Fixed();
  TensorLayout col;
  col.device_matrix = {4};
  col.tensor_map = {-1, 0};
  col.shape = {256, 4096};
  const TensorLayout whole = ReplicatedLayout({4}, {256, 4096});
  // Gathering the columns: one AllGather of the whole tensor.
  Result<double> gather = RedistributionSeconds(col, whole, DType::F32, c, "shm");
  ASSERT_TRUE(gather.ok()) << gather.status().ToString();
  EXPECT_DOUBLE_EQ(*gather, kAlpha + kBeta * 0.75 * kOutputBytes);
  // Slicing is local.
  EXPECT_EQ(*RedistributionSeconds(whole, col, DType::F32, c, "shm"), 0);
  // A pending sum resolved to whole: ResolvedLayout's AllReduce.
  TensorLayout partial = whole;
  partial.partial = {0};
  EXPECT_DOUBLE_EQ(*RedistributionSeconds(partial, ResolvedLayout(partial), DType::F32, c, "shm"),
                   AllReduce(4, kOutputBytes));
  // Row split to column split: one AllToAll.
  TensorLayout rows = col;
  rows.tensor_map = {0, -1};
  EXPECT_DOUBLE_EQ(*RedistributionSeconds(rows, col, DType::F32, c, "shm"), kAlpha + kBeta * 0.75 * kOutputBytes / 4);
}

// Alpa's two MLP oracles on 4 devices, at the cost-model level: two layers
// x·W1·W2, data parallel against Megatron (W1 column-, W2 row-split; the
// edge between them is free either way). Wide and short: Megatron is
// cheaper; narrow and tall: data parallel is.
double TwoLayerSeconds(int64_t batch, int64_t hidden, const Strategy& s1, const Strategy& s2) {
  Graph g;
  const TensorId x = g.Input("x", {batch, hidden});
  const TensorId w1 = g.Param("w1", {hidden, hidden}, InitSpec::Zeros());
  const TensorId w2 = g.Param("w2", {hidden, hidden}, InitSpec::Zeros());
  g.MatMul(g.MatMul(x, w1), w2);
  const Calibration c = Fixed();
  Result<CostContext> ctx = MakeCostContext(g, c);
  EXPECT_TRUE(ctx.ok());
  double total = 0;
  for (size_t i = 0; i < 2; ++i) {
    Result<OpSharding> sh = ShardOp(g, g.ops()[i], i == 0 ? s1 : s2, 4);
    EXPECT_TRUE(sh.ok()) << sh.status().ToString();
    Result<OpCost> cost = CostOfOp(*ctx, g.ops()[i], *sh);
    EXPECT_TRUE(cost.ok()) << cost.status().ToString();
    total += cost->StepSeconds();
  }
  return total;
}

TEST(CostModelTest, MegatronWinsWideLayersDataParallelWinsTallOnes) {
  const Strategy dp = {{4, 1}, {1, 1}}, col = {{1, 1}, {1, 4}}, row = {{1, 4}, {4, 1}};
  EXPECT_LT(TwoLayerSeconds(32, 256, col, row), TwoLayerSeconds(32, 256, dp, dp));
  EXPECT_LT(TwoLayerSeconds(256, 32, dp, dp), TwoLayerSeconds(256, 32, col, row));
}

TEST(CostModelTest, UnknownTransportIsRefused) {
  Graph g;
  g.Input("x", {4});
  const Calibration c = Fixed();
  Result<CostContext> ctx = MakeCostContext(g, c, CostOptions{.transport = "tcp"});
  ASSERT_FALSE(ctx.ok());
  EXPECT_EQ(ctx.status().message(),
            "cost model: transport \"tcp\" has no collective fits in fixed test calibration (it has shm)");
}

}  // namespace
}  // namespace sinkrt::host::parallel
