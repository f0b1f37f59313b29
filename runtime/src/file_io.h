/// \file
/// Whole-file reads and writes with errors that name the path and the
/// system's reason. Every reader of a file in sinkrt goes through
/// ReadFileBytes, so none of them can be pointed at a device (/dev/zero
/// never ends) or a file far larger than its format allows.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "sinkrt/runtime/status.h"

namespace sinkrt {

/// How large a file of one kind may be: `what` names the kind in the error
/// ("a checkpoint").
struct FileLimit {
  uint64_t max_bytes;  ///< the largest file accepted, in bytes
  const char* what;    ///< the kind of file, for messages ("a checkpoint")
};

/// A FlatBuffer (task stream excepted) addresses itself with 32-bit offsets.
inline constexpr FileLimit kFlatBufferFileLimit{uint64_t{1} << 31, "a FlatBuffers file"};
/// JSON written by sinkrt or by hand (rank tables, strategy files,
/// calibration, manifests): far below this.
inline constexpr FileLimit kJsonFileLimit{uint64_t{256} << 20, "a JSON file"};

/// Ok when `path` names a regular file (symbolic links followed). NotFound
/// when nothing is there; InvalidArgument naming what it is otherwise ("a
/// character device, not a regular file").
Status CheckRegularFile(const std::string& path);

/// The whole regular file at `path`. Fails naming the path: NotFound when it
/// cannot be opened, InvalidArgument when it is not a regular file or holds
/// more than `limit.max_bytes` (checked before anything is read).
Result<std::vector<uint8_t>> ReadFileBytes(const std::string& path, FileLimit limit);

/// Writes `bytes` to `path` whole or not at all: into `.NAME.tmp.PID` in the
/// same directory (locked with flock while written, see
/// RemoveStaleTemporaries), then renamed over `path`. A `path` that exists
/// and is no regular file (a device, a FIFO) cannot be replaced, so it is
/// written in place. Errors carry strerror(errno) ("No space left on device").
Status WriteFileBytes(const std::string& path, std::span<const uint8_t> bytes);

/// Ok when files can be created in the directory `dir`, or, when `dir` does
/// not exist yet, in the nearest ancestor that does (where creating it
/// starts). Tries it: creates and removes a probe file, so a read-only
/// filesystem, missing permission or a file in the way is found before any
/// work that would be lost. Errors name the directory and the reason.
Status CheckDirectoryWritable(const std::string& dir);

/// Removes the temporaries WriteFileBytes left in `dir` for files whose name
/// ends in `suffix` when their writer died mid-write: the PID in the name is
/// no live process, and no one holds the file's lock. A live writer's
/// temporary is never touched. Returns the names removed; a directory that
/// cannot be read has none.
std::vector<std::string> RemoveStaleTemporaries(const std::string& dir, const std::string& suffix);

}  // namespace sinkrt
