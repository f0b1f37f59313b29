// Model::train, eval and predict against MindSpore's semantics (reference
// mindspore-semantics.md §1, §2, §8) on a real in-process device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <thread>

#include "device/src/data_queue.h"
#include "device/src/executor.h"
#include "sinkrt/fb/task_stream_generated.h"
#include "sinkrt/host/model.h"
#include "support/compare.h"
#include "support/feeder.h"
#include "support/model_fixtures.h"
#include "support/test_util.h"

namespace sinkrt {
namespace {

using host::Dataset;
using host::LossSpec;
using host::Model;
using host::OptimizerSpec;
using testing::CountingDevice;
using testing::HookCall;
using testing::MakeDataset;
using testing::MakeSyntheticData;
using testing::MlpNetwork;
using testing::RecordingCallback;

constexpr int64_t kBatch = 8;
constexpr int64_t kFeatures = 16;
constexpr int kClasses = 4;

std::unique_ptr<Model> MakeModel(DeviceLink& dev, OptimizerSpec opt = OptimizerSpec::Momentum(0.05f, 0.9f),
                                 host::ModelOptions options = {}) {
  auto m = Model::Create(MlpNetwork(kBatch, {kFeatures, 12, kClasses}), LossSpec::SparseSoftmaxCrossEntropy(), opt, dev,
                         options);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? std::move(m).value() : nullptr;
}

testing::SyntheticData Data(int64_t batches, uint64_t seed = 3) {
  return MakeSyntheticData(batches * kBatch, kFeatures, kClasses, seed);
}

// Trains a second model of the same stream by driving its device directly:
// batches first .. first + count - 1 (wrapping the data set) in one sink.
struct Reference {
  std::unique_ptr<Model> model;
  double loss = 0;
};
Reference ReferenceRun(device::InProcessDevice& dev, const testing::SyntheticData& data, int64_t first, int64_t count,
                       OptimizerSpec opt = OptimizerSpec::Momentum(0.05f, 0.9f)) {
  Reference ref{MakeModel(dev, opt), 0};
  testing::Feeder feeder(dev, 0, data, kBatch, first, count);
  auto r = dev.RunSink(ProgramKind::TrainStep, static_cast<uint32_t>(count));
  EXPECT_TRUE(feeder.Join().ok());
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (r.ok()) ref.loss = r->reports[0].scalar();
  return ref;
}

uint32_t TrainQueueSize(CountingDevice& dev) { return dev.inner().executor()->queued_batches(0); }

std::vector<int64_t> Steps(const std::vector<HookCall>& calls) {
  std::vector<int64_t> out;
  for (const HookCall& c : calls) out.push_back(c.cur_step_num);
  return out;
}
std::vector<int> Epochs(const std::vector<HookCall>& calls) {
  std::vector<int> out;
  for (const HookCall& c : calls) out.push_back(c.cur_epoch_num);
  return out;
}

// ---- sink mode: the reference table (§1.5) -------------------------------------------------

TEST(ModelTrain, SinkSizeMinusOneSinksOnePassPerEpoch) {
  CountingDevice dev;
  auto model = MakeModel(dev);
  auto data = Data(6);
  RecordingCallback rec;
  const uint64_t rt0 = dev.control_round_trips();
  SINKRT_ASSERT_OK(model->train(3, MakeDataset(data, kBatch), {&rec}, true, -1));
  EXPECT_EQ(dev.control_round_trips() - rt0, 3u);  // one per epoch
  EXPECT_EQ(dev.sinks(), (std::vector<CountingDevice::Sink>(3, {ProgramKind::TrainStep, 6})));
  EXPECT_EQ(dev.pushed(0), 18);
  EXPECT_EQ(rec.count("begin"), 1);
  EXPECT_EQ(rec.count("epoch_begin"), 3);
  EXPECT_EQ(rec.count("step_begin"), 3);
  EXPECT_EQ(rec.count("step_end"), 3);
  EXPECT_EQ(rec.count("epoch_end"), 3);
  EXPECT_EQ(rec.count("end"), 1);
  // cur_step_num advances by the sink's steps, after step_begin.
  EXPECT_EQ(Steps(rec.of("step_begin")), (std::vector<int64_t>{0, 6, 12}));
  EXPECT_EQ(Steps(rec.of("step_end")), (std::vector<int64_t>{6, 12, 18}));
  EXPECT_EQ(Epochs(rec.of("epoch_end")), (std::vector<int>{1, 2, 3}));
  for (const HookCall& c : rec.calls) {
    EXPECT_EQ(c.epoch_num, 3);
    EXPECT_EQ(c.batch_num, 6);
    EXPECT_TRUE(c.dataset_sink_mode);
  }
  for (const HookCall& c : rec.of("step_end")) {
    EXPECT_EQ(c.sink_steps, 6);
    EXPECT_EQ(c.global_batch, c.cur_step_num);
    EXPECT_TRUE(std::isfinite(c.net_outputs));
  }
  EXPECT_EQ(rec.calls.front().hook, "begin");
  EXPECT_EQ(rec.calls.back().hook, "end");
  EXPECT_EQ(TrainQueueSize(dev), 0u);
}

TEST(ModelTrain, SinkSizeNRunsNStepsPerEpochAndContinuesThroughTheData) {
  CountingDevice dev;
  auto model = MakeModel(dev);
  auto data = Data(6);
  RecordingCallback rec;
  SINKRT_ASSERT_OK(model->train(3, MakeDataset(data, kBatch), {&rec}, true, 4));
  EXPECT_EQ(dev.sinks(), (std::vector<CountingDevice::Sink>(3, {ProgramKind::TrainStep, 4})));
  EXPECT_EQ(dev.pushed(0), 12);  // (epoch - initial_epoch) x sink_size, not whole passes
  EXPECT_EQ(Steps(rec.of("step_end")), (std::vector<int64_t>{4, 8, 12}));
  for (const HookCall& c : rec.calls) EXPECT_EQ(c.batch_num, 4);
  // Epoch 2 took batches 4, 5, 0, 1: the same as one sink over batches 0..11.
  device::InProcessDevice ref_dev;
  auto ref = ReferenceRun(ref_dev, data, 0, 12);
  testing::ExpectSameState(*model, *ref.model);
  EXPECT_EQ(rec.of("step_end").back().net_outputs, ref.loss);  // the last step's loss
}

TEST(ModelTrain, FewerBatchesThanSinkSizeCrossesPassBoundaries) {
  CountingDevice dev;
  auto model = MakeModel(dev);
  auto data = Data(3);
  RecordingCallback rec;
  SINKRT_ASSERT_OK(model->train(2, MakeDataset(data, kBatch), {&rec}, true, 5));
  EXPECT_EQ(dev.sinks(), (std::vector<CountingDevice::Sink>(2, {ProgramKind::TrainStep, 5})));
  EXPECT_EQ(dev.pushed(0), 10);
  EXPECT_EQ(Steps(rec.of("step_end")), (std::vector<int64_t>{5, 10}));
  // Batches 0,1,2,0,1 then 2,0,1,2,0: no break at a pass boundary.
  device::InProcessDevice ref_dev;
  auto ref = ReferenceRun(ref_dev, data, 0, 10);
  testing::ExpectSameState(*model, *ref.model);
}

TEST(ModelTrain, InitialEpochContinuesTheEpochCountAndTheData) {
  CountingDevice dev;
  auto model = MakeModel(dev);
  auto data = Data(6);
  RecordingCallback rec;
  SINKRT_ASSERT_OK(model->train(5, MakeDataset(data, kBatch), {&rec}, true, 4, /*initial_epoch=*/2));
  EXPECT_EQ(dev.sinks().size(), 3u);
  EXPECT_EQ(dev.pushed(0), 12);
  EXPECT_EQ(Epochs(rec.of("epoch_begin")), (std::vector<int>{3, 4, 5}));
  EXPECT_EQ(Steps(rec.of("step_end")), (std::vector<int64_t>{4, 8, 12}));  // restarts at 0
  for (const HookCall& c : rec.calls) EXPECT_EQ(c.epoch_num, 3);
  std::vector<int64_t> global;
  for (const HookCall& c : rec.of("step_end")) global.push_back(c.global_batch);
  EXPECT_EQ(global, (std::vector<int64_t>{12, 16, 20}));
  // The data starts at global batch initial_epoch x sink_size = 8.
  device::InProcessDevice ref_dev;
  auto ref = ReferenceRun(ref_dev, data, 8, 12);
  testing::ExpectSameState(*model, *ref.model);
}

TEST(ModelTrain, SinkModeRequestStopTakesEffectAtTheSinkBoundary) {
  CountingDevice dev;
  auto model = MakeModel(dev);
  auto data = Data(4);
  RecordingCallback rec;
  // Asked during epoch 2's step: its epoch still ends, epoch 3 never starts.
  rec.stop_at = [](const HookCall& c) { return c.hook == "step_end" && c.cur_epoch_num == 2; };
  const int threads = testing::ThreadCount();
  SINKRT_ASSERT_OK(model->train(5, MakeDataset(data, kBatch), {&rec}, true, 3));
  EXPECT_EQ(testing::ThreadCount(), threads);  // the feeder is joined
  EXPECT_EQ(dev.sinks().size(), 2u);
  EXPECT_EQ(rec.count("epoch_begin"), 2);
  EXPECT_EQ(rec.count("step_end"), 2);
  EXPECT_EQ(rec.count("epoch_end"), 2);
  EXPECT_EQ(rec.count("end"), 1);
  EXPECT_EQ(rec.of("end")[0].cur_step_num, 6);
  // The feeder ran ahead (it may have pushed epoch 3's batches, at most all
  // 15); whatever it pushed for epochs that never ran is gone.
  EXPECT_GE(dev.pushed(0), 6);
  EXPECT_LE(dev.pushed(0), 15);
  EXPECT_GE(dev.clears(), 1);
  EXPECT_EQ(TrainQueueSize(dev), 0u);
  // So the next train() starts clean: with initial_epoch = 2 it is the
  // uninterrupted 5-epoch job.
  SINKRT_ASSERT_OK(model->train(5, MakeDataset(data, kBatch), {}, true, 3, 2));
  device::InProcessDevice ref_dev;
  auto ref = ReferenceRun(ref_dev, data, 0, 15);
  testing::ExpectSameState(*model, *ref.model);
}

TEST(ModelTrain, StopWhileTheFeederIsBlockedOnAFullQueue) {
  CountingDevice dev;
  host::ModelOptions options;
  options.queue_capacity = 2;
  auto model = MakeModel(dev, OptimizerSpec::Momentum(0.05f, 0.9f), options);
  auto data = Data(4);
  RecordingCallback rec;
  rec.stop_at = [](const HookCall& c) { return c.hook == "epoch_end"; };
  // Let the feeder fill the queue (one epoch's 4 batches, then its 2 slots)
  // and block on the next push before the stop.
  rec.fail_at = [&dev](const HookCall& c) {
    if (c.hook != "epoch_end") return false;
    for (int i = 0; i < 500 && dev.pushed(0) < 6; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return false;
  };
  const int threads = testing::ThreadCount();
  SINKRT_ASSERT_OK(model->train(10, MakeDataset(data, kBatch), {&rec}, true, 4));
  EXPECT_EQ(testing::ThreadCount(), threads);
  EXPECT_EQ(dev.sinks().size(), 1u);
  // The blocked push was refused by the clear (6); had the feeder not yet
  // reached it, it went in after the first clear and out with the second (7).
  EXPECT_GE(dev.pushed(0), 6);
  EXPECT_LE(dev.pushed(0), 7);
  EXPECT_EQ(TrainQueueSize(dev), 0u);
}

TEST(ModelTrain, CallbackErrorStopsTrainingAndCleansUp) {
  CountingDevice dev;
  auto model = MakeModel(dev);
  auto data = Data(4);
  RecordingCallback rec;
  rec.fail_at = [](const HookCall& c) { return c.hook == "step_end" && c.cur_epoch_num == 1; };
  const int threads = testing::ThreadCount();
  Status st = model->train(3, MakeDataset(data, kBatch), {&rec}, true, 2);
  EXPECT_EQ(st.code(), StatusCode::kAborted);
  EXPECT_EQ(st.message(), "callback failed at step_end");
  EXPECT_EQ(testing::ThreadCount(), threads);
  EXPECT_EQ(rec.count("end"), 0);  // an error is not a train end
  EXPECT_EQ(rec.count("epoch_end"), 0);
  EXPECT_EQ(TrainQueueSize(dev), 0u);
}

TEST(ModelTrain, FeederErrorIsReportedInsteadOfTheDeviceTimeout) {
  device::DeviceOptions options = device::DeviceOptions::FromEnvironment();
  options.get_next_timeout = std::chrono::milliseconds(300);
  CountingDevice dev(options);
  auto model = MakeModel(dev);
  auto data = Data(8);
  // Sample 44 (batch 5) cannot be produced.
  Dataset broken = Dataset::FromGenerator({{"image", DType::F32, {kFeatures}}, {"label", DType::I32, {}}}, data.size(),
                                          [&data](int64_t i, host::Row* row) -> Status {
                                            if (i == 44) return Unavailable("sample 44 is unreadable");
                                            (*row)[0] = host::Tensor{DType::F32, {kFeatures}, {}};
                                            (*row)[0].data.resize(kFeatures * sizeof(float));
                                            std::memcpy((*row)[0].data.data(), data.images.data() + i * kFeatures,
                                                        kFeatures * sizeof(float));
                                            (*row)[1] = host::Tensor{DType::I32, {}, {}};
                                            (*row)[1].data.resize(sizeof(int32_t));
                                            std::memcpy((*row)[1].data.data(), &data.labels[i], sizeof(int32_t));
                                            return Status::Ok();
                                          });
  const int threads = testing::ThreadCount();
  Status st = model->train(2, broken.Batch(kBatch, true), {}, true, -1);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("sample 44 is unreadable"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("dataset batch 5"), std::string::npos) << st.message();
  EXPECT_EQ(testing::ThreadCount(), threads);
  EXPECT_EQ(TrainQueueSize(dev), 0u);
}

// ---- non-sink mode -------------------------------------------------------------------------

TEST(ModelTrain, NonSinkRunsOneStepPerRequestWithPerStepCallbacks) {
  CountingDevice dev;
  auto model = MakeModel(dev);
  auto data = Data(5);
  RecordingCallback rec;
  const uint64_t rt0 = dev.control_round_trips();
  SINKRT_ASSERT_OK(model->train(2, MakeDataset(data, kBatch), {&rec}, false, /*sink_size ignored*/ 3));
  EXPECT_EQ(dev.control_round_trips() - rt0, 10u);  // one per step
  EXPECT_EQ(dev.sinks(), (std::vector<CountingDevice::Sink>(10, {ProgramKind::TrainStep, 1})));
  EXPECT_EQ(dev.pushed(0), 10);
  EXPECT_EQ(rec.count("epoch_begin"), 2);
  EXPECT_EQ(rec.count("step_begin"), 10);
  EXPECT_EQ(rec.count("step_end"), 10);
  EXPECT_EQ(rec.count("epoch_end"), 2);
  EXPECT_EQ(Steps(rec.of("step_end")), (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  EXPECT_EQ(Epochs(rec.of("step_end")), (std::vector<int>{1, 1, 1, 1, 1, 2, 2, 2, 2, 2}));
  for (const HookCall& c : rec.calls) {
    EXPECT_EQ(c.batch_num, 5);
    EXPECT_FALSE(c.dataset_sink_mode);
  }
  for (const HookCall& c : rec.of("step_end")) EXPECT_EQ(c.sink_steps, 1);
}

TEST(ModelTrain, NonSinkRequestStopTakesEffectAfterTheStep) {
  CountingDevice dev;
  auto model = MakeModel(dev);
  auto data = Data(5);
  RecordingCallback rec;
  rec.stop_at = [](const HookCall& c) { return c.hook == "step_end" && c.cur_step_num == 3; };
  const int threads = testing::ThreadCount();
  SINKRT_ASSERT_OK(model->train(4, MakeDataset(data, kBatch), {&rec}, false));
  EXPECT_EQ(testing::ThreadCount(), threads);
  EXPECT_EQ(dev.sinks().size(), 3u);
  EXPECT_EQ(rec.count("step_end"), 3);
  EXPECT_EQ(rec.count("epoch_end"), 1);  // the stopped epoch still ends
  EXPECT_EQ(rec.count("end"), 1);
  EXPECT_EQ(TrainQueueSize(dev), 0u);
}

TEST(ModelTrain, SinkAndNonSinkEndBitwiseIdentical) {
  auto data = Data(5);
  for (OptimizerSpec opt : {OptimizerSpec::Momentum(0.05f, 0.9f), OptimizerSpec::Adam(0.01f)}) {
    CountingDevice sink_dev, step_dev;
    auto sink = MakeModel(sink_dev, opt);
    auto step = MakeModel(step_dev, opt);
    RecordingCallback sink_rec, step_rec;
    SINKRT_ASSERT_OK(sink->train(3, MakeDataset(data, kBatch), {&sink_rec}, true));
    SINKRT_ASSERT_OK(step->train(3, MakeDataset(data, kBatch), {&step_rec}, false));
    EXPECT_EQ(sink_dev.sinks().size(), 3u);
    EXPECT_EQ(step_dev.sinks().size(), 15u);
    testing::ExpectSameState(*sink, *step);
    EXPECT_EQ(sink_rec.of("step_end").back().net_outputs, step_rec.of("step_end").back().net_outputs);
  }
}

// ---- validation: MindSpore's order and messages ---------------------------------------------

TEST(ModelTrain, ArgumentErrorsAreMindSporeMessages) {
  CountingDevice dev;
  auto model = MakeModel(dev);
  const Dataset ds = MakeDataset(Data(4), kBatch);
  auto message = [&](int epoch, const Dataset& d, bool sink, int sink_size, int initial) {
    Status st = model->train(epoch, d, {}, sink, sink_size, initial);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    return st.message();
  };
  EXPECT_EQ(message(-1, ds, true, -1, 0), "The input value must be int and must >= 0, but got '-1' with type 'int'.");
  EXPECT_EQ(message(2, ds, true, -1, -3), "The input value must be int and must >= 0, but got '-3' with type 'int'.");
  EXPECT_EQ(message(2, ds, true, -1, 2),
            "For 'Model.train', the parameter 'epoch' must bigger than parameter 'initial_epoch', but got the "
            "parameter 'epoch' is 2, 'initial_epoch' is 2.");
  EXPECT_EQ(message(0, ds, false, -1, 0),
            "For 'Model.train', the parameter 'epoch' must bigger than parameter 'initial_epoch', but got the "
            "parameter 'epoch' is 0, 'initial_epoch' is 0.");
  // 3 rows in batches of 8 with drop_remainder: no batch at all.
  const Dataset empty = MakeDataset(MakeSyntheticData(3, kFeatures, kClasses, 1), kBatch);
  EXPECT_EQ(message(1, empty, true, -1, 0), "There is no valid data in dataset, please check dataset file firstly.");
  for (bool sink : {true, false}) {
    EXPECT_EQ(message(1, ds, sink, 0, 0),
              "For 'Model.train', The argument 'sink_size' must be -1 or positive, but got 0.");
    EXPECT_EQ(message(1, ds, sink, -2, 0),
              "For 'Model.train', The argument 'sink_size' must be -1 or positive, but got -2.");
  }
  // Order: epoch before the dataset, the dataset before sink_size.
  EXPECT_NE(message(1, empty, true, 0, 1).find("must bigger than parameter 'initial_epoch'"), std::string::npos);
  EXPECT_EQ(message(1, empty, true, 0, 0), "There is no valid data in dataset, please check dataset file firstly.");
  EXPECT_TRUE(dev.sinks().empty());
  EXPECT_EQ(dev.pushed(0), 0);
}

TEST(ModelTrain, DatasetColumnsMustMatchTheCompiledInputs) {
  CountingDevice dev;
  auto model = MakeModel(dev);
  auto data = Data(4);
  auto expect = [&](const Dataset& d, const std::string& text) {
    Status st = model->train(1, d, {}, true);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find(text), std::string::npos) << st.message();
  };
  // The batch size is part of the graph.
  expect(MakeDataset(data, 4),
         "the dataset column 'image' gives batches of f32 [4,16], but the network was "
         "compiled for f32 [8,16]");
  host::Tensor labels64{DType::I64, {data.size()}, std::vector<uint8_t>(data.size() * 8, 0)};
  expect(Dataset::FromArrays({{"image", testing::ImagesTensor(data)}, {"label", labels64}}).Batch(kBatch, true),
         "the dataset column 'label' gives batches of i64 [8]");
  expect(Dataset::FromArrays({{"image", testing::ImagesTensor(data)}, {"target", testing::LabelsTensor(data)}})
             .Batch(kBatch, true),
         "the network reads the input 'label', but the dataset has no such column (its columns: image, target)");
  expect(Dataset::FromArrays({{"image", testing::ImagesTensor(data)},
                              {"label", testing::LabelsTensor(data)},
                              {"id", testing::LabelsTensor(data)}})
             .Batch(kBatch, true),
         "the dataset column 'id' is not an input of the network (its inputs: image, label)");
  // 36 rows without drop_remainder: the last batch has 4 rows.
  expect(MakeDataset(MakeSyntheticData(36, kFeatures, kClasses, 1), kBatch, false),
         "column 'image' is f32 [4,16], the network was compiled for f32 [8,16] (a partial batch");
  EXPECT_TRUE(dev.sinks().empty());
  EXPECT_EQ(dev.pushed(0), 0);
}

TEST(ModelCreate, ParallelContextAndQueueCapacityChecks) {
  CountingDevice dev;
  auto create = [&](host::ModelOptions o) {
    return Model::Create(MlpNetwork(kBatch), LossSpec::SparseSoftmaxCrossEntropy(), OptimizerSpec::Sgd(0.1f), dev, o)
        .status();
  };
  host::ModelOptions o;
  o.context.device_num = 4;
  EXPECT_EQ(create(o).message(),
            "If parallel_mode is stand_alone, device_number must be 1, device_number: 4, parallel_mode:stand_alone");
  // auto_parallel and semi_auto_parallel run, one device per rank.
  o.context.mode = host::ParallelMode::AutoParallel;
  Status st = create(o);
  EXPECT_EQ(st.message(),
            "Model: network 'mlp': auto_parallel with device_num 4 needs 4 devices, one per rank, but got 1");
  o.context.mode = host::ParallelMode::SemiAutoParallel;
  EXPECT_EQ(create(o).message(),
            "Model: network 'mlp': semi_auto_parallel with device_num 4 needs 4 devices, one per rank, but got 1");
  // Data parallel runs, on one device per rank.
  o.context.mode = host::ParallelMode::DataParallel;
  st = create(o);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(),
            "Model: network 'mlp': data_parallel with device_num 4 needs 4 devices, one per rank, "
            "but got 1 (or one per process: init() in each rank's process)");
  o = {};
  o.context.device_num = 0;
  EXPECT_EQ(create(o).message(),
            "The context configuration parameter 'device_num' must be in [1, 4096], but got "
            "the value of device_num : 0.");
  o = {};
  o.context.parameter_broadcast = true;
  EXPECT_EQ(create(o).message(),
            "stand_alone, semi_auto_parallel and auto_parallel do not support parameter "
            "broadcast, parallel_mode: stand_alone, parameter_broadcast:True");

  for (const char* bad : {"0", "-3", "abc"}) {
    setenv("MS_DATASET_SINK_QUEUE", bad, 1);
    EXPECT_EQ(create({}).message(),
              "Invalid data queue capacity. Expect env variable MS_DATASET_SINK_QUEUE > 0, "
              "but got '" +
                  std::string(bad) + "'.");
  }
  setenv("MS_DATASET_SINK_QUEUE", "129", 1);
  EXPECT_EQ(create({}).message(),
            "Invalid data queue capacity. Expect env variable MS_DATASET_SINK_QUEUE in 1~128, "
            "but got '129'.");
  setenv("MS_DATASET_SINK_QUEUE", "5", 1);
  auto m = Model::Create(MlpNetwork(kBatch), LossSpec::SparseSoftmaxCrossEntropy(), OptimizerSpec::Sgd(0.1f), dev);
  unsetenv("MS_DATASET_SINK_QUEUE");
  SINKRT_ASSERT_OK(m);
  for (const fb::QueueSpec* q : *(*m)->compiled().stream.root()->queues()) EXPECT_EQ(q->capacity(), 5u);
}

TEST(ModelCreate, LossSpecErrors) {
  CountingDevice dev;
  host::Graph with_loss = testing::MakeMlp(kBatch, {kFeatures, 4});
  auto r = Model::Create(with_loss, LossSpec::SparseSoftmaxCrossEntropy(), OptimizerSpec::Sgd(0.1f), dev);
  EXPECT_NE(r.status().message().find("already has a loss: pass LossSpec::None()"), std::string::npos);
  // The same network trains as it is with LossSpec::None().
  SINKRT_ASSERT_OK(Model::Create(with_loss, LossSpec::None(), OptimizerSpec::Sgd(0.1f), dev));
  r = Model::Create(MlpNetwork(kBatch), LossSpec::None(), OptimizerSpec::Sgd(0.1f), dev);
  EXPECT_NE(r.status().message().find("has no loss"), std::string::npos);
  host::Graph no_output("no_output");
  no_output.Input("image", {kBatch, kFeatures});
  r = Model::Create(no_output, LossSpec::SparseSoftmaxCrossEntropy(), OptimizerSpec::Sgd(0.1f), dev);
  EXPECT_NE(r.status().message().find("has no output"), std::string::npos);
}

// The dense losses read an f32 label column of the logits' shape.
TEST(ModelCreate, DenseLossesReadF32LabelsOfTheLogitsShape) {
  CountingDevice dev;
  for (LossSpec loss : {LossSpec::SoftmaxCrossEntropy(), LossSpec::MSE("target"), LossSpec::L1("target")}) {
    auto m = Model::Create(MlpNetwork(kBatch, {kFeatures, 12, kClasses}), loss, OptimizerSpec::Sgd(0.1f), dev);
    SINKRT_ASSERT_OK(m);
    const fb::QueueColumn* label = nullptr;
    for (const fb::QueueSpec* q : *(*m)->compiled().stream.root()->queues())
      for (const fb::QueueColumn* c : *q->columns())
        if (c->name()->str() == loss.label_column) label = c;
    ASSERT_NE(label, nullptr) << loss.label_column;
    EXPECT_EQ(label->dtype(), fb::DType::F32);
    EXPECT_EQ(std::vector<int64_t>(label->shape()->begin(), label->shape()->end()),
              (std::vector<int64_t>{kBatch, kClasses}));
  }
  host::Graph flat("flat");
  flat.AddOutput(flat.Input("image", {kBatch * kFeatures}));
  auto r = Model::Create(flat, LossSpec::SoftmaxCrossEntropy(), OptimizerSpec::Sgd(0.1f), dev);
  EXPECT_NE(r.status().message().find("SoftmaxCrossEntropy needs [N, C] logits"), std::string::npos)
      << r.status().ToString();
}

// ---- eval and predict -----------------------------------------------------------------------

struct HostScore {
  double loss_sum = 0;
  int64_t correct = 0;
};

// The MLP forward pass and the loss in double, from the model's parameters.
HostScore ScoreOnHost(Model& model, const testing::SyntheticData& d) {
  auto state = model.ReadState();
  EXPECT_TRUE(state.ok());
  auto param = [&](const std::string& name) {
    for (auto& [n, t] : *state)
      if (n == name) return std::vector<float>(t.as<float>(), t.as<float>() + t.numel());
    ADD_FAILURE() << "no " << name;
    return std::vector<float>{};
  };
  const auto w1 = param("fc1.weight"), b1 = param("fc1.bias"), w2 = param("fc2.weight"), b2 = param("fc2.bias");
  const int64_t hidden = 12;
  HostScore s;
  for (int64_t i = 0; i < d.size(); ++i) {
    std::vector<double> h(hidden), z(kClasses);
    for (int64_t j = 0; j < hidden; ++j) {
      double acc = b1[j];
      for (int64_t k = 0; k < kFeatures; ++k) acc += double(d.images[i * kFeatures + k]) * w1[k * hidden + j];
      h[j] = std::max(acc, 0.0);
    }
    for (int64_t c = 0; c < kClasses; ++c) {
      double acc = b2[c];
      for (int64_t j = 0; j < hidden; ++j) acc += h[j] * w2[j * kClasses + c];
      z[c] = acc;
    }
    const int64_t argmax = std::max_element(z.begin(), z.end()) - z.begin();
    const double m = z[argmax];
    double sum = 0;
    for (double v : z) sum += std::exp(v - m);
    s.loss_sum += m + std::log(sum) - z[d.labels[i]];
    s.correct += argmax == d.labels[i];
  }
  return s;
}

TEST(ModelEval, LossAndAccuracyOverEverySampleIncludingAPartialBatch) {
  CountingDevice dev;
  auto model = MakeModel(dev);
  SINKRT_ASSERT_OK(model->train(2, MakeDataset(Data(6), kBatch), {}, true));
  for (int64_t n : {int64_t{45}, int64_t{48}}) {  // 5 full batches + 5 rows; 6 full batches
    SCOPED_TRACE(n);
    auto eval_data = MakeSyntheticData(n, kFeatures, kClasses, 99);
    const size_t sinks_before = dev.sinks().size();
    auto r = model->eval(MakeDataset(eval_data, kBatch, false));
    SINKRT_ASSERT_OK(r);
    const HostScore host = ScoreOnHost(*model, eval_data);
    EXPECT_EQ(r->samples, n);
    EXPECT_EQ(r->accuracy, double(host.correct) / double(n));
    EXPECT_NEAR(r->loss, host.loss_sum / double(n), 1e-5 * std::abs(host.loss_sum / double(n)));
    EXPECT_EQ(r->round_trips, 6u);  // one launch per batch
    std::vector<CountingDevice::Sink> expected(5, {ProgramKind::EvalStep, 1});
    expected.push_back({n == 45 ? ProgramKind::PredictStep : ProgramKind::EvalStep, 1});
    EXPECT_EQ(std::vector<CountingDevice::Sink>(dev.sinks().begin() + sinks_before, dev.sinks().end()), expected);
  }
  EXPECT_EQ(dev.pushed(1), 11);  // eval queue: full batches only
  EXPECT_EQ(dev.pushed(2), 1);   // predict queue: the partial one
}

TEST(ModelEval, PredictReturnsTheRealRowsOfAPaddedBatch) {
  CountingDevice dev;
  auto model = MakeModel(dev);
  EXPECT_EQ(model->compiled().predict_columns, (std::vector<std::string>{"image"}));
  auto d = Data(1);
  host::Tensor full = testing::ImagesTensor(d);
  auto logits = model->predict({full});
  SINKRT_ASSERT_OK(logits);
  EXPECT_EQ(logits->shape, (Shape{kBatch, kClasses}));
  host::Tensor part{DType::F32, {3, kFeatures}, {}};
  part.data.assign(full.data.begin(), full.data.begin() + 3 * kFeatures * sizeof(float));
  auto short_logits = model->predict({part});
  SINKRT_ASSERT_OK(short_logits);
  ASSERT_EQ(short_logits->shape, (Shape{3, kClasses}));
  for (int64_t i = 0; i < 3 * kClasses; ++i)
    EXPECT_NEAR(short_logits->as<float>()[i], logits->as<float>()[i], 1e-5f) << i;

  EXPECT_NE(model->predict({full, full}).status().message().find("reads 1 inputs (image), but got 2"),
            std::string::npos);
  host::Tensor too_many{DType::F32, {kBatch + 1, kFeatures}, std::vector<uint8_t>((kBatch + 1) * kFeatures * 4)};
  EXPECT_NE(model->predict({too_many}).status().message().find("(at most 8 rows)"), std::string::npos);
  host::Tensor ints{DType::I32, {2, kFeatures}, std::vector<uint8_t>(2 * kFeatures * 4)};
  EXPECT_EQ(model->predict({ints}).status().message(),
            "For 'Model.predict', input 'image' is i32 [2,16], the network takes f32 [8,16] (at most 8 rows)");
}

// ---- the device queue's ClearQueue -------------------------------------------------------------

TEST(DeviceClearQueue, DropsQueuedBatchesAndReleasesABlockedProducer) {
  device::DeviceOptions options = device::DeviceOptions::FromEnvironment();
  options.push_timeout = std::chrono::seconds(30);
  CountingDevice dev(options);
  host::ModelOptions mo;
  mo.queue_capacity = 2;
  auto model = MakeModel(dev, OptimizerSpec::Sgd(0.1f), mo);
  auto d = Data(1);
  const ConstBytes cols[2] = {ConstBytes(reinterpret_cast<const uint8_t*>(d.images.data()), d.images.size() * 4),
                              ConstBytes(reinterpret_cast<const uint8_t*>(d.labels.data()), d.labels.size() * 4)};
  SINKRT_ASSERT_OK(dev.PushBatch(0, cols));
  SINKRT_ASSERT_OK(dev.PushBatch(0, cols));
  Status blocked;
  std::thread producer([&] { blocked = dev.PushBatch(0, cols); });  // the queue is full
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  SINKRT_ASSERT_OK(dev.ClearQueue(0));
  producer.join();
  EXPECT_EQ(blocked.code(), StatusCode::kAborted);
  EXPECT_EQ(blocked.message(), "queue 'train' was cleared");
  EXPECT_EQ(TrainQueueSize(dev), 0u);
  // The queue works on: one batch in, one step out.
  SINKRT_ASSERT_OK(dev.PushBatch(0, cols));
  SINKRT_ASSERT_OK(dev.RunSink(ProgramKind::TrainStep, 1));
  EXPECT_EQ(TrainQueueSize(dev), 0u);
  EXPECT_EQ(dev.ClearQueue(7).code(), StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace sinkrt
