// sinkdump end to end: the real binary on a compiled MLP, in text and JSON,
// and on corrupt files.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "runtime/src/file_io.h"
#include "runtime/src/stream_names.h"
#include "sinkrt/host/compiler.h"
#include "sinkrt/host/model_zoo.h"
#include "sinkrt/runtime/stream_format.h"
#include "sinkrt/runtime/task_stream_verifier.h"
#include "support/alltoall_stream.h"
#include "support/run_binary.h"
#include "support/test_models.h"

namespace sinkrt {
namespace {

namespace fs = std::filesystem;

using testing::RunResult;
using testing::Slurp;

class SinkdumpTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / ("sinkdump_test_" + std::to_string(::getpid())));
    fs::create_directories(*dir_);
    host::CompileOptions options;
    options.optimizer = host::OptimizerSpec::Momentum(0.05f, 0.9f);
    auto compiled = host::Compile(testing::MakeMlp(8, {16, 12, 4}), options);
    ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
    bytes_ = new std::vector<uint8_t>(compiled->stream.bytes());
    mlp_ = new fs::path(*dir_ / "mlp.tstream");
    ASSERT_TRUE(WriteFileBytes(mlp_->string(), *bytes_).ok());
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(*dir_, ec);
    delete dir_;
    delete mlp_;
    delete bytes_;
  }

  void SetUp() override {
#ifndef SINKDUMP_PATH
    GTEST_SKIP() << "sinkdump is not built in this configuration";
#endif
    ASSERT_NE(bytes_, nullptr) << "compiling the MLP failed";
  }

  // Runs sinkdump with `args` (already shell-quoted where needed).
  static RunResult Run(const std::string& args) {
    RunResult r;
#ifdef SINKDUMP_PATH
    r = testing::RunBinary(SINKDUMP_PATH, args, *dir_);
#endif
    return r;
  }

  static std::string Quoted(const fs::path& p) {
    std::string q = "'";
    q += p.string();
    q += '\'';
    return q;
  }

  static fs::path WriteVariant(const std::string& name, const std::vector<uint8_t>& bytes) {
    fs::path p = *dir_ / name;
    EXPECT_TRUE(WriteFileBytes(p.string(), bytes).ok());
    return p;
  }

  static VerifiedStream View() {
    auto v = VerifyTaskStream(*bytes_);
    EXPECT_TRUE(v.ok()) << v.status().ToString();
    return std::move(v).value();
  }

  static fs::path* dir_;
  static fs::path* mlp_;
  static std::vector<uint8_t>* bytes_;
};
fs::path* SinkdumpTest::dir_ = nullptr;
fs::path* SinkdumpTest::mlp_ = nullptr;
std::vector<uint8_t>* SinkdumpTest::bytes_ = nullptr;

// Read until std::bad_alloc at 4 GB.
TEST_F(SinkdumpTest, ADeviceFileIsRefusedNamingWhatItIs) {
  RunResult r = Run("/dev/urandom");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("'/dev/urandom' is a character device, not a regular file"), std::string::npos) << r.err;
}

TEST_F(SinkdumpTest, TextShowsHeaderMemoryPlanQueuesAndTasks) {
  RunResult r = Run(Quoted(*mlp_));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;
  for (const char* fragment : {"header",
                               "format        1.6",
                               "world size 1",
                               "graph hash    0x",
                               "requirements",
                               "producer",
                               "memory plan:",
                               "liveness lower bound",
                               "arena / lower bound",
                               "bytes per role",
                               "fc1.weight",
                               "fc2.bias",
                               "HeUniform",
                               "queues:",
                               "'train'",
                               "image",
                               "label",
                               "per batch",
                               "communicator groups: 0",
                               "program 'init'",
                               "train_step",
                               "eval_step",
                               "GetNext",
                               "MatMul",
                               "SparseSoftmaxCrossEntropy",
                               "MomentumUpdate",
                               "momentum=0.9",
                               " -> "})
    EXPECT_NE(r.out.find(fragment), std::string::npos) << "missing '" << fragment << "' in:\n" << r.out;

  // Every buffer appears as a row of the memory table, in index order.
  VerifiedStream v = View();
  size_t at = r.out.find("memory plan:");
  for (uint32_t i = 0; i < v.root()->buffers()->size(); ++i) {
    std::string name = v.root()->buffers()->Get(i)->name()->str();
    size_t next = r.out.find(name, at);
    ASSERT_NE(next, std::string::npos) << "buffer " << i << " '" << name << "' not listed in order";
    at = next;
  }
}

TEST_F(SinkdumpTest, TextShowsFusedKernelOptions) {
  // The MLP's hidden layer is MatMul + BiasAdd + Relu, which the compiler fuses.
  RunResult r = Run(Quoted(*mlp_) + " --program train_step");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("fused_bias=fc1.bias"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fused_relu"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("program 'init'"), std::string::npos) << "--program must filter:\n" << r.out;
}

// Sunk eval (format 1.4): eval_step's MetricSum with its weights (the
// batch's rows for the loss, 1 for the count) and the accumulator the
// device zeroes when a sink starts, in text and in JSON.
TEST_F(SinkdumpTest, ShowsTheSunkEvalSumsAndTheirAccumulator) {
  RunResult r = Run(Quoted(*mlp_) + " --program eval_step");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* fragment :
       {"MetricSum", "eval/metric_sum", "weights=", "accumulators [eval/metric_sums]", "zeroed when a sink starts"})
    EXPECT_NE(r.out.find(fragment), std::string::npos) << "missing '" << fragment << "' in:\n" << r.out;
  RunResult j = Run(Quoted(*mlp_) + " --json --program eval_step");
  ASSERT_EQ(j.exit_code, 0) << j.err;
  nlohmann::json doc = nlohmann::json::parse(j.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(doc.is_discarded()) << j.out;
  ASSERT_TRUE(doc.contains("programs") && doc["programs"].is_array() && !doc["programs"].empty()) << j.out;
  EXPECT_EQ(doc["programs"][0]["accumulators"], nlohmann::json::array({"eval/metric_sums"})) << j.out;
}

TEST_F(SinkdumpTest, TextShowsTheLayoutOpsAndTheirOptions) {
  host::Graph g("layout");
  const host::TensorId x = g.Param("x", {2, 3, 4}, host::InitSpec::HeUniform(3));
  const std::vector<host::TensorId> parts = g.Split(g.Transpose(x, {0, 2, 1}), -1, {1, 2});
  const host::TensorId c = g.Concat({parts[1], parts[0]}, 2);
  g.SetLoss(g.ReduceSum(g.BatchMatMul(c, x, true, true)));
  host::CompileOptions options;
  options.optimizer = host::OptimizerSpec::Sgd(0.5f);
  auto compiled = host::Compile(g, options);
  ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
  const fs::path p = WriteVariant("layout.tstream", compiled->stream.bytes());
  RunResult r = Run(Quoted(p) + " --program train_step");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* fragment : {"Transpose", "perm=0,2,1", "Split", "axis=2 sizes=1,2", "Concat", "axis=2",
                               "BatchMatMul", "transpose_a transpose_b"})
    EXPECT_NE(r.out.find(fragment), std::string::npos) << "missing '" << fragment << "' in:\n" << r.out;
}

