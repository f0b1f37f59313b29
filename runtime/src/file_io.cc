#include "sinkrt/runtime/file_io.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace sinkrt {

Result<std::vector<uint8_t>> ReadFileBytes(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return NotFound("cannot open '" + path + "': " + std::strerror(errno));
  std::vector<uint8_t> bytes;
  uint8_t chunk[1 << 16];
  size_t n;
  while ((n = std::fread(chunk, 1, sizeof chunk, f)) > 0) bytes.insert(bytes.end(), chunk, chunk + n);
  bool failed = std::ferror(f);
  std::fclose(f);
  if (failed) return Unavailable("error reading '" + path + "'");
  return bytes;
}

Status WriteFileBytes(const std::string& path, std::span<const uint8_t> bytes) {
  std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return NotFound("cannot create '" + tmp + "': " + std::strerror(errno));
  bool ok = bytes.empty() || std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    return Unavailable("error writing '" + path + "'");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    return Unavailable("cannot rename '" + tmp + "' to '" + path + "': " + std::strerror(errno));
  return Status::Ok();
}

}  // namespace sinkrt
