// AUTO_PARALLEL's calibration file (host/src/parallel/auto_parallel/calibration.cc): the
// checked-in default loads, a file round-trips, every malformed field is
// refused naming the file and the field, and the GEMM grid interpolates in
// log space.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include <nlohmann/json.hpp>

#include "sinkrt/host/calibration.h"

namespace sinkrt::host::parallel {
namespace {

using Json = nlohmann::ordered_json;

Json DefaultJson() {
  Result<Calibration> c = DefaultCalibration();
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return Json::parse(CalibrationToJson(*c));
}

std::string ErrorOf(const Json& j) {
  Result<Calibration> c = ParseCalibration(j.dump(), "calib.json");
  return c.ok() ? "ok" : c.status().message();
}

TEST(CalibrationTest, DefaultLoadsAndRoundTrips) {
  Result<Calibration> c = DefaultCalibration();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->device_kind, "cpu-zen4-2core");
  EXPECT_NE(c->source.find("default"), std::string::npos);
  EXPECT_EQ(c->gemm.flops.size(), c->gemm.m.size() * c->gemm.n.size() * c->gemm.k.size());
  EXPECT_TRUE(c->collectives.count("shm"));
  EXPECT_TRUE(c->collectives.count("tcp"));
  Result<Calibration> again = ParseCalibration(CalibrationToJson(*c), "again");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->gemm.flops, c->gemm.flops);
  EXPECT_EQ(again->collectives.at("shm")[0].per_group.at(4).beta, c->collectives.at("shm")[0].per_group.at(4).beta);
  EXPECT_EQ(again->grad_hidden_fraction, c->grad_hidden_fraction);
}

TEST(CalibrationTest, MalformedFieldsNameFileAndField) {
  EXPECT_NE(ParseCalibration("{\"device\": ", "calib.json").status().message().find("calib.json: not valid JSON"),
            std::string::npos);

  Json j = DefaultJson();
  j["compute"].erase("memory_bandwidth");
  EXPECT_EQ(ErrorOf(j), "calib.json: compute.memory_bandwidth: missing");

  j = DefaultJson();
  j["compute"]["kernel_launch"] = -1e-6;
  EXPECT_EQ(ErrorOf(j), "calib.json: compute.kernel_launch: -1e-06 is negative");

  j = DefaultJson();
  j["collectives"]["shm"]["AllGather"]["beta"] = "fast";
  EXPECT_EQ(ErrorOf(j), "calib.json: collectives.shm.AllGather.beta: is not a number: \"fast\"");

  j = DefaultJson();
  j["collectives"]["tcp"].erase("AllToAll");
  EXPECT_EQ(ErrorOf(j), "calib.json: collectives.tcp.AllToAll: missing");

  j = DefaultJson();
  j["collectives"]["shm"]["AllReduce"]["groups"]["one"] = {{"alpha", 1}, {"beta", 1}};
  EXPECT_EQ(ErrorOf(j), "calib.json: collectives.shm.AllReduce.groups: key \"one\" is not a group size of at least 2");

  j = DefaultJson();
  j["compute"]["gemm"]["k"] = {16, 64, 64, 4096, 16384};
  EXPECT_EQ(ErrorOf(j), "calib.json: compute.gemm.k: is not sorted ascending at index 2 (64 after 64)");

  j = DefaultJson();
  j["compute"]["gemm"]["flops"][1][2].erase(0);
  EXPECT_EQ(ErrorOf(j), "calib.json: compute.gemm.flops[1][2]: is not a list of 5 entries (one per k of the grid)");

  j = DefaultJson();
  j["compute"]["gemm"]["flops"][0][0][0] = 0;
  EXPECT_EQ(ErrorOf(j), "calib.json: compute.gemm.flops[0][0][0]: 0 is not a positive FLOP/s");

  j = DefaultJson();
  j["overlap"]["grad_hidden_fraction"] = 1.5;
  EXPECT_EQ(ErrorOf(j), "calib.json: overlap.grad_hidden_fraction: 1.500000 is above 1");

  j = DefaultJson();
  j.erase("device");
  EXPECT_EQ(ErrorOf(j), "calib.json: device: missing");

  Result<Calibration> missing = LoadCalibration("/nonexistent/calib.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/calib.json"), std::string::npos);
}

