// Strategy files (host/src/parallel/strategy/strategy_file.h): the written text, the
// round trip into a graph without strategies, and one clear error, naming
// the file, for each way a file can be wrong or meant for another graph.
#include "host/src/parallel/strategy/strategy_file.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "sinkrt/host/compiler.h"

namespace sinkrt::host::parallel {
namespace {

namespace fs = std::filesystem;

// fc1.matmul [8,16]x[16,32], fc1.relu, fc2.matmul [8,32]x[32,10], the loss.
Graph Tiny(uint64_t seed = 1, const std::string& name = "tiny", int64_t batch = 8) {
  Graph g(name);
  const TensorId x = g.Input("x", {batch, 16});
  const TensorId label = g.Input("label", {batch}, DType::I32);
  TensorId h;
  {
    NameScope s(g, "fc1");
    h = g.Relu(g.MatMul(x, g.Param("fc1.w", {16, 32}, InitSpec::HeUniform(seed))));
  }
  TensorId logits;
  {
    NameScope s(g, "fc2");
    logits = g.MatMul(h, g.Param("fc2.w", {32, 10}, InitSpec::HeUniform(2)));
  }
  g.SetLoss(g.SparseSoftmaxCrossEntropy(logits, label));
  g.AddOutput(logits);
  return g;
}

// Megatron's pair on 4 ranks: columns, then rows.
Graph ShardedTiny() {
  Graph g = Tiny();
  g.Shard("fc1.matmul", {{1, 1}, {1, 4}});
  g.Shard("fc2.matmul", {{1, 4}, {4, 1}});
  return g;
}

std::map<std::string, TensorLayout> Layouts() {
  return {{"fc2.w", TensorLayout{{1, 4, 1}, {1, -1}, {}, {32, 10}}},
          {"fc1.w", TensorLayout{{1, 1, 4}, {-1, 0}, {}, {16, 32}}}};
}

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name) : path(fs::path(::testing::TempDir()) / ("strategy_file_" + name)) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string Write(const std::string& name, const std::string& text) const {
    const fs::path p = path / name;
    std::ofstream(p, std::ios::binary) << text;
    return p.string();
  }
  std::string Read(const std::string& name) const {
    std::ifstream in(path / name, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
};

std::string Hex(uint64_t v) {
  char buf[19];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

void ExpectError(const Status& s, const std::string& message) {
  ASSERT_FALSE(s.ok()) << "expected: " << message;
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.message();
  EXPECT_EQ(s.message(), message);
}

TEST(StrategyFileTest, WritesTheDocumentedFormat) {
  TempDir dir("format");
  const std::string path = (dir.path / "tiny.json").string();
  ASSERT_TRUE(WriteStrategyFile(path, ShardedTiny(), 4, Layouts()).ok());
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  // Ops and parameters in graph order, one per line.
  std::string want = R"({
  "format": "sinkrt-strategy",
  "version": 1,
  "graph": "tiny",
  "graph_hash": "HASH",
  "inputs": {"x": [8, 16], "label": [8]},
  "device_num": 4,
  "stage": 0,
  "ops": {
    "fc1.matmul": [[1, 1], [1, 4]],
    "fc2.matmul": [[1, 4], [4, 1]]
  },
  "parameters": {
    "fc1.w": {"dev_matrix": [1, 1, 4], "tensor_map": [-1, 0], "shape": [16, 32]},
    "fc2.w": {"dev_matrix": [1, 4, 1], "tensor_map": [1, -1], "shape": [32, 10]}
  }
}
)";
  want.replace(want.find("HASH"), 4, Hex(GraphHashWithoutStrategies(Tiny())));
  EXPECT_EQ(dir.Read("tiny.json"), want);
}

TEST(StrategyFileTest, RoundTripsIntoAGraphWithoutStrategies) {
  TempDir dir("round_trip");
  const std::string path = (dir.path / "tiny.json").string();
  const Graph sharded = ShardedTiny();
  ASSERT_TRUE(WriteStrategyFile(path, sharded, 4, Layouts()).ok());
  Result<StrategyFileContents> c = ReadStrategyFile(path);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->source, path);
  EXPECT_EQ(c->graph_name, "tiny");
  EXPECT_EQ(c->graph_hash, GraphHashWithoutStrategies(sharded));
  EXPECT_EQ(c->device_num, 4);
  EXPECT_EQ(c->stage, 0);
  ASSERT_EQ(c->ops.size(), 2u);
  EXPECT_EQ(c->ops[0].first, "fc1.matmul");
  EXPECT_EQ(c->ops[0].second, (Strategy{{1, 1}, {1, 4}}));
  EXPECT_EQ(c->ops[1].first, "fc2.matmul");
  ASSERT_EQ(c->parameters.size(), 2u);
  EXPECT_EQ(c->parameters[0].first, "fc1.w");
  EXPECT_EQ(c->parameters[0].second, Layouts().at("fc1.w"));
  EXPECT_EQ(c->parameters[1].second, Layouts().at("fc2.w"));

