// Runs a built tool as a child process and captures what it printed.
#pragma once

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "support/text.h"  // Slurp

namespace sinkrt::testing {

struct RunResult {
  int exit_code = -1;  // -1: killed by a signal
  std::string out, err;
};

// `args` must already be shell-quoted where needed. exec: the shell becomes
// the tool, so a crash reads as a signal, not as the shell's 128 + N.
inline RunResult RunBinary(const std::string& binary, const std::string& args,
                           const std::filesystem::path& scratch_dir) {
  RunResult r;
  const std::filesystem::path out = scratch_dir / "stdout", err = scratch_dir / "stderr";
  const std::string cmd = "exec '" + binary + "' " + args + " >'" + out.string() + "' 2>'" + err.string() + "'";
  const int status = std::system(cmd.c_str());
  if (status != -1 && WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  r.out = Slurp(out);
  r.err = Slurp(err);
  return r;
}

}  // namespace sinkrt::testing