TEST_F(SinkdumpTest, JsonCarriesTheSameInformation) {
  RunResult r = Run(Quoted(*mlp_) + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << "not JSON:\n" << r.out;

  VerifiedStream v = View();
  const fb::TaskStream& s = *v.root();
  EXPECT_EQ(j["header"]["format_version"], "1.6");
  EXPECT_EQ(j["header"]["world_size"], 1);
  EXPECT_EQ(j["header"]["target"], s.header()->target()->str());

  const auto& mem = j["memory"];
  EXPECT_EQ(mem["arena_bytes"].get<uint64_t>(), s.arena_bytes());
  EXPECT_EQ(mem["liveness_lower_bound"].get<uint64_t>(), s.liveness_lower_bound());
  ASSERT_EQ(mem["buffers"].size(), s.buffers()->size());
  uint64_t role_bytes = 0;
  for (const auto& [role, total] : mem["bytes_per_role"].items()) role_bytes += total["bytes"].get<uint64_t>();
  uint64_t table_bytes = 0;
  for (uint32_t i = 0; i < s.buffers()->size(); ++i) {
    const fb::Buffer* b = s.buffers()->Get(i);
    const auto& e = mem["buffers"][i];
    EXPECT_EQ(e["index"], i);
    EXPECT_EQ(e["name"], b->name()->str());
    EXPECT_EQ(e["offset"].get<uint64_t>(), b->offset());
    EXPECT_EQ(e["bytes"].get<uint64_t>(), b->bytes());
    EXPECT_EQ(e["role"], std::string(BufferRoleName(b->role())));
    table_bytes += b->bytes();
  }
  EXPECT_EQ(role_bytes, table_bytes);

  ASSERT_EQ(j["queues"].size(), s.queues()->size());
  const auto& train = j["queues"][0];
  EXPECT_EQ(train["name"], "train");
  ASSERT_EQ(train["columns"].size(), 2u);
  EXPECT_EQ(train["columns"][0]["name"], "image");
  EXPECT_EQ(train["columns"][0]["shape"], nlohmann::json::array({8, 16}));
  EXPECT_EQ(train["columns"][1]["dtype"], "i32");
  EXPECT_EQ(train["bytes_per_batch"], 8 * 16 * 4 + 8 * 4);

  ASSERT_EQ(j["programs"].size(), s.programs()->size());
  std::vector<std::string> kinds;
  for (const auto& p : j["programs"]) kinds.push_back(p["kind"]);
  EXPECT_NE(std::find(kinds.begin(), kinds.end(), "train_step"), kinds.end());
  for (uint32_t p = 0; p < s.programs()->size(); ++p) {
    const fb::Program* prog = s.programs()->Get(p);
    const auto& jp = j["programs"][p];
    ASSERT_EQ(jp["streams"].size(), prog->streams()->size());
    for (uint32_t st = 0; st < prog->streams()->size(); ++st)
      EXPECT_EQ(jp["streams"][st]["tasks"].size(), prog->streams()->Get(st)->tasks()->size());
  }
  // The first train_step task pops the train queue into the input buffers.
  const fb::Program* train_prog = v.FindProgram(ProgramKind::TrainStep);
  ASSERT_NE(train_prog, nullptr);
  for (const auto& p : j["programs"]) {
    if (p["kind"] != "train_step") continue;
    const auto& first = p["streams"][0]["tasks"][0];
    EXPECT_EQ(first["kind"], "GetNext");
    EXPECT_EQ(first["options"]["queue"], "train");
    EXPECT_EQ(first["outputs"], nlohmann::json::array({"image", "label"}));
  }
}

TEST_F(SinkdumpTest, ShowsLayerNormGatherCastAndBf16Buffers) {
  host::Graph g("norm_gather_cast");
  const host::TensorId ids = g.Input("ids", {4}, DType::I32);
  const host::TensorId table = g.Param("embed", {10, 8}, host::InitSpec::Normal(0.0f, 1.0f, 1));
  const host::TensorId gamma = g.Param("ln.gamma", {8}, host::InitSpec::Constant(1.0f));
  const host::TensorId beta = g.Param("ln.beta", {8}, host::InitSpec::Zeros());
  host::TensorId y = g.LayerNorm(g.Gather(table, ids), gamma, beta, 1e-6f);
  y = g.Cast(g.Cast(y, DType::BF16), DType::F32);
  g.SetLoss(g.ReduceSum(y));
  host::CompileOptions options;
  options.optimizer = host::OptimizerSpec::Sgd(0.1f);
  auto compiled = host::Compile(g, options);
  ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
  const fs::path path = WriteVariant("norm_gather_cast.tstream", compiled->stream.bytes());
  RunResult r = Run(Quoted(path));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* fragment :
       {"LayerNorm", "LayerNormGrad", "epsilon=1e-06", "Gather", "GatherGrad", "Cast", "to=bf16", "to=f32", "bf16"})
    EXPECT_NE(r.out.find(fragment), std::string::npos) << fragment << " not in:\n" << r.out;
  RunResult j = Run(Quoted(path) + " --json");
  ASSERT_EQ(j.exit_code, 0) << j.err;
  EXPECT_NE(j.out.find("\"bf16\""), std::string::npos) << j.out;
}

// amp_level O2 (docs/guide/amp.md): the casts are tasks of their own, each
// parameter's bf16 copy is a bf16 buffer, and the fused bias is that copy.
TEST_F(SinkdumpTest, ShowsTheCastsOfAmpO2) {
  host::CompileOptions options;
  options.optimizer = host::OptimizerSpec::Momentum(0.1f, 0.9f);
  options.amp_level = host::AmpLevel::O2;
  auto compiled = host::Compile(testing::MakeMlp(8, {16, 12, 4}), options);
  ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
  const fs::path path = WriteVariant("mlp_o2.tstream", compiled->stream.bytes());
  RunResult r = Run(Quoted(path) + " --program train_step");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* fragment : {"Cast", "to=bf16", "to=f32", "fc1.weight/to_bf16", "image/to_bf16",
                               "fused_bias=fc1.bias/to_bf16", "MomentumUpdate"})
    EXPECT_NE(r.out.find(fragment), std::string::npos) << fragment << " not in:\n" << r.out;
  RunResult all = Run(Quoted(path));
  ASSERT_EQ(all.exit_code, 0) << all.err;
  EXPECT_NE(all.out.find("bf16"), std::string::npos);
}

// Loss scaling (docs/guide/loss_scale.md): the check, the scaled updates reading
// its status, the update cell, and the scale's state in the memory plan.
TEST_F(SinkdumpTest, ShowsTheLossScaleTasksAndState) {
  host::CompileOptions options;
  options.optimizer = host::OptimizerSpec::Momentum(0.1f, 0.9f);
  options.loss_scale = host::LossScaleManager::Dynamic(1024.0f, 2.0f, 100);
  auto compiled = host::Compile(testing::MakeMlp(8, {16, 12, 4}), options);
  ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
  const fs::path path = WriteVariant("mlp_loss_scale.tstream", compiled->stream.bytes());
  RunResult r = Run(Quoted(path));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* fragment : {"GradOverflow", "loss_scale/status", "check", "LossScaleUpdate", "scale_factor=2",
                               "scale_window=100", "loss_scale/counters", "loss_scale/seed"})
    EXPECT_NE(r.out.find(fragment), std::string::npos) << fragment << " not in:\n" << r.out;
}