  Graph g = Tiny();
  ASSERT_TRUE(ApplyStrategies(*c, g).ok());
  EXPECT_EQ(GraphHash(g), GraphHash(sharded));
  // Written again, it is the same file.
  const std::string again = (dir.path / "again.json").string();
  ASSERT_TRUE(WriteStrategyFile(again, g, 4, Layouts()).ok());
  EXPECT_EQ(dir.Read("again.json"), dir.Read("tiny.json"));
}

// A graph that has strategies already takes the file's for the ops it
// lists and keeps its own for the others.
TEST(StrategyFileTest, ListedOpsOnlyAreSet) {
  TempDir dir("listed");
  Graph written = Tiny();
  written.Shard("fc1.matmul", {{2, 1}, {1, 2}});
  const std::string path = (dir.path / "s.json").string();
  ASSERT_TRUE(WriteStrategyFile(path, written, 4, {}).ok());
  Result<StrategyFileContents> c = ReadStrategyFile(path);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_TRUE(c->parameters.empty());

  Graph g = Tiny();
  g.Shard("fc1.matmul", {{4, 1}, {1, 1}});
  g.Shard("fc2.matmul", {{4, 1}, {1, 1}});
  ASSERT_TRUE(ApplyStrategies(*c, g).ok());
  EXPECT_EQ(g.ops()[g.FindOp("fc1.matmul")].strategy, (Strategy{{2, 1}, {1, 2}}));
  EXPECT_EQ(g.ops()[g.FindOp("fc2.matmul")].strategy, (Strategy{{4, 1}, {1, 1}}));
}

TEST(StrategyFileTest, EmptyObjectsAreWrittenAndRead) {
  TempDir dir("empty");
  const std::string path = (dir.path / "s.json").string();
  ASSERT_TRUE(WriteStrategyFile(path, Tiny(), 1, {}).ok());
  EXPECT_NE(dir.Read("s.json").find("  \"ops\": {},\n  \"parameters\": {}\n}\n"), std::string::npos)
      << dir.Read("s.json");
  Result<StrategyFileContents> c = ReadStrategyFile(path);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_TRUE(c->ops.empty());
  Graph g = Tiny();
  EXPECT_TRUE(ApplyStrategies(*c, g).ok());
}

// -- reading errors -----------------------------------------------------------

// A valid file for Tiny() with `edit` replacing `from`.
class StrategyFileErrorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = (dir_.path / "good.json").string();
    ASSERT_TRUE(WriteStrategyFile(path, ShardedTiny(), 4, Layouts()).ok());
    good_ = dir_.Read("good.json");
  }
  std::string Edited(const std::string& from, const std::string& to) {
    std::string text = good_;
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << "'" << from << "' is not in " << text;
    if (at != std::string::npos) text.replace(at, from.size(), to);
    return dir_.Write("bad.json", text);
  }
  Status ReadError(const std::string& from, const std::string& to) {
    Result<StrategyFileContents> c = ReadStrategyFile(Edited(from, to));
    return c.ok() ? Status::Ok() : c.status();
  }
  // Reads the edited file (which must read) and applies it to `g`.
  Status ApplyError(const std::string& from, const std::string& to, Graph g = Tiny()) {
    Result<StrategyFileContents> c = ReadStrategyFile(Edited(from, to));
    EXPECT_TRUE(c.ok()) << c.status().message();
    if (!c.ok()) return Status::Ok();
    const uint64_t before = GraphHash(g);
    Status s = ApplyStrategies(*c, g);
    // A refused file leaves the graph as it was.
    EXPECT_TRUE(g.status().ok()) << g.status().message();
    EXPECT_EQ(GraphHash(g), before);
    return s;
  }
  std::string Bad() const { return (dir_.path / "bad.json").string(); }

  TempDir dir_{::testing::UnitTest::GetInstance()->current_test_info()->name()};
  std::string good_;
};

