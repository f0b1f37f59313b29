// The model the single-run benches train: the 784-512-256-10 MLP with SGD
// momentum (0.01, 0.9), compiled and loaded on a device.
#pragma once

#include <cstdint>

#include "sinkrt/host/compiler.h"
#include "sinkrt/runtime/device_link.h"
#include "sinkrt/runtime/status.h"
#include "support/test_models.h"

namespace sinkrt {

inline Status LoadMlp(DeviceLink& device, int64_t batch,
                      uint32_t queue_capacity = host::CompileOptions{}.queue_capacity) {
  host::CompileOptions o;
  o.optimizer = host::OptimizerSpec::Momentum(0.01f, 0.9f);
  o.queue_capacity = queue_capacity;
  SINKRT_ASSIGN_OR_RETURN(host::CompiledStream cs, host::Compile(testing::MakeMlp(batch), o));
  return device.Load(cs.stream).status();
}

}  // namespace sinkrt