TEST_F(SinkdumpTest, JsonKeyOrderIsStable) {
  RunResult a = Run(Quoted(*mlp_) + " --json");
  RunResult b = Run(Quoted(*mlp_) + " --json");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  // Header first, programs last, as documented; not alphabetical.
  EXPECT_LT(a.out.find("\"header\""), a.out.find("\"memory\""));
  EXPECT_LT(a.out.find("\"queues\""), a.out.find("\"programs\""));
}

TEST_F(SinkdumpTest, NoTasksListsStreamsOnly) {
  RunResult r = Run(Quoted(*mlp_) + " --json --no-tasks --program train_step");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["programs"].size(), 1u);
  EXPECT_EQ(j["programs"][0]["kind"], "train_step");
  for (const auto& st : j["programs"][0]["streams"]) {
    EXPECT_FALSE(st.contains("tasks"));
    EXPECT_GT(st["num_tasks"].get<int>(), 0);
  }
  RunResult text = Run(Quoted(*mlp_) + " --no-tasks");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_EQ(text.out.find("MatMul"), std::string::npos) << text.out;
}

TEST_F(SinkdumpTest, CorruptFilesExitOneNamingTheFile) {
  std::vector<uint8_t> truncated(bytes_->begin(), bytes_->begin() + bytes_->size() / 2);
  std::vector<uint8_t> wrong_id = *bytes_;
  wrong_id[8] = 'X';  // the file identifier follows the size prefix and root offset
  std::vector<uint8_t> garbage(256);
  for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<uint8_t>(i * 37 + 11);
  const std::pair<const char*, const std::vector<uint8_t>*> cases[] = {
      {"truncated.tstream", &truncated}, {"wrong_id.tstream", &wrong_id}, {"garbage.tstream", &garbage}};
  for (const auto& [name, bytes] : cases) {
    fs::path p = WriteVariant(name, *bytes);
    RunResult r = Run(Quoted(p));
    EXPECT_EQ(r.exit_code, 1) << name << ": " << r.err;
    EXPECT_TRUE(r.out.empty()) << name << " printed a partial dump:\n" << r.out;
    EXPECT_NE(r.err.find(p.string()), std::string::npos) << name << ": error does not name the file: " << r.err;
    EXPECT_NE(r.err.find("INVALID_ARGUMENT"), std::string::npos) << name << ": " << r.err;
  }
  RunResult missing = Run(Quoted(*dir_ / "no_such.tstream"));
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("no_such.tstream"), std::string::npos) << missing.err;
}

TEST_F(SinkdumpTest, RandomByteFlipsNeverCrash) {
  // Every outcome is a dump (exit 0) or a verification error (exit 1); a
  // signal would show up as -1.
  uint64_t state = 0x9E3779B97F4A7C15ull;
  auto next = [&state] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<uint8_t> bytes = *bytes_;
    for (int k = 0; k < 3; ++k) bytes[4 + next() % (bytes.size() - 4)] = static_cast<uint8_t>(next());
    fs::path p = WriteVariant("flip.tstream", bytes);
    RunResult r = Run(Quoted(p) + " --json");
    ASSERT_TRUE(r.exit_code == 0 || r.exit_code == 1) << "trial " << trial << " exit " << r.exit_code << ": " << r.err;
  }
}

// The FlatBuffers Verifier accepts a union whose type is set but whose value
// is absent; such a task must be refused, not dereferenced.
TEST_F(SinkdumpTest, TaskWithTypeButNoBodyIsRefused) {
  for (fb::TaskBody type :
       {fb::TaskBody::KernelTask, fb::TaskBody::GetNextTask, fb::TaskBody::EventRecordTask, fb::TaskBody::InitTask}) {
    flatbuffers::FlatBufferBuilder fbb;
    auto header = fb::CreateHeaderDirect(fbb, kFormatMajor, kFormatMinor, 0, 1, "cpu");
    std::vector<flatbuffers::Offset<fb::Task>> tasks = {fb::CreateTaskDirect(fbb, type, 0, "bodiless")};
    std::vector<flatbuffers::Offset<fb::Stream>> streams = {fb::CreateStreamDirect(fbb, "compute", &tasks)};
    std::vector<flatbuffers::Offset<fb::Program>> programs = {
        fb::CreateProgramDirect(fbb, "train_step", fb::ProgramKind::TrainStep, &streams, 1)};
    fb::TaskStreamBuilder root(fbb);
    root.add_header(header);
    root.add_programs(fbb.CreateVector(programs));
    fb::FinishSizePrefixedTaskStreamBuffer(fbb, root.Finish());
    std::string name = std::string("bodiless_") + fb::EnumNameTaskBody(type) + ".tstream";
    fs::path p =
        WriteVariant(name, std::vector<uint8_t>(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize()));
    RunResult r = Run(Quoted(p));
    EXPECT_EQ(r.exit_code, 1) << name << " (-1: killed by a signal)";
    EXPECT_NE(r.err.find(p.string()), std::string::npos) << name << ": " << r.err;
  }
}

