// Compiled jobs on disk (sinkc's directories) and the compile cache:
// CompileJob, WriteCompiledJob / ReadCompiledJob, Model::Create(job), and
// that nothing read from disk is trusted.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "host/src/job/manifest.h"
#include "host/src/util/hex.h"
#include "runtime/src/file_io.h"
#include "sinkrt/device/in_process_device.h"
#include "sinkrt/host/compiled_job.h"
#include "sinkrt/host/model.h"
#include "support/model_fixtures.h"
#include "support/test_models.h"
#include "support/test_util.h"

namespace sinkrt {
namespace {

namespace fs = std::filesystem;
using host::CompiledJob;
using host::CompileOptions;
using host::OptimizerSpec;

constexpr int64_t kBatch = 8;
constexpr int64_t kFeatures = 16;

host::Graph Net() { return testing::MakeMlp(kBatch, {kFeatures, 12, 4}); }

CompileOptions Options(uint32_t world = 1) {
  CompileOptions o;
  o.optimizer = OptimizerSpec::Momentum(0.05f, 0.9f);
  o.world_size = world;
  o.predict_program = true;
  if (world > 1) {
    o.parallel_mode = host::ParallelMode::DataParallel;
    o.gradients_mean = true;
  }
  return o;
}

// A fresh directory per test, removed at the end.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name) : path(fs::path(::testing::TempDir()) / ("compiled_job_" + name)) {
    fs::remove_all(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string str(const std::string& sub = "") const { return (sub.empty() ? path : path / sub).string(); }
};

std::string ReadText(const std::string& path) {
  auto b = ReadFileBytes(path, kFlatBufferFileLimit);
  return b.ok() ? std::string(b->begin(), b->end()) : "";
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

void FlipByte(const std::string& path, size_t at) {
  auto b = ReadFileBytes(path, kFlatBufferFileLimit);
  ASSERT_TRUE(b.ok());
  ASSERT_LT(at, b->size());
  (*b)[at] ^= 0x5A;
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(b->data()), b->size());
}

TEST(CompiledJob, CompilesEveryRankAndKnowsItsNetwork) {
  auto job = host::CompileJob(Net(), Options(3));
  SINKRT_ASSERT_OK(job.status());
  ASSERT_EQ(job->world_size(), 3u);
  EXPECT_EQ(job->network_name, "mlp");
  EXPECT_EQ(job->network_hash, host::NetworkHash(Net()));
  EXPECT_EQ(job->label_column, "label");
  for (uint32_t r = 0; r < 3; ++r) {
    auto view = VerifyTaskStream(job->ranks[r].stream.bytes());
    SINKRT_ASSERT_OK(view.status());
    EXPECT_EQ(view->root()->header()->rank(), r);
    EXPECT_EQ(view->root()->header()->world_size(), 3u);
  }
  const auto cols = job->train_columns();
  ASSERT_EQ(cols.size(), 2u);
  EXPECT_EQ(cols[0].name, "image");
  EXPECT_EQ(cols[0].shape, (Shape{kBatch, kFeatures}));
}

TEST(CompiledJob, WriteThenReadGivesTheSameStreamsAndReport) {
  TempDir dir("roundtrip");
  auto job = host::CompileJob(Net(), Options(2));
  SINKRT_ASSERT_OK(job.status());
  SINKRT_ASSERT_OK(host::WriteCompiledJob(*job, dir.str()));
  auto back = host::ReadCompiledJob(dir.str());
  SINKRT_ASSERT_OK(back.status());
  ASSERT_EQ(back->world_size(), 2u);
  EXPECT_EQ(back->network_name, job->network_name);
  EXPECT_EQ(back->network_hash, job->network_hash);
  EXPECT_EQ(back->label_column, job->label_column);
  EXPECT_EQ(back->options.optimizer.learning_rate, 0.05f);
  EXPECT_EQ(back->options.optimizer.momentum, 0.9f);
  EXPECT_EQ(back->options.parallel_mode, host::ParallelMode::DataParallel);
  EXPECT_TRUE(back->options.gradients_mean);
  for (uint32_t r = 0; r < 2; ++r) {
    const host::CompiledStream& a = job->ranks[r];
    const host::CompiledStream& b = back->ranks[r];
    EXPECT_EQ(a.stream.bytes(), b.stream.bytes());
    EXPECT_EQ(a.graph_hash, b.graph_hash);
    EXPECT_EQ(a.input_columns, b.input_columns);
    EXPECT_EQ(a.predict_columns, b.predict_columns);
    EXPECT_EQ(a.report.arena_bytes, b.report.arena_bytes);
    EXPECT_EQ(a.report.liveness_lower_bound, b.report.liveness_lower_bound);
    EXPECT_EQ(a.report.persistent_bytes, b.report.persistent_bytes);
    EXPECT_EQ(a.report.train_tasks, b.report.train_tasks);
    EXPECT_EQ(a.report.comm_tasks, b.report.comm_tasks);
    EXPECT_EQ(a.report.eval_tasks, b.report.eval_tasks);
    EXPECT_EQ(a.report.predict_tasks, b.report.predict_tasks);
    ASSERT_EQ(a.report.buckets.size(), b.report.buckets.size());
    for (size_t i = 0; i < a.report.buckets.size(); ++i) {
      EXPECT_EQ(a.report.buckets[i].offset, b.report.buckets[i].offset);
      EXPECT_EQ(a.report.buckets[i].bytes, b.report.buckets[i].bytes);
      EXPECT_EQ(a.report.buckets[i].gradients, b.report.buckets[i].gradients);
    }
  }
  // The manifest of what was read is the manifest that was written.
  EXPECT_EQ(host::ManifestJson(*back), ReadText(dir.str("manifest.json")));
}

TEST(CompiledJob, CompilingTwiceGivesByteIdenticalFiles) {
  TempDir a("twice_a"), b("twice_b");
  SINKRT_ASSERT_OK(host::WriteCompiledJob(host::CompileJob(Net(), Options(2)).value(), a.str()));
  SINKRT_ASSERT_OK(host::WriteCompiledJob(host::CompileJob(Net(), Options(2)).value(), b.str()));
  for (const char* f : {"manifest.json", "rank_0.tstream", "rank_1.tstream"})
    EXPECT_EQ(ReadText(a.str(f)), ReadText(b.str(f))) << f;
}

TEST(CompiledJob, RewritingForFewerRanksRemovesTheStaleRankFiles) {
  TempDir dir("stale");
  SINKRT_ASSERT_OK(host::WriteCompiledJob(host::CompileJob(Net(), Options(3)).value(), dir.str()));
  ASSERT_TRUE(fs::exists(dir.path / "rank_2.tstream"));
  SINKRT_ASSERT_OK(host::WriteCompiledJob(host::CompileJob(Net(), Options(1)).value(), dir.str()));
  EXPECT_FALSE(fs::exists(dir.path / "rank_1.tstream"));
  EXPECT_FALSE(fs::exists(dir.path / "rank_2.tstream"));
  EXPECT_TRUE(host::ReadCompiledJob(dir.str()).ok());
}

TEST(CompiledJob, ReadRefusesWhatDoesNotBelong) {
  TempDir dir("refuse");
  SINKRT_ASSERT_OK(host::WriteCompiledJob(host::CompileJob(Net(), Options(2)).value(), dir.str()));
  const std::string manifest = ReadText(dir.str("manifest.json"));

  // No directory.
  auto missing = host::ReadCompiledJob(dir.str("nowhere"));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("nowhere/manifest.json"), std::string::npos) << missing.status().ToString();

