// Training one network on a world of in-process devices fed as Model feeds
// data-parallel ranks (Dataset::ShardBelowBatch): replica j of n reads rows
// j, j + n, j + 2n, ... of every global batch. What the dropout
// composition tests share (docs/guide/dropout.md: a mask keyed by the
// global row must see the rows Model gives each rank): each rank compiles
// its own stream, columns are fed by name ("image", "label", and under
// gradient accumulation "mb<m>/image" ... for micro-step m), and a middle
// pipeline stage has no queue.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "sinkrt/device/in_process_device.h"
#include "sinkrt/host/compiler.h"
#include "support/in_process_world.h"
#include "support/test_models.h"

namespace sinkrt::testing {

// Every step's global batch, row after row: images [rows, width] f32 and
// labels [rows] i32.
struct StepData {
  int64_t width = 32;
  int64_t rows = 0;  // per step
  std::vector<float> images;
  std::vector<int32_t> labels;
};

// `steps` global batches of `rows` rows from MakeSyntheticData (a quarter
// of the labels randomised, so the loss keeps moving).
inline StepData MakeStepData(int steps, int64_t rows, int64_t width = 32) {
  SyntheticData d = MakeSyntheticData(steps * rows, width, 10, 5);
  RandomizeQuarterOfLabels(d);
  return {width, rows, d.images, d.labels};
}

// Rows r, r + n, ... of step s's global batch, then the first `micro`-th of
// them for micro-step 0, the next for micro-step 1, ...
struct RankShare {
  std::vector<float> images;
  std::vector<int32_t> labels;
};
inline RankShare Share(const StepData& d, int s, int r, int n) {
  RankShare f;
  for (int64_t row = r; row < d.rows; row += n) {
    const int64_t at = s * d.rows + row;
    f.images.insert(f.images.end(), d.images.begin() + at * d.width, d.images.begin() + (at + 1) * d.width);
    f.labels.push_back(d.labels[static_cast<size_t>(at)]);
  }
  return f;
}

// The queue entry for `columns`: "image"/"label" are micro-step 0's rows,
// "mb<m>/image" micro-step m's, each micro-step 1/micro of the share.
inline std::vector<ConstBytes> ShareColumns(const RankShare& f, const std::vector<std::string>& columns, int micro,
                                            int64_t width) {
  const int64_t rows = static_cast<int64_t>(f.labels.size()) / micro;
  std::vector<ConstBytes> cols;
  for (const std::string& c : columns) {
    int m = 0;
    std::string name = c;
    if (c.rfind("mb", 0) == 0 && c.find('/') != std::string::npos) {
      m = std::stoi(c.substr(2, c.find('/') - 2));
      name = c.substr(c.find('/') + 1);
    }
    if (name == "image")
      cols.emplace_back(reinterpret_cast<const uint8_t*>(f.images.data() + m * rows * width),
                        rows * width * sizeof(float));
    if (name == "label")
      cols.emplace_back(reinterpret_cast<const uint8_t*>(f.labels.data() + m * rows), rows * sizeof(int32_t));
  }
  return cols;
}

// Each step's loss, the mean over the ranks that report one, on `world`
// ranks: rank r compiled with `options(r)`, fed share r % replicas of
// `replicas` (split into `micro` accumulation micro-steps), one step a sink.
inline std::vector<double> TrainInterleaved(const host::Graph& net, int world, int replicas, const StepData& data,
                                            int steps, const std::function<host::CompileOptions(int)>& options,
                                            int micro = 1) {
  std::vector<std::unique_ptr<device::InProcessDevice>> devices;
  std::vector<PeerEndpoint> members;
  for (int r = 0; r < world; ++r) {
    devices.push_back(std::make_unique<device::InProcessDevice>(OneThreadOptions()));
    auto e = devices.back()->Endpoint();
    EXPECT_TRUE(e.ok());
    members.push_back(*e);
  }
  std::vector<std::vector<double>> losses(world);
  std::vector<Status> status(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      device::InProcessDevice& dev = *devices[r];
      if (world > 1) status[r] = dev.JoinWorld({13, static_cast<uint32_t>(r), members});
      if (!status[r].ok()) return;
      auto cs = host::Compile(net, options(r));
      if (!cs.ok()) {
        status[r] = cs.status();
        return;
      }
      if (Status st = dev.Load(cs->stream).status(); !st.ok()) {
        status[r] = st;
        return;
      }
      for (int s = 0; s < steps; ++s) {
        const RankShare f = Share(data, s, r % replicas, replicas);
        const std::vector<ConstBytes> cols = ShareColumns(f, cs->input_columns, micro, data.width);
        if (!cols.empty()) status[r] = dev.PushBatch(0, cols);
        if (!status[r].ok()) return;
        auto res = dev.RunSink(ProgramKind::TrainStep, 1);
        if (!res.ok()) {
          status[r] = res.status();
          return;
        }
        if (!res->reports.empty()) losses[r].push_back(res->reports.at(0).scalar());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < world; ++r) EXPECT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r].ToString();
  std::vector<double> out(static_cast<size_t>(steps), 0.0);
  int reporting = 0;
  for (const std::vector<double>& l : losses) {
    if (l.empty()) continue;
    ++reporting;
    for (int s = 0; s < steps; ++s) out[s] += s < static_cast<int>(l.size()) ? l[s] : NAN;
  }
  for (double& v : out) v /= std::max(reporting, 1);
  return out;
}

// The worst relative difference of `got` from `want`, step by step, also
// recorded as the test's property; fails above `tolerance`.
inline double ExpectLossesTrack(const std::vector<double>& want, const std::vector<double>& got,
                                double tolerance = 1e-5) {
  EXPECT_EQ(got.size(), want.size());
  double worst = 0;
  for (size_t s = 0; s < want.size() && s < got.size(); ++s) {
    const double rel = std::abs(got[s] - want[s]) / std::abs(want[s]);
    worst = std::max(worst, std::isnan(rel) ? INFINITY : rel);
    EXPECT_LE(rel, tolerance) << "step " << s << ": " << got[s] << " against " << want[s];
    if (std::getenv("SINKRT_TEST_VERBOSE")) std::printf("step %zu: %.8f %.8f\n", s, got[s], want[s]);
  }
  ::testing::Test::RecordProperty("worst_relative_loss_difference", std::to_string(worst));
  std::printf("worst relative loss difference over %zu steps: %.3g\n", want.size(), worst);
  return worst;
}

}  // namespace sinkrt::testing
