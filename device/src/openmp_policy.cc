#include "sinkrt/device/openmp_policy.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace sinkrt::device {

void EnsurePassiveOpenMp(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY")) return;
  setenv("OMP_WAIT_POLICY", "passive", 1);
  execv("/proc/self/exe", argv);
  // Re-exec failed (no /proc): carry on; only the spinning policy is lost.
  std::fprintf(stderr, "sinkrt: could not re-exec with OMP_WAIT_POLICY=passive; set it in the environment\n");
}

}  // namespace sinkrt::device