// An AllToAll on a subgroup shows like the other collectives: its buffers
// and its group, in text and JSON.
TEST_F(SinkdumpTest, ShowsAllToAllWithItsGroup) {
  const fs::path p = WriteVariant(
      "alltoall.tstream",
      testing::AllToAllStream(2, 4, {{"tokens", DType::F32, {2, 8}}, {"routed", DType::F32, {2, 8}}}, {{1, 0, 1}}));
  RunResult text = Run(Quoted(p) + " --program train_step");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  for (const char* fragment : {"communicator groups: 3", "1 'even': ranks [0, 2]", "stream 1 'comm'"})
    EXPECT_NE(text.out.find(fragment), std::string::npos) << "missing '" << fragment << "' in:\n" << text.out;
  // The task's row of the comm stream's table.
  const size_t at = text.out.find("exchange0");
  ASSERT_NE(at, std::string::npos) << text.out;
  const size_t begin = text.out.rfind('\n', at) + 1;
  const std::string row = text.out.substr(begin, text.out.find('\n', at) - begin);
  for (const char* fragment : {" AllToAll ", "tokens -> routed", "group=even"})
    EXPECT_NE(row.find(fragment), std::string::npos) << "missing '" << fragment << "' in the row: " << row;

  RunResult json = Run(Quoted(p) + " --json");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  nlohmann::json j = nlohmann::json::parse(json.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << "not JSON:\n" << json.out;
  const auto& task = j["programs"][0]["streams"][1]["tasks"][1];
  EXPECT_EQ(task["kind"], "AllToAll");
  EXPECT_EQ(task["inputs"], nlohmann::json::array({"tokens"}));
  EXPECT_EQ(task["outputs"], nlohmann::json::array({"routed"}));
  EXPECT_EQ(task["options"]["group"], "even");
}

// A DATA_PARALLEL stream dumps its two train_step streams, the world group
// and each fusion bucket's byte range.
TEST_F(SinkdumpTest, ShowsDataParallelBucketsStreamsAndGroups) {
  host::CompileOptions options;
  options.optimizer = host::OptimizerSpec::Momentum(0.05f, 0.9f);
  options.parallel_mode = host::ParallelMode::DataParallel;
  options.world_size = 2;
  options.rank = 1;
  options.gradients_mean = true;
  options.comm_fusion.openstate = false;  // one bucket per gradient
  auto compiled = host::Compile(testing::MakeMlp(8, {16, 12, 4}), options);
  ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
  fs::path p = WriteVariant("dp.tstream", compiled->stream.bytes());
  const auto& buckets = compiled->report.buckets;
  ASSERT_EQ(buckets.size(), 4u);

  RunResult text = Run(Quoted(p) + " --program train_step");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  for (const char* fragment :
       {"rank          1 of world size 2", "(collectives)", "communicator groups: 1", "0 'world': ranks [0, 1]",
        "2 streams, 8 events", "stream 0 'compute'", "stream 1 'comm': 12 tasks", "EventRecord", "EventWait",
        "AllReduce", "group=world op=Mean", "gradients=1", "buckets: 4 AllReduces"})
    EXPECT_NE(text.out.find(fragment), std::string::npos) << "missing '" << fragment << "' in:\n" << text.out;
  for (const host::GradientBucket& b : buckets) {
    std::string range = "bytes=[";  // appends: GCC 12 warns (-Wrestrict) on "[" + temporaries
    range += std::to_string(b.offset);
    range += ", ";
    range += std::to_string(b.offset + b.bytes);
    range += ')';
    EXPECT_NE(text.out.find(range), std::string::npos) << range << " in:\n" << text.out;
    EXPECT_NE(text.out.find(b.gradients[0]), std::string::npos);
  }
  // The bucket table is there without the task lists too.
  RunResult brief = Run(Quoted(p) + " --program train_step --no-tasks");
  ASSERT_EQ(brief.exit_code, 0) << brief.err;
  EXPECT_NE(brief.out.find("buckets: 4 AllReduces"), std::string::npos) << brief.out;

  RunResult json = Run(Quoted(p) + " --json");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  nlohmann::json j = nlohmann::json::parse(json.out);
  EXPECT_EQ(j["header"]["rank"], 1);
  EXPECT_EQ(j["header"]["requirement_names"], nlohmann::json::array({"collectives"}));
  ASSERT_EQ(j["groups"].size(), 1u);
  EXPECT_EQ(j["groups"][0]["name"], "world");
  EXPECT_EQ(j["groups"][0]["ranks"], nlohmann::json::array({0, 1}));
  bool saw_train = false;
  for (const auto& prog : j["programs"]) {
    if (prog["kind"] != "train_step") {
      EXPECT_EQ(prog["streams"].size(), 1u) << prog["kind"];
      EXPECT_TRUE(prog["buckets"].empty()) << prog["kind"];
      continue;
    }
    saw_train = true;
    EXPECT_EQ(prog["num_events"], 8);
    ASSERT_EQ(prog["streams"].size(), 2u);
    EXPECT_EQ(prog["streams"][1]["name"], "comm");
    ASSERT_EQ(prog["buckets"].size(), buckets.size());
    for (size_t k = 0; k < buckets.size(); ++k) {
      const auto& b = prog["buckets"][k];
      EXPECT_EQ(b["stream"], 1);
      EXPECT_EQ(b["op"], "Mean");
      EXPECT_EQ(b["group"], "world");
      EXPECT_EQ(b["gradients"], 1);
      EXPECT_EQ(b["offset"].get<uint64_t>(), buckets[k].offset);
      EXPECT_EQ(b["bytes"].get<uint64_t>(), buckets[k].bytes);
      EXPECT_EQ(b["end"].get<uint64_t>(), buckets[k].offset + buckets[k].bytes);
      EXPECT_EQ(b["buffers"], nlohmann::json(buckets[k].gradients));
    }
  }
  EXPECT_TRUE(saw_train);
}

TEST_F(SinkdumpTest, MissingProgramIsAnError) {
  host::CompileOptions options;
  options.eval_program = false;
  auto compiled = host::Compile(testing::MakeMlp(4, {6, 3}), options);
  ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
  fs::path p = WriteVariant("no_eval.tstream", compiled->stream.bytes());
  RunResult r = Run(Quoted(p) + " --program eval_step");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("eval_step"), std::string::npos) << r.err;
}

TEST_F(SinkdumpTest, PredictStepCanBePicked) {
  host::CompileOptions options;
  options.predict_program = true;
  auto compiled = host::Compile(testing::MakeMlp(4, {6, 3}), options);
  ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
  fs::path p = WriteVariant("predict.tstream", compiled->stream.bytes());
  RunResult r = Run(Quoted(p) + " --program predict_step --no-tasks");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("predict_step"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("train_step"), std::string::npos) << r.out;
}

// Every tool exits 2 on a bad command line (CLI11's own codes are 105 to 115).
TEST_F(SinkdumpTest, UsageErrorsExitTwo) {
  for (const std::string& args : {std::string("--no-such-flag ") + Quoted(*mlp_), std::string(""),
                                  Quoted(*mlp_) + " --limit abc", Quoted(*mlp_) + " --program nope"}) {
    SCOPED_TRACE(args);
    RunResult r = Run(args);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_FALSE(r.err.empty());
  }
  EXPECT_EQ(Run("--help").exit_code, 0);
}

// sinkrt's other files are named for what they are, with what to do instead.
TEST_F(SinkdumpTest, OtherSinkrtFilesAreNamedForWhatTheyAre) {
  auto write_text = [](const std::string& name, const std::string& text) {
    fs::path p = *dir_ / name;
    std::ofstream(p) << text;
    return p;
  };
  // A plain FlatBuffer: root offset, then the 4-byte file identifier.
  auto write_flatbuffer = [](const std::string& name, const char* identifier) {
    std::vector<uint8_t> bytes = {8, 0, 0, 0};
    bytes.insert(bytes.end(), identifier, identifier + 4);
    bytes.resize(32, 0);
    return WriteVariant(name, bytes);
  };
  struct Case {
    fs::path path;
    std::vector<std::string> says;
  };
  const std::vector<Case> cases = {
      {write_text("graph.json", R"({"format_major": 1, "name": "mlp", "tensors": []})"),
       {"graph file (JSON)", "sinkc"}},
      {write_text("manifest.json", R"({"format": "sinkrt-job 1", "network": {}, "ranks": []})"),
       {"sinkc manifest", "rank_0.tstream"}},
      {write_flatbuffer("graph.sgraph", "SKGR"), {"graph file", "sinkc"}},
      {write_flatbuffer("weights.ckpt", "SKCK"), {"checkpoint", "SKCK"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.path.string());
    RunResult r = Run(Quoted(c.path));
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find(c.path.string()), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("not a task stream"), std::string::npos) << r.err;
    for (const std::string& s : c.says) EXPECT_NE(r.err.find(s), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("size prefix"), std::string::npos) << r.err;
  }

  const fs::path job = *dir_ / "job";
  fs::create_directories(job);
  RunResult empty = Run(Quoted(job));
  EXPECT_EQ(empty.exit_code, 1);
  EXPECT_NE(empty.err.find("is a directory"), std::string::npos) << empty.err;
  fs::copy_file(*mlp_, job / "rank_0.tstream");
  fs::copy_file(*mlp_, job / "rank_1.tstream");
  RunResult streams = Run(Quoted(job));
  EXPECT_EQ(streams.exit_code, 1);
  EXPECT_NE(streams.err.find("is a directory"), std::string::npos) << streams.err;
  EXPECT_NE(streams.err.find((job / "rank_0.tstream").string()), std::string::npos) << streams.err;
  EXPECT_NE(streams.err.find((job / "rank_1.tstream").string()), std::string::npos) << streams.err;
}