TEST_F(StrategyFileErrorTest, MissingFile) {
  const std::string path = (dir_.path / "nope.json").string();
  Result<StrategyFileContents> c = ReadStrategyFile(path);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(c.status().message().rfind("strategy file: cannot open '" + path + "'", 0), 0u) << c.status().message();
}

TEST_F(StrategyFileErrorTest, NotJson) {
  Status s = ReadError("\"stage\": 0,", "\"stage\": 0,,");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message().rfind("strategy file " + Bad() + ": not JSON (", 0), 0u) << s.message();
  ExpectError(ReadStrategyFile(dir_.Write("bad.json", "[1, 2]")).status(),
              "strategy file " + Bad() + ": not a JSON object");
}

TEST_F(StrategyFileErrorTest, WrongFormatOrVersion) {
  ExpectError(ReadError("\"sinkrt-strategy\"", "\"mindspore\""),
              "strategy file " + Bad() + ": \"format\" is \"mindspore\", this build reads \"sinkrt-strategy\"");
  ExpectError(ReadError("\"version\": 1", "\"version\": 2"),
              "strategy file " + Bad() + ": \"version\" is 2, this build reads version 1");
  // Issue 39: '"version" is "1", this build reads version 1'.
  ExpectError(ReadError("\"version\": 1", "\"version\": \"1\""),
              "strategy file " + Bad() + ": \"version\" is \"1\", a string: the version is a number (\"version\": 1)");
  ExpectError(ReadError("\"version\": 1", "\"version\": 1.5"),
              "strategy file " + Bad() + ": \"version\" is 1.5, not an integer (this build reads version 1)");
}

// Issue 39: a 10 MB "format" string went to stderr whole.
TEST_F(StrategyFileErrorTest, EchoedValuesAreCut) {
  const std::string huge(10 * 1000 * 1000, 'x');
  Status s = ReadError("\"sinkrt-strategy\"", "\"" + huge + "\"");
  ASSERT_FALSE(s.ok());
  EXPECT_LT(s.message().size(), 400u);
  EXPECT_EQ(s.message(), "strategy file " + Bad() + ": \"format\" is \"" + std::string(79, 'x') +
                             "... (10000002 characters), this build reads \"sinkrt-strategy\"");
  // A huge op name, too.
  s = ReadError("\"fc1.matmul\": [[1, 1], [1, 4]]", "\"" + huge + "\": 7");
  ASSERT_FALSE(s.ok());
  EXPECT_LT(s.message().size(), 400u) << s.message().substr(0, 400);
}

TEST_F(StrategyFileErrorTest, MissingOrMistypedField) {
  ExpectError(ReadError("  \"stage\": 0,\n", ""), "strategy file " + Bad() + ": \"stage\" is missing");
  ExpectError(ReadError("\"device_num\": 4", "\"device_num\": \"4\""),
              "strategy file " + Bad() + ": \"device_num\" is \"4\", not an integer");
  ExpectError(ReadError("\"device_num\": 4", "\"device_num\": 0"),
              "strategy file " + Bad() + ": \"device_num\" is 0, not >= 1");
  ExpectError(ReadError("\"graph_hash\": \"0x", "\"graph_hash\": \"0y"),
              "strategy file " + Bad() + ": \"graph_hash\" is \"0y" +
                  Hex(GraphHashWithoutStrategies(Tiny())).substr(2) + "\", not \"0x\" and 16 hex digits");
  ExpectError(ReadError("[[1, 1], [1, 4]]", "[[1, 1], [1, \"4\"]]"),
              "strategy file " + Bad() + ": \"ops.fc1.matmul\" is [[1,1],[1,\"4\"]], not a list of lists of integers");
  ExpectError(ReadError("[[1, 1], [1, 4]]", "{}"),
              "strategy file " + Bad() + ": \"ops.fc1.matmul\" is {}, not a list of lists of integers");
}

