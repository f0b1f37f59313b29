// Hashes as people read them in messages, manifests and strategy files.
#pragma once

#include <cstdint>
#include <string>

namespace sinkrt::host {

// "0x" + 16 lower-case hex digits.
std::string Hex64(uint64_t v);

}  // namespace sinkrt::host
