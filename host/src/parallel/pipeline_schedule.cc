// The pipeline schedule and its deadlock check (parallel/pipeline_schedule.h).
#include "parallel/pipeline_schedule.h"

#include <algorithm>
#include <map>
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
         std::to_string(m.link) + " (stage " + std::to_string(s.Sender(m)) + " -> " +
         std::to_string(s.Receiver(m)) + ")";
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
  if (stages < 1 || stages > 1024) return InvalidArgument("pipeline: stages " + std::to_string(stages) + " out of range");
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
        for (const auto& [l, back] : Outgoing(s.links, static_cast<int>(k), b)) sent_at[{l, b.micro, back}] = free_at[k];
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
  for (size_t i = 0; i < s.messages.size(); ++i) s.messages[i].order = static_cast<int64_t>(i);
  SINKRT_RETURN_IF_ERROR(CheckPipelineDeadlock(s), "pipeline: " + scheduler + " with " + std::to_string(stages) +
                                                       " stages and micro_size " + std::to_string(micro_size));
  return s;
}

Status CheckPipelineDeadlock(const PipelineSchedule& s) {
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

  // The streams as item lists (see the header).
  enum class Kind : uint8_t { Arm, Ready, WaitDone, Run, Transfer };
  struct Item {
    Kind kind;
    size_t msg = 0;
    PipelineBlock block;
  };
  std::vector<std::vector<Item>> compute(S), comm(S);
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
    for (size_t i = 0; i < s.messages.size(); ++i)
      if (s.Sender(s.messages[i]) == stage || s.Receiver(s.messages[i]) == stage) comm[k].push_back({Kind::Transfer, i, {}});
  }

  std::vector<bool> armed(s.messages.size(), false), ready(s.messages.size(), false), done(s.messages.size(), false);
  std::vector<size_t> pc(S, 0), pm(S, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t k = 0; k < S; ++k) {
      for (; pc[k] < compute[k].size(); ++pc[k], progress = true) {
        const Item& it = compute[k][pc[k]];
        if (it.kind == Kind::Arm) armed[it.msg] = true;
        if (it.kind == Kind::Ready) ready[it.msg] = true;
        if (it.kind == Kind::WaitDone && !done[it.msg]) break;
      }
      while (pm[k] < comm[k].size()) {
        const size_t m = comm[k][pm[k]].msg;
        const size_t snd = static_cast<size_t>(s.Sender(s.messages[m]));
        const size_t rcv = static_cast<size_t>(s.Receiver(s.messages[m]));
        const size_t other = snd == k ? rcv : snd;
        const bool partner_there = pm[other] < comm[other].size() && comm[other][pm[other]].msg == m;
        if (!partner_there || !ready[m] || !armed[m]) break;
        done[m] = true;
        ++pm[snd];
        ++pm[rcv];
        progress = true;
      }
    }
  }
  std::string stuck;
  for (size_t k = 0; k < S; ++k) {
    std::string where;
    if (pc[k] < compute[k].size()) {
      const Item& it = compute[k][pc[k]];
      where += "compute waits for " + MessageName(s, s.messages[it.msg]);
    }
    if (pm[k] < comm[k].size()) {
      where += std::string(where.empty() ? "" : ", ") + "comm is at " + MessageName(s, s.messages[comm[k][pm[k]].msg]);
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