TEST_F(StrategyFileErrorTest, MalformedParameterLayout) {
  ExpectError(ReadError("\"tensor_map\": [-1, 0]", "\"tensor_map\": [0, 0]"),
              "strategy file " + Bad() + ": \"parameters.fc1.w\" is not a layout: " +
                  CheckLayout(TensorLayout{{1, 1, 4}, {0, 0}, {}, {16, 32}}).message());
  ExpectError(ReadError("\"dev_matrix\": [1, 1, 4]", "\"dev_matrix\": [1, 2, 4]"),
              "strategy file " + Bad() +
                  ": \"parameters.fc1.w\" has a device matrix of 8 ranks, the file's "
                  "device_num is 4");
  ExpectError(ReadError(", \"shape\": [16, 32]", ""),
              "strategy file " + Bad() + ": \"parameters.fc1.w\" has no \"shape\"");
}

// -- applying errors -------------------------------------------------------------

TEST_F(StrategyFileErrorTest, AnOpTheGraphDoesNotHave) {
  ExpectError(ApplyError("\"fc2.matmul\"", "\"fc3.matmul\""),
              "strategy file " + Bad() + " names op fc3.matmul, which graph tiny does not have");
}

TEST_F(StrategyFileErrorTest, AParameterTheGraphDoesNotHave) {
  ExpectError(ApplyError("\"fc2.w\"", "\"fc3.w\""),
              "strategy file " + Bad() + " names parameter fc3.w, which graph tiny does not have");
  ExpectError(ApplyError("\"fc2.w\"", "\"x\""),
              "strategy file " + Bad() + " names parameter x, which graph tiny does not have");
}

// Another graph with the same op names: the hashes tell them apart, and
// the recorded inputs say what differs.
TEST_F(StrategyFileErrorTest, AnotherGraph) {
  const std::string h1 = Hex(GraphHashWithoutStrategies(Tiny()));
  const Graph other = Tiny(/*seed=*/7);
  ExpectError(ApplyError("\"stage\"", "\"stage\"", other),
              "strategy file " + Bad() + " was written for graph tiny with hash " + h1 + "; this graph hashes " +
                  Hex(GraphHashWithoutStrategies(other)) +
                  ": the inputs are the same, so the ops, their shapes or the initialisers differ");
  const Graph renamed = Tiny(1, "tiny2");
  ExpectError(ApplyError("\"stage\"", "\"stage\"", renamed),
              "strategy file " + Bad() + " was written for graph tiny with hash " + h1 +
                  "; this graph, tiny2, hashes " + Hex(GraphHashWithoutStrategies(renamed)) +
                  ": the names differ (a graph's name is part of its hash), and the ops, their shapes or the "
                  "initialisers may too");
  // Issue 39: only the file's name differs, and two equal hashes were printed.
  ExpectError(ApplyError("\"graph\": \"tiny\"", "\"graph\": \"tiny2\""),
              "strategy file " + Bad() +
                  " was written for graph tiny2; this graph is tiny, the same otherwise (both "
                  "hash " +
                  h1 + ")");
}

// Issue 39: a file used at another batch said only that the hashes differ.
TEST_F(StrategyFileErrorTest, AnotherBatchIsNamed) {
  const Graph wider = Tiny(1, "tiny", 16);
  ExpectError(ApplyError("\"stage\"", "\"stage\"", wider),
              "strategy file " + Bad() + " was written for graph tiny with hash " +
                  Hex(GraphHashWithoutStrategies(Tiny())) + "; this graph hashes " +
                  Hex(GraphHashWithoutStrategies(wider)) +
                  ": input x is [16,16] here, [8,16] in the file (batch 16, the file's 8): write the file again at "
                  "this batch, or compile at the file's");
  // A file written before inputs were recorded: the hashes alone.
  ExpectError(ApplyError("  \"inputs\": {\"x\": [8, 16], \"label\": [8]},\n", "", wider),
              "strategy file " + Bad() + " was written for graph tiny with hash " +
                  Hex(GraphHashWithoutStrategies(Tiny())) + "; this graph hashes " +
                  Hex(GraphHashWithoutStrategies(wider)));
}

