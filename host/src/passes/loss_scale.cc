// Loss-scale managers (sinkrt/host/loss_scale.h): construction, MindSpore's
// checks and the command line's spelling.
#include "sinkrt/host/loss_scale.h"

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace sinkrt::host {
namespace {

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::vector<std::string_view> SplitColons(std::string_view s) {
  std::vector<std::string_view> out;
  for (size_t at = 0;;) {
    const size_t colon = s.find(':', at);
    out.push_back(s.substr(at, colon == std::string_view::npos ? std::string_view::npos : colon - at));
    if (colon == std::string_view::npos) return out;
    at = colon + 1;
  }
}

Result<double> Number(std::string_view text, const char* what) {
  const std::string s(text);
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v))
    return InvalidArgument(std::string(what) + " '" + s + "' is not a finite number");
  return v;
}

}  // namespace

LossScaleManager LossScaleManager::Fixed(float loss_scale, bool drop_overflow_update) {
  LossScaleManager m;
  m.kind = Kind::Fixed;
  m.loss_scale = loss_scale;
  m.drop_overflow_update = drop_overflow_update;
  return m;
}

LossScaleManager LossScaleManager::Dynamic(float init_loss_scale, float scale_factor, int scale_window) {
  LossScaleManager m;
  m.kind = Kind::Dynamic;
  m.loss_scale = init_loss_scale;
  m.scale_factor = scale_factor;
  m.scale_window = scale_window;
  return m;
}

Status ValidateLossScaleManager(const LossScaleManager& m) {
  switch (m.kind) {
    case LossScaleManager::Kind::None:
      return Status::Ok();
    case LossScaleManager::Kind::Fixed:
      if (!(m.loss_scale >= 1.0f) || !std::isfinite(m.loss_scale))
        return InvalidArgument("FixedLossScaleManager: the argument 'loss_scale' must be >= 1, but got " +
                               Num(m.loss_scale));
      return Status::Ok();
    case LossScaleManager::Kind::Dynamic:
      if (!(m.loss_scale >= 1.0f) || !std::isfinite(m.loss_scale))
        return InvalidArgument("DynamicLossScaleManager: the argument 'init_loss_scale' must be >= 1, but got " +
                               Num(m.loss_scale));
      if (!(m.scale_factor > 0.0f) || !std::isfinite(m.scale_factor))
        return InvalidArgument("DynamicLossScaleManager: the argument 'scale_factor' must be > 0, but got " +
                               Num(m.scale_factor));
      if (m.scale_window <= 0)
        return InvalidArgument("DynamicLossScaleManager: the argument 'scale_window' must be a positive int, but got " +
                               std::to_string(m.scale_window));
      return Status::Ok();
  }
  return InvalidArgument("loss scale manager: unknown kind " + std::to_string(static_cast<int>(m.kind)));
}

Result<LossScaleManager> ParseLossScaleManager(std::string_view text) {
  const std::vector<std::string_view> parts = SplitColons(text);
  const std::string_view kind = parts[0];
  const std::string whole(text);
  LossScaleManager m;
  if (kind == "none" && parts.size() == 1) return m;
  if (kind == "fixed" && parts.size() <= 3) {
    m = LossScaleManager::Fixed();
    if (parts.size() > 1) {
      SINKRT_ASSIGN_OR_RETURN(double v, Number(parts[1], "loss_scale"), "'" + whole + "'");
      m.loss_scale = static_cast<float>(v);
    }
    if (parts.size() > 2) {
      if (parts[2] != "true" && parts[2] != "false")
        return InvalidArgument("'" + whole + "': drop_overflow_update must be true or false, got '" +
                               std::string(parts[2]) + "'");
      m.drop_overflow_update = parts[2] == "true";
    }
  } else if (kind == "dynamic" && parts.size() <= 4) {
    m = LossScaleManager::Dynamic();
    if (parts.size() > 1) {
      SINKRT_ASSIGN_OR_RETURN(double v, Number(parts[1], "init_loss_scale"), "'" + whole + "'");
      m.loss_scale = static_cast<float>(v);
    }
    if (parts.size() > 2) {
      SINKRT_ASSIGN_OR_RETURN(double v, Number(parts[2], "scale_factor"), "'" + whole + "'");
      m.scale_factor = static_cast<float>(v);
    }
    if (parts.size() > 3) {
      SINKRT_ASSIGN_OR_RETURN(double v, Number(parts[3], "scale_window"), "'" + whole + "'");
      if (v != std::floor(v) || v < -2e9 || v > 2e9)
        return InvalidArgument("'" + whole + "': scale_window must be an integer, got '" + std::string(parts[3]) + "'");
      m.scale_window = static_cast<int>(v);
    }
  } else {
    return InvalidArgument("'" + whole +
                           "' is not a loss scale manager: none, fixed[:SCALE[:DROP]] or "
                           "dynamic[:INIT[:FACTOR[:WINDOW]]]");
  }
  SINKRT_RETURN_IF_ERROR(ValidateLossScaleManager(m));
  return m;
}

std::string LossScaleManagerText(const LossScaleManager& m) {
  switch (m.kind) {
    case LossScaleManager::Kind::None:
      return "no loss scale";
    case LossScaleManager::Kind::Fixed:
      return "FixedLossScaleManager(loss_scale=" + Num(m.loss_scale) +
             ", drop_overflow_update=" + (m.drop_overflow_update ? "True" : "False") + ")";
    case LossScaleManager::Kind::Dynamic:
      return "DynamicLossScaleManager(init_loss_scale=" + Num(m.loss_scale) + ", scale_factor=" + Num(m.scale_factor) +
             ", scale_window=" + std::to_string(m.scale_window) + ")";
  }
  return "?";
}

}  // namespace sinkrt::host
