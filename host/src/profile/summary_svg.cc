#include "host/src/profile/summary_svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <string_view>

namespace sinkrt::host {
namespace {

struct Part {
  const char* id;     // data-part
  const char* label;  // legend
  const char* colour;
};
constexpr Part kParts[] = {
    {"compute", "compute", "#4c72b0"}, {"exposed_comm", "exposed comm", "#dd8452"},
    {"bubble", "bubble", "#8172b3"},   {"queue", "queue wait", "#55a868"},
    {"other", "other", "#b0b0b0"},
};

constexpr double kLeft = 80, kRight = 80, kTop = 50, kBarHeight = 22, kBarGap = 10, kPlotWidth = 600;

std::string Xml(std::string_view s) {
  std::string out;
  for (char c : s) switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        // XML 1.0 allows no control characters but tab, newline and return.
        if (static_cast<unsigned char>(c) >= 0x20 || c == '\t' || c == '\n' || c == '\r') out += c;
    }
  return out;
}

std::string Num(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

// A round tick spacing giving about five ticks up to `max`.
double TickStep(double max) {
  double raw = max / 5;
  double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (m * p >= raw) return m * p;
  return 10 * p;
}

}  // namespace

std::string SummarySvg(const ProfileSummary& s) {
  double max_ms = 0;
  for (const RankStepSplit& r : s.ranks)
    max_ms = std::max({max_ms, r.step_ms, r.compute_ms + r.exposed_comm_ms + r.bubble_ms + r.queue_ms + r.other_ms});
  double step = max_ms > 0 ? TickStep(max_ms) : 1;
  double axis_ms = max_ms > 0 ? std::ceil(max_ms / step) * step : 1;
  double scale = kPlotWidth / axis_ms;
  size_t n = s.ranks.size();
  double axis_y = kTop + static_cast<double>(n) * (kBarHeight + kBarGap);
  double width = kLeft + kPlotWidth + kRight;
  double height = axis_y + 80;

  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out += "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"" + Num("%.0f", width) + "\" height=\"" +
         Num("%.0f", height) + "\" viewBox=\"0 0 " + Num("%.0f", width) + " " + Num("%.0f", height) +
         "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  std::string title = "Mean train step per rank";
  if (!s.network.empty()) title += ": " + s.network;
  out += "<title>" + Xml(title) + "</title>\n";
  out += "<rect x=\"0\" y=\"0\" width=\"" + Num("%.0f", width) + "\" height=\"" + Num("%.0f", height) +
         "\" fill=\"white\"/>\n";
  out += "<text x=\"" + Num("%.0f", width / 2) + "\" y=\"24\" text-anchor=\"middle\" font-size=\"16\">" + Xml(title) +
         "</text>\n";

  for (size_t i = 0; i < n; ++i) {
    const RankStepSplit& r = s.ranks[i];
    double y = kTop + static_cast<double>(i) * (kBarHeight + kBarGap);
    std::string rank = std::to_string(r.rank);
    out += "<g data-rank=\"" + rank + "\" data-step-ms=\"" + Num("%.6g", r.step_ms) + "\">\n";
    out += "<text x=\"" + Num("%.0f", kLeft - 8) + "\" y=\"" + Num("%.1f", y + kBarHeight / 2 + 4) +
           "\" text-anchor=\"end\">rank " + rank + "</text>\n";
    const double ms[] = {r.compute_ms, r.exposed_comm_ms, r.bubble_ms, r.queue_ms, r.other_ms};
    static_assert(std::size(ms) == std::size(kParts));
    double x = kLeft;
    for (size_t p = 0; p < std::size(kParts); ++p) {
      double w = ms[p] * scale;
      out += "<rect x=\"" + Num("%.3f", x) + "\" y=\"" + Num("%.1f", y) + "\" width=\"" + Num("%.3f", w) +
             "\" height=\"" + Num("%.0f", kBarHeight) + "\" fill=\"" + kParts[p].colour + "\" data-rank=\"" + rank +
             "\" data-part=\"" + kParts[p].id + "\" data-ms=\"" + Num("%.6g", ms[p]) + "\"><title>rank " + rank + " " +
             kParts[p].label + " " + Num("%.3f", ms[p]) + " ms</title></rect>\n";
      x += w;
    }
    out += "<text x=\"" + Num("%.3f", x + 4) + "\" y=\"" + Num("%.1f", y + kBarHeight / 2 + 4) + "\">" +
           Num("%.3f", r.step_ms) + " ms</text>\n";
    out += "</g>\n";
  }

  // The axis, in ms.
  out += "<g data-axis=\"ms\">\n";
  out += "<line x1=\"" + Num("%.0f", kLeft) + "\" y1=\"" + Num("%.1f", axis_y) + "\" x2=\"" +
         Num("%.0f", kLeft + kPlotWidth) + "\" y2=\"" + Num("%.1f", axis_y) + "\" stroke=\"black\"/>\n";
  for (double t = 0; t <= axis_ms + step / 2; t += step) {
    double x = kLeft + t * scale;
    out += "<line x1=\"" + Num("%.3f", x) + "\" y1=\"" + Num("%.1f", axis_y) + "\" x2=\"" + Num("%.3f", x) +
           "\" y2=\"" + Num("%.1f", axis_y + 5) + "\" stroke=\"black\"/>\n";
    out += "<text x=\"" + Num("%.3f", x) + "\" y=\"" + Num("%.1f", axis_y + 18) + "\" text-anchor=\"middle\">" +
           Num("%g", t) + "</text>\n";
  }
  out += "<text x=\"" + Num("%.0f", kLeft + kPlotWidth / 2) + "\" y=\"" + Num("%.1f", axis_y + 34) +
         "\" text-anchor=\"middle\">ms per step</text>\n";
  out += "</g>\n";

  // The legend.
  out += "<g data-legend=\"parts\">\n";
  double lx = kLeft, ly = axis_y + 50;
  for (const Part& p : kParts) {
    out += "<rect x=\"" + Num("%.0f", lx) + "\" y=\"" + Num("%.0f", ly) + "\" width=\"12\" height=\"12\" fill=\"" +
           p.colour + "\"/>\n";
    out += "<text x=\"" + Num("%.0f", lx + 16) + "\" y=\"" + Num("%.0f", ly + 10) + "\">" + p.label + "</text>\n";
    lx += 125;
  }
  out += "</g>\n";
  out += "</svg>\n";
  return out;
}

}  // namespace sinkrt::host
