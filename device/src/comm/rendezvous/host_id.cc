// LocalHostId: two daemons may share memory only on the same running
// kernel and in the same network namespace. The boot id changes at every
// boot (a reused hostname after a reinstall, or two containers with one
// name on different machines, never match); the hostname tells containers
// with separate /dev/shm apart on one machine in the usual setups. The
// network namespace settles the rest: containers (and the test bed's
// scripts/netns_testbed.sh hosts) on one machine each have their own, and
// usually their own /dev/shm too, so they must talk TCP; daemons inside one
// namespace still share memory. Its identity is the namespace's inode,
// as readlink(/proc/self/ns/net) gives it ("net:[4026531840]").
#include <unistd.h>

#include <climits>
#include <fstream>

#include "device/src/comm/communicator.h"

namespace sinkrt::device {

std::string LocalHostId() {
  std::string boot_id;
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  if (f) std::getline(f, boot_id);
  while (!boot_id.empty() && (boot_id.back() == '\n' || boot_id.back() == ' ')) boot_id.pop_back();
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  char net[PATH_MAX] = {};
  const ssize_t len = ::readlink("/proc/self/ns/net", net, sizeof net - 1);
  net[len > 0 ? len : 0] = '\0';
  return boot_id + "/" + host + "/" + net;
}

}  // namespace sinkrt::device
