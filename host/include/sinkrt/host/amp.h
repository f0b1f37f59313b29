/// \file
/// Mixed precision: MindSpore's amp_level (docs/guide/amp.md).
///
/// The low-precision type is bf16 (AVX512-BF16 on these CPUs; oneDNN runs
/// bf16 matmuls and convolutions with f32 accumulation). The compiler
/// rewrites the forward graph with Cast ops that sinkdump shows; parameters
/// (the master weights), their gradients, the optimizer state and the loss
/// stay f32 at every level.
#pragma once

#include <cstdint>
#include <string_view>

#include "sinkrt/runtime/status.h"

namespace sinkrt::host {

/// Which ops compute in bf16 (MindSpore's amp_level).
enum class AmpLevel : uint8_t {
  /// Unchanged: every op in f32, the stream byte for byte what it was
  /// before amp existed.
  O0,
  /// MindSpore's white list in bf16 (MatMul, BatchMatMul, Conv2D, Relu),
  /// everything else in f32.
  O1,
  /// The network in bf16 but LayerNorm, Softmax, LogSoftmax and the loss,
  /// which stay f32 (MindSpore's O2 keeps BatchNorm, LayerNorm and loss_fn).
  O2,
  /// The network in bf16 but the loss (MindSpore's O3: keep_batchnorm_fp32
  /// False; its loss_fn still runs on the output cast to f32).
  O3,
};

const char* AmpLevelName(AmpLevel level);  ///< "O0" ... "O3"
/// "O0" ... "O3" (MindSpore's spelling; "o2" too); anything else is
/// InvalidArgument in MindSpore's words.
Result<AmpLevel> ParseAmpLevel(std::string_view text);

}  // namespace sinkrt::host
