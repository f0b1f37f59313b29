// The oneDNN engine and stream of one device. The executor creates one per
// device (engine(engine::kind::cpu, 0), an in-order stream on it) before any
// prepare, and it must outlive every kernel state built against it: oneDNN
// primitives and memory objects hold the engine.
//
// A kernel split across the worker team runs one primitive per part at
// once; each part executes on its own stream (part_streams[p], p >= 1;
// part 0 uses `stream`), so no stream is shared between threads.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <vector>

namespace sinkrt::device {

struct DnnlRuntime {
  dnnl::engine engine;
  dnnl::stream stream;
  std::vector<dnnl::stream> part_streams;  // [team size]; [0] is `stream`

  const dnnl::stream& StreamOf(int part) const { return part == 0 ? stream : part_streams[part]; }
};

}  // namespace sinkrt::device
