// sinkprof: prints the summary of a profiled run's directory again.
//
//   sinkprof DIR [--json]
//   sinkprof --version
//
// DIR is what Profiler::analyse() (or `sinkrun train --profile DIR`)
// wrote; its trace.json is read back and summarised as analyse() did
// (docs/guide/profiler.md). Prints summary.txt's text, or with --json
// summary.json's. Exit 0 on success, 2 for a bad command line, 1 when the
// directory cannot be read (the message names the file and what is wrong).
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/tool_version.h"
#include "sinkrt/host/file_formats.h"
#include "sinkrt/host/profiler.h"

int main(int argc, char** argv) {
  CLI::App app{"sinkprof: the summary of a profiled run (a Profiler's output directory)"};
  sinkrt::tools::AddVersionFlag(app, sinkrt::host::HostVersionText("sinkprof"));
  std::string dir;
  bool json = false;
  app.add_option("dir", dir, "the directory Profiler::analyse() or sinkrun --profile wrote")->required();
  app.add_flag("--json", json, "print summary.json's JSON instead of the text summary");
  CLI11_PARSE(app, argc, argv);

  auto summary = sinkrt::host::ReadProfile(dir);
  if (!summary.ok()) {
    std::fprintf(stderr, "sinkprof: %s\n", summary.status().ToString().c_str());
    return 1;
  }
  std::string text = json ? sinkrt::host::SummaryJsonText(*summary) : sinkrt::host::SummaryText(*summary);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}
