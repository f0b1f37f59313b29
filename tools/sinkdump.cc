// sinkdump: prints a task stream (header, memory plan, queues, programs), or
// what differs between two.
//
//   sinkdump FILE [--json] [--program init|train_step|eval_step|predict_step] [--no-tasks]
//   sinkdump --diff A B [--json] [--program ...] [--no-tasks] [--limit N]
//   sinkdump --version
//
// Every file is verified as a device verifies it before anything is printed,
// with every feature this build knows accepted (collectives included), so a
// stream sinkdump shows is well formed, and a corrupt one is an error message
// naming the file, never a crash.
//
// A file that is not a task stream but another of sinkrt's (a graph file, a
// manifest, a checkpoint, a directory of streams) is named for what it is.
//
// Exit status: a dump exits 0, or 1 when its file does not load; a usage
// error exits 2, as in every tool. --diff follows diff(1): 0 when the files
// are identical, 1 when they differ, 2 on any error.
#include <iostream>
#include <map>
#include <optional>

#include <CLI/CLI.hpp>

#include "cli/cli_validators.h"
#include "cli/tool_version.h"
#include "dump_file_kind.h"
#include "dump_format.h"
#include "runtime/src/file_io.h"
#include "sinkrt/runtime/stream_format.h"
#include "sinkrt/runtime/version.h"

namespace {

using namespace sinkrt;

// Reads and verifies `path`; an error is printed naming the file.
std::optional<VerifiedStream> Load(const std::string& path) {
  if (std::optional<std::string> dir = tools::DescribeDirectory(path)) {
    std::cerr << "sinkdump: " << *dir << '\n';
    return std::nullopt;
  }
  Result<std::vector<uint8_t>> read = ReadFileBytes(path, {kMaxStreamBytes, "a task stream"});
  if (!read.ok()) {
    std::cerr << "sinkdump: " << read.status().ToString() << '\n';
    return std::nullopt;
  }
  // Told before the bytes move into the verifier, used only when it refuses.
  const std::optional<std::string> other = tools::DescribeOtherFile(path, *read);
  Result<VerifiedStream> view = VerifyTaskStream(std::move(read).value(), kSupportedFeatures | kFeatureCollectives);
  if (!view.ok()) {
    if (other)
      std::cerr << "sinkdump: " << *other << '\n';
    else
      std::cerr << "sinkdump: " << path << ": " << view.status().ToString() << '\n';
    return std::nullopt;
  }
  return *view;
}

std::string Dumped(const tools::Json& j) { return j.dump(2, ' ', false, tools::Json::error_handler_t::replace); }

int Diff(const std::string& a_path, const std::string& b_path, bool json, const tools::DumpOptions& options,
         size_t limit) {
  constexpr int kError = 2;
  std::optional<VerifiedStream> a = Load(a_path);
  if (!a) return kError;
  std::optional<VerifiedStream> b = Load(b_path);
  if (!b) return kError;
  if (options.program && !a->FindProgram(FromFb(*options.program)) && !b->FindProgram(FromFb(*options.program))) {
    std::cerr << "sinkdump: neither " << a_path << " nor " << b_path << " has a " << ProgramKindName(*options.program)
              << " program\n";
    return kError;
  }
  tools::Json diff = tools::DiffJson(*a, a_path, *b, b_path, options);
  if (json)
    std::cout << Dumped(diff) << '\n';
  else
    std::cout << tools::DiffText(diff, limit);
  std::cout.flush();
  if (!std::cout.good()) return kError;
  return diff["identical"].get<bool>() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Prints a sinkrt task stream (.tstream): header, memory plan, queues, programs and tasks; "
      "or, with --diff A B, what differs between two."};
  tools::AddVersionFlag(app, VersionText("sinkdump"));
  std::string path;
  std::vector<std::string> diff_paths;
  bool json = false;
  bool no_tasks = false;
  size_t limit = 10;
  std::string program_name;
  const std::map<std::string, fb::ProgramKind> kPrograms = {
      {"init", fb::ProgramKind::Init},
      {"train_step", fb::ProgramKind::TrainStep},
      {"eval_step", fb::ProgramKind::EvalStep},
      {"predict_step", fb::ProgramKind::PredictStep},
  };
  CLI::Option* file = app.add_option("file", path, "task stream file");
  CLI::Option* diff =
      app.add_option("--diff", diff_paths, "compare two task streams: exit 0 identical, 1 differ, 2 error")
          ->expected(2)
          ->type_name("FILE");
  file->excludes(diff);
  app.add_flag("--json", json, "print one JSON document instead of text");
  app.add_option("--program", program_name, "show (or compare) only this program")->check(CLI::IsMember(kPrograms));
  app.add_flag("--no-tasks", no_tasks, "list programs and streams without their tasks");
  app.add_option("--limit", limit, "--diff text: at most N entries per list, then '... N more' (0: all)")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
    if (diff->count() == 0 && path.empty()) throw CLI::RequiredError("file");
  } catch (const CLI::ParseError& e) {
    return tools::UsageExit(app, e);
  }
  tools::DumpOptions options;
  if (!program_name.empty()) options.program = kPrograms.at(program_name);
  options.tasks = !no_tasks;
  if (diff->count()) return Diff(diff_paths[0], diff_paths[1], json, options, limit);

  std::optional<VerifiedStream> loaded = Load(path);
  if (!loaded) return 1;
  const VerifiedStream& view = *loaded;
  if (options.program && !view.FindProgram(FromFb(*options.program))) {
    std::cerr << "sinkdump: " << path << " has no " << ProgramKindName(*options.program) << " program\n";
    return 1;
  }
  if (json)
    std::cout << Dumped(tools::DumpJson(view, path, options)) << '\n';
  else
    std::cout << tools::DumpText(view, path, options);
  std::cout.flush();
  return std::cout.good() ? 0 : 1;
}