  // A damaged stream: the content hash says so before the verifier runs.
  FlipByte(dir.str("rank_1.tstream"), 200);
  auto damaged = host::ReadCompiledJob(dir.str());
  ASSERT_FALSE(damaged.ok());
  EXPECT_NE(damaged.status().message().find("rank_1.tstream"), std::string::npos) << damaged.status().ToString();
  EXPECT_NE(damaged.status().message().find("changed or damaged"), std::string::npos) << damaged.status().ToString();
  FlipByte(dir.str("rank_1.tstream"), 200);
  SINKRT_ASSERT_OK(host::ReadCompiledJob(dir.str()).status());

  // Rank 1's stream under rank 0's name, the manifest edited to match its
  // bytes: the header still says rank 1.
  {
    auto job = host::ReadCompiledJob(dir.str()).value();
    fs::copy_file(dir.path / "rank_1.tstream", dir.path / "rank_0.tstream", fs::copy_options::overwrite_existing);
    nlohmann::json m = nlohmann::json::parse(manifest);
    m["ranks"][0]["content_hash"] = m["ranks"][1]["content_hash"];
    m["ranks"][0]["bytes"] = m["ranks"][1]["bytes"];
    WriteText(dir.str("manifest.json"), m.dump());
    auto swapped = host::ReadCompiledJob(dir.str());
    ASSERT_FALSE(swapped.ok());
    EXPECT_NE(swapped.status().message().find("rank_0.tstream: the stream is rank 1 of 2, the manifest says rank 0"),
              std::string::npos)
        << swapped.status().ToString();
    SINKRT_ASSERT_OK(host::WriteCompiledJob(job, dir.str()));
  }

