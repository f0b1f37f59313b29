// LocalHostId: two daemons may share memory only on the same running
// kernel. The boot id changes at every boot (a reused hostname after a
// reinstall, or two containers with one name on different machines, never
// match); the hostname tells containers with separate /dev/shm apart on one
// machine in the usual setups.
#include <unistd.h>

#include <fstream>

#include "sinkrt/device/communicator.h"

namespace sinkrt::device {

std::string LocalHostId() {
  std::string boot_id;
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  if (f) std::getline(f, boot_id);
  while (!boot_id.empty() && (boot_id.back() == '\n' || boot_id.back() == ' ')) boot_id.pop_back();
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  return boot_id + "/" + host;
}

}  // namespace sinkrt::device
