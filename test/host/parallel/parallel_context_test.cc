// ParallelContext and comm_fusion: MindSpore's set_auto_parallel_context
// checks with its messages (mindspore-semantics.md §3.1, §3.5, §4, §5.5;
// _auto_parallel_context.py for the comm_fusion strings), the defaults
// sinkrt shares with MindSpore, and what a Model refuses rather than
// ignores (full_batch under data_parallel, a global_rank of its own).
#include <gtest/gtest.h>

#include <string>

#include "sinkrt/host/model.h"
#include "sinkrt/host/parallel_context.h"
#include "support/model_fixtures.h"
#include "support/test_util.h"

namespace sinkrt {
namespace {

using host::CommFusion;
using host::ParallelContext;
using host::ParallelMode;
using host::ParseCommFusion;

const std::vector<ParallelMode> kRuns = {ParallelMode::StandAlone, ParallelMode::DataParallel};

std::string FusionError(const std::string& json) {
  auto r = ParseCommFusion(json);
  EXPECT_FALSE(r.ok()) << json;
  return r.ok() ? "" : r.status().message();
}

TEST(ParallelContext, ModesAndValueChecks) {
  EXPECT_EQ(*host::ParseParallelMode("semi_auto_parallel"), ParallelMode::SemiAutoParallel);
  EXPECT_EQ(host::ParseParallelMode("model_parallel").status().message(),
            "The context configuration parameter 'parallel_mode' only support 'stand_alone', 'data_parallel', "
            "'hybrid_parallel', 'semi_auto_parallel' and 'auto_parallel', but got the value : model_parallel.");
  ParallelContext c;
  SINKRT_ASSERT_OK(c.Validate());
  c.search_mode = "greedy";
  EXPECT_EQ(c.Validate().message(),
            "The context configuration parameter 'auto_parallel_search_mode' only support 'recursive_programming', "
            "'dynamic_programming' and 'sharding_propagation', but got the value: greedy.");
  c = {};
  c.comm_fusion.mode = "bucket";
  EXPECT_EQ(c.Validate().message(), "fusion method mode must be auto, index or size, but got bucket");
  // MindSpore's check is `threshold < 0`: 0 is valid (no fusion), below is not.
  c.comm_fusion.mode = "size";
  c.comm_fusion.size_mb = 0;
  SINKRT_ASSERT_OK(c.Validate());
  c.comm_fusion.size_mb = -1;
  EXPECT_EQ(c.Validate().message(), "fusion threshold must be larger than 0, but got -1.0");
  c = {};
  c.comm_fusion.allgather.mode = "index";
  EXPECT_EQ(c.Validate().message(), "fusion method mode must be auto or size, but got index");
  c = {};
  c.mode = ParallelMode::DataParallel;
  c.device_num = 8;
  c.global_rank = 8;
  EXPECT_EQ(c.Validate().message(), "The global_rank 8 must be less than device_num 8.");
  c.global_rank = 3;
  EXPECT_EQ(c.Validate().code(), StatusCode::kUnimplemented);  // valid, not runnable yet
  SINKRT_ASSERT_OK(c.Validate(kRuns));
}

TEST(ParallelContext, DefaultsAreMindSporesAndTheToolsShareThem) {
  const ParallelContext c;
  EXPECT_FALSE(c.gradients_mean);  // set_auto_parallel_context's default
  EXPECT_FALSE(c.parameter_broadcast);
  EXPECT_FALSE(c.full_batch);
  EXPECT_EQ(c.global_rank, 0);
  EXPECT_TRUE(c.comm_fusion.openstate);
  EXPECT_EQ(c.comm_fusion.mode, "auto");
  EXPECT_EQ(c.comm_fusion.allgather.mode, "auto");
  EXPECT_EQ(c.comm_fusion.reducescatter.size_mb, 64);
}

// hybrid_parallel is refused naming every mode that runs (issue 39: the
// list said only stand_alone and data_parallel, long after the others ran).
TEST(ParallelContext, HybridParallelRefusalNamesWhatRuns) {
  const Status st = host::ParseParallelMode("hybrid_parallel").status();
  EXPECT_EQ(st.code(), StatusCode::kUnimplemented);
  EXPECT_EQ(st.message(),
            "The parallel_mode 'hybrid_parallel' (manual model parallelism) is not supported by sinkrt, which runs "
            "'stand_alone', 'data_parallel', 'semi_auto_parallel' and 'auto_parallel': shard strategies "
            "(semi_auto_parallel) express the same layouts.");
  for (const char* mode : {"stand_alone", "data_parallel", "semi_auto_parallel", "auto_parallel"})
    EXPECT_TRUE(host::ParseParallelMode(mode).ok()) << mode;
}

TEST(ParallelContext, FullBatchIsRefusedUnderDataParallel) {
  ParallelContext c;
  c.full_batch = true;
  SINKRT_ASSERT_OK(c.Validate(kRuns));  // one device loads the whole batch anyway
  c.mode = ParallelMode::DataParallel;
  c.device_num = 2;
  const Status st = c.Validate(kRuns);
  EXPECT_EQ(st.code(), StatusCode::kUnimplemented);
  EXPECT_EQ(st.message(),
            "full_batch=True (dataset_strategy 'full_batch') is not supported with data_parallel: every rank reads "
            "its own shard of the batch. It will be supported with semi_auto_parallel; set full_batch=False.");
}

TEST(ParallelContext, AModelRefusesFullBatchAndAGlobalRankInsteadOfIgnoringThem) {
  testing::CountingDevice a, b;
  DeviceLink* devices[] = {&a, &b};
  auto create = [&](const host::ModelOptions& o, std::span<DeviceLink* const> links) {
    return host::Model::Create(testing::MlpNetwork(8), host::LossSpec::SparseSoftmaxCrossEntropy(),
                               host::OptimizerSpec::Sgd(0.1f), links, o)
        .status();
  };
  host::ModelOptions o;
  o.context.mode = ParallelMode::DataParallel;
  o.context.device_num = 2;
  o.context.full_batch = true;
  EXPECT_EQ(create(o, devices).code(), StatusCode::kUnimplemented);
  o.context.full_batch = false;
  o.context.global_rank = 1;
  const Status st = create(o, devices);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(),
            "global_rank 1: a sinkrt Model drives every rank from one host (devices[r] is rank r), so it has no "
            "global_rank of its own; leave global_rank 0");
}

// ---- comm_fusion as _AutoParallelContext.set_comm_fusion checks it ---------

TEST(CommFusion, EntriesNeedModeAndConfig) {
  EXPECT_EQ(FusionError(R"({"allreduce": {"config": 32}})"), "For 'comm_fusion', the key 'mode' should be contained.");
  EXPECT_EQ(FusionError(R"({"allreduce": {"mode": "size"}})"),
            "For 'comm_fusion', the key 'config' should be contained.");
  EXPECT_EQ(FusionError(R"({"allreduce": {"mode": "auto"}})"),
            "For 'comm_fusion', the key 'config' should be contained.");
  EXPECT_EQ(FusionError(R"({"allgather": {"mode": "auto"}})"),
            "For 'comm_fusion', the key 'config' should be contained.");
  EXPECT_EQ(FusionError(R"({"reducescatter": {"config": null}})"),
            "For 'comm_fusion', the key 'mode' should be contained.");
}

TEST(CommFusion, ANonDictEntryIsNamedWithItsPythonType) {
  const std::pair<const char*, const char*> cases[] = {{"5", "int"},       {"2.5", "float"}, {"\"auto\"", "str"},
                                                       {"[1, 2]", "list"}, {"true", "bool"}, {"null", "NoneType"}};
  for (const auto& [value, type] : cases) {
    EXPECT_EQ(FusionError(std::string(R"({"allreduce": )") + value + "}"),
              std::string("For 'comm_fusion', the 'allreduce' config must be dict, but got the type : <class '") +
                  type + "'>.");
    EXPECT_EQ(
        FusionError(std::string(R"({"allgather": )") + value + "}"),
        std::string("For 'comm_fusion', allgather config must be dict, but got the type : <class '") + type + "'>.");
  }
  EXPECT_EQ(FusionError(R"({"reducescatter": 1})"),
            "For 'comm_fusion', reducescatter config must be dict, but got the type : <class 'int'>.");
  EXPECT_EQ(FusionError(R"({"openstate": 1})"),
            "For 'comm_fusion', the 'openstate' must be bool, but got the type : <class 'int'>.");
  EXPECT_EQ(FusionError("[1]"), "The parameter 'comm_fusion' must be <class 'dict'>, but got <class 'list'>");
  EXPECT_EQ(FusionError(R"({"broadcast": {}})"),
            "comm fusion type must be openstate,allreduce, allgather or reducescatter, but got broadcast");
  EXPECT_NE(FusionError(R"({"openstate": )").find("comm_fusion is not valid JSON"), std::string::npos);
}

TEST(CommFusion, ModesAndConfigs) {
  // "auto" ignores its config, whatever it is.
  for (const char* config : {"null", "7", "\"x\"", "[1]"}) {
    auto f = ParseCommFusion(std::string(R"({"allreduce": {"mode": "auto", "config": )") + config + "}}");
    SINKRT_ASSERT_OK(f);
    EXPECT_EQ(f->mode, "auto");
    EXPECT_EQ(f->size_mb, 64);
  }
  auto size = ParseCommFusion(R"({"allreduce": {"mode": "size", "config": 32}})");
  SINKRT_ASSERT_OK(size);
  EXPECT_EQ(size->mode, "size");
  EXPECT_EQ(size->size_mb, 32);
  SINKRT_ASSERT_OK(ParseCommFusion(R"({"allreduce": {"mode": "size", "config": 0}})"));
  EXPECT_EQ(FusionError(R"({"allreduce": {"mode": "size", "config": -2}})"),
            "fusion threshold must be larger than 0, but got -2");
  EXPECT_EQ(FusionError(R"({"allreduce": {"mode": "size", "config": "big"}})"),
            "'<' not supported between instances of 'str' and 'int'");
  EXPECT_EQ(FusionError(R"({"allreduce": {"mode": "size", "config": null}})"),
            "'<' not supported between instances of 'NoneType' and 'int'");
  EXPECT_EQ(FusionError(R"({"allreduce": {"mode": "bucket", "config": null}})"),
            "fusion method mode must be auto, index or size, but got bucket");
  EXPECT_EQ(FusionError(R"({"allreduce": {"mode": 3, "config": null}})"),
            "fusion method mode must be auto, index or size, but got 3");
  EXPECT_EQ(FusionError(R"({"allreduce": {"mode": "size", "config": 1, "group": "g"}})"),
            "comm_fusion: 'allreduce' has no key 'group' (it has 'mode' and 'config')");

  const std::string who = "For 'set_auto_parallel_context().set_all_reduce_fusion_split_indices', ";
  auto index = ParseCommFusion(R"({"allreduce": {"mode": "index", "config": [2, 5]}})");
  SINKRT_ASSERT_OK(index);
  EXPECT_EQ(index->indices, (std::vector<int>{2, 5}));
  EXPECT_EQ(FusionError(R"({"allreduce": {"mode": "index", "config": []}})"),
            who + "the argument 'indices' can not be empty");
  EXPECT_EQ(FusionError(R"({"allreduce": {"mode": "index", "config": null}})"),
            who + "the argument 'indices' can not be empty");
  EXPECT_EQ(FusionError(R"({"allreduce": {"mode": "index", "config": 4}})"),
            who + "the argument 'indices' must be list, but got the type : <class 'int'> .");
  EXPECT_EQ(FusionError(R"({"allreduce": {"mode": "index", "config": [1, 2.5]}})"),
            who + "the argument 'index' must be int, but got the type : <class 'float'> .");
  EXPECT_EQ(FusionError(R"({"allreduce": {"mode": "index", "config": [true]}})"),
            who + "the argument 'index' must be int, but got the type : <class 'bool'> .");
  EXPECT_EQ(FusionError(R"({"allreduce": {"mode": "index", "config": [3, 3]}})"), "The indices has duplicate elements");
  EXPECT_EQ(FusionError(R"({"allreduce": {"mode": "index", "config": [3, 1]}})"),
            who + "the elements in argument 'indices' must be sorted in ascending order");
}

TEST(CommFusion, AllGatherAndReduceScatterAreCheckedAndKept) {
  auto f = ParseCommFusion(R"({"allgather": {"mode": "size", "config": 16},
                               "reducescatter": {"mode": "auto", "config": null}})");
  SINKRT_ASSERT_OK(f);
  EXPECT_EQ(f->mode, "auto");  // the AllReduce fusion is untouched
  EXPECT_EQ(f->allgather.mode, "size");
  EXPECT_EQ(f->allgather.size_mb, 16);
  EXPECT_EQ(f->reducescatter.mode, "auto");
  EXPECT_EQ(f->reducescatter.size_mb, 64);
  EXPECT_EQ(FusionError(R"({"allgather": {"mode": "index", "config": [1]}})"),
            "fusion method mode must be auto or size, but got index");
  EXPECT_EQ(FusionError(R"({"reducescatter": {"mode": "size", "config": -1.5}})"),
            "fusion threshold must be larger than 0, but got -1.5");
}

// Python walks the dict in its order: openstate=False turns the fusions off,
// and the entries after it return before their checks.
TEST(CommFusion, OpenstateFalseStopsTheChecksOfLaterEntries) {
  auto off = ParseCommFusion(R"({"openstate": false, "allreduce": 5})");
  SINKRT_ASSERT_OK(off);
  EXPECT_FALSE(off->openstate);
  EXPECT_EQ(FusionError(R"({"allreduce": 5, "openstate": false})"),
            "For 'comm_fusion', the 'allreduce' config must be dict, but got the type : <class 'int'>.");
  auto on = ParseCommFusion(R"({"openstate": true, "allreduce": {"mode": "size", "config": 8}})");
  SINKRT_ASSERT_OK(on);
  EXPECT_TRUE(on->openstate);
  EXPECT_EQ(on->size_mb, 8);
}

}  // namespace
}  // namespace sinkrt
