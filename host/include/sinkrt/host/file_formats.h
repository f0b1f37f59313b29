// The versions of the files the host library writes and reads: graph files
// (graph_file.h, schemas/graph.fbs) and checkpoints (callbacks.h,
// schemas/checkpoint.fbs). The writers stamp these constants and the
// readers check against them, so what a program asks here is what its
// files say. docs/design/compatibility.md says which versions a release reads.
#pragma once

#include <string>
#include <string_view>

#include "sinkrt/runtime/version.h"

namespace sinkrt::host {

/// The graph file format SaveGraph writes. LoadGraph reads every minor of
/// its major (a minor adds only what an older reader may ignore or refuses
/// by name, such as an op it does not know) and refuses any other major.
/// 1.1: transformer ops; 1.2: Exp, Log, Sqrt, Rsqrt, Square, Abs;
/// 1.3: the optimizer's learning-rate schedule; Div, Maximum, Minimum, Pow, Erf, GeluErf, Dropout;
/// optimizers AdamWeightDecay and Lamb, group parameters; BatchNorm and TensorKind State.
inline constexpr FormatVersion kGraphFileFormat{1, 3};

/// The checkpoint format SaveCheckpoint writes. LoadCheckpoint reads every
/// minor of its major and refuses any other major.
/// 1.1: a CRC-32 per tensor and of the whole file, the file's size, and the
/// network's structure hash (seed-independent binding); 1.2: role State
/// (BatchNorm's moving statistics).
inline constexpr FormatVersion kCheckpointFormat{1, 2};

/// The file formats of the host library a program linked.
struct FileFormats {
  FormatVersion graph_file;  ///< kGraphFileFormat
  FormatVersion checkpoint;  ///< kCheckpointFormat
};

/// The file formats of the host library this program linked. They can
/// differ from the constants above, which an application compiled in, only
/// when its headers and libraries come from different installs.
FileFormats FileFormatVersions();

/// VersionText(tool) followed by "graph file format 1.1\ncheckpoint format
/// 1.0\n": the --version text of a tool that links the host library.
std::string HostVersionText(std::string_view tool);

}  // namespace sinkrt::host
