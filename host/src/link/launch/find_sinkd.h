// FindSinkd's search (local_cluster.h) with its inputs given, so a test can
// put the executable and PATH where it wants them.
#pragma once

#include <filesystem>
#include <string>

#include "sinkrt/runtime/status.h"

namespace sinkrt::host {

// `exe`: this executable's path (empty: unknown); `path_env`: $PATH's value
// (null: unset). Looks beside exe, then in exe/../device, then along PATH.
Result<std::string> FindSinkdFrom(const std::filesystem::path& exe, const char* path_env);

}  // namespace sinkrt::host
