// What the AUTO_PARALLEL Model tests share: the fixed calibration file the
// cost model reads (so no searched plan depends on the machine), and the
// rows of the train queue a searched job's rank 0 reads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "host/src/job/stream_report.h"
#include "sinkrt/host/model.h"

namespace sinkrt::testing {

// test/data/calibration_fixed.json ("" where the tree's path is unknown).
inline std::string FixedCalibration() {
#ifdef SINKRT_SOURCE_DIR
  return std::string(SINKRT_SOURCE_DIR) + "/test/data/calibration_fixed.json";
#else
  return "";
#endif
}

// One data-parallel group's batch, which the dataset gives.
inline int64_t GroupBatch(const host::Model& m) {
  const std::vector<host::ColumnSpec> cols = host::job::QueueColumns(m.compiled().stream, "train");
  return cols.empty() || cols[0].shape.empty() ? 0 : cols[0].shape[0];
}

}  // namespace sinkrt::testing
