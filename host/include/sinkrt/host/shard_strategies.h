/// \file
/// Shard strategies given from outside C++ (sinkc's and sinkrun's
/// --strategy and --strategy-save): presets by name and strategy files, for
/// graphs compiled under SEMI_AUTO_PARALLEL (docs/design/sharding.md §10,
/// docs/reference/file_formats.md "Strategy files").
///
/// ~~~
///   if (auto s = ApplyShardStrategy("2x2", graph, 4); !s.ok()) ...   // graph has its loss
///   SaveShardStrategies("strategy.json", graph, 4, /*full_batch=*/false);
/// ~~~
#pragma once

#include <cstdint>
#include <string>

#include "sinkrt/host/graph.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host {

/// How --strategy's value reads: a preset's spelling (data, model, or
/// DPxMP such as 2x2, right or wrong), else a strategy file's path.
bool IsStrategyPresetName(const std::string& strategy);

/// A preset's data-parallel degree on device_num ranks (data: device_num,
/// model: 1, DPxMP: DP), or why it is no preset for them: an unknown name,
/// DP x MP other than device_num. What needs no graph.
Result<int64_t> PresetDataParallel(const std::string& preset, int64_t device_num);

/// How many ways `strategy` splits the batch on device_num ranks: the
/// data-parallel degree, which --batch (one replica's batch) is multiplied
/// by to give the graph's batch. A preset's (above); for a strategy file,
/// the split of the labels in its entry for the loss op of `graph` (which
/// must have its loss); empty `strategy`: the one the loss op of `graph`
/// has. A loss without a strategy gets MindSpore's default, device_num. A
/// bad preset or an unreadable file is an error naming it.
Result<int64_t> StrategyDataParallel(const std::string& strategy, const Graph& graph, int64_t device_num);

/// Sets the strategies of `graph` (with its loss) from `strategy`: a preset
/// (every op, host/src/parallel/strategy_presets.h), or a strategy file
/// written for device_num ranks (the ops it lists). On error `graph` is
/// unchanged.
Status ApplyShardStrategy(const std::string& strategy, Graph& graph, int64_t device_num);

/// MindSpore's strategy_ckpt_save_file: the strategy of every op of `graph`
/// that has one and the layout the partitioner gives every parameter on
/// device_num ranks (so also checks that the strategies partition).
Status SaveShardStrategies(const std::string& path, const Graph& graph, int64_t device_num, bool full_batch);

}  // namespace sinkrt::host
