/// \file
/// A compiled job: one task stream per rank and what a host needs to run them
/// without the graph — "compile once, sink many times".
///
/// ~~~
///   graph --CompileJob--> CompiledJob --WriteCompiledJob--> DIR/rank_K.tstream
///                                                           DIR/manifest.json
///   DIR --ReadCompiledJob--> CompiledJob --Model::Create--> devices
/// ~~~
///
/// sinkc writes DIR; `sinkrun train --streams DIR` and Model::Create(job, ...)
/// run it. The compile cache (SINKRT_COMPILE_CACHE, or MindSpore's
/// MS_COMPILER_CACHE_PATH) stores the same directories under a key that
/// hashes the graph, every compile option and the format version.
///
/// Nothing read from disk is trusted: ReadCompiledJob verifies every stream
/// as a device would (VerifyTaskStream), checks each file against the
/// manifest's content hash, and checks that the ranks belong together (one
/// graph, one world, rank K in rank_K.tstream, equal queues).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sinkrt/host/compiler.h"
#include "sinkrt/host/tensor.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host {

/// A network compiled for every rank of its job: what sinkc writes and Model::Create takes.
struct CompiledJob {
  std::string network_name;   ///< the network's Graph name
  uint64_t network_hash = 0;  ///< NetworkHash of the network with its loss (checkpoints bind to it)
  /// NetworkStructureHash of the same (checkpoints of format 1.1 on bind to
  /// it); 0 for a job read from a manifest written before it existed.
  uint64_t network_structure_hash = 0;
  /// The Input the loss reads when it is SparseSoftmaxCrossEntropy of
  /// outputs()[0] (eval scores a partial batch on the host); else empty.
  std::string label_column;
  /// What every rank was compiled with; options.rank is rank 0's. A job
  /// compiled under AutoParallel holds SemiAutoParallel here (what its
  /// streams are) and the search in auto_parallel.
  CompileOptions options;
  /// AutoParallel: the one search every rank was compiled from (none for a
  /// job read from disk, whose streams are plain semi-auto streams).
  std::optional<AutoParallelPlan> auto_parallel;
  /// By rank: ranks[K] is rank K's stream (report rebuilt from the stream
  /// when the job was read from disk: buffers, arena and buckets, not the
  /// liveness figures).
  std::vector<CompiledStream> ranks;

  uint32_t world_size() const { return static_cast<uint32_t>(ranks.size()); }  ///< ranks in the job
  /// The columns of one dataset batch of the train queue, per rank (the
  /// batch is their leading dimension). Under gradient accumulation the
  /// queue takes options.grad_accumulation such batches per step, under
  /// micro-batch names (mb1/image, ...); this is the first batch's, what
  /// the dataset must yield.
  std::vector<ColumnSpec> train_columns() const;
  /// How many ways rank 0's train queue splits the global batch by rows
  /// (SEMI_AUTO_PARALLEL: the data-parallel groups the dataset's batches
  /// are sharded over, global rows / its rows); 1 when it holds them all.
  int64_t train_batch_shards() const;
};

/// Where the compile cache lives: SINKRT_COMPILE_CACHE, else MindSpore's
/// MS_COMPILER_CACHE_PATH (SINKRT_COMPILE_CACHE wins when both are set and
/// non-empty), else empty (no cache).
std::string CompileCacheDirFromEnvironment();

/// Process-wide counters of the compile cache, for logs and tests.
struct CompileCacheStats {
  uint64_t hits = 0;      ///< a verified entry was used: nothing compiled
  uint64_t misses = 0;    ///< no entry: compiled and stored
  uint64_t corrupt = 0;   ///< an entry failed verification: compiled and replaced
  uint64_t compiles = 0;  ///< per-rank Compile() calls made by CompileJob
};
/// A snapshot of the counters.
CompileCacheStats GetCompileCacheStats();

/// Compiles `network` (which has its loss) for every rank of
/// options.world_size (options.rank is ignored). Under AutoParallel it
/// searches once (PlanAutoParallel on a copy of `network`) and compiles every
/// rank from the planned copy as SemiAutoParallel, so the job's streams,
/// cache entry and options are those of the searched strategies under
/// semi_auto_parallel, and job.auto_parallel holds the plan. With `cache_dir` non-empty,
/// first looks for a verified entry keyed by the options and the graph and
/// uses it (one log line on stderr: "sinkrt: compile cache hit ..."), else
/// compiles and stores one (a miss, or a corrupt entry, also logged). A cache
/// that cannot be written is logged and skipped, never an error.
Result<CompiledJob> CompileJob(const Graph& network, CompileOptions options, const std::string& cache_dir = "");

/// Only rank `rank`'s stream of the job CompileJob would compile: a host
/// process per rank (communication.h) compiles its own and no other. The
/// job holds that one stream (its header names its rank and the world);
/// options.rank is `rank`. Data parallel and stand-alone only: the sharded
/// modes plan every rank's slice together. No cache.
Result<CompiledJob> CompileJobForRank(const Graph& network, CompileOptions options, uint32_t rank);

/// The manifest (JSON): network, options, inputs and queues, per rank the
/// file, its bytes, arena bytes, stream hash and content hash, the fusion
/// buckets. Deterministic: no time stamps, no paths.
std::string ManifestJson(const CompiledJob& job);

/// DIR/rank_K.tstream for every rank and DIR/manifest.json, each written to a
/// temporary file and renamed. Creates DIR and its parents when missing, and
/// removes rank files of an earlier, larger world from it.
Status WriteCompiledJob(const CompiledJob& job, const std::string& dir);
/// Reads what WriteCompiledJob wrote, checking every stream against the manifest and verifying it.
Result<CompiledJob> ReadCompiledJob(const std::string& dir);

}  // namespace sinkrt::host
