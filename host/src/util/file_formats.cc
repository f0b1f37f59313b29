#include "sinkrt/host/file_formats.h"

namespace sinkrt::host {

FileFormats FileFormatVersions() { return {kGraphFileFormat, kCheckpointFormat}; }

std::string HostVersionText(std::string_view tool) {
  auto line = [](std::string_view what, FormatVersion f) {
    return std::string(what) + " " + std::to_string(f.major) + "." + std::to_string(f.minor) + "\n";
  };
  const FileFormats formats = FileFormatVersions();
  return VersionText(tool) + line("graph file format", formats.graph_file) +
         line("checkpoint format", formats.checkpoint);
}

}  // namespace sinkrt::host
