// --version, the same in every tool: the text of sinkrt::VersionText (and
// sinkrt::host::HostVersionText in a tool that links the host library) on
// stdout, exit 0. Header-only: sinkd uses it without the host library.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace sinkrt::tools {

inline void AddVersionFlag(CLI::App& app, std::string text) {
  // CLI11 ends the text with a newline of its own.
  while (!text.empty() && text.back() == '\n') text.pop_back();
  app.set_version_flag("--version", text, "print the versions of sinkrt, its task-stream format and wire protocol");
}

}  // namespace sinkrt::tools
