#include "sinkrt/runtime/version.h"

#include "runtime/src/wire.h"
#include "sinkrt/runtime/stream_format.h"

namespace sinkrt {

Versions LinkedVersions() {
  Versions v;
  v.major = SINKRT_VERSION_MAJOR;
  v.minor = SINKRT_VERSION_MINOR;
  v.patch = SINKRT_VERSION_PATCH;
  v.library = SINKRT_VERSION_STRING;
  v.task_stream = {kFormatMajor, kFormatMinor};
  v.wire_protocol = {kProtocolMajor, kProtocolMinor};
  return v;
}

std::string VersionText(std::string_view tool) {
  const Versions v = LinkedVersions();
  auto format = [](FormatVersion f) { return std::to_string(f.major) + "." + std::to_string(f.minor); };
  return std::string(tool) + " " + v.library + "\ntask stream format " + format(v.task_stream) + "\nwire protocol " +
         format(v.wire_protocol) + "\n";
}

}  // namespace sinkrt
