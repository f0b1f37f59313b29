/// \file
/// Task-stream file layout and format version.
///
/// ~~~
///   [uint32 size][FlatBuffer "SKTS" ...][pad to 64][blob section]
/// ~~~
///
/// The size prefix lets a reader find the blob section without parsing; blob
/// offsets in the stream are relative to the blob section's start.
#pragma once

#include <cstdint>
#include <span>

#include "sinkrt/runtime/status.h"

namespace sinkrt {

/// The task-stream format's version: a device loads every minor of its major.
inline constexpr uint16_t kFormatMajor = 1;
inline constexpr uint16_t kFormatMinor = 6;  ///< 1.1: transformer ops; 1.2: sharded slices; 1.3: ParamSlice/GradSlice;
                                             ///< 1.4: MetricSum, Program.accumulators (sunk eval); 1.5: Exp, Log,
                                             ///< Sqrt, Rsqrt, Square, Abs, AbsGrad; 1.6: LrSchedule, StepAdvance,
                                             ///< the update ops' lr_input; Div, Maximum, Minimum, Pow, Erf,
                                             ///< GeluErf and their helpers; Dropout, DropoutGrad, DropoutStep;
                                             ///< AdamWeightDecay, LambNorms, LambUpdate; BatchNorm ops,
                                             ///< BufferRole State; SumSquares, ClipByGlobalNorm
/// The blob section and every blob in it start at a multiple of this many bytes.
inline constexpr uint32_t kBlobAlignment = 64;
/// Feature bits a stream may require (Header.requirements). A device refuses
/// a stream with any bit outside the set it supports.
inline constexpr uint64_t kFeatureCollectives = 1ull << 0;
/// Fused, blocked AllGather and ReduceScatter (their inputs/outputs lists;
/// format 1.3): a device that ignored those fields would run a different
/// collective, so it must refuse the stream instead.
inline constexpr uint64_t kFeatureBlockedCollectives = 1ull << 1;
/// Every feature bit this build's devices run.
inline constexpr uint64_t kSupportedFeatures = kFeatureCollectives | kFeatureBlockedCollectives;

/// Largest stream a device accepts (FlatBuffer plus blobs).
inline constexpr uint64_t kMaxStreamBytes = 1ull << 36;
/// Largest arena a device accepts (256 GiB); the compiler refuses a plan
/// above it, naming the largest buffers.
inline constexpr uint64_t kMaxArenaBytes = kMaxStreamBytes * 4;

/// A .tstream file's two parts, as SplitStream finds them.
struct StreamSections {
  std::span<const uint8_t> flatbuffer;  ///< without the size prefix
  std::span<const uint8_t> blobs;       ///< the tensor data the FlatBuffer's blob references point into
};

/// Splits a .tstream file into its sections, checking the size prefix and the
/// blob section's alignment padding against the file length.
Result<StreamSections> SplitStream(std::span<const uint8_t> file);

/// Offset of the blob section for a FlatBuffer of `flatbuffer_bytes`.
inline uint64_t BlobSectionOffset(uint64_t flatbuffer_bytes) {
  uint64_t end = 4 + flatbuffer_bytes;
  return (end + kBlobAlignment - 1) / kBlobAlignment * kBlobAlignment;
}

}  // namespace sinkrt
