// The oneDNN engine and stream of one device. The executor creates one per
// device (engine(engine::kind::cpu, 0), an in-order stream on it) before any
// prepare, and it must outlive every kernel state built against it: oneDNN
// primitives and memory objects hold the engine.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

namespace sinkrt::device {

struct DnnlRuntime {
  dnnl::engine engine;
  dnnl::stream stream;
};

}  // namespace sinkrt::device