  // Manifests that are not ours, each error naming the key.
  struct Case {
    std::string text, expect;
  };
  nlohmann::json no_ranks = nlohmann::json::parse(manifest);
  no_ranks.erase("ranks");
  nlohmann::json bad_hash = nlohmann::json::parse(manifest);
  bad_hash["network"]["hash"] = "42";
  nlohmann::json bad_mode = nlohmann::json::parse(manifest);
  bad_mode["options"]["parallel"]["mode"] = "pipeline";
  nlohmann::json wrong_count = nlohmann::json::parse(manifest);
  wrong_count["options"]["parallel"]["device_num"] = 4;
  nlohmann::json wrong_arena = nlohmann::json::parse(manifest);
  wrong_arena["ranks"][1]["arena_bytes"] = wrong_arena["ranks"][1]["arena_bytes"].get<uint64_t>() + 64;
  nlohmann::json no_arena = nlohmann::json::parse(manifest);
  no_arena["ranks"][0].erase("arena_bytes");
  nlohmann::json wrong_type = nlohmann::json::parse(manifest);
  wrong_type["options"]["queue_capacity"] = "sixteen";
  for (const Case& c : std::vector<Case>{
           {"{", "manifest.json: not JSON"},
           {"{\"format\": \"other 9\"}", "format \"other 9\""},
           {no_ranks.dump(), "missing \"ranks\""},
           {bad_hash.dump(), "\"network.hash\" is \"42\""},
           {bad_mode.dump(), "options.parallel.mode"},
           {wrong_count.dump(), "2 ranks listed, but options.parallel.device_num is 4"},
           {wrong_type.dump(), "\"options.queue_capacity\" has the wrong type"},
           {wrong_arena.dump(), "rank_1.tstream: the stream's arena is "},
           {no_arena.dump(), "arena_bytes"},
       }) {
    WriteText(dir.str("manifest.json"), c.text);
    auto r = host::ReadCompiledJob(dir.str());
    ASSERT_FALSE(r.ok()) << c.expect;
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos) << r.status().ToString();
  }
}

