// The pipeline schedule and its deadlock check (parallel/pipeline/pipeline_schedule.h).
#include "host/src/parallel/pipeline/pipeline_schedule.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

namespace sinkrt::host::parallel {
namespace {

std::string BlockName(const PipelineBlock& b) { return std::string(b.backward ? "B" : "F") + std::to_string(b.micro); }

// The messages block `b` of stage `s` receives before it runs, and sends
// when it is done (as (link, backward) pairs).
std::vector<std::pair<int, bool>> Incoming(const std::vector<PipelineLink>& links, int s, const PipelineBlock& b) {
  std::vector<std::pair<int, bool>> out;
  for (size_t l = 0; l < links.size(); ++l) {
    if (!b.backward && links[l].to == s) out.emplace_back(static_cast<int>(l), false);
    if (b.backward && links[l].from == s && links[l].grad) out.emplace_back(static_cast<int>(l), true);
  }
  return out;
}

std::vector<std::pair<int, bool>> Outgoing(const std::vector<PipelineLink>& links, int s, const PipelineBlock& b) {
  std::vector<std::pair<int, bool>> out;
  for (size_t l = 0; l < links.size(); ++l) {
    if (!b.backward && links[l].from == s) out.emplace_back(static_cast<int>(l), false);
    if (b.backward && links[l].to == s && links[l].grad) out.emplace_back(static_cast<int>(l), true);
  }
  return out;
}

// Message index by (link, micro, backward).
using MessageKey = std::tuple<int, int, bool>;

std::string MessageName(const PipelineSchedule& s, const PipelineMessage& m) {
  return std::string(m.backward ? "gradient" : "activation") + " " + std::to_string(m.micro) + " of link " +
         std::to_string(m.link) + " (stage " + std::to_string(s.Sender(m)) + " -> " + std::to_string(s.Receiver(m)) +
         ")";
}

// The compute streams of the header's model, over the indices of
// s.messages, and how far a replay got: what each message went through.
enum class Kind : uint8_t { Arm, Ready, WaitDone, Run };
struct Item {
  Kind kind;
  size_t msg = 0;
  PipelineBlock block;
};

struct Replay {
  std::vector<std::vector<Item>> compute;
  std::vector<size_t> pc;
  std::vector<bool> armed, ready, done;

