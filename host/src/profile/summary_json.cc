#include "host/src/profile/summary_json.h"

namespace sinkrt::host {

nlohmann::json SummaryJson(const ProfileSummary& s) {
  using nlohmann::json;
  json out = {{"network", s.network},
              {"world_size", s.world_size},
              {"steps", s.steps},
              {"host_step_ms", s.host_step_ms},
              {"dropped_steps", s.dropped_steps}};
  json& ranks = out["ranks"] = json::array();
  for (const RankStepSplit& r : s.ranks)
    ranks.push_back({{"rank", r.rank},
                     {"steps", r.steps},
                     {"step_ms", r.step_ms},
                     {"compute_ms", r.compute_ms},
                     {"exposed_comm_ms", r.exposed_comm_ms},
                     {"bubble_ms", r.bubble_ms},
                     {"queue_ms", r.queue_ms},
                     {"other_ms", r.other_ms},
                     {"comm_ms", r.comm_ms},
                     {"overlap_pct", r.overlap_pct}});
  json& ops = out["top_ops"] = json::array();
  for (const OpTotal& o : s.top_ops)
    ops.push_back({{"op", o.op}, {"count", o.count}, {"total_ms", o.total_ms}, {"share_pct", o.share_pct}});
  json& buckets = out["buckets"] = json::array();
  for (const BucketBandwidth& b : s.buckets)
    buckets.push_back({{"rank", b.rank},
                       {"task", b.task},
                       {"bytes", b.bytes},
                       {"group_size", b.group_size},
                       {"count", b.count},
                       {"mean_ms", b.mean_ms},
                       {"algbw_gbps", b.algbw_gbps},
                       {"busbw_gbps", b.busbw_gbps},
                       {"peer_wait_ms", b.peer_wait_ms}});
  json& slowest = out["slowest"] = json::array();
  for (const SlowestRank& r : s.slowest)
    slowest.push_back({{"rank", r.rank}, {"steps_slowest", r.steps_slowest}, {"mean_gap_ms", r.mean_gap_ms}});
  json& memory = out["memory"] = json::array();
  for (const MemoryPlan& m : s.memory) {
    json roles = json::array();  // the enum's order, which an object would lose
    for (const auto& [role, bytes] : m.by_role) roles.push_back({{"role", role}, {"bytes", bytes}});
    memory.push_back(
        {{"rank", m.rank}, {"arena_bytes", m.arena_bytes}, {"queue_bytes", m.queue_bytes}, {"by_role", roles}});
  }
  json& clocks = out["clocks"] = json::array();
  for (const ClockAlignment& c : s.clocks)
    clocks.push_back({{"rank", c.rank},
                      {"offset_us", c.offset_us},
                      {"uncertainty_us", c.uncertainty_us},
                      {"drift_ppm", c.drift_ppm}});
  return out;
}

std::string SummaryJsonText(const ProfileSummary& summary) { return SummaryJson(summary).dump(2) + "\n"; }

}  // namespace sinkrt::host