// A corrupt stream that its manifest vouches for (hash and size rewritten to
// match) is refused by the verifier as it is read, naming the file: a
// CompiledJob, and so train_columns(), only ever holds verified streams.
TEST(CompiledJob, ReadRefusesACorruptStreamItsManifestVouchesFor) {
  TempDir dir("corrupt_stream");
  SINKRT_ASSERT_OK(host::WriteCompiledJob(host::CompileJob(Net(), Options()).value(), dir.str()));
  FlipByte(dir.str("rank_0.tstream"), 4 + 4);  // the file identifier "SKTS"
  auto bytes = ReadFileBytes(dir.str("rank_0.tstream"), kFlatBufferFileLimit);
  ASSERT_TRUE(bytes.ok());
  nlohmann::json m = nlohmann::json::parse(ReadText(dir.str("manifest.json")));
  m["ranks"][0]["content_hash"] = host::Hex64(host::job::ContentHash(*bytes));
  WriteText(dir.str("manifest.json"), m.dump());
  auto read = host::ReadCompiledJob(dir.str());
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.status().message().find("rank_0.tstream: not a sinkrt task stream"), std::string::npos)
      << read.status().ToString();
}

std::vector<std::pair<std::string, host::Tensor>> TrainAndRead(std::unique_ptr<host::Model>& model) {
  const auto data = testing::MakeSyntheticData(6 * kBatch, kFeatures, 4, 3);
  EXPECT_TRUE(model->train(2, testing::MakeDataset(data, kBatch), {}, true, -1).ok());
  auto state = model->ReadState();
  EXPECT_TRUE(state.ok());
  return state.ok() ? std::move(state).value() : std::vector<std::pair<std::string, host::Tensor>>{};
}

TEST(CompiledJob, ModelFromAJobReadFromDiskTrainsBitwiseLikeModelFromTheGraph) {
  TempDir dir("model");
  host::ModelOptions no_cache;
  no_cache.compile_cache = "";
  device::InProcessDevice a, b;
  auto from_graph =
      host::Model::Create(Net(), host::LossSpec::None(), OptimizerSpec::Momentum(0.05f, 0.9f), a, no_cache);
  SINKRT_ASSERT_OK(from_graph.status());
  SINKRT_ASSERT_OK(host::WriteCompiledJob(host::CompileJob(Net(), Options(1)).value(), dir.str()));
  auto job = host::ReadCompiledJob(dir.str());
  SINKRT_ASSERT_OK(job.status());
  DeviceLink* one[] = {&b};
  auto from_job = host::Model::Create(std::move(job).value(), one);
  SINKRT_ASSERT_OK(from_job.status());
  EXPECT_EQ((*from_job)->network_hash(), (*from_graph)->network_hash());
  EXPECT_EQ((*from_job)->network_name(), "mlp");
  const auto sa = TrainAndRead(*from_graph);
  const auto sb = TrainAndRead(*from_job);
  ASSERT_EQ(sa.size(), sb.size());
  ASSERT_FALSE(sa.empty());
  for (size_t i = 0; i < sa.size(); ++i) {
    EXPECT_EQ(sa[i].first, sb[i].first);
    EXPECT_TRUE(sa[i].second.data == sb[i].second.data) << sa[i].first;
  }
  // Eval scores partial batches on the host: it needs the label column the
  // manifest carried.
  const auto test = testing::MakeSyntheticData(3 * kBatch + 3, kFeatures, 4, 9);
  auto ea = (*from_graph)->eval(testing::MakeDataset(test, kBatch, false));
  auto eb = (*from_job)->eval(testing::MakeDataset(test, kBatch, false));
  SINKRT_ASSERT_OK(ea.status());
  SINKRT_ASSERT_OK(eb.status());
  EXPECT_EQ(ea->loss, eb->loss);
  EXPECT_EQ(ea->accuracy, eb->accuracy);
  EXPECT_EQ(ea->samples, eb->samples);
}

