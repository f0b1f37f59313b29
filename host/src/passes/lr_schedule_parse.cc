// `sinkrun train --lr-schedule` text (docs/guide/lr_schedules.md, "On the
// command line"): KIND[:KEY=VALUE,...], the rate of --lr as the schedule's
// learning rate (the cosines' max_lr) and the run's optimizer steps as the
// default decay span.
#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "sinkrt/host/lr_schedule.h"

namespace sinkrt::host {
namespace {

struct Args {
  std::string kind;
  std::map<std::string, std::string> values;
};

Result<Args> Split(const std::string& text) {
  Args a;
  const size_t colon = text.find(':');
  a.kind = text.substr(0, colon);
  if (colon == std::string::npos) return a;
  const std::string rest = text.substr(colon + 1);
  size_t start = 0;
  while (start <= rest.size()) {
    const size_t comma = rest.find(',', start);
    const std::string item = rest.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0)
      return InvalidArgument("'" + item + "' is not KEY=VALUE (schedule '" + text + "')");
    const std::string key = item.substr(0, eq);
    if (!a.values.emplace(key, item.substr(eq + 1)).second) {
      std::string message = "'";  // built up: GCC 12 warns (-Wrestrict) on "'" + a temporary
      message += key;
      message += "' is given twice";
      return InvalidArgument(message);
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return a;
}

class Reader {
 public:
  explicit Reader(Args a) : a_(std::move(a)) {}

  Status CheckKeys(const std::set<std::string>& allowed) const {
    for (const auto& [key, value] : a_.values)
      if (!allowed.count(key)) {
        std::string list;
        for (const std::string& k : allowed) list += (list.empty() ? "" : ", ") + k;
        return InvalidArgument("'" + a_.kind + "' has no key '" + key + "'" +
                               (list.empty() ? std::string(" (it takes none)") : " (its keys: " + list + ")"));
      }
    return Status::Ok();
  }
  bool Has(const std::string& key) const { return a_.values.count(key) > 0; }

  Result<double> Number(const std::string& key, std::optional<double> fallback = std::nullopt) const {
    auto it = a_.values.find(key);
    if (it == a_.values.end()) {
      if (fallback) return *fallback;
      return InvalidArgument("'" + a_.kind + "' needs " + key + "=VALUE");
    }
    char* end = nullptr;
    const double v = std::strtod(it->second.c_str(), &end);
    if (it->second.empty() || *end != '\0' || !std::isfinite(v))
      return InvalidArgument(key + "=" + it->second + " is not a finite number");
    return v;
  }

  Result<int64_t> Steps(const std::string& key, std::optional<int64_t> fallback = std::nullopt) const {
    auto it = a_.values.find(key);
    if (it == a_.values.end()) {
      if (fallback) return *fallback;
      return InvalidArgument("'" + a_.kind + "' needs " + key + "=STEPS");
    }
    char* end = nullptr;
    const long long v = std::strtoll(it->second.c_str(), &end, 10);
    if (it->second.empty() || *end != '\0') return InvalidArgument(key + "=" + it->second + " is not a whole number");
    return static_cast<int64_t>(v);
  }

  Result<bool> Flag(const std::string& key) const {
    auto it = a_.values.find(key);
    if (it == a_.values.end()) return false;
    if (it->second == "1" || it->second == "true") return true;
    if (it->second == "0" || it->second == "false") return false;
    return InvalidArgument(key + "=" + it->second + " is not 0, 1, true or false");
  }

  // "100/200/300": a list split on '/', each parsed by `parse`.
  template <typename T, typename F>
  Result<std::vector<T>> List(const std::string& key, F parse) const {
    auto it = a_.values.find(key);
    if (it == a_.values.end()) return InvalidArgument("'" + a_.kind + "' needs " + key + "=A/B/...");
    std::vector<T> out;
    size_t start = 0;
    const std::string& s = it->second;
    while (true) {
      const size_t slash = s.find('/', start);
      const std::string item = s.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
      char* end = nullptr;
      const T v = parse(item.c_str(), &end);
      if (item.empty() || *end != '\0') return InvalidArgument(key + ": '" + item + "' is not a number");
      out.push_back(v);
      if (slash == std::string::npos) break;
      start = slash + 1;
    }
    return out;
  }

 private:
  Args a_;
};

// The run's steps as a default span; a run of unknown length must say it.
Result<int64_t> DefaultSpan(const Reader& r, const std::string& key, int64_t total, int64_t less) {
  if (r.Has(key) || total > 0) return r.Steps(key, total - less);
  return InvalidArgument("give " + key + "=STEPS (the run's length is not known here)");
}

Result<LrSchedule> Cosine(const Reader& r, double lr, int64_t total) {
  SINKRT_RETURN_IF_ERROR(r.CheckKeys({"min", "decay", "warmup"}));
  SINKRT_ASSIGN_OR_RETURN(const double min_lr, r.Number("min", 0.0));
  if (!r.Has("warmup")) {
    SINKRT_ASSIGN_OR_RETURN(const int64_t decay, DefaultSpan(r, "decay", total, 0));
    return LrSchedule::CosineDecay(min_lr, lr, decay);
  }
  SINKRT_ASSIGN_OR_RETURN(const int64_t warmup, r.Steps("warmup"));
  SINKRT_ASSIGN_OR_RETURN(const int64_t decay, DefaultSpan(r, "decay", total, warmup));
  if (decay <= 0 && !r.Has("decay"))
    return InvalidArgument("warmup=" + std::to_string(warmup) + " leaves no step of the run's " +
                           std::to_string(total) + " to decay over");
  return LrSchedule::WarmupCosine(lr, min_lr, warmup, decay);
}

Result<LrSchedule> Decay(const Reader& r, LrScheduleKind kind, double lr) {
  SINKRT_RETURN_IF_ERROR(r.CheckKeys({"rate", "decay", "stair"}));
  SINKRT_ASSIGN_OR_RETURN(const double rate, r.Number("rate"));
  SINKRT_ASSIGN_OR_RETURN(const int64_t decay, r.Steps("decay"));
  SINKRT_ASSIGN_OR_RETURN(const bool stair, r.Flag("stair"));
  LrSchedule s = LrSchedule::ExponentialDecay(lr, rate, decay, stair);
  s.kind = kind;
  return s;
}

Result<LrSchedule> Piecewise(const Reader& r) {
  SINKRT_RETURN_IF_ERROR(r.CheckKeys({"milestones", "rates"}));
  SINKRT_ASSIGN_OR_RETURN(
      const std::vector<int64_t> milestones,
      (r.List<int64_t>("milestones", [](const char* s, char** e) { return std::strtoll(s, e, 10); })));
  SINKRT_ASSIGN_OR_RETURN(const std::vector<double> rates,
                          (r.List<double>("rates", [](const char* s, char** e) { return std::strtod(s, e); })));
  SINKRT_ASSIGN_OR_RETURN(const std::vector<double> table, PiecewiseConstantLr(milestones, rates));
  return LrSchedule::Table(table);
}

Result<LrSchedule> Parse(const Args& a, double lr, int64_t total) {
  const Reader r(a);
  if (a.kind == "constant") {
    SINKRT_RETURN_IF_ERROR(r.CheckKeys({}));
    return LrSchedule{};
  }
  if (a.kind == "warmup") {
    SINKRT_RETURN_IF_ERROR(r.CheckKeys({"steps"}));
    SINKRT_ASSIGN_OR_RETURN(const int64_t steps, r.Steps("steps"));
    return LrSchedule::WarmUp(lr, steps);
  }
  if (a.kind == "cosine") return Cosine(r, lr, total);
  if (a.kind == "poly") {
    SINKRT_RETURN_IF_ERROR(r.CheckKeys({"end", "power", "decay", "update"}));
    SINKRT_ASSIGN_OR_RETURN(const double end, r.Number("end", 0.0));
    SINKRT_ASSIGN_OR_RETURN(const double power, r.Number("power", 1.0));
    SINKRT_ASSIGN_OR_RETURN(const int64_t decay, DefaultSpan(r, "decay", total, 0));
    SINKRT_ASSIGN_OR_RETURN(const bool update, r.Flag("update"));
    return LrSchedule::PolynomialDecay(lr, end, decay, power, update);
  }
  if (a.kind == "exp") return Decay(r, LrScheduleKind::ExponentialDecay, lr);
  if (a.kind == "natural_exp") return Decay(r, LrScheduleKind::NaturalExpDecay, lr);
  if (a.kind == "inverse") return Decay(r, LrScheduleKind::InverseDecay, lr);
  if (a.kind == "piecewise") return Piecewise(r);
  return InvalidArgument("unknown schedule '" + a.kind +
                         "'; valid: constant, warmup, cosine, poly, exp, natural_exp, inverse, piecewise");
}

}  // namespace

Result<LrSchedule> ParseLrSchedule(const std::string& text, double base_lr, int64_t total_steps) {
  SINKRT_ASSIGN_OR_RETURN(const Args a, Split(text));
  SINKRT_ASSIGN_OR_RETURN(LrSchedule s, Parse(a, base_lr, total_steps));
  SINKRT_RETURN_IF_ERROR(ValidateLrSchedule(s));
  return s;
}

}  // namespace sinkrt::host
