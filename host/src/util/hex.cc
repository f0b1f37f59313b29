#include "host/src/util/hex.h"

#include <cinttypes>
#include <cstdio>

namespace sinkrt::host {

std::string Hex64(uint64_t v) {
  char buf[19];
  std::snprintf(buf, sizeof buf, "0x%016" PRIx64, v);
  return buf;
}

}  // namespace sinkrt::host
