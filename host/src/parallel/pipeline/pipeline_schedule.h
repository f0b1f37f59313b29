// The pipeline schedule (docs/design/pipeline.md): in which order each stage runs
// the forward (F) and backward (B) of each micro-batch, and in which order
// each stage's comm stream moves the activations and gradients that cross
// stages. It is pure data, the same on every rank, and it is checked for
// deadlock here, before any stream is written.
//
// A stage's compute stream, for blocks c = 0, 1, ... of its order:
//   arm the receives of block c + 1 (block 0's at the very start)
//   wait for block c's receives, run block c
//   for each message block c sends: wait until the previous micro-batch's
//     message on the same link is sent, then mark this one ready
// and at the end it waits for every send. A stage's comm stream runs every
// message it sends or receives, in `order`: a global order of all
// messages, taken from a simulated run of the schedule (the message's
// time, ties broken by stage and micro-batch; a message one of whose ends
// cannot move it yet lets the next go first), so that both ends of a link
// see its messages in the same order and no two stages can wait on each
// other in a cycle. PlanPipelineSchedule then replays the whole world with
// blocking (rendezvous) transfers and refuses a schedule that would hang.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sinkrt/runtime/status.h"

namespace sinkrt::host::parallel {

struct PipelineBlock {
  bool backward = false;
  int micro = 0;
};

// 1F1B (MindSpore's and Megatron's default): stage k of S runs
// min(S - k - 1, M) warm-up forwards, then alternates one forward and one
// backward, then the remaining backwards; at most S - k micro-batches are
// in flight. GPipe: every forward, then every backward (M in flight).
std::vector<PipelineBlock> StageBlockOrder(int stages, int stage, int micro_size, bool gpipe);

// A tensor that stage `from` sends to stage `to` (> from) every
// micro-batch; with `grad` its gradient comes back from `to` in the
// backward of the same micro-batch.
struct PipelineLink {
  int from = 0, to = 0;
  bool grad = true;
};

struct PipelineMessage {
  int link = 0;
  int micro = 0;
  bool backward = false;  // the gradient, from link.to to link.from
  int64_t order = 0;      // position in the global message order
  double time = 0;        // when the simulated run sends it
};

struct PipelineSchedule {
  int stages = 1;
  int micro_size = 1;
  bool gpipe = false;
  std::vector<PipelineLink> links;
  std::vector<std::vector<PipelineBlock>> blocks;  // per stage, in run order
  std::vector<PipelineMessage> messages;           // sorted by order
  // The simulated run (unit per forward/backward from `forward_cost` and
  // `backward_cost`, transfers free): its length, and per stage the time it
  // spends waiting for a neighbour.
  double makespan = 0;
  std::vector<double> idle;

  int Sender(const PipelineMessage& m) const { return m.backward ? links[m.link].to : links[m.link].from; }
  int Receiver(const PipelineMessage& m) const { return m.backward ? links[m.link].from : links[m.link].to; }
  // The message of `link` for micro-batch `micro` in the direction given, or nullptr.
  const PipelineMessage* Find(int link, int micro, bool backward) const;
};

// The schedule for `links` between `stages` stages, M = micro_size
// micro-batches, 1F1B or GPipe. forward_cost / backward_cost: per stage,
// the estimated time of one micro-batch's forward and backward (their
// ratios matter; empty: 1 and 2). Errors: stages or micro_size out of
// range, a link that does not go forward, or (an internal error) a
// schedule whose replay deadlocks, naming what each stage waits for.
Result<PipelineSchedule> PlanPipelineSchedule(int stages, int micro_size, const std::string& scheduler,
                                              std::vector<PipelineLink> links, std::vector<double> forward_cost = {},
                                              std::vector<double> backward_cost = {});

// Replays `s` with blocking transfers (a send and its receive complete
// together, once both comm streams reach them and the receive is armed and
// the send ready). Ok when every stream finishes; else an error naming the
// task each stage's streams are stuck at. PlanPipelineSchedule calls it;
// tests call it on hand-made orders.
Status CheckPipelineDeadlock(const PipelineSchedule& s);

// The fraction of the simulated run a stage spends idle, averaged over the
// stages: (S - 1) / (M + S - 1) for equal stages with backward = 2 forward.
double PredictedBubble(const PipelineSchedule& s);

}  // namespace sinkrt::host::parallel
