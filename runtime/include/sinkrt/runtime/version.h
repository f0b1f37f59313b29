/// \file
/// The versions of sinkrt: the library's release and the two formats it
/// exchanges with other builds, the task stream (stream_format.h) and the wire
/// protocol (wire.h). docs/design/compatibility.md says which versions of each a
/// release accepts.
///
/// The release number lives here and nowhere else: CMake reads it from this
/// file (project(VERSION)), so the package, the CMake version file, the
/// pkg-config file and the code cannot disagree.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

/// The release this header belongs to (semantic versioning).
/// @{
#define SINKRT_VERSION_MAJOR 1
#define SINKRT_VERSION_MINOR 0
#define SINKRT_VERSION_PATCH 0
/// @}
#define SINKRT_VERSION_STRINGIFY_(x) #x
#define SINKRT_VERSION_STRINGIFY(x) SINKRT_VERSION_STRINGIFY_(x)
/// "MAJOR.MINOR.PATCH"
#define SINKRT_VERSION_STRING                    \
  SINKRT_VERSION_STRINGIFY(SINKRT_VERSION_MAJOR) \
  "." SINKRT_VERSION_STRINGIFY(SINKRT_VERSION_MINOR) "." SINKRT_VERSION_STRINGIFY(SINKRT_VERSION_PATCH)

namespace sinkrt {

/// A format's version: a reader accepts every minor of its own major.
struct FormatVersion {
  uint16_t major = 0;  ///< breaking changes: a reader refuses another major
  uint16_t minor = 0;  ///< additions a reader of the same major may ignore
};

/// What a build of the library is and speaks.
struct Versions {
  /// The library's release, as the SINKRT_VERSION_* macros of its build.
  /// @{
  int major = 0;
  int minor = 0;
  int patch = 0;
  /// @}
  std::string library;          ///< "1.0.0"
  FormatVersion task_stream;    ///< the format the compiler writes; a device loads any minor of its major
  FormatVersion wire_protocol;  ///< the protocol this build speaks; a peer of the same major is accepted
};

/// The versions of the library this program linked. They can differ from
/// the SINKRT_VERSION_* macros an application compiled against only when
/// its headers and libraries come from different installs.
Versions LinkedVersions();

/// "TOOL 1.0.0\ntask stream format 1.4\nwire protocol 1.4\n": the start of
/// every tool's --version.
std::string VersionText(std::string_view tool);

}  // namespace sinkrt
