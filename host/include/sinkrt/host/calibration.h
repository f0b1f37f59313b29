/// \file
/// The calibration of AUTO_PARALLEL's cost model (docs/design/auto_parallel.md,
/// "Calibration file"): what one device kind does per second, measured once
/// by `sinkrun calibrate` (or a program of its own) and read by the
/// strategy search (AutoParallelOptions::calibration names the file).
///
/// Units are seconds and bytes, not MindSpore's abstract byte counts, so the
/// search's estimate of a step can be compared with the measured step.
/// ~~~
///   compute      GEMM throughput (FLOP/s) on a log grid of (M, N, K), and a
///                memory bandwidth (B/s) plus a per-kernel launch cost for
///                memory-bound ops;
///   collectives  per transport ("shm", "tcp") and kind, t = α + β·f(n)·bytes
///                with the ring factor f (AllReduce 2(n-1)/n, the others
///                (n-1)/n), a fit per measured group size and one for the rest;
///   overlap      the fraction of gradient communication hidden behind the
///                backward pass.
/// ~~~
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "sinkrt/runtime/status.h"

namespace sinkrt::host {

/// GEMM throughput at the grid points: flops[(i * n.size() + j) * k.size() + l]
/// is the FLOP/s of an [m[i], k[l]] x [k[l], n[j]] product. Each axis is
/// ascending and positive.
struct GemmGrid {
  /// The grid's axes: the product's m, n and k.
  /// @{
  std::vector<int64_t> m, n, k;
  /// @}
  std::vector<double> flops;  ///< FLOP/s at each point, indexed as above
};

/// t = alpha + beta * f(n) * bytes.
struct AlphaBeta {
  double alpha = 0;  ///< s
  double beta = 0;   ///< s per byte
};

/// The collectives the cost model prices.
enum class CollectiveKind : uint8_t { AllReduce, AllGather, ReduceScatter, AllToAll };
/// How many CollectiveKind values there are.
inline constexpr int kCollectiveKinds = 4;
/// "AllReduce", ...: the kind's name.
const char* CollectiveKindName(CollectiveKind kind);

/// The time of one collective kind on one transport: a general fit, and fits per group size.
struct CollectiveFit {
  AlphaBeta fit;                           ///< any group size not measured
  std::map<int64_t, AlphaBeta> per_group;  ///< group size -> its own fit
};

/// Per collective kind (indexed by CollectiveKind).
using TransportFits = std::array<CollectiveFit, kCollectiveKinds>;

/// The measured speeds the auto-parallel cost model prices strategies with.
struct Calibration {
  std::string device_kind;                           ///< "cpu-zen4-2core"
  std::string description;                           ///< a line for people: what was measured, and how
  std::string source;                                ///< the file it was read from, or the built-in default
  GemmGrid gemm;                                     ///< GEMM throughput
  double memory_bandwidth = 0;                       ///< B/s, bytes read + written
  double kernel_launch = 0;                          ///< s per kernel
  std::map<std::string, TransportFits> collectives;  ///< "shm", "tcp"
  double grad_hidden_fraction = 0;                   ///< in [0, 1]
};

/// Parses a calibration file's text; `source` names it in every error
/// ("calib.json: compute.gemm.k is not ascending at index 2").
Result<Calibration> ParseCalibration(const std::string& text, const std::string& source);
/// Reads and parses `path`.
Result<Calibration> LoadCalibration(const std::string& path);
/// The checked-in default (data/calibration/default.json, compiled in).
Result<Calibration> DefaultCalibration();
/// The calibration a run uses: `path` when given, else the file named by
/// SINKRT_CALIBRATION, else the built-in default. Its `source` says which,
/// for the run to print.
Result<Calibration> FindCalibration(const std::string& path);
/// The file's JSON text (what `sinkrun calibrate` writes).
std::string CalibrationToJson(const Calibration& c);

// ---- what the cost model asks ------------------------------------------------

/// FLOP/s of an [m, k] x [k, n] product: trilinear interpolation in
/// (log2 m, log2 n, log2 k) between the grid points, clamped to the grid's
/// edges outside it (a shape beyond the largest point runs at its rate).
double GemmFlops(const GemmGrid& grid, int64_t m, int64_t n, int64_t k);
/// Seconds of one such product (0 for an empty one).
double GemmSeconds(const Calibration& c, int64_t m, int64_t n, int64_t k);
/// Seconds of a memory-bound kernel that reads and writes `bytes` in all.
double MemoryBoundSeconds(const Calibration& c, int64_t bytes);

/// The ring factor f(n): AllReduce 2(n-1)/n, the others (n-1)/n.
double RingFactor(CollectiveKind kind, int64_t group_size);
/// Seconds of one collective over `group_size` ranks on `transport`, where
/// `bytes` is the whole buffer (AllReduce's, AllGather's output,
/// ReduceScatter's input, AllToAll's either). A group of one costs 0; an
/// unknown transport is an error naming the ones the calibration has.
Result<double> CollectiveSeconds(const Calibration& c, const std::string& transport, CollectiveKind kind,
                                 int64_t group_size, int64_t bytes);

}  // namespace sinkrt::host
