// sinkdump: prints a task stream (header, memory plan, queues, programs).
//
//   sinkdump FILE [--json] [--program init|train_step|eval_step] [--no-tasks]
//
// The file is verified as a device verifies it before anything is printed,
// except that features this build's device does not run yet (collectives)
// are checked rather than refused: a stream sinkdump shows is well formed,
// and a corrupt one is an error message and exit status 1, never a crash.
#include <optional>
#include <iostream>
#include <map>

#include <CLI/CLI.hpp>

#include "dump_format.h"
#include "sinkrt/runtime/file_io.h"
#include "sinkrt/runtime/format.h"

int main(int argc, char** argv) {
  using namespace sinkrt;
  CLI::App app{"Prints a sinkrt task stream (.tstream): header, memory plan, queues, programs and tasks."};
  std::string path;
  bool json = false;
  bool no_tasks = false;
  std::string program_name;
  const std::map<std::string, fb::ProgramKind> kPrograms = {
      {"init", fb::ProgramKind::Init},
      {"train_step", fb::ProgramKind::TrainStep},
      {"eval_step", fb::ProgramKind::EvalStep},
  };
  app.add_option("file", path, "task stream file")->required();
  app.add_flag("--json", json, "print one JSON document instead of text");
  app.add_option("--program", program_name, "show only this program")
      ->check(CLI::IsMember(kPrograms));
  app.add_flag("--no-tasks", no_tasks, "list programs and streams without their tasks");
  CLI11_PARSE(app, argc, argv);
  std::optional<fb::ProgramKind> program;
  if (!program_name.empty()) program = kPrograms.at(program_name);

  Result<std::vector<uint8_t>> bytes = ReadFileBytes(path);
  if (!bytes.ok()) {
    std::cerr << "sinkdump: " << bytes.status().ToString() << '\n';
    return 1;
  }
  Result<StreamView> view = VerifyTaskStream(*bytes, kSupportedFeatures | kFeatureCollectives);
  if (!view.ok()) {
    std::cerr << "sinkdump: " << path << ": " << view.status().ToString() << '\n';
    return 1;
  }
  tools::DumpOptions options;
  options.program = program;
  options.tasks = !no_tasks;
  if (program && !view->FindProgram(*program)) {
    std::cerr << "sinkdump: " << path << " has no " << ProgramKindName(*program) << " program\n";
    return 1;
  }
  if (json)
    std::cout << tools::DumpJson(*view, path, options).dump(2, ' ', false, tools::Json::error_handler_t::replace) << '\n';
  else
    std::cout << tools::DumpText(*view, path, options);
  std::cout.flush();
  return std::cout.good() ? 0 : 1;
}
