// The console reporter, keeping every measured run so a suite's main can
// print ratios and summaries after the tables (wire_bench, data_parallel_bench);
// RunRecorded is such a main.
#pragma once

#include <benchmark/benchmark.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace sinkrt {

class RecordingReporter : public benchmark::ConsoleReporter {
 public:
  RecordingReporter() : ConsoleReporter(isatty(STDOUT_FILENO) ? OO_ColorTabular : OO_Tabular) {}

  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs)
      if (r.run_type == Run::RT_Iteration && !r.error_occurred)
        runs_[r.run_name.function_name + (r.run_name.args.empty() ? "" : "/" + r.run_name.args)].push_back(r);
    ConsoleReporter::ReportRuns(runs);
  }

  // The median over repetitions of a counter ("" = real time per
  // iteration in the benchmark's unit); negative if the run is missing.
  double Median(const std::string& name, const std::string& counter = "") const {
    auto it = runs_.find(name);
    if (it == runs_.end()) return -1;
    std::vector<double> v;
    for (const Run& r : it->second) {
      if (counter.empty()) {
        v.push_back(r.GetAdjustedRealTime());
      } else {
        auto c = r.counters.find(counter);
        if (c != r.counters.end()) v.push_back(c->second.value);
      }
    }
    if (v.empty()) return -1;
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  }

 private:
  std::map<std::string, std::vector<Run>> runs_;
};

// A suite's main: runs the benchmarks the command line selects, then
// `stop` (the suite's daemons) and `summarise` (its lines after the
// tables), and flushes stdout. Returns main's exit status: 1 for an
// argument Google Benchmark does not know.
inline int RunRecorded(int argc, char** argv, const std::function<void()>& stop,
                       const std::function<void(const RecordingReporter&)>& summarise) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  RecordingReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  stop();
  summarise(reporter);
  std::fflush(stdout);
  return 0;
}

}  // namespace sinkrt
