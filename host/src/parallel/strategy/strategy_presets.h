// Strategy presets: whole-network shard strategies by name (sinkc and
// sinkrun's --strategy data|model|DPxMP), set on every op with Graph::Shard
// (docs/design/sharding.md §10).
//
// - data: every op splits its batch dim over all ranks. For the zoo MLP this
//   is exactly MindSpore's default (DefaultStrategy: dim 0 of the first
//   activation input); for the ViT the default differs at the qkv Split,
//   whose dim 0 is q/k/v (it would run replicated and gather the batch):
//   the preset follows the batch to dim 1 there.
// - model: Megatron's layout over all ranks. The first linear of each pair
//   is split by columns, the second by rows (its output partial: one
//   AllReduce); what lies between follows the split (biases, activations,
//   attention by heads). Everything else (patch embedding, LayerNorms, the
//   head, the loss) is replicated.
// - DPxMP: the batch split DP ways across DP groups of the model layout on
//   MP ranks each; rank r is replica r / MP, model slice r % MP.
//
// The batch dim and the model-split dim are followed from the dataset
// inputs and the column layers through every op's loops (op_loops.h) and
// through Reshapes as the partitioner carries splits, so each op gets the
// strategy that keeps them where they are: no redistribution inside a
// pair. Layers are found by their parameters' names (fc1.weight,
// block0.attn.qkv.weight), not by op position.
#pragma once

#include <cstdint>
#include <string>

#include "sinkrt/host/graph.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host::parallel {

struct StrategyPreset {
  std::string name;            // as given: "data", "model", "2x2"
  int64_t data_parallel = 1;   // ways the batch is split
  int64_t model_parallel = 1;  // ways each Megatron pair is split
};

// Whether `name` is a preset's spelling (data, model, or digits x digits),
// right or wrong; anything else is a strategy file's path.
bool IsStrategyPresetName(const std::string& name);

// data (N x 1), model (1 x N) or DPxMP with DP * MP == device_num.
Result<StrategyPreset> ParseStrategyPreset(const std::string& name, int64_t device_num);

// Sets every op's strategy (ops without a sharding rule, Reshape and
// Flatten, get none: they carry their input's layout). `g` must have its
// loss: its strategy decides each rank's slice of the batch. With
// model_parallel > 1 the network must be one the preset knows (the zoo MLP,
// "mlp", and ViT, "vit"). Refused, naming the op, the dim and the split,
// when a split does not divide a dim (the batch, 4 heads on 8 ranks). On
// error `g` is unchanged.
Status ApplyStrategyPreset(Graph& g, const StrategyPreset& preset);

}  // namespace sinkrt::host::parallel