  // Runs stage k's compute stream up to its next wait for a message not
  // yet moved; `flagged` gets the messages it armed or marked ready.
  bool Advance(size_t k, std::vector<size_t>* flagged) {
    bool progress = false;
    for (; pc[k] < compute[k].size(); ++pc[k], progress = true) {
      const Item& it = compute[k][pc[k]];
      if (it.kind == Kind::Arm) armed[it.msg] = true;
      if (it.kind == Kind::Ready) ready[it.msg] = true;
      if ((it.kind == Kind::Arm || it.kind == Kind::Ready) && flagged) flagged->push_back(it.msg);
      if (it.kind == Kind::WaitDone && !done[it.msg]) break;
    }
    return progress;
  }
  std::string Waiting(const PipelineSchedule& s, size_t k) const {
    if (pc[k] >= compute[k].size()) return "";
    return "compute waits for " + MessageName(s, s.messages[compute[k][pc[k]].msg]);
  }
};

Result<Replay> StartReplay(const PipelineSchedule& s) {
  const size_t S = static_cast<size_t>(s.stages);
  std::map<MessageKey, size_t> index;
  for (size_t i = 0; i < s.messages.size(); ++i)
    index[{s.messages[i].link, s.messages[i].micro, s.messages[i].backward}] = i;
  auto find = [&](int link, int micro, bool back) -> Result<size_t> {
    auto it = index.find({link, micro, back});
    if (it == index.end())
      return Internal("the schedule has no " + std::string(back ? "gradient" : "activation") + " message " +
                      std::to_string(micro) + " on link " + std::to_string(link));
    return it->second;
  };

  Replay r;
  std::vector<std::vector<Item>>& compute = r.compute;
  compute.resize(S);
  for (size_t k = 0; k < S; ++k) {
    const int stage = static_cast<int>(k);
    const std::vector<PipelineBlock>& blocks = s.blocks[k];
    std::map<std::pair<int, bool>, size_t> last_sent;  // channel -> message
    auto arm = [&](size_t c) -> Status {
      if (c >= blocks.size()) return Status::Ok();
      for (const auto& [l, back] : Incoming(s.links, stage, blocks[c])) {
        SINKRT_ASSIGN_OR_RETURN(size_t m, find(l, blocks[c].micro, back));
        compute[k].push_back({Kind::Arm, m, {}});
      }
      return Status::Ok();
    };
    SINKRT_RETURN_IF_ERROR(arm(0));
    for (size_t c = 0; c < blocks.size(); ++c) {
      SINKRT_RETURN_IF_ERROR(arm(c + 1));
      for (const auto& [l, back] : Incoming(s.links, stage, blocks[c])) {
        SINKRT_ASSIGN_OR_RETURN(size_t m, find(l, blocks[c].micro, back));
        compute[k].push_back({Kind::WaitDone, m, {}});
      }
      compute[k].push_back({Kind::Run, 0, blocks[c]});
      for (const auto& [l, back] : Outgoing(s.links, stage, blocks[c])) {
        SINKRT_ASSIGN_OR_RETURN(size_t m, find(l, blocks[c].micro, back));
        if (auto it = last_sent.find({l, back}); it != last_sent.end())
          compute[k].push_back({Kind::WaitDone, it->second, {}});
        compute[k].push_back({Kind::Ready, m, {}});
        last_sent[{l, back}] = m;
      }
    }
    for (const auto& [channel, m] : last_sent) compute[k].push_back({Kind::WaitDone, m, {}});
  }
  r.pc.assign(S, 0);
  r.armed.assign(s.messages.size(), false);
  r.ready.assign(s.messages.size(), false);
  r.done.assign(s.messages.size(), false);
  return r;
}

}  // namespace

std::vector<PipelineBlock> StageBlockOrder(int stages, int stage, int micro_size, bool gpipe) {
  std::vector<PipelineBlock> out;
  if (gpipe) {
    for (int m = 0; m < micro_size; ++m) out.push_back({false, m});
    for (int m = 0; m < micro_size; ++m) out.push_back({true, m});
    return out;
  }
  const int warmup = std::min(stages - stage - 1, micro_size);
  for (int m = 0; m < warmup; ++m) out.push_back({false, m});
  for (int i = 0; i < micro_size - warmup; ++i) {
    out.push_back({false, warmup + i});
    out.push_back({true, i});
  }
  for (int m = micro_size - warmup; m < micro_size; ++m) out.push_back({true, m});
  return out;
}

const PipelineMessage* PipelineSchedule::Find(int link, int micro, bool backward) const {
  for (const PipelineMessage& m : messages)
    if (m.link == link && m.micro == micro && m.backward == backward) return &m;
  return nullptr;
}

Result<PipelineSchedule> PlanPipelineSchedule(int stages, int micro_size, const std::string& scheduler,
                                              std::vector<PipelineLink> links, std::vector<double> forward_cost,
                                              std::vector<double> backward_cost) {
  if (stages < 1 || stages > 1024)
    return InvalidArgument("pipeline: stages " + std::to_string(stages) + " out of range");
  if (micro_size < 1 || micro_size > 65536)
    return InvalidArgument("pipeline: micro_size " + std::to_string(micro_size) + " out of range");
  if (scheduler != "1f1b" && scheduler != "gpipe")
    return InvalidArgument("pipeline: unknown pipeline_scheduler '" + scheduler + "' (expected 1f1b or gpipe)");
  for (const PipelineLink& l : links)
    if (l.from < 0 || l.to <= l.from || l.to >= stages)
      return InvalidArgument("pipeline: a link from stage " + std::to_string(l.from) + " to stage " +
                             std::to_string(l.to) + " does not go forward between stages 0.." +
                             std::to_string(stages - 1));
  const size_t S = static_cast<size_t>(stages);
  if (forward_cost.size() != S) forward_cost.assign(S, 1.0);
  if (backward_cost.size() != S) backward_cost.assign(S, 2.0);
  for (size_t k = 0; k < S; ++k) {
    if (!(forward_cost[k] > 0)) forward_cost[k] = 1e-9;
    if (!(backward_cost[k] > 0)) backward_cost[k] = 2e-9;
  }

  PipelineSchedule s;
  s.stages = stages;
  s.micro_size = micro_size;
  s.gpipe = scheduler == "gpipe";
  s.links = std::move(links);
  for (int k = 0; k < stages; ++k) s.blocks.push_back(StageBlockOrder(stages, k, micro_size, s.gpipe));

  // The simulated run: a block starts when its stage is free and its
  // messages have arrived; transfers take no time.
  std::map<MessageKey, double> sent_at;
  std::vector<size_t> next(S, 0);
  std::vector<double> free_at(S, 0), busy(S, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t k = 0; k < S; ++k) {
      while (next[k] < s.blocks[k].size()) {
        const PipelineBlock& b = s.blocks[k][next[k]];
        double start = free_at[k];
        bool ready = true;
        for (const auto& [l, back] : Incoming(s.links, static_cast<int>(k), b)) {
          auto it = sent_at.find({l, b.micro, back});
          if (it == sent_at.end()) {
            ready = false;
            break;
          }
          start = std::max(start, it->second);
        }
        if (!ready) break;
        const double cost = b.backward ? backward_cost[k] : forward_cost[k];
        free_at[k] = start + cost;
        busy[k] += cost;
        for (const auto& [l, back] : Outgoing(s.links, static_cast<int>(k), b))
          sent_at[{l, b.micro, back}] = free_at[k];
        ++next[k];
        progress = true;
      }
    }
  }
  for (size_t k = 0; k < S; ++k)
    if (next[k] < s.blocks[k].size())
      return Internal("pipeline: the " + scheduler + " order cannot run: stage " + std::to_string(k) +
                      " waits forever before " + BlockName(s.blocks[k][next[k]]));
  s.makespan = *std::max_element(free_at.begin(), free_at.end());
  for (size_t k = 0; k < S; ++k) s.idle.push_back(s.makespan - busy[k]);

