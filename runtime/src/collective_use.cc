#include "sinkrt/runtime/collective_use.h"

#include <algorithm>

#include "runtime/src/collective_kinds.h"
#include "sinkrt/fb/task_stream_generated.h"
#include "sinkrt/runtime/task_stream_verifier.h"

namespace sinkrt {
namespace {

// The group index a collective task names (the verifier has checked it).
uint32_t GroupOf(const fb::Task& task) {
  switch (task.body_type()) {
    case fb::TaskBody::AllReduceTask:
      return task.body_as_AllReduceTask()->group();
    case fb::TaskBody::AllGatherTask:
      return task.body_as_AllGatherTask()->group();
    case fb::TaskBody::ReduceScatterTask:
      return task.body_as_ReduceScatterTask()->group();
    case fb::TaskBody::BroadcastTask:
      return task.body_as_BroadcastTask()->group();
    case fb::TaskBody::AllToAllTask:
      return task.body_as_AllToAllTask()->group();
    default:
      return 0;
  }
}

void Add(std::vector<GroupUse>& out, std::vector<uint32_t> ranks, uint32_t use) {
  for (GroupUse& g : out)
    if (g.ranks == ranks) {
      g.uses |= use;
      return;
    }
  out.push_back(GroupUse{std::move(ranks), use});
}

}  // namespace

uint32_t CollectiveUseOf(fb::TaskBody kind) {
  switch (kind) {
    case fb::TaskBody::AllReduceTask:
      return kUsesAllReduce;
    case fb::TaskBody::AllGatherTask:
      return kUsesAllGather;
    case fb::TaskBody::ReduceScatterTask:
      return kUsesReduceScatter;
    case fb::TaskBody::BroadcastTask:
      return kUsesBroadcast;
    case fb::TaskBody::AllToAllTask:
      return kUsesAllToAll;
    case fb::TaskBody::SendTask:
    case fb::TaskBody::RecvTask:
      return kUsesSendRecv;
    default:
      return 0;
  }
}

std::vector<GroupUse> CollectiveUses(const VerifiedStream& stream, uint32_t rank) {
  std::vector<GroupUse> out;
  const fb::TaskStream* root = stream.root();
  if (!root->programs()) return out;
  for (const fb::Program* program : *root->programs()) {
    if (!program->streams()) continue;
    for (const fb::Stream* s : *program->streams()) {
      if (!s->tasks()) continue;
      for (const fb::Task* task : *s->tasks()) {
        const uint32_t use = CollectiveUseOf(task->body_type());
        if (use == 0) continue;
        if (use == kUsesSendRecv) {
          const uint32_t peer = task->body_type() == fb::TaskBody::SendTask ? task->body_as_SendTask()->peer()
                                                                            : task->body_as_RecvTask()->peer();
          Add(out, {std::min(rank, peer), std::max(rank, peer)}, use);
          continue;
        }
        const fb::CommGroup* g = root->groups()->Get(GroupOf(*task));
        Add(out, std::vector<uint32_t>(g->ranks()->begin(), g->ranks()->end()), use);
      }
    }
  }
  return out;
}

}  // namespace sinkrt
