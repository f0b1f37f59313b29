#include "host/src/model/callbacks/prefix_claim.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace sinkrt::host {

Result<std::unique_ptr<PrefixClaim>> PrefixClaim::TryClaim(const std::string& dir, const std::string& prefix) {
  const std::string path = dir + "/." + prefix + ".lock";
  // A holder releases by unlinking the file before unlocking it, so a lock
  // taken on a file that is no longer at `path` claims nothing: try again
  // (bounded: each retry means another run released the prefix meanwhile).
  for (int attempt = 0; attempt < 16; ++attempt) {
    // Read-only: another user's lock file can be locked all the same.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) return PermissionDenied("cannot create or open '" + path + "': " + std::strerror(errno));
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      ::close(fd);
      if (err == EWOULDBLOCK) return std::unique_ptr<PrefixClaim>();
      return Unavailable("cannot lock '" + path + "': " + std::strerror(err));
    }
    struct stat held, now;
    if (::fstat(fd, &held) == 0 && ::stat(path.c_str(), &now) == 0 && held.st_dev == now.st_dev &&
        held.st_ino == now.st_ino)
      return std::unique_ptr<PrefixClaim>(new PrefixClaim(fd, path));
    ::close(fd);
  }
  return Unavailable("cannot claim '" + path + "': it keeps being replaced");
}

void PrefixClaim::Release() {
  if (fd_ < 0) return;
  ::unlink(path_.c_str());
  ::close(fd_);
  fd_ = -1;
}

PrefixClaim::~PrefixClaim() { Release(); }

}  // namespace sinkrt::host