// Issue 39: a parameter layout that contradicts the op strategies was
// ignored without a word.
TEST_F(StrategyFileErrorTest, AParameterLayoutThatContradictsItsOp) {
  // fc1.matmul splits fc1.w's columns 4 ways; the file says rows.
  ExpectError(ApplyError("\"fc1.w\": {\"dev_matrix\": [1, 1, 4], \"tensor_map\": [-1, 0]",
                         "\"fc1.w\": {\"dev_matrix\": [1, 1, 4], \"tensor_map\": [0, -1]"),
              "strategy file " + Bad() + " gives parameter fc1.w the layout " +
                  LayoutToString(TensorLayout{{1, 1, 4}, {0, -1}, {}, {16, 32}}) +
                  ", but its op strategies give it dm[1,1,4] map[1,0] shape[16,32]" +
                  ": the two disagree (write the file again, or edit both)");
}

TEST_F(StrategyFileErrorTest, AParameterOfAnotherShape) {
  ExpectError(ApplyError("\"shape\": [16, 32]", "\"shape\": [16, 16]"),
              "strategy file " + Bad() + " gives parameter fc1.w the shape [16,16]; in graph tiny it is [16,32]");
}

TEST_F(StrategyFileErrorTest, StrategiesThatDoNotFitTheirOps) {
  ExpectError(ApplyError("[[1, 4], [4, 1]]", "[[1, 4]]"),
              "strategy file " + Bad() +
                  ": fc2.matmul: The strategy is ((1, 4),), strategy size: 1 is not equal to "
                  "inputs size: 2");
  ExpectError(ApplyError("[[1, 4], [4, 1]]", "[[1, 4], [4]]"),
              "strategy file " + Bad() +
                  ": fc2.matmul: The strategy is ((1, 4), (4,)), strategy len: 1 is not "
                  "equal to inputs len: 2, index: 1");
  ExpectError(ApplyError("[[1, 4], [4, 1]]", "[[1, 4], [0, 1]]"),
              "strategy file " + Bad() +
                  ": fc2.matmul: The strategy is ((1, 4), (0, 1)), the value of strategy must "
                  "be larger than 0, but get 0");
  ExpectError(ApplyError("[[1, 4], [4, 1]]", "[]"),
              "strategy file " + Bad() +
                  ": fc2.matmul: The strategy is (), strategy size: 0 is not equal to inputs "
                  "size: 2");
}

// -- writing errors ---------------------------------------------------------------

TEST(StrategyFileWriteTest, RefusesLayoutsThatDoNotFit) {
  TempDir dir("write_errors");
  const std::string path = (dir.path / "s.json").string();
  const std::string f = "strategy file " + path;
  const Graph g = ShardedTiny();
  auto with = [](const std::string& name, TensorLayout l) {
    std::map<std::string, TensorLayout> m = Layouts();
    m[name] = std::move(l);
    return m;
  };
  ExpectError(WriteStrategyFile(path, g, 0, {}), f + ": device_num is 0, not >= 1");
  ExpectError(WriteStrategyFile(path, g, 4, with("x", TensorLayout{{4}, {0, -1}, {}, {8, 16}})),
              f + ": parameter 'x' is not a Param of graph 'tiny'");
  ExpectError(WriteStrategyFile(path, g, 4, with("nope", TensorLayout{{4}, {0}, {}, {8}})),
              f + ": parameter 'nope' is not a tensor of graph 'tiny'");
  ExpectError(WriteStrategyFile(path, g, 4, with("fc1.w", TensorLayout{{4}, {0, -1}, {}, {16, 16}})),
              f + ": parameter 'fc1.w': the layout's shape [16,16] is not the parameter's [16,32]");
  ExpectError(WriteStrategyFile(path, g, 4, with("fc1.w", TensorLayout{{2}, {0, -1}, {}, {16, 32}})),
              f + ": parameter 'fc1.w': the device matrix has 2 ranks, not device_num 4");
  ExpectError(WriteStrategyFile(path, g, 4, with("fc1.w", TensorLayout{{2, 2}, {0, -1}, {1}, {16, 32}})),
              f + ": parameter 'fc1.w': a parameter's layout cannot hold a pending sum (" +
                  LayoutToString(TensorLayout{{2, 2}, {0, -1}, {1}, {16, 32}}) + ")");
  EXPECT_FALSE(fs::exists(path));
}

}  // namespace
}  // namespace sinkrt::host::parallel