  for (const auto& [key, time] : sent_at) {
    const auto& [l, micro, back] = key;
    s.messages.push_back({.link = l, .micro = micro, .backward = back, .order = 0, .time = time});
  }
  std::sort(s.messages.begin(), s.messages.end(), [&](const PipelineMessage& a, const PipelineMessage& b) {
    return std::make_tuple(a.time, s.Sender(a), a.micro, a.backward, a.link) <
           std::make_tuple(b.time, s.Sender(b), b.micro, b.backward, b.link);
  });
  // The order: by that time, except that a message waits while one of its
  // ends cannot move it yet. Ordered by time alone, a message could stand on
  // a comm stream ahead of one its stage needs first: sent early to a stage
  // that arms its receive late (one block ahead of its reader; a skip link
  // from stage 0 to 2 ties with stage 1's message to 2), or held back on its
  // sender by the previous send on its channel. So the order is that of a
  // replay in which each step moves, of the messages both ends could move
  // now, the first by time. Where the timed order runs as it is, this is it.
  {
    SINKRT_ASSIGN_OR_RETURN(Replay r, StartReplay(s), "pipeline: " + scheduler);
    std::set<size_t> movable;
    std::vector<size_t> flagged, taken;
    auto advance = [&](size_t k) {
      flagged.clear();
      r.Advance(k, &flagged);
      for (size_t m : flagged)
        if (r.armed[m] && r.ready[m] && !r.done[m]) movable.insert(m);
    };
    for (size_t k = 0; k < S; ++k) advance(k);
    while (!movable.empty()) {
      const size_t m = *movable.begin();
      movable.erase(movable.begin());
      r.done[m] = true;
      taken.push_back(m);
      advance(static_cast<size_t>(s.Sender(s.messages[m])));
      advance(static_cast<size_t>(s.Receiver(s.messages[m])));
    }
    if (taken.size() < s.messages.size()) {
      std::string stuck;
      for (size_t k = 0; k < S; ++k)
        if (std::string where = r.Waiting(s, k); !where.empty())
          stuck += (stuck.empty() ? "" : "; ") + std::string("stage ") + std::to_string(k) + " " + where;
      return Internal("pipeline: " + scheduler + " with " + std::to_string(stages) + " stages and micro_size " +
                      std::to_string(micro_size) + ": the schedule deadlocks: " + stuck);
    }
    std::vector<PipelineMessage> ordered;
    for (size_t m : taken) ordered.push_back(s.messages[m]);
    s.messages = std::move(ordered);
  }
  for (size_t i = 0; i < s.messages.size(); ++i) s.messages[i].order = static_cast<int64_t>(i);
  SINKRT_RETURN_IF_ERROR(CheckPipelineDeadlock(s), "pipeline: " + scheduler + " with " + std::to_string(stages) +
                                                       " stages and micro_size " + std::to_string(micro_size));
  return s;
}

