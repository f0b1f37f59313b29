// One ModelCheckpoint's claim on its file prefix in a directory, so that two
// runs writing into one directory at the same time never share a prefix (and
// so never overwrite or prune each other's files).
//
// The claim is the file `.{prefix}.lock` in the directory, locked with
// flock(LOCK_EX) for the claim's life. The kernel drops an flock when the
// process holding it dies, however it dies, so a claim is never stale: the
// lock file a killed run leaves behind claims nothing, and the next run that
// finds it unlocked may take it (or delete it).
#pragma once

#include <memory>
#include <string>

#include "sinkrt/runtime/status.h"

namespace sinkrt::host {

class PrefixClaim {
 public:
  // Claims `prefix` in `dir` without waiting: the claim, or null when a live
  // claim (of this process or another) holds it. Fails naming the directory
  // when the lock file cannot be created (a read-only directory).
  static Result<std::unique_ptr<PrefixClaim>> TryClaim(const std::string& dir, const std::string& prefix);

  PrefixClaim(const PrefixClaim&) = delete;
  PrefixClaim& operator=(const PrefixClaim&) = delete;
  // Releases: removes the lock file, then unlocks.
  ~PrefixClaim();

  // Gives the prefix up at once and removes its lock file (a claim taken on
  // a prefix that turned out to have files already).
  void Release();

  const std::string& lock_path() const { return path_; }

 private:
  PrefixClaim(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_;
  std::string path_;
};

}  // namespace sinkrt::host