TEST(CompiledJob, ModelRefusesAJobForAnotherWorld) {
  device::InProcessDevice a, b;
  DeviceLink* one[] = {&a};
  auto two_ranks = host::Model::Create(host::CompileJob(Net(), Options(2)).value(), one);
  ASSERT_FALSE(two_ranks.ok());
  EXPECT_NE(two_ranks.status().message().find("compiled for 2 ranks, but got 1 device"), std::string::npos)
      << two_ranks.status().ToString();
  // Streams of the right count but the wrong ranks.
  CompiledJob swapped = host::CompileJob(Net(), Options(2)).value();
  std::swap(swapped.ranks[0], swapped.ranks[1]);
  DeviceLink* both[] = {&a, &b};
  auto wrong = host::Model::Create(std::move(swapped), both);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("the stream for rank 0 is rank 1 of 2"), std::string::npos)
      << wrong.status().ToString();
  host::ModelOptions dp;
  dp.context.mode = host::ParallelMode::DataParallel;
  dp.context.device_num = 2;
  auto contradicted = host::Model::Create(host::CompileJob(Net(), Options(1)).value(), one, dp);
  ASSERT_FALSE(contradicted.ok());
  EXPECT_NE(contradicted.status().message().find(
                "was compiled for stand_alone on 1 devices, but the context asks for data_parallel on 2"),
            std::string::npos)
      << contradicted.status().ToString();
}

// MindSpore's MS_COMPILER_CACHE_PATH names the cache too; sinkrt's own
// variable wins when both are set.
TEST(CompileCache, TheDirectoryComesFromSinkrtsOrMindSporesVariable) {
  const char* names[] = {"SINKRT_COMPILE_CACHE", "MS_COMPILER_CACHE_PATH"};
  std::optional<std::string> saved[2];
  for (int i = 0; i < 2; ++i)
    if (const char* v = std::getenv(names[i])) saved[i] = v;
  for (const char* n : names) ::unsetenv(n);
  EXPECT_EQ(host::CompileCacheDirFromEnvironment(), "");
  ::setenv("MS_COMPILER_CACHE_PATH", "/tmp/ms_cache", 1);
  EXPECT_EQ(host::CompileCacheDirFromEnvironment(), "/tmp/ms_cache");
  EXPECT_EQ(host::ModelOptions{}.compile_cache, "/tmp/ms_cache");
  ::setenv("SINKRT_COMPILE_CACHE", "/tmp/sinkrt_cache", 1);
  EXPECT_EQ(host::CompileCacheDirFromEnvironment(), "/tmp/sinkrt_cache");
  ::setenv("SINKRT_COMPILE_CACHE", "", 1);  // empty: as if unset
  EXPECT_EQ(host::CompileCacheDirFromEnvironment(), "/tmp/ms_cache");
  for (int i = 0; i < 2; ++i) {
    if (saved[i])
      ::setenv(names[i], saved[i]->c_str(), 1);
    else
      ::unsetenv(names[i]);
  }
}

TEST(CompileCache, MissThenHitSkipsCompilation) {
  TempDir cache("cache_hit");
  const host::CompileCacheStats before = host::GetCompileCacheStats();
  ::testing::internal::CaptureStderr();
  auto first = host::CompileJob(Net(), Options(2), cache.str());
  std::string log = ::testing::internal::GetCapturedStderr();
  SINKRT_ASSERT_OK(first.status());
  EXPECT_NE(log.find("sinkrt: compile cache miss"), std::string::npos) << log;
  host::CompileCacheStats mid = host::GetCompileCacheStats();
  EXPECT_EQ(mid.misses, before.misses + 1);
  EXPECT_EQ(mid.compiles, before.compiles + 2);

  ::testing::internal::CaptureStderr();
  auto second = host::CompileJob(Net(), Options(2), cache.str());
  log = ::testing::internal::GetCapturedStderr();
  SINKRT_ASSERT_OK(second.status());
  EXPECT_NE(log.find("sinkrt: compile cache hit"), std::string::npos) << log;
  host::CompileCacheStats after = host::GetCompileCacheStats();
  EXPECT_EQ(after.hits, mid.hits + 1);
  EXPECT_EQ(after.compiles, mid.compiles) << "a hit compiled";
  for (uint32_t r = 0; r < 2; ++r) EXPECT_EQ(first->ranks[r].stream.bytes(), second->ranks[r].stream.bytes());

  // Another option is another key.
  CompileOptions other = Options(2);
  other.optimizer.learning_rate = 0.01f;
  ::testing::internal::CaptureStderr();
  SINKRT_ASSERT_OK(host::CompileJob(Net(), other, cache.str()).status());
  ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(host::GetCompileCacheStats().misses, after.misses + 1);
  EXPECT_EQ(host::GetCompileCacheStats().compiles, after.compiles + 2);
}

