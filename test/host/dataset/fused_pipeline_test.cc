// The fused pipeline (dataset/fused_column.h, batch_writer.h) against the
// unfused one it replaces: bit-identical batches for every chain it fuses,
// through the iterator and through BatchWriter, and what it leaves unfused.
// Feeding a device in place (DeviceLink::FillBatch) trains exactly as
// pushing does.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "host/src/dataset/batch_builder.h"
#include "host/src/dataset/batch_writer.h"
#include "host/src/model/feeder.h"
#include "sinkrt/device/in_process_device.h"
#include "sinkrt/host/compiler.h"
#include "sinkrt/host/dataset.h"
#include "support/test_models.h"

namespace sinkrt::host {
namespace {

// n u8 images of `shape` holding every byte value, and i32 labels 0..9.
Dataset Images(int64_t n, Shape shape) {
  Shape full{n};
  full.insert(full.end(), shape.begin(), shape.end());
  Tensor images{DType::U8, full, {}};
  images.data.resize(static_cast<size_t>(NumElements(full)));
  uint64_t x = 0x2545F4914F6CDD1Dull;
  for (size_t i = 0; i < images.data.size(); ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    // Every value appears, at every position modulo small channel counts.
    images.data[i] = static_cast<uint8_t>(i < 256 * 12 ? i / 12 : x >> 56);
  }
  Tensor labels{DType::I32, {n}, {}};
  labels.data.resize(static_cast<size_t>(n) * 4);
  for (int64_t i = 0; i < n; ++i) labels.as<int32_t>()[i] = static_cast<int32_t>(i % 10);
  return Dataset::FromArrays({{"image", std::move(images)}, {"label", std::move(labels)}});
}

// Batches [first, first + count) of `d`, fused or as before fusion.
std::vector<Row> Batches(const Dataset& d, bool fuse, int64_t first, int64_t count) {
  std::vector<Row> rows;
  IteratorOptions o;
  o.start_batch = first;
  o.num_workers = 2;
  auto it = IterateDataset(d, o, fuse);
  EXPECT_TRUE(it.ok()) << it.status().ToString();
  if (!it.ok()) return rows;
  for (int64_t i = 0; i < count; ++i) {
    Row row;
    Status st = (*it)->Next(&row);
    EXPECT_TRUE(st.ok()) << st.ToString();
    rows.push_back(std::move(row));
  }
  return rows;
}

void ExpectSameRows(const std::vector<Row>& want, const std::vector<Row>& got) {
  ASSERT_EQ(want.size(), got.size());
  for (size_t b = 0; b < want.size(); ++b) {
    ASSERT_EQ(want[b].size(), got[b].size());
    for (size_t c = 0; c < want[b].size(); ++c) {
      EXPECT_EQ(want[b][c].dtype, got[b][c].dtype) << "batch " << b << " column " << c;
      EXPECT_EQ(want[b][c].shape, got[b][c].shape) << "batch " << b << " column " << c;
      // Bytes, not float ==: bitwise, NaN and -0 included.
      EXPECT_TRUE(want[b][c].data == got[b][c].data) << "batch " << b << " column " << c;
    }
  }
}

std::vector<FusedColumn::Kind> Kinds(const Dataset& d) {
  const SamplePlan plan = MakeSamplePlan(DatasetAccess::node(d));
  std::vector<FusedColumn::Kind> kinds;
  for (const FusedColumn& f : plan.fused) kinds.push_back(f.kind);
  return kinds;
}

using Kind = FusedColumn::Kind;

struct Chain {
  std::string name;
  Shape shape;  // per sample image
  std::vector<Transform> transforms;
};

std::vector<Chain> FusedChains() {
  return {
      {"mlp", {28, 28, 1}, {Transform::Rescale(1.0 / 255.0), Transform::Reshape({784})}},
      {"rescale_shift", {28, 28, 1}, {Transform::Rescale(1.0 / 127.5, -1.0)}},
      {"rescale_normalize",
       {28, 28, 1},
       {Transform::Rescale(1.0 / 255.0), Transform::Normalize({0.2860f}, {0.3530f}), Transform::Reshape({-1})}},
      {"normalize_u8", {28, 28, 1}, {Transform::Normalize({33.3f}, {78.6f})}},
      {"normalize_rgb",
       {8, 8, 3},
       {Transform::Rescale(1.0 / 255.0), Transform::Normalize({0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f})}},
      {"cast_rescale", {28, 28, 1}, {Transform::TypeCast(DType::F32), Transform::Rescale(0.003921568859368563, 0.5)}},
      {"cast_i64", {6, 6, 1}, {Transform::TypeCast(DType::I64)}},
      {"cast_f64", {6, 6, 1}, {Transform::TypeCast(DType::F64)}},
      {"reshape_only", {28, 28, 1}, {Transform::Reshape({28, 28})}},
  };
}

TEST(FusedPipelineTest, FusedChainsGiveTheUnfusedBatchesBitForBit) {
  for (const Chain& chain : FusedChains()) {
    SCOPED_TRACE(chain.name);
    // 100 samples in batches of 16 with Shuffle and Repeat: batches 0..12
    // cross the pass boundary.
    const Dataset d = Images(100, chain.shape).Map("image", chain.transforms).Shuffle(7).Batch(16, true).Repeat(2);
    ASSERT_TRUE(d.status().ok()) << d.status().ToString();
    EXPECT_NE(Kinds(d)[0], Kind::kUnfused);
    EXPECT_EQ(Kinds(d)[1], Kind::kCopy);
    ExpectSameRows(Batches(d, /*fuse=*/false, 3, 10), Batches(d, /*fuse=*/true, 3, 10));
  }
}

TEST(FusedPipelineTest, EveryByteValueMapsAsTheTransformsDo) {
  // One sample holding 0..255 in every channel: the table is the chain.
  for (const Chain& chain : FusedChains()) {
    SCOPED_TRACE(chain.name);
    const int64_t elements = NumElements(chain.shape);
    const Dataset d = Images(256 * 12 / elements + 2, chain.shape).Map("image", chain.transforms).Batch(1, true);
    const std::vector<Row> fused = Batches(d, true, 0, 256 * 12 / elements + 1);
    const std::vector<Row> unfused = Batches(d, false, 0, 256 * 12 / elements + 1);
    ExpectSameRows(unfused, fused);
  }
}

TEST(FusedPipelineTest, BatchWriterWritesTheIteratorsBatches) {
  const Dataset d = Images(300, {28, 28, 1})
                        .Map("image", {Transform::Rescale(1.0 / 255.0), Transform::Reshape({784})})
                        .Shuffle(3)
                        .Batch(64, true);
  auto writer = BatchWriter::Make(d);
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  ASSERT_NE(*writer, nullptr);
  const std::vector<Row> want = Batches(d, /*fuse=*/false, 0, 9);  // 4 per pass: passes 0, 1 and 2
  std::vector<uint8_t> image(64 * 784 * 4), label(64 * 4);
  for (int64_t g = 0; g < 9; ++g) {
    EXPECT_EQ((*writer)->samples(g), 64);
    const std::span<uint8_t> dst[2] = {image, label};
    ASSERT_TRUE((*writer)->Write(g, dst).ok());
    EXPECT_TRUE(image == want[g][0].data) << "batch " << g;
    EXPECT_TRUE(label == want[g][1].data) << "batch " << g;
    // An empty span skips its column.
    std::fill(label.begin(), label.end(), 0xAB);
    const std::span<uint8_t> only_image[2] = {image, {}};
    ASSERT_TRUE((*writer)->Write(g, only_image).ok());
    EXPECT_EQ(label[0], 0xAB);
  }
}

TEST(FusedPipelineTest, GeneratorSourcesFuseThroughTheSampleRow) {
  const Dataset d = Dataset::SyntheticImages(200)
                        .Map("image", {Transform::Rescale(1.0 / 255.0), Transform::Reshape({784})})
                        .Shuffle(5)
                        .Batch(32, true);
  EXPECT_EQ(Kinds(d), (std::vector<Kind>{Kind::kTable, Kind::kCopy}));
  ExpectSameRows(Batches(d, false, 0, 8), Batches(d, true, 0, 8));
  // Its samples cost its function: the feeder keeps the worker threads.
  auto writer = BatchWriter::Make(d);
  ASSERT_TRUE(writer.ok());
  EXPECT_EQ(*writer, nullptr);
}

TEST(FusedPipelineTest, WhatCannotFuseRunsAsWrittenBesideWhatCan) {
  Transform custom;
  custom.name = "Double";
  custom.apply = [](Tensor& x) {
    for (uint8_t& v : x.data) v = static_cast<uint8_t>(v * 2);
    return Status::Ok();
  };
  // A custom transform, HWC2CHW, OneHot and a per-value chain on i32 input
  // stay unfused; the other column still fuses, and the batch is the same.
  const Dataset raw = Images(64, {4, 4, 3});
  const std::vector<Dataset> cases = {
      raw.Map("image", {custom, Transform::Rescale(0.5)}),
      raw.Map("image", {Transform::Rescale(1.0 / 255.0), Transform::HWC2CHW()}),
      raw.Map("label", {Transform::OneHot(10)}).Map("image", {Transform::Rescale(1.0 / 255.0)}),
      raw.Map("label", {Transform::Rescale(0.25)}).Map("image", {Transform::Rescale(1.0 / 255.0)}),
  };
  const std::vector<std::vector<Kind>> kinds = {{Kind::kUnfused, Kind::kCopy},
                                                {Kind::kUnfused, Kind::kCopy},
                                                {Kind::kTable, Kind::kUnfused},
                                                {Kind::kTable, Kind::kUnfused}};
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(i);
    const Dataset d = cases[i].Shuffle(2).Batch(8, true);
    ASSERT_TRUE(d.status().ok()) << d.status().ToString();
    EXPECT_EQ(Kinds(d), kinds[i]);
    auto writer = BatchWriter::Make(d);
    ASSERT_TRUE(writer.ok());
    EXPECT_EQ(*writer, nullptr);  // not every column fuses: iterate instead
    ExpectSameRows(Batches(d, false, 0, 10), Batches(d, true, 0, 10));
  }
}

TEST(FusedPipelineTest, ErrorsReadTheSameFusedOrNot) {
  // A short last batch (no drop_remainder) and a bad sample index are
  // reported as before; the writer refuses an empty dataset as Iterate does.
  const Dataset d = Images(20, {2, 2, 1}).Map("image", {Transform::Rescale(0.5)}).Batch(8);
  ExpectSameRows(Batches(d, false, 0, 6), Batches(d, true, 0, 6));
  auto writer = BatchWriter::Make(d);
  ASSERT_TRUE(writer.ok());
  ASSERT_NE(*writer, nullptr);
  EXPECT_EQ((*writer)->samples(2), 4);
  std::vector<uint8_t> image(8 * 4 * 4), label(8 * 4);
  const std::span<uint8_t> dst[2] = {image, label};
  Status st = (*writer)->Write(2, dst);  // 4 samples into room for 8
  EXPECT_EQ(st.code(), StatusCode::kInternal) << st.ToString();
  auto empty = BatchWriter::Make(Images(4, {2, 2, 1}).Batch(8, true));
  EXPECT_EQ(empty.status().code(), StatusCode::kFailedPrecondition);
}

// The MLP trained by the Feeder through FillBatch (fused, in the slot) and
// as before (unfused iterator, PushBatch): the same losses, bit for bit.
TEST(FusedPipelineTest, FeederFillingTrainsAsPushing) {
  constexpr int64_t kBatch = 32;
  constexpr uint32_t kSteps = 8;
  const Dataset d = Images(kBatch * 5, {28, 28, 1})
                        .Map("image", {Transform::Rescale(1.0 / 255.0), Transform::Reshape({784})})
                        .Shuffle(11)
                        .Batch(kBatch, true);
  auto losses = [&](bool fuse) {
    std::vector<std::vector<uint8_t>> out;
    device::DeviceOptions o = device::DeviceOptions::FromEnvironment();
    o.threads = 1;
    device::InProcessDevice dev(o);
    CompileOptions co;
    co.optimizer = OptimizerSpec::Momentum(0.01f, 0.9f);
    auto cs = Compile(testing::MakeMlp(kBatch), co);
    EXPECT_TRUE(cs.ok()) << cs.status().ToString();
    if (!cs.ok()) return out;
    EXPECT_TRUE(dev.Load(cs->stream).ok());
    FeedPlan plan;
    plan.columns = {{"image", DType::F32, {kBatch, 784}}, {"label", DType::I32, {kBatch}}};
    plan.source = {0, 1};
    plan.count = kSteps;
    plan.batches_per_epoch = kSteps;
    plan.fuse = fuse;
    for (int sink = 0; sink < 3; ++sink, plan.start_batch += kSteps) {
      auto feeder = Feeder::Start(dev, d, plan);
      EXPECT_TRUE(feeder.ok()) << feeder.status().ToString();
      if (!feeder.ok()) return out;
      auto r = dev.RunSink(ProgramKind::TrainStep, kSteps);
      EXPECT_TRUE((*feeder)->Finish().ok());
      EXPECT_EQ((*feeder)->pushed(), kSteps);
      EXPECT_TRUE(r.ok()) << r.status().ToString();
      if (!r.ok()) return out;
      for (const ReportedTensor& t : r->reports) out.push_back(t.data);
    }
    return out;
  };
  const auto pushed = losses(false);
  const auto filled = losses(true);
  ASSERT_FALSE(pushed.empty());
  EXPECT_EQ(pushed, filled);
}

}  // namespace
}  // namespace sinkrt::host