Status CheckPipelineDeadlock(const PipelineSchedule& s) {
  const size_t S = static_cast<size_t>(s.stages);
  SINKRT_ASSIGN_OR_RETURN(Replay r, StartReplay(s));
  // Each stage's comm stream: its messages in `order` (as the compiled
  // streams run them, whatever their positions in a hand-made schedule).
  std::vector<std::vector<size_t>> comm(S);
  for (size_t k = 0; k < S; ++k) {
    const int stage = static_cast<int>(k);
    for (size_t i = 0; i < s.messages.size(); ++i)
      if (s.Sender(s.messages[i]) == stage || s.Receiver(s.messages[i]) == stage) comm[k].push_back(i);
    std::stable_sort(comm[k].begin(), comm[k].end(),
                     [&](size_t a, size_t b) { return s.messages[a].order < s.messages[b].order; });
  }

  std::vector<size_t> pm(S, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t k = 0; k < S; ++k) {
      progress = r.Advance(k, nullptr) || progress;
      while (pm[k] < comm[k].size()) {
        const size_t m = comm[k][pm[k]];
        const size_t snd = static_cast<size_t>(s.Sender(s.messages[m]));
        const size_t rcv = static_cast<size_t>(s.Receiver(s.messages[m]));
        const size_t other = snd == k ? rcv : snd;
        const bool partner_there = pm[other] < comm[other].size() && comm[other][pm[other]] == m;
        if (!partner_there || !r.ready[m] || !r.armed[m]) break;
        r.done[m] = true;
        ++pm[snd];
        ++pm[rcv];
        progress = true;
      }
    }
  }
  std::string stuck;
  for (size_t k = 0; k < S; ++k) {
    std::string where = r.Waiting(s, k);
    if (pm[k] < comm[k].size()) {
      where += std::string(where.empty() ? "" : ", ") + "comm is at " + MessageName(s, s.messages[comm[k][pm[k]]]);
    }
    if (!where.empty()) stuck += (stuck.empty() ? "" : "; ") + std::string("stage ") + std::to_string(k) + " " + where;
  }
  if (!stuck.empty()) return Internal("the schedule deadlocks: " + stuck);
  return Status::Ok();
}

double PredictedBubble(const PipelineSchedule& s) {
  if (s.idle.empty() || !(s.makespan > 0)) return 0;
  double sum = 0;
  for (double i : s.idle) sum += i / s.makespan;
  return sum / static_cast<double>(s.idle.size());
}

}  // namespace sinkrt::host::parallel