TEST(CalibrationTest, FindPrefersThePathThenTheEnvironment) {
  const std::string path = ::testing::TempDir() + "/calibration_find_test.json";
  Json j = DefaultJson();
  j["device"]["kind"] = "from-file";
  std::ofstream(path) << j.dump();

  Result<Calibration> given = FindCalibration(path);
  ASSERT_TRUE(given.ok()) << given.status().ToString();
  EXPECT_EQ(given->device_kind, "from-file");
  EXPECT_EQ(given->source, path);

  ::setenv("SINKRT_CALIBRATION", path.c_str(), 1);
  Result<Calibration> env = FindCalibration("");
  ::unsetenv("SINKRT_CALIBRATION");
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  EXPECT_EQ(env->device_kind, "from-file");
  EXPECT_EQ(env->source, path + " (SINKRT_CALIBRATION)");

  Result<Calibration> fallback = FindCalibration("");
  ASSERT_TRUE(fallback.ok());
  EXPECT_EQ(fallback->device_kind, "cpu-zen4-2core");
  std::remove(path.c_str());
}

// Two points per axis, 16 and 256: 64 lies halfway in log2 (4, 6, 8).
TEST(CalibrationTest, GemmInterpolatesTrilinearlyInLogSpaceAndClamps) {
  GemmGrid g;
  g.m = {16, 256};
  g.n = {16, 256};
  g.k = {16, 256};
  // flops = 1e9 * (1 + 1·[m hi] + 2·[n hi] + 4·[k hi]): linear in each axis.
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j)
      for (int l = 0; l < 2; ++l) g.flops.push_back(1e9 * (1 + i + 2 * j + 4 * l));
  EXPECT_DOUBLE_EQ(GemmFlops(g, 16, 16, 16), 1e9);
  EXPECT_DOUBLE_EQ(GemmFlops(g, 256, 256, 256), 8e9);
  EXPECT_DOUBLE_EQ(GemmFlops(g, 64, 16, 16), 1.5e9);
  EXPECT_DOUBLE_EQ(GemmFlops(g, 64, 64, 64), 1e9 * (1 + 0.5 + 1 + 2));
  EXPECT_DOUBLE_EQ(GemmFlops(g, 16, 16, 32), 1e9 * (1 + 4 * 0.25));  // log2 32 = 5: a quarter of the way
  // Outside the grid: the edge's rate.
  EXPECT_DOUBLE_EQ(GemmFlops(g, 1, 1, 1), 1e9);
  EXPECT_DOUBLE_EQ(GemmFlops(g, 100000, 8, 100000), 1e9 * (1 + 1 + 4));

  Calibration c;
  c.gemm = g;
  c.kernel_launch = 1e-6;
  EXPECT_DOUBLE_EQ(GemmSeconds(c, 256, 256, 256), 1e-6 + 2.0 * 256 * 256 * 256 / 8e9);
  EXPECT_EQ(GemmSeconds(c, 0, 256, 256), 0);
}

TEST(CalibrationTest, CollectivesUseTheGroupFitElseTheGeneralOne) {
  Calibration c;
  c.source = "test";
  TransportFits fits;
  for (auto& f : fits) f.fit = {1e-5, 1e-9};
  fits[static_cast<int>(CollectiveKind::AllReduce)].per_group[2] = {2e-6, 2e-10};
  c.collectives["shm"] = fits;

  EXPECT_DOUBLE_EQ(RingFactor(CollectiveKind::AllReduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(RingFactor(CollectiveKind::AllGather, 4), 0.75);
  EXPECT_DOUBLE_EQ(RingFactor(CollectiveKind::AllToAll, 2), 0.5);

  EXPECT_DOUBLE_EQ(*CollectiveSeconds(c, "shm", CollectiveKind::AllReduce, 2, 1000), 2e-6 + 2e-10 * 1.0 * 1000);
  EXPECT_DOUBLE_EQ(*CollectiveSeconds(c, "shm", CollectiveKind::AllReduce, 4, 1000), 1e-5 + 1e-9 * 1.5 * 1000);
  EXPECT_DOUBLE_EQ(*CollectiveSeconds(c, "shm", CollectiveKind::ReduceScatter, 8, 800), 1e-5 + 1e-9 * 0.875 * 800);
  EXPECT_EQ(*CollectiveSeconds(c, "shm", CollectiveKind::AllReduce, 1, 1000), 0);
  Result<double> tcp = CollectiveSeconds(c, "tcp", CollectiveKind::AllReduce, 2, 1000);
  ASSERT_FALSE(tcp.ok());
  EXPECT_EQ(tcp.status().message(), "test has no collectives for transport \"tcp\" (it has shm)");
}

}  // namespace
}  // namespace sinkrt::host::parallel