// ---- --diff -----------------------------------------------------------------

// Compiles `graph` into the file `p`.
fs::path CompileTo(const fs::path& p, const host::Graph& graph, const host::CompileOptions& options) {
  auto compiled = host::Compile(graph, options);
  EXPECT_TRUE(compiled.ok()) << compiled.status().ToString();
  EXPECT_TRUE(compiled.ok() && WriteFileBytes(p.string(), compiled->stream.bytes()).ok()) << p;
  return p;
}

host::CompileOptions DataParallel(uint32_t rank) {
  host::CompileOptions options;
  options.optimizer = host::OptimizerSpec::Momentum(0.05f, 0.9f);
  options.parallel_mode = host::ParallelMode::DataParallel;
  options.world_size = 2;
  options.rank = rank;
  options.gradients_mean = true;
  return options;
}

nlohmann::json ParseJson(const RunResult& r) {
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(j.is_discarded()) << "not JSON:\n" << r.out;
  return j;
}

TEST_F(SinkdumpTest, DiffOfIdenticalFilesExitsZero) {
  fs::path copy = WriteVariant("copy.tstream", *bytes_);
  RunResult r = Run("--diff " + Quoted(*mlp_) + " " + Quoted(copy));
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_EQ(r.out.rfind("identical: ", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("graph hash 0x"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find('\n'), r.out.size() - 1) << "one line expected:\n" << r.out;

  RunResult json = Run("--diff " + Quoted(*mlp_) + " " + Quoted(copy) + " --json");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  nlohmann::json j = ParseJson(json);
  EXPECT_EQ(j["identical"], true);
  EXPECT_TRUE(j["sections"].empty());
  EXPECT_TRUE(j["graph_hash"].is_string());
}

// Rank 0 and rank 1 of one data-parallel job: the same stream but for the
// header's rank, and so its graph hash (the compile-cache key, which mixes
// in every compile option, rank included).
TEST_F(SinkdumpTest, DiffOfTwoRanksShowsOnlyTheRank) {
  fs::path r0 = CompileTo(*dir_ / "rank0.tstream", testing::MakeMlp(8, {16, 12, 4}), DataParallel(0));
  fs::path r1 = CompileTo(*dir_ / "rank1.tstream", testing::MakeMlp(8, {16, 12, 4}), DataParallel(1));
  RunResult r = Run("--diff " + Quoted(r0) + " " + Quoted(r1));
  ASSERT_EQ(r.exit_code, 1) << r.err << r.out;
  const std::string expected = "--- " + r0.string() + "\n+++ " + r1.string() +
                               "\ndiffer in: header\n\nheader\n  rank        0 -> 1\n  graph hash  0x";
  EXPECT_EQ(r.out.substr(0, expected.size()), expected);
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 7) << r.out;

  RunResult json = Run("--diff " + Quoted(r0) + " " + Quoted(r1) + " --json");
  ASSERT_EQ(json.exit_code, 1) << json.err;
  nlohmann::json j = ParseJson(json);
  EXPECT_EQ(j["identical"], false);
  EXPECT_EQ(j["sections"], nlohmann::json::array({"header"}));
  ASSERT_EQ(j["header"].size(), 2u);
  EXPECT_EQ(j["header"][0], nlohmann::json({{"field", "rank"}, {"a", 0}, {"b", 1}}));
  EXPECT_EQ(j["header"][1]["field"], "graph_hash");
  EXPECT_TRUE(j["graph_hash"].is_null()) << "no shared hash";
}

// One network at two batch sizes: activations and inputs change shape and
// bytes, the train queue's columns change shape, parameters do not.
TEST_F(SinkdumpTest, DiffOfTwoBatchSizesShowsShapesAndBytes) {
  host::CompileOptions options;
  options.optimizer = host::OptimizerSpec::Momentum(0.05f, 0.9f);
  fs::path b32 = CompileTo(*dir_ / "b32.tstream", testing::MakeMlp(32, {16, 12, 4}), options);
  fs::path b64 = CompileTo(*dir_ / "b64.tstream", testing::MakeMlp(64, {16, 12, 4}), options);
  RunResult r = Run("--diff " + Quoted(b32) + " " + Quoted(b64) + " --limit 0");
  ASSERT_EQ(r.exit_code, 1) << r.err << r.out;
  for (const char* fragment :
       {"differ in: ", "buffers: ", "~ image: ", "shape [32, 16] -> [64, 16]", "bytes 2048 -> 4096",
        "~ label: ", "shape [32] -> [64]", "queues: 2 changed (of 2)", "~ train: ", "image.shape [32, 16] -> [64, 16]",
        "label.shape [32] -> [64]", "bytes per batch 2176 -> 4352"})
    EXPECT_NE(r.out.find(fragment), std::string::npos) << "missing '" << fragment << "' in:\n" << r.out;
  EXPECT_EQ(r.out.find("~ fc1.weight: shape"), std::string::npos) << "a parameter's shape changed?\n" << r.out;

  RunResult json = Run("--diff " + Quoted(b32) + " " + Quoted(b64) + " --json");
  ASSERT_EQ(json.exit_code, 1) << json.err;
  nlohmann::json j = ParseJson(json);
  std::vector<std::string> sections = j["sections"];
  for (const char* s : {"header", "buffers", "queues"})
    EXPECT_NE(std::find(sections.begin(), sections.end(), s), sections.end()) << s << " in " << j["sections"];
  EXPECT_TRUE(j["buffers"]["added"].empty());
  EXPECT_TRUE(j["buffers"]["removed"].empty());
  bool saw_image = false;
  for (const auto& c : j["buffers"]["changed"]) {
    if (c["name"] != "image") continue;
    saw_image = true;
    EXPECT_NE(std::find(c["changes"].begin(), c["changes"].end(),
                        nlohmann::json({{"field", "shape"}, {"a", {32, 16}}, {"b", {64, 16}}})),
              c["changes"].end())
        << c;
  }
  EXPECT_TRUE(saw_image) << j["buffers"];
  ASSERT_EQ(j["queues"]["changed"].size(), 2u);  // train and eval
  EXPECT_EQ(j["queues"]["changed"][0]["name"], "train");

  // The text stops each list at --limit entries and says how many it left out.
  RunResult brief = Run("--diff " + Quoted(b32) + " " + Quoted(b64) + " --limit 2");
  ASSERT_EQ(brief.exit_code, 1) << brief.err;
  EXPECT_NE(brief.out.find("more\n"), std::string::npos) << brief.out;
  EXPECT_LT(brief.out.size(), r.out.size());
}

// Two comm-fusion configs of one job: one AllReduce per gradient against one
// fused bucket.
TEST_F(SinkdumpTest, DiffOfTwoFusionConfigsShowsBuckets) {
  host::CompileOptions per_gradient = DataParallel(0);
  per_gradient.comm_fusion.openstate = false;
  fs::path a = CompileTo(*dir_ / "fusion_off.tstream", testing::MakeMlp(8, {16, 12, 4}), per_gradient);
  fs::path b = CompileTo(*dir_ / "fusion_on.tstream", testing::MakeMlp(8, {16, 12, 4}), DataParallel(0));
  RunResult r = Run("--diff " + Quoted(a) + " " + Quoted(b) + " --program train_step");
  ASSERT_EQ(r.exit_code, 1) << r.err << r.out;
  for (const char* fragment : {"buckets (train_step): 4 AllReduces over ", " -> 1 AllReduce over ",
                               "program train_step", "stream 1 'comm': ", "AllReduce", "group=world op=Mean"})
    EXPECT_NE(r.out.find(fragment), std::string::npos) << "missing '" << fragment << "' in:\n" << r.out;
  EXPECT_EQ(r.out.find("program init"), std::string::npos) << "--program must filter:\n" << r.out;

  RunResult json = Run("--diff " + Quoted(a) + " " + Quoted(b) + " --json");
  ASSERT_EQ(json.exit_code, 1) << json.err;
  nlohmann::json j = ParseJson(json);
  std::vector<std::string> sections = j["sections"];
  EXPECT_NE(std::find(sections.begin(), sections.end(), "buckets"), sections.end()) << j["sections"];
  ASSERT_EQ(j["buckets"].size(), 1u);
  const auto& train = j["buckets"][0];
  EXPECT_EQ(train["program"], "train_step");
  EXPECT_EQ(train["a"]["count"], 4);
  EXPECT_EQ(train["b"]["count"], 1);
  ASSERT_EQ(train["changed"].size(), 4u);
  EXPECT_EQ(train["changed"][0]["b"]["gradients"], 4);
  EXPECT_TRUE(train["changed"][3]["b"].is_null());
}

// ---- SEMI_AUTO_PARALLEL ----------------------------------------------------

// x [8,32] -> MatMul w1 [32,64] + b1 -> Tanh -> MatMul w2 [64,10] + b2 ->
// loss, with `strategies` per op in order (matmul, biasadd, tanh, matmul,
// biasadd, loss; empty: MindSpore's default).
using Strategies = std::vector<std::vector<std::vector<int64_t>>>;

host::Graph ShardedMlp(const Strategies& strategies) {
  host::Graph g("mlp");
  const host::TensorId x = g.Input("image", {8, 32});
  const host::TensorId labels = g.Input("label", {8}, DType::I32);
  const host::TensorId w1 = g.Param("w1", {32, 64}, host::InitSpec::HeUniform(11));
  const host::TensorId b1 = g.Param("b1", {64}, host::InitSpec::Uniform(-0.1f, 0.1f, 12));
  const host::TensorId w2 = g.Param("w2", {64, 10}, host::InitSpec::XavierUniform(13));
  const host::TensorId b2 = g.Param("b2", {10}, host::InitSpec::Uniform(-0.1f, 0.1f, 14));
  const host::TensorId h = g.Tanh(g.BiasAdd(g.MatMul(x, w1), b1));
  g.SetLoss(g.SparseSoftmaxCrossEntropy(g.BiasAdd(g.MatMul(h, w2), b2), labels));
  for (size_t i = 0; i < strategies.size() && i < g.ops().size(); ++i)
    if (!strategies[i].empty()) g.Shard(g.ops()[i].name, strategies[i]);
  EXPECT_TRUE(g.status().ok()) << g.status().ToString();
  return g;
}

// Megatron's pair on 2 ranks: w1 by columns, w2 by rows, the batch whole
// (the loss's strategy keeps it so).
Strategies Megatron() {
  return {{{1, 1}, {1, 2}}, {{1, 2}, {2}}, {{1, 2}}, {{1, 2}, {2, 1}}, {{1, 1}, {1}}, {{1, 1}, {1}}};
}

host::CompileOptions SemiAuto(uint32_t world, uint32_t rank) {
  host::CompileOptions options;
  options.optimizer = host::OptimizerSpec::Momentum(0.05f, 0.9f);
  options.parallel_mode = host::ParallelMode::SemiAutoParallel;
  options.world_size = world;
  options.rank = rank;
  options.gradients_mean = true;
  return options;
}

// The row of the text dump's table that names `name` (first column after
// the index), or "" when none does.
std::string RowOf(const std::string& text, const std::string& name, size_t from = 0) {
  for (size_t at = text.find("  " + name + " ", from); at != std::string::npos;
       at = text.find("  " + name + " ", at + 1)) {
    const size_t begin = text.rfind('\n', at) + 1;
    return text.substr(begin, text.find('\n', at) - begin);
  }
  return "";
}

const nlohmann::json* FindNamed(const nlohmann::json& list, const std::string& name) {
  for (const auto& e : list)
    if (e["name"] == name) return &e;
  return nullptr;
}

// Megatron on 2 ranks: every weight and its gradient and momentum is half
// the whole, the batch is whole on both ranks, and the forward's one
// AllReduce (the second MatMul's partial sums) goes over both ranks.
// Optimizer parallel: every parameter of the 784-512-256-32 MLP divides in
// two aligned blocks, so rank 1 holds exactly half of the momentum, its
// block of each parameter is a view (no arena bytes of its own), and the
// comm stream reduces into the blocks and gathers them back.
TEST_F(SinkdumpTest, OptimizerParallelStreamShowsHalfTheOptimizerState) {
  host::Graph g = host::MakeMlpNetwork(8, {784, 512, 256, 32});
  const host::TensorId label = g.Input("label", {8}, DType::I32);
  g.SetLoss(g.SparseSoftmaxCrossEntropy(g.outputs().front(), label));
  host::CompileOptions options = DataParallel(1);
  options.enable_parallel_optimizer = true;
  options.parallel_optimizer_config.threshold_kb = 0;
  const fs::path r1 = CompileTo(*dir_ / "zero_1.tstream", g, options);
  RunResult text = Run(Quoted(r1));
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("parallel      data parallel on 2 ranks, optimizer parallel: 6 parameters updated in "
                          "blocks"),
            std::string::npos)
      << text.out;
  EXPECT_NE(RowOf(text.out, "fc1.weight/momentum").find("[392,512]"), std::string::npos) << text.out;
  EXPECT_NE(RowOf(text.out, "fc1.weight/momentum").find("at [392,0]"), std::string::npos) << text.out;
  const size_t roles = text.out.find("bytes per role");
  ASSERT_NE(roles, std::string::npos);
  EXPECT_NE(RowOf(text.out, "OptState", roles).find("50.0%"), std::string::npos) << RowOf(text.out, "OptState", roles);
  EXPECT_NE(RowOf(text.out, "Param", roles).find("100.0%"), std::string::npos) << RowOf(text.out, "Param", roles);
  const std::string slice_row = RowOf(text.out, "ParamSlice", roles);
  ASSERT_FALSE(slice_row.empty()) << text.out;
  EXPECT_NE(slice_row.find(" 0 "), std::string::npos) << "a block covers no arena bytes of its own: " << slice_row;
  EXPECT_NE(text.out.find("requirements  0x0000000000000003 (collectives, blocked collectives)"), std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("ReduceScatter (optimizer parallel)"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("AllGather (optimizer parallel)"), std::string::npos) << text.out;

  RunResult json = Run(Quoted(r1) + " --json");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const nlohmann::json j = ParseJson(json);
  EXPECT_EQ(j["header"]["parallel"]["mode"], "data_parallel");
  EXPECT_EQ(j["header"]["parallel"]["optimizer_parallel"], true);
  EXPECT_EQ(j["header"]["parallel"]["parameters_updated_in_blocks"], 6);
  const auto& opt = j["memory"]["bytes_per_role"]["OptState"];
  EXPECT_EQ(2 * opt["bytes"].get<uint64_t>(), opt["whole_bytes"].get<uint64_t>()) << opt;
  EXPECT_EQ(j["memory"]["bytes_per_role"]["ParamSlice"]["arena"], 0);
}

TEST_F(SinkdumpTest, ShardedStreamShowsLayoutsCollectivesAndMemory) {
  const fs::path r1 = CompileTo(*dir_ / "megatron_1.tstream", ShardedMlp(Megatron()), SemiAuto(2, 1));
  RunResult text = Run(Quoted(r1));
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("parallel      semi_auto_parallel on 2 ranks, sharded: "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find(" buffers are slices, 4 of 4 queue columns"), std::string::npos) << text.out;
  // w1 [32,64] split by columns: rank 1 holds columns [32,64).
  const std::string w1 = RowOf(text.out, "w1");
  for (const char* fragment : {"Param", "[32,32]", "of [32,64] dm [", "map (", "at [0,32]"})
    EXPECT_NE(w1.find(fragment), std::string::npos) << "'" << fragment << "' not in the w1 row: " << w1;
  // w2 [64,10] split by rows: rows [32,64); its momentum has the same layout.
  for (const char* name : {"w2", "w2/momentum", "w2/grad"})
    EXPECT_NE(RowOf(text.out, name).find("[32,10]  "), std::string::npos) << RowOf(text.out, name);
  EXPECT_NE(RowOf(text.out, "w2").find("of [64,10] dm ["), std::string::npos) << RowOf(text.out, "w2");
  EXPECT_NE(RowOf(text.out, "w2").find("at [32,0]"), std::string::npos) << RowOf(text.out, "w2");
  // The batch is whole on every rank.
  EXPECT_NE(text.out.find("rank 1 reads whole batch of 8"), std::string::npos) << text.out;
  // One forward AllReduce of the [8,10] logits per program that runs the forward.
  const size_t train = text.out.find("program 'train_step'");
  ASSERT_NE(train, std::string::npos);
  EXPECT_NE(text.out.find("collectives: 1 AllReduce (forward) 320 B\n", train), std::string::npos) << text.out;
  const std::string row = RowOf(text.out, "AllReduce", text.out.find("collectives:", train));
  for (const char* fragment : {"forward", "world", "[0, 1]", " 320 "})
    EXPECT_NE(row.find(fragment), std::string::npos) << "'" << fragment << "' not in: " << row;
  // Memory: Param, Grad and OptState each hold half the weights and the
  // whole b2 (w1 4096 + b1 128 + w2 1280 + b2 40 of 8192 + 256 + 2560 + 40).
  const std::string param = RowOf(text.out, "Param", text.out.find("bytes per role"));
  for (const char* fragment : {" 5544 ", " 11048 ", "50.2%"})
    EXPECT_NE(param.find(fragment), std::string::npos) << "'" << fragment << "' not in: " << param;
  EXPECT_NE(text.out.find("this rank holds 16,632 B of 33,144 B of parameters, gradients and optimizer state (50.2%)"),
            std::string::npos)
      << text.out;

  RunResult json = Run(Quoted(r1) + " --json");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const nlohmann::json j = ParseJson(json);
  EXPECT_EQ(j["header"]["parallel"]["mode"], "semi_auto_parallel");
  EXPECT_EQ(j["header"]["parallel"]["world_size"], 2);
  const nlohmann::json* jw1 = FindNamed(j["memory"]["buffers"], "w1");
  ASSERT_NE(jw1, nullptr);
  EXPECT_EQ((*jw1)["shape"], nlohmann::json::array({32, 32}));
  EXPECT_EQ((*jw1)["slice"]["global_shape"], nlohmann::json::array({32, 64}));
  EXPECT_EQ((*jw1)["slice"]["offset"], nlohmann::json::array({0, 32}));
  EXPECT_EQ((*jw1)["slice"]["layout"].get<std::string>().rfind("of [32,64] dm [", 0), 0u) << (*jw1)["slice"];
  EXPECT_TRUE((*FindNamed(j["memory"]["buffers"], "b2"))["slice"]["offset"] == nlohmann::json::array({0}));
  const auto& roles = j["memory"]["bytes_per_role"];
  for (const char* role : {"Param", "Grad", "OptState"}) {
    EXPECT_EQ(roles[role]["bytes"], 5544) << role;
    EXPECT_EQ(roles[role]["whole_bytes"], 11048) << role;
    EXPECT_EQ(roles[role]["arena"], 5544) << role << ": persistent buffers never share arena bytes";
  }
  EXPECT_LE(roles["Activation"]["arena"].get<uint64_t>(), roles["Activation"]["bytes"].get<uint64_t>());
  EXPECT_EQ(j["queues"][0]["columns"][0]["slice"]["reads"], "whole batch of 8");
  for (const auto& p : j["programs"]) {
    if (p["kind"] == "init") {
      EXPECT_TRUE(p["collectives"].empty());
      continue;
    }
    SCOPED_TRACE(p["kind"].get<std::string>());
    ASSERT_EQ(p["collectives"].size(), 1u) << p["collectives"];
    const auto& c = p["collectives"][0];
    EXPECT_EQ(c["kind"], "AllReduce");
    EXPECT_EQ(c["purpose"], "forward");
    EXPECT_EQ(c["group"], "world");
    EXPECT_EQ(c["ranks"], nlohmann::json::array({0, 1}));
    EXPECT_EQ(c["bytes"], 8 * 10 * 4);
    EXPECT_TRUE(p["buckets"].empty()) << "an activation's AllReduce is no gradient bucket: " << p["buckets"];
  }
}

// Every op on its default strategy over 2 ranks: data parallel. The
// parameters are whole (replicated layouts), each rank reads half the batch,
// and the gradients go through one bucket over both ranks.
TEST_F(SinkdumpTest, DefaultStrategiesShowBatchSlicesAndTheGradientBucket) {
  const fs::path r1 = CompileTo(*dir_ / "data_1.tstream", ShardedMlp({}), SemiAuto(2, 1));
  RunResult text = Run(Quoted(r1) + " --no-tasks");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  for (const char* fragment :
       {"rank 1 reads rows [4,8) of 8", "this rank holds 33,144 B of 33,144 B",
        "collectives: gradient buckets: 1 AllReduce ", " over ranks [0, 1]\n", "buckets: 1 AllReduce over "})
    EXPECT_NE(text.out.find(fragment), std::string::npos) << "missing '" << fragment << "' in:\n" << text.out;
  EXPECT_NE(RowOf(text.out, "image").find("[4,32]"), std::string::npos) << RowOf(text.out, "image");
  EXPECT_NE(RowOf(text.out, "bucket0/allreduce").find("[0, 1]"), std::string::npos)
      << RowOf(text.out, "bucket0/allreduce");

  RunResult json = Run(Quoted(r1) + " --json --program train_step");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const nlohmann::json j = ParseJson(json);
  EXPECT_EQ(j["memory"]["bytes_per_role"]["Param"]["bytes"], j["memory"]["bytes_per_role"]["Param"]["whole_bytes"]);
  const auto& p = j["programs"][0];
  ASSERT_EQ(p["buckets"].size(), 1u);
  ASSERT_EQ(p["collective_totals"].size(), 1u) << p["collective_totals"];
  const auto& total = p["collective_totals"][0];
  EXPECT_EQ(total["purpose"], "gradient bucket");
  EXPECT_EQ(total["ranks"], nlohmann::json::array({0, 1}));
  EXPECT_EQ(total["count"], 1);
  EXPECT_EQ(total["bytes"], p["buckets"][0]["bytes"]);
  EXPECT_EQ(p["buckets"][0]["ranks"], nlohmann::json::array({0, 1}));
}

// 2x2 with the second layer alone split by rows: the local cut of h
// (ShardSlice), the forward AllReduce of the logits' partial sums and the
// backward AllGather all go over the model-parallel pair [0, 1], the
// gradient bucket over the data-parallel pair [0, 2].
TEST_F(SinkdumpTest, ShowsShardSliceAllGatherAndMirrorGroupBuckets) {
  const Strategies second_layer = {{{2, 1}, {1, 1}}, {{2, 1}, {1}}, {{2, 2}},
                                   {{2, 2}, {2, 1}}, {{2, 1}, {1}}, {{2, 1}, {2}}};
  const fs::path p = CompileTo(*dir_ / "2x2_0.tstream", ShardedMlp(second_layer), SemiAuto(4, 0));
  RunResult text = Run(Quoted(p) + " --program train_step --no-tasks");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("collectives: 1 ShardSlice (local, moves nothing), 1 AllReduce (forward) 160 B, "
                          "1 AllGather (backward) 512 B; gradient buckets: 1 AllReduce "),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find(" over ranks [0, 2]\n"), std::string::npos) << text.out;
  for (const char* kind : {"ShardSlice", "AllGather"}) {
    const std::string row = RowOf(text.out, kind, text.out.find("collectives:"));
    EXPECT_NE(row.find("ranks_0_1  [0, 1]"), std::string::npos) << row;
  }
  EXPECT_NE(text.out.find("partial ("), std::string::npos) << "the logits before their AllReduce:\n" << text.out;
}

