#include "runtime/src/file_io.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>

namespace sinkrt {
namespace {

// Appended, not "'" + path: GCC 12 -O3 warns falsely there (-Wrestrict).
std::string Quoted(const std::string& path) { return std::string(1, '\'').append(path).append(1, '\''); }

std::string Errno(int err) { return std::strerror(err); }

// What a stat mode names, for "X is a character device, not a regular file".
const char* TypeName(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  return "something else";
}

Status NotRegular(const std::string& path, mode_t mode) {
  return InvalidArgument(Quoted(path) + " is " + TypeName(mode) + ", not a regular file");
}

// Closes on every path out.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  // Closes now, so that the error of a close (NFS, quota) is seen.
  int Close() {
    const int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }

 private:
  int fd_;
};

// All of `bytes` to `fd`; 0 or the errno of the failed write.
int WriteAll(int fd, std::span<const uint8_t> bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return EIO;
    done += static_cast<size_t>(n);
  }
  return 0;
}

// A device or FIFO cannot be renamed over: write into it.
Status WriteInPlace(const std::string& path, std::span<const uint8_t> bytes) {
  Fd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (fd.get() < 0) return Unavailable("cannot open " + Quoted(path) + " for writing: " + Errno(errno));
  if (const int err = WriteAll(fd.get(), bytes))
    return Unavailable("error writing " + Quoted(path) + ": " + Errno(err));
  if (fd.Close() != 0) return Unavailable("error writing " + Quoted(path) + ": " + Errno(errno));
  return Status::Ok();
}

std::string DirOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string BaseOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool ProcessIsGone(long pid) {
  if (pid <= 0 || pid != static_cast<pid_t>(pid)) return false;  // not ours to judge
  return ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

// The PID of `.NAME.tmp.PID` when NAME ends in `suffix`; -1 for any other name.
long TemporaryWriter(const std::string& name, const std::string& suffix) {
  const size_t tmp = name.rfind(".tmp.");
  if (name.size() < 2 || name[0] != '.' || tmp == std::string::npos || tmp < 1) return -1;
  const std::string target = name.substr(1, tmp - 1);
  if (target.empty() || !target.ends_with(suffix)) return -1;
  long pid = -1;
  const char* first = name.data() + tmp + 5;
  const char* last = name.data() + name.size();
  auto [end, ec] = std::from_chars(first, last, pid);
  return ec == std::errc() && end == last && first != last ? pid : -1;
}

}  // namespace

Status CheckRegularFile(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT) return NotFound(Quoted(path) + ": no such file");
    return NotFound("cannot open " + Quoted(path) + ": " + Errno(err));
  }
  if (!S_ISREG(st.st_mode)) return NotRegular(path, st.st_mode);
  return Status::Ok();
}

Result<std::vector<uint8_t>> ReadFileBytes(const std::string& path, FileLimit limit) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer before fstat
  // can refuse it.
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (fd.get() < 0) return NotFound("cannot open " + Quoted(path) + ": " + Errno(errno));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return Unavailable("cannot stat " + Quoted(path) + ": " + Errno(errno));
  if (!S_ISREG(st.st_mode)) return NotRegular(path, st.st_mode);
  const auto too_large = [&](uint64_t bytes, const char* at_least) {
    return InvalidArgument(Quoted(path) + " holds " + at_least + std::to_string(bytes) + " bytes, more than " +
                           limit.what + " may (" + std::to_string(limit.max_bytes) + ")");
  };
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > limit.max_bytes) return too_large(size, "");
  // One byte past the size: a file that grows while it is read is noticed.
  std::vector<uint8_t> bytes(static_cast<size_t>(size) + 1);
  size_t got = 0;
  for (;;) {
    if (got == bytes.size()) {
      if (got > limit.max_bytes) return too_large(got, "at least ");
      bytes.resize(static_cast<size_t>(std::min<uint64_t>(limit.max_bytes + 1, got + std::max<size_t>(4096, got / 2))));
    }
    const ssize_t n = ::read(fd.get(), bytes.data() + got, bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Unavailable("error reading " + Quoted(path) + ": " + Errno(errno));
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  if (got > limit.max_bytes) return too_large(got, "at least ");
  bytes.resize(got);
  return bytes;
}

Status WriteFileBytes(const std::string& path, std::span<const uint8_t> bytes) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return InvalidArgument(Quoted(path) + " is a directory");
    if (!S_ISREG(st.st_mode)) return WriteInPlace(path, bytes);
  }
  const std::string tmp = DirOf(path) + "/." + BaseOf(path) + ".tmp." + std::to_string(::getpid());
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) return Unavailable("cannot create " + Quoted(tmp) + ": " + Errno(errno));
  // Held until the rename: RemoveStaleTemporaries never takes a file whose
  // writer is alive, even one whose PID it cannot see.
  (void)::flock(fd.get(), LOCK_EX | LOCK_NB);
  int err = WriteAll(fd.get(), bytes);
  if (err == 0 && ::fsync(fd.get()) != 0 && errno != EINVAL && errno != EROFS) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    return Unavailable("error writing " + Quoted(tmp) + ": " + Errno(err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    err = errno;
    ::unlink(tmp.c_str());
    return Unavailable("cannot rename " + Quoted(tmp) + " to " + Quoted(path) + ": " + Errno(err));
  }
  if (fd.Close() != 0) return Unavailable("error writing " + Quoted(path) + ": " + Errno(errno));
  return Status::Ok();
}

Status CheckDirectoryWritable(const std::string& dir) {
  // The directory, or the nearest ancestor that exists.
  std::string at = dir.empty() ? "." : dir;
  struct stat st;
  while (::stat(at.c_str(), &st) != 0) {
    // ENOTDIR: a file stands where a parent would be; found below.
    if (errno != ENOENT && errno != ENOTDIR)
      return Unavailable("cannot use the directory " + Quoted(dir) + ": " + Errno(errno));
    std::string parent = at;
    while (parent.size() > 1 && parent.back() == '/') parent.pop_back();
    parent = DirOf(parent);
    if (parent == at) return NotFound("cannot use the directory " + Quoted(dir) + ": nothing above it exists");
    at = parent;
  }
  if (!S_ISDIR(st.st_mode)) {
    const std::string type = S_ISREG(st.st_mode) ? "a regular file" : TypeName(st.st_mode);
    if (at == dir) return InvalidArgument(Quoted(dir) + " is " + type + ", not a directory");
    return InvalidArgument("cannot create the directory " + Quoted(dir) + ": " + Quoted(at) + " is " + type);
  }
  const std::string probe = at + "/.sinkrt-probe." + std::to_string(::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 && errno != EEXIST) {
    const std::string why = Errno(errno);
    if (at == dir) return PermissionDenied("cannot write in the directory " + Quoted(dir) + ": " + why);
    return PermissionDenied("cannot create the directory " + Quoted(dir) + ": cannot write in " + Quoted(at) + ": " +
                            why);
  }
  if (fd >= 0) {
    ::close(fd);
    ::unlink(probe.c_str());
  }
  return Status::Ok();
}

std::vector<std::string> RemoveStaleTemporaries(const std::string& dir, const std::string& suffix) {
  std::vector<std::string> removed;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return removed;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (!ProcessIsGone(TemporaryWriter(name, suffix))) continue;
    const std::string path = dir + "/" + name;
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
    if (fd.get() < 0) continue;
    struct stat st;
    if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    // A writer in another PID namespace or on another host holds the lock.
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) continue;
    if (::unlink(path.c_str()) == 0) removed.push_back(name);
  }
  ::closedir(d);
  return removed;
}

}  // namespace sinkrt
