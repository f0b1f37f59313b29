#include "sinkrt/host/calibration.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "runtime/src/file_io.h"

namespace sinkrt::host {
namespace {

using Json = nlohmann::ordered_json;

constexpr const char* kKindNames[kCollectiveKinds] = {"AllReduce", "AllGather", "ReduceScatter", "AllToAll"};

// The compiled-in copy of data/calibration/default.json (host/CMakeLists.txt
// generates the include), so an installed binary needs no data directory.
constexpr const char kDefaultText[] =
#include "default_calibration.inc"
    ;

// Reads fields of one file, every error naming the file and the field's
// path ("calib.json: compute.memory_bandwidth: -1 is negative").
struct Reader {
  const std::string& source;

  Status Error(const std::string& path, const std::string& what) const {
    return InvalidArgument(source + ": " + path + ": " + what);
  }
  Result<const Json*> Field(const Json& obj, const std::string& path, const std::string& key) const {
    const std::string where = path.empty() ? key : path + "." + key;
    if (!obj.is_object()) return Error(path.empty() ? "(top level)" : path, "is not an object");
    auto it = obj.find(key);
    if (it == obj.end()) return Error(where, "missing");
    return &*it;
  }
  Result<double> Number(const Json& obj, const std::string& path, const std::string& key) const {
    SINKRT_ASSIGN_OR_RETURN(const Json* v, Field(obj, path, key));
    const std::string where = path.empty() ? key : path + "." + key;
    if (!v->is_number()) return Error(where, "is not a number: " + v->dump());
    const double x = v->get<double>();
    if (!std::isfinite(x)) return Error(where, "is not finite");
    if (x < 0) return Error(where, v->dump() + " is negative");
    return x;
  }
  Result<std::string> String(const Json& obj, const std::string& path, const std::string& key) const {
    SINKRT_ASSIGN_OR_RETURN(const Json* v, Field(obj, path, key));
    if (!v->is_string()) return Error(path.empty() ? key : path + "." + key, "is not a string");
    return v->get<std::string>();
  }
  // A non-empty, strictly ascending list of positive integers.
  Result<std::vector<int64_t>> Axis(const Json& obj, const std::string& path, const std::string& key) const {
    SINKRT_ASSIGN_OR_RETURN(const Json* v, Field(obj, path, key));
    const std::string where = path + "." + key;
    if (!v->is_array() || v->empty()) return Error(where, "is not a non-empty list");
    std::vector<int64_t> out;
    for (size_t i = 0; i < v->size(); ++i) {
      const Json& e = (*v)[i];
      if (!e.is_number_integer() || e.get<int64_t>() < 1)
        return Error(where, "entry " + std::to_string(i) + " (" + e.dump() + ") is not a positive integer");
      if (!out.empty() && e.get<int64_t>() <= out.back())
        return Error(where, "is not sorted ascending at index " + std::to_string(i) + " (" + e.dump() + " after " +
                                std::to_string(out.back()) + ")");
      out.push_back(e.get<int64_t>());
    }
    return out;
  }
  Result<AlphaBeta> Fit(const Json& obj, const std::string& path) const {
    AlphaBeta ab;
    SINKRT_ASSIGN_OR_RETURN(ab.alpha, Number(obj, path, "alpha"));
    SINKRT_ASSIGN_OR_RETURN(ab.beta, Number(obj, path, "beta"));
    return ab;
  }
};

Result<GemmGrid> ReadGemm(const Reader& r, const Json& gemm) {
  const std::string path = "compute.gemm";
  GemmGrid g;
  SINKRT_ASSIGN_OR_RETURN(g.m, r.Axis(gemm, path, "m"));
  SINKRT_ASSIGN_OR_RETURN(g.n, r.Axis(gemm, path, "n"));
  SINKRT_ASSIGN_OR_RETURN(g.k, r.Axis(gemm, path, "k"));
  SINKRT_ASSIGN_OR_RETURN(const Json* flops, r.Field(gemm, path, "flops"));
  // flops[i][j][l]: m[i], n[j], k[l].
  const std::string where = path + ".flops";
  auto shape_error = [&](const std::string& at, size_t want, const char* axis) {
    return r.Error(where + at,
                   "is not a list of " + std::to_string(want) + " entries (one per " + axis + " of the grid)");
  };
  if (!flops->is_array() || flops->size() != g.m.size()) return shape_error("", g.m.size(), "m");
  for (size_t i = 0; i < g.m.size(); ++i) {
    const Json& row = (*flops)[i];
    const std::string at_i = "[" + std::to_string(i) + "]";
    if (!row.is_array() || row.size() != g.n.size()) return shape_error(at_i, g.n.size(), "n");
    for (size_t j = 0; j < g.n.size(); ++j) {
      const Json& col = row[j];
      const std::string at_j = at_i + "[" + std::to_string(j) + "]";
      if (!col.is_array() || col.size() != g.k.size()) return shape_error(at_j, g.k.size(), "k");
      for (size_t l = 0; l < g.k.size(); ++l) {
        const Json& e = col[l];
        const std::string at = where + at_j + "[" + std::to_string(l) + "]";
        if (!e.is_number() || !std::isfinite(e.get<double>())) return r.Error(at, "is not a number");
        if (e.get<double>() <= 0) return r.Error(at, e.dump() + " is not a positive FLOP/s");
        g.flops.push_back(e.get<double>());
      }
    }
  }
  return g;
}

Result<TransportFits> ReadTransport(const Reader& r, const Json& t, const std::string& path) {
  TransportFits fits;
  for (int kind = 0; kind < kCollectiveKinds; ++kind) {
    const std::string kpath = path + "." + kKindNames[kind];
    SINKRT_ASSIGN_OR_RETURN(const Json* entry, r.Field(t, path, kKindNames[kind]));
    CollectiveFit& fit = fits[kind];
    SINKRT_ASSIGN_OR_RETURN(fit.fit, r.Fit(*entry, kpath));
    if (auto groups = entry->find("groups"); groups != entry->end()) {
      if (!groups->is_object()) return r.Error(kpath + ".groups", "is not an object of group size -> {alpha, beta}");
      for (const auto& [key, value] : groups->items()) {
        char* end = nullptr;
        const long long n = std::strtoll(key.c_str(), &end, 10);
        if (key.empty() || *end != '\0' || n < 2)
          return r.Error(kpath + ".groups", "key \"" + key + "\" is not a group size of at least 2");
        SINKRT_ASSIGN_OR_RETURN(fit.per_group[n], r.Fit(value, kpath + ".groups." + key));
      }
    }
  }
  return fits;
}

// Index of the grid interval holding log2(x) and the weight of its upper
// end, clamped to the grid.
std::pair<size_t, double> Bracket(const std::vector<int64_t>& axis, int64_t x) {
  if (axis.size() == 1 || x <= axis.front()) return {0, 0.0};
  if (x >= axis.back()) return {axis.size() - 2, 1.0};
  size_t hi = std::upper_bound(axis.begin(), axis.end(), x) - axis.begin();
  size_t lo = hi - 1;
  const double t = (std::log2(double(x)) - std::log2(double(axis[lo]))) /
                   (std::log2(double(axis[hi])) - std::log2(double(axis[lo])));
  return {lo, t};
}

Json FitJson(const AlphaBeta& ab) { return Json{{"alpha", ab.alpha}, {"beta", ab.beta}}; }

}  // namespace

const char* CollectiveKindName(CollectiveKind kind) { return kKindNames[static_cast<int>(kind)]; }

Result<Calibration> ParseCalibration(const std::string& text, const std::string& source) {
  Json j;
  try {
    j = Json::parse(text);
  } catch (const Json::parse_error& e) {
    return InvalidArgument(source + ": not valid JSON: " + e.what());
  }
  const Reader r{source};
  Calibration c;
  c.source = source;
  SINKRT_ASSIGN_OR_RETURN(const Json* device, r.Field(j, "", "device"));
  SINKRT_ASSIGN_OR_RETURN(c.device_kind, r.String(*device, "device", "kind"));
  if (auto d = device->find("description"); d != device->end() && d->is_string()) c.description = d->get<std::string>();

  SINKRT_ASSIGN_OR_RETURN(const Json* compute, r.Field(j, "", "compute"));
  SINKRT_ASSIGN_OR_RETURN(const Json* gemm, r.Field(*compute, "compute", "gemm"));
  SINKRT_ASSIGN_OR_RETURN(c.gemm, ReadGemm(r, *gemm));
  SINKRT_ASSIGN_OR_RETURN(c.memory_bandwidth, r.Number(*compute, "compute", "memory_bandwidth"));
  if (c.memory_bandwidth <= 0) return r.Error("compute.memory_bandwidth", "must be positive (B/s)");
  SINKRT_ASSIGN_OR_RETURN(c.kernel_launch, r.Number(*compute, "compute", "kernel_launch"));

  SINKRT_ASSIGN_OR_RETURN(const Json* colls, r.Field(j, "", "collectives"));
  if (!colls->is_object() || colls->empty())
    return r.Error("collectives", "is not an object of transport (\"shm\", \"tcp\") -> fits");
  for (const auto& [transport, fits] : colls->items()) {
    SINKRT_ASSIGN_OR_RETURN(c.collectives[transport], ReadTransport(r, fits, "collectives." + transport));
  }

  SINKRT_ASSIGN_OR_RETURN(const Json* overlap, r.Field(j, "", "overlap"));
  SINKRT_ASSIGN_OR_RETURN(c.grad_hidden_fraction, r.Number(*overlap, "overlap", "grad_hidden_fraction"));
  if (c.grad_hidden_fraction > 1)
    return r.Error("overlap.grad_hidden_fraction", std::to_string(c.grad_hidden_fraction) + " is above 1");
  return c;
}

Result<Calibration> LoadCalibration(const std::string& path) {
  auto bytes = ReadFileBytes(path, {kJsonFileLimit.max_bytes, "a calibration file"});
  if (!bytes.ok()) return bytes.status().WithContext("calibration file " + path);
  return ParseCalibration(std::string(bytes->begin(), bytes->end()), path);
}

Result<Calibration> DefaultCalibration() {
  return ParseCalibration(kDefaultText, "built-in default calibration (data/calibration/default.json)");
}

Result<Calibration> FindCalibration(const std::string& path) {
  if (!path.empty()) return LoadCalibration(path);
  if (const char* env = std::getenv("SINKRT_CALIBRATION"); env && *env) {
    auto c = LoadCalibration(env);
    if (c.ok()) c->source = std::string(env) + " (SINKRT_CALIBRATION)";
    return c;
  }
  return DefaultCalibration();
}

std::string CalibrationToJson(const Calibration& c) {
  Json flops = Json::array();
  for (size_t i = 0; i < c.gemm.m.size(); ++i) {
    Json row = Json::array();
    for (size_t j = 0; j < c.gemm.n.size(); ++j) {
      Json col = Json::array();
      for (size_t l = 0; l < c.gemm.k.size(); ++l)
        col.push_back(c.gemm.flops[(i * c.gemm.n.size() + j) * c.gemm.k.size() + l]);
      row.push_back(col);
    }
    flops.push_back(row);
  }
  Json colls = Json::object();
  for (const auto& [transport, fits] : c.collectives) {
    Json t = Json::object();
    for (int kind = 0; kind < kCollectiveKinds; ++kind) {
      Json e = FitJson(fits[kind].fit);
      if (!fits[kind].per_group.empty()) {
        Json groups = Json::object();
        for (const auto& [n, ab] : fits[kind].per_group) groups[std::to_string(n)] = FitJson(ab);
        e["groups"] = groups;
      }
      t[kKindNames[kind]] = e;
    }
    colls[transport] = t;
  }
  Json j{{"device", {{"kind", c.device_kind}, {"description", c.description}}},
         {"compute",
          {{"gemm", {{"m", c.gemm.m}, {"n", c.gemm.n}, {"k", c.gemm.k}, {"flops", flops}}},
           {"memory_bandwidth", c.memory_bandwidth},
           {"kernel_launch", c.kernel_launch}}},
         {"collectives", colls},
         {"overlap", {{"grad_hidden_fraction", c.grad_hidden_fraction}}}};
  return j.dump(2) + "\n";
}

double GemmFlops(const GemmGrid& g, int64_t m, int64_t n, int64_t k) {
  const auto [i, ti] = Bracket(g.m, m);
  const auto [j, tj] = Bracket(g.n, n);
  const auto [l, tl] = Bracket(g.k, k);
  auto at = [&](size_t a, size_t b, size_t d) {
    a = std::min(a, g.m.size() - 1);
    b = std::min(b, g.n.size() - 1);
    d = std::min(d, g.k.size() - 1);
    return g.flops[(a * g.n.size() + b) * g.k.size() + d];
  };
  double sum = 0;
  for (int di = 0; di < 2; ++di)
    for (int dj = 0; dj < 2; ++dj)
      for (int dl = 0; dl < 2; ++dl) {
        const double w = (di ? ti : 1 - ti) * (dj ? tj : 1 - tj) * (dl ? tl : 1 - tl);
        if (w != 0) sum += w * at(i + di, j + dj, l + dl);
      }
  return sum;
}

double GemmSeconds(const Calibration& c, int64_t m, int64_t n, int64_t k) {
  if (m <= 0 || n <= 0 || k <= 0) return 0;
  return c.kernel_launch + 2.0 * double(m) * double(n) * double(k) / GemmFlops(c.gemm, m, n, k);
}

double MemoryBoundSeconds(const Calibration& c, int64_t bytes) {
  return c.kernel_launch + double(bytes) / c.memory_bandwidth;
}

double RingFactor(CollectiveKind kind, int64_t group_size) {
  const double n = double(group_size);
  const double f = (n - 1) / n;
  return kind == CollectiveKind::AllReduce ? 2 * f : f;
}

Result<double> CollectiveSeconds(const Calibration& c, const std::string& transport, CollectiveKind kind,
                                 int64_t group_size, int64_t bytes) {
  if (group_size <= 1) return 0.0;
  auto t = c.collectives.find(transport);
  if (t == c.collectives.end()) {
    std::string have;
    for (const auto& [name, _] : c.collectives) have += (have.empty() ? "" : ", ") + name;
    return NotFound(c.source + " has no collectives for transport \"" + transport + "\" (it has " + have + ")");
  }
  const CollectiveFit& fit = t->second[static_cast<int>(kind)];
  auto g = fit.per_group.find(group_size);
  const AlphaBeta& ab = g != fit.per_group.end() ? g->second : fit.fit;
  return ab.alpha + ab.beta * RingFactor(kind, group_size) * double(bytes);
}

}  // namespace sinkrt::host