// Two strategies of one network on 2 ranks: --diff says first how they
// shard apart (memory per role, layouts, collectives), then the usual
// sections.
TEST_F(SinkdumpTest, DiffOfTwoStrategiesShowsLayoutsCollectivesAndMemory) {
  const fs::path model = CompileTo(*dir_ / "diff_model.tstream", ShardedMlp(Megatron()), SemiAuto(2, 0));
  const fs::path data = CompileTo(*dir_ / "diff_data.tstream", ShardedMlp({}), SemiAuto(2, 0));
  RunResult r = Run("--diff " + Quoted(model) + " " + Quoted(data) + " --limit 0");
  ASSERT_EQ(r.exit_code, 1) << r.err << r.out;
  EXPECT_NE(r.out.find("differ in: header, memory, layouts, collectives, buffers"), std::string::npos) << r.out;
  for (const char* fragment :
       {"memory: arena ", "  Param       5,544 B of 11,048 B whole, 5,544 B in arena -> 11,048 B of 11,048 B whole",
        // Output: the loss and eval_step's f64 metric sum (sunk eval, format 1.4).
        "  Output      12 B of 12 B whole, 12 B in arena (same)", "layouts: ", "~ w1: [32,32] of [32,64] dm [",
        "-> [32,64] of [32,64] dm [", "~ w2: [32,10] of [64,10] dm [",
        "collectives (train_step)\n  - 1 AllReduce (forward) 320 B\n  + gradient buckets: 1 AllReduce ",
        "- only: 1 AllReduce forward, group world [0, 1], 320 B each",
        "+ only: 1 AllReduce gradient bucket, group world [0, 1], ", "collectives (eval_step)"})
    EXPECT_NE(r.out.find(fragment), std::string::npos) << "missing '" << fragment << "' in:\n" << r.out;

  RunResult json = Run("--diff " + Quoted(model) + " " + Quoted(data) + " --json");
  ASSERT_EQ(json.exit_code, 1) << json.err;
  const nlohmann::json j = ParseJson(json);
  const nlohmann::json* w1 = FindNamed(j["layouts"]["changed"], "w1");
  ASSERT_NE(w1, nullptr) << j["layouts"];
  EXPECT_EQ((*w1)["a"]["shape"], nlohmann::json::array({32, 32}));
  EXPECT_EQ((*w1)["b"]["shape"], nlohmann::json::array({32, 64}));
  EXPECT_TRUE((*w1)["a"]["layout"].is_string());
  ASSERT_FALSE(j["collectives"].empty());
  const auto& train = j["collectives"][0];
  EXPECT_EQ(train["program"], "train_step");
  ASSERT_EQ(train["only_a"].size(), 1u);
  EXPECT_EQ(train["only_a"][0]["kind"], "AllReduce");
  EXPECT_EQ(train["only_a"][0]["purpose"], "forward");
  EXPECT_EQ(train["only_a"][0]["bytes"], 320);
  ASSERT_EQ(train["only_b"].size(), 1u);
  EXPECT_EQ(train["only_b"][0]["purpose"], "gradient bucket");
  EXPECT_EQ(train["only_b"][0]["ranks"], nlohmann::json::array({0, 1}));
  for (const auto& role : j["memory"]["roles"]) {
    if (role["role"] != "Param") continue;
    EXPECT_EQ(role["a"]["bytes"], 5544);
    EXPECT_EQ(role["b"]["bytes"], 11048);
    EXPECT_EQ(role["a"]["whole_bytes"], role["b"]["whole_bytes"]);
  }

  // One strategy against itself is identical; the two ranks of one strategy
  // differ in where their slices sit.
  const fs::path model1 = CompileTo(*dir_ / "diff_model_1.tstream", ShardedMlp(Megatron()), SemiAuto(2, 1));
  EXPECT_EQ(Run("--diff " + Quoted(model) + " " + Quoted(model)).exit_code, 0);
  RunResult ranks = Run("--diff " + Quoted(model) + " " + Quoted(model1) + " --limit 0");
  ASSERT_EQ(ranks.exit_code, 1) << ranks.err;
  EXPECT_NE(ranks.out.find("differ in: header, layouts\n"), std::string::npos) << ranks.out;
  EXPECT_NE(ranks.out.find("at [0,0] -> [32,32] of [32,64]"), std::string::npos) << ranks.out;
  EXPECT_EQ(ranks.out.find("collectives ("), std::string::npos) << ranks.out;
}

TEST_F(SinkdumpTest, DiffOfACorruptFileExitsTwoNamingIt) {
  std::vector<uint8_t> truncated(bytes_->begin(), bytes_->begin() + bytes_->size() / 2);
  fs::path bad = WriteVariant("diff_truncated.tstream", truncated);
  for (const char* flags : {"", " --json"}) {
    RunResult r = Run("--diff " + Quoted(*mlp_) + " " + Quoted(bad) + flags);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
    EXPECT_NE(r.err.find(bad.string()), std::string::npos) << "error does not name the file: " << r.err;
    EXPECT_EQ(r.err.find(mlp_->string()), std::string::npos) << "blames the good file: " << r.err;
  }
  RunResult missing = Run("--diff " + Quoted(*dir_ / "no_such.tstream") + " " + Quoted(*mlp_));
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("no_such.tstream"), std::string::npos) << missing.err;
  RunResult one_file = Run("--diff " + Quoted(*mlp_));
  EXPECT_EQ(one_file.exit_code, 2) << "a usage error under --diff: " << one_file.err;
}

}  // namespace
}  // namespace sinkrt