TEST(CompileCache, ACorruptEntryIsRecompiledAndReplacedNeverUsed) {
  TempDir cache("cache_corrupt");
  ::testing::internal::CaptureStderr();
  auto good = host::CompileJob(Net(), Options(1), cache.str());
  ::testing::internal::GetCapturedStderr();
  SINKRT_ASSERT_OK(good.status());
  fs::path entry;
  for (const auto& e : fs::directory_iterator(cache.path)) entry = e.path();
  ASSERT_TRUE(fs::exists(entry / "rank_0.tstream"));
  FlipByte((entry / "rank_0.tstream").string(), 100);

  const host::CompileCacheStats before = host::GetCompileCacheStats();
  ::testing::internal::CaptureStderr();
  auto again = host::CompileJob(Net(), Options(1), cache.str());
  const std::string log = ::testing::internal::GetCapturedStderr();
  SINKRT_ASSERT_OK(again.status());
  EXPECT_NE(log.find("is unusable, recompiling"), std::string::npos) << log;
  EXPECT_EQ(again->ranks[0].stream.bytes(), good->ranks[0].stream.bytes());
  const host::CompileCacheStats after = host::GetCompileCacheStats();
  EXPECT_EQ(after.corrupt, before.corrupt + 1);
  EXPECT_EQ(after.compiles, before.compiles + 1);
  // The entry was replaced: the next compile is a hit again.
  ::testing::internal::CaptureStderr();
  SINKRT_ASSERT_OK(host::CompileJob(Net(), Options(1), cache.str()).status());
  ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(host::GetCompileCacheStats().hits, after.hits + 1);
}

TEST(CompileCache, ModelCreateUsesTheCacheItIsGiven) {
  TempDir cache("cache_model");
  host::ModelOptions options;
  options.compile_cache = cache.str();
  device::InProcessDevice a, b;
  ::testing::internal::CaptureStderr();
  auto m1 = host::Model::Create(Net(), host::LossSpec::None(), OptimizerSpec::Sgd(0.1f), a, options);
  const host::CompileCacheStats mid = host::GetCompileCacheStats();
  auto m2 = host::Model::Create(Net(), host::LossSpec::None(), OptimizerSpec::Sgd(0.1f), b, options);
  ::testing::internal::GetCapturedStderr();
  SINKRT_ASSERT_OK(m1.status());
  SINKRT_ASSERT_OK(m2.status());
  EXPECT_EQ(host::GetCompileCacheStats().hits, mid.hits + 1);
  EXPECT_EQ(host::GetCompileCacheStats().compiles, mid.compiles);
  EXPECT_EQ((*m1)->compiled().stream.bytes(), (*m2)->compiled().stream.bytes());
}

TEST(CompileCache, AnUnwritableCacheIsSkippedNotAnError) {
  TempDir dir("cache_unwritable");
  fs::create_directories(dir.path);
  WriteText(dir.str("file"), "not a directory");
  ::testing::internal::CaptureStderr();
  auto job = host::CompileJob(Net(), Options(1), dir.str("file"));
  const std::string log = ::testing::internal::GetCapturedStderr();
  SINKRT_ASSERT_OK(job.status());
  EXPECT_NE(log.find("not written"), std::string::npos) << log;
}

}  // namespace
}  // namespace sinkrt
