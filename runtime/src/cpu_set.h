/// \file
/// Core lists, as taskset and /proc/PID/status write them ("0-3,6"), and
/// binding a process to one: what `sinkd --cpus` and LocalCluster's
/// bind_cores use so that daemons sharing a machine each keep cores of their
/// own (mpirun's --bind-to core; Horovod and MindSpore's launchers bind the
/// same way).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "sinkrt/runtime/status.h"

namespace sinkrt {

/// "0-3,6" -> {0, 1, 2, 3, 6}: sorted, no duplicates; an empty, malformed or
/// negative entry is an error that names it.
Result<std::vector<int>> ParseCpuList(std::string_view list);
/// The reverse, with ranges folded: {0, 1, 2, 3, 6} -> "0-3,6".
std::string FormatCpuList(const std::vector<int>& cpus);

/// The cores this process may run on (sched_getaffinity), ascending.
std::vector<int> AllowedCpus();

/// Binds the whole process (the calling thread and every thread it starts
/// afterwards) to `cpus`; an error names the cores this process may not use.
Status BindProcessTo(const std::vector<int>& cpus);

/// Shares `cpus` out among `parts` processes: contiguous runs of
/// cpus.size() / parts cores each (the first cpus.size() % parts get one
/// more), or, with more parts than cores, core k % cpus.size() for part k.
std::vector<std::vector<int>> ShareCpus(const std::vector<int>& cpus, int parts);

}  // namespace sinkrt
