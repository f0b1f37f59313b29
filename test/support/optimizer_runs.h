// What the optimizer composition tests share (AdamWeightDecay and Lamb in
// parallel/optimizer_composition_test.cc, gradient clipping in
// parallel/grad_clip_test.cc): an MLP or the zoo ViT trained through Model
// on in-process devices in one of the modes (one device, data parallel,
// the parallel optimizer, gradient accumulation, loss scaling, sinks,
// SEMI_AUTO presets), and the comparison of two runs' losses.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sinkrt/host/loss_scale.h"
#include "sinkrt/host/optimizer.h"
#include "support/compare.h"
#include "support/test_models.h"

namespace sinkrt::testing {

// The MLP's widths: 64 features, two hidden layers, 10 classes.
inline const std::vector<int64_t> kCompositionWidths = {64, 48, 48, 10};

struct RunSetup {
  host::OptimizerSpec optimizer;
  int devices = 1;     // > 1: data parallel with gradients_mean
  int64_t batch = 32;  // per rank and micro-step
  int accumulate = 1;
  bool zero = false;  // the parallel optimizer, every parameter sharded (threshold 0)
  bool sink = false;
  int sink_size = 1;
  int epochs = 1;
  int64_t samples = 32 * 100;
  host::LossScaleManager loss_scale = host::LossScaleManager::None();
  // The samples, unshuffled (kCompositionWidths[0] features); nullptr:
  // `samples` synthetic ones, a quarter of their labels random, shuffled.
  const SyntheticData* data = nullptr;
};

struct TrainedRun {
  std::vector<double> losses;
  NamedTensors state;
};

// The MLP under `s`; one loss per step (per sink when sunk), then the
// whole state.
TrainedRun TrainCompositionMlp(const RunSetup& s);

// The zoo ViT (batch 8) under a SEMI_AUTO preset on `n` ranks (empty: one
// device), optionally with the parallel optimizer; one loss per step.
std::vector<double> TrainCompositionVit(const host::OptimizerSpec& opt, const std::string& preset, int n, bool zero,
                                        int steps);

// The worst relative loss difference, printed and recorded as a property
// named `what`; expects it <= rel, as many losses, and the loss to fall.
double ExpectLossesTrack(const TrainedRun& got, const TrainedRun& want, double rel, const std::string& what);

// 4 micro-batches of 8 against one batch of 32 under `opt`: losses and
// state within 1e-5 relative (`what` names the case).
void ExpectAccumulationTracksTheLargerBatch(const host::OptimizerSpec& opt, const std::string& what);

// 40 steps as 8 sinks of 5 and as 40 sinks of 1 under `opt`: the same bits.
void ExpectOneSinkOfNIsNSinksOfOne(const host::OptimizerSpec& opt);

}  // namespace sinkrt::testing
