#include "support/rank_world.h"

#include <gtest/gtest.h>

#include <memory>
#include <thread>

#include "sinkrt/device/in_process_device.h"
#include "support/in_process_world.h"

namespace sinkrt::testing {
namespace {

// Rank r's whole run: join, compile, load, then push and run each step.
Status RunRank(device::InProcessDevice& dev, int world, int r, const std::vector<PeerEndpoint>& members, int steps,
               uint64_t world_id, const RankCompile& compile, const RankFeed& feed, std::vector<double>* losses) {
  if (world > 1) SINKRT_RETURN_IF_ERROR(dev.JoinWorld({world_id, static_cast<uint32_t>(r), members}));
  SINKRT_ASSIGN_OR_RETURN(host::CompiledStream cs, compile(r));
  SINKRT_RETURN_IF_ERROR(dev.Load(cs.stream).status());
  for (int s = 0; s < steps; ++s) {
    const std::vector<ConstBytes> cols = feed(r, s);
    SINKRT_RETURN_IF_ERROR(dev.PushBatch(0, cols));
    SINKRT_ASSIGN_OR_RETURN(auto res, dev.RunSink(ProgramKind::TrainStep, 1));
    losses->push_back(res.reports.at(0).scalar());
  }
  return Status::Ok();
}

}  // namespace

std::vector<std::vector<double>> TrainRanks(int world, int steps, const RankCompile& compile, const RankFeed& feed,
                                            uint64_t world_id) {
  InProcessWorld w(world);
  std::vector<PeerEndpoint> members;
  for (auto& dev : w.devices) {
    auto e = dev->Endpoint();
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    if (e.ok()) members.push_back(*e);
  }
  std::vector<std::vector<double>> losses(world);
  std::vector<Status> status(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      status[r] = RunRank(*w.devices[r], world, r, members, steps, world_id, compile, feed, &losses[r]);
    });
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < world; ++r) EXPECT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r].ToString();
  return losses;
}

std::vector<ConstBytes> RowColumns(const float* features, int64_t width, const int32_t* labels, int64_t row,
                                   int64_t rows) {
  return {ConstBytes(reinterpret_cast<const uint8_t*>(features + row * width), rows * width * sizeof(float)),
          ConstBytes(reinterpret_cast<const uint8_t*>(labels + row), rows * sizeof(int32_t))};
}

}  // namespace sinkrt::testing
