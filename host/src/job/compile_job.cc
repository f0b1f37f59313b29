// CompileJob: every rank's stream, through the compile cache when there is one.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <random>
#include <string>
#include <system_error>
#include <utility>

#include "host/src/compiler/graph_hash.h"
#include "host/src/compiler/memory_limited_search.h"
#include "host/src/job/manifest.h"
#include "host/src/util/hex.h"
#include "sinkrt/host/compiled_job.h"

namespace sinkrt::host {
namespace {

namespace fs = std::filesystem;

struct Counters {
  std::atomic<uint64_t> hits{0}, misses{0}, corrupt{0}, compiles{0};
};
Counters& Stats() {
  static Counters c;
  return c;
}

// The label Input when the loss is SparseSoftmaxCrossEntropy(outputs()[0],
// an Input): eval can then score a partial batch on the host.
std::string HostLossLabel(const Graph& g) {
  if (g.outputs().empty() || !g.valid(g.loss())) return "";
  const int64_t op = g.producer(g.loss());
  if (op < 0) return "";
  const OpNode& node = g.ops()[op];
  if (node.op != OpCode::SparseSoftmaxCrossEntropy || node.inputs.size() != 2 ||
      node.inputs[0] != g.outputs().front() || g.tensor(node.inputs[1]).kind != TensorKind::Input)
    return "";
  return g.tensor(node.inputs[1]).name;
}

CompileOptions ForRank(CompileOptions o, uint32_t rank) {
  o.rank = rank;
  return o;
}

// Why a cache entry cannot stand for this compile; Ok when it can.
Status CheckEntry(const CompiledJob& entry, const Graph& network, const CompileOptions& options, uint64_t graph_hash) {
  if (entry.world_size() != options.world_size)
    return InvalidArgument("it holds " + std::to_string(entry.world_size()) + " ranks, not " +
                           std::to_string(options.world_size));
  if (entry.network_hash != NetworkHash(network) || entry.network_name != network.name())
    return InvalidArgument("it holds network '" + entry.network_name + "' " + Hex64(entry.network_hash));
  for (uint32_t r = 0; r < entry.world_size(); ++r) {
    const uint64_t want = compiler::StreamHash(graph_hash, ForRank(options, r));
    if (entry.ranks[r].graph_hash != want)
      return InvalidArgument("rank " + std::to_string(r) + "'s stream hash is " + Hex64(entry.ranks[r].graph_hash) +
                             ", not " + Hex64(want));
  }
  return Status::Ok();
}

// Renames a fully written temporary directory onto `entry`, replacing a
// corrupt one. Losing a race to another process writing the same entry is
// fine: theirs is as good as ours.
void Publish(const fs::path& tmp, const fs::path& entry) {
  std::error_code ec;
  fs::remove_all(entry, ec);
  fs::rename(tmp, entry, ec);
  if (ec) fs::remove_all(tmp, ec);
}

}  // namespace

std::string CompileCacheDirFromEnvironment() {
  // sinkrt's own name first, so that a job can point its cache elsewhere
  // than the MindSpore setting its shell exports.
  for (const char* name : {"SINKRT_COMPILE_CACHE", "MS_COMPILER_CACHE_PATH"})
    if (const char* dir = std::getenv(name); dir && *dir) return dir;
  return "";
}

CompileCacheStats GetCompileCacheStats() {
  Counters& c = Stats();
  return {.hits = c.hits.load(), .misses = c.misses.load(), .corrupt = c.corrupt.load(), .compiles = c.compiles.load()};
}

Result<CompiledJob> CompileJob(const Graph& network, CompileOptions options, const std::string& cache_dir) {
  if (options.world_size == 0) return InvalidArgument("compile: world_size must be at least 1");
  if (options.parallel_mode == ParallelMode::AutoParallel) {
    // The context's checks under its own name before the search, which
    // would otherwise meet them only as semi_auto_parallel's.
    ParallelContext context = ParallelContextFor(options);
    context.global_rank = 0;  // the job compiles every rank
    SINKRT_RETURN_IF_ERROR(context.Validate({ParallelMode::AutoParallel}), "compile graph '" + network.name() + "'");
    SINKRT_RETURN_IF_ERROR(network.status(), "compile graph '" + network.name() + "'");
    // Once for every rank: each compiles its slice of the same planned graph.
    // Within device_memory: the largest rank's compiled arena, not the
    // search's estimate (compiler/memory_limited_search.h).
    CompileOptions semi = options;
    semi.parallel_mode = ParallelMode::SemiAutoParallel;
    SINKRT_ASSIGN_OR_RETURN(auto searched,
                            compiler::SearchAndCompileWithinLimit<CompiledJob>(
                                network, AutoParallelOptionsFor(options),
                                [&](const Graph& planned) { return CompileJob(planned, semi, cache_dir); },
                                [](const CompiledJob& job) {
                                  uint64_t most = 0;
                                  for (const CompiledStream& s : job.ranks) most = std::max(most, s.report.arena_bytes);
                                  return most;
                                }),
                            "compile graph '" + network.name() + "'");
    CompiledJob job = std::move(searched.first);
    job.auto_parallel = std::move(searched.second);
    return job;
  }
  const uint64_t graph_hash = GraphHash(network);
  // One key for the job: rank 0's stream hash mixes the graph, every option
  // (world_size included) and the format version; the other ranks' follow.
  const std::string key = Hex64(compiler::StreamHash(graph_hash, ForRank(options, 0))).substr(2);
  const fs::path entry = cache_dir.empty() ? fs::path() : fs::path(cache_dir) / key;

  if (!cache_dir.empty()) {
    std::error_code ec;
    if (fs::exists(entry / "manifest.json", ec)) {
      auto cached = ReadCompiledJob(entry.string());
      Status why = cached.ok() ? CheckEntry(*cached, network, options, graph_hash) : cached.status();
      if (why.ok()) {
        Stats().hits.fetch_add(1);
        std::cerr << "sinkrt: compile cache hit " << key << " for '" << network.name() << "' (" << options.world_size
                  << (options.world_size == 1 ? " rank" : " ranks") << ", " << entry.string() << ")\n";
        cached->options = ForRank(options, 0);
        return std::move(cached).value();
      }
      Stats().corrupt.fetch_add(1);
      std::cerr << "sinkrt: compile cache entry " << entry.string() << " is unusable, recompiling: " << why.message()
                << "\n";
    } else {
      Stats().misses.fetch_add(1);
      std::cerr << "sinkrt: compile cache miss " << key << " for '" << network.name() << "', compiling into "
                << entry.string() << "\n";
    }
  }

  CompiledJob out;
  out.network_name = network.name();
  // Checkpoints bind to the network, not to how it is sharded: they hold
  // full tensors and load under any strategy.
  out.network_hash = NetworkHash(network);
  out.network_structure_hash = NetworkStructureHash(network);
  out.label_column = HostLossLabel(network);
  out.options = ForRank(options, 0);
  out.ranks.reserve(options.world_size);
  for (uint32_t r = 0; r < options.world_size; ++r) {
    Stats().compiles.fetch_add(1);
    SINKRT_ASSIGN_OR_RETURN(CompiledStream s, Compile(network, ForRank(options, r)));
    out.ranks.push_back(std::move(s));
  }

  if (!cache_dir.empty()) {
    // A private temporary name, so concurrent compiles never see each
    // other's half-written entries.
    std::random_device entropy;
    const fs::path tmp =
        fs::path(cache_dir) / (key + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(entropy()));
    Status st = WriteCompiledJob(out, tmp.string());
    if (st.ok()) {
      Publish(tmp, entry);
    } else {
      std::error_code ec;
      fs::remove_all(tmp, ec);
      std::cerr << "sinkrt: compile cache " << cache_dir << " not written: " << st.message() << "\n";
    }
  }
  return out;
}

}  // namespace sinkrt::host

namespace sinkrt::host {

Result<CompiledJob> CompileJobForRank(const Graph& network, CompileOptions options, uint32_t rank) {
  if (options.world_size == 0) return InvalidArgument("compile: world_size must be at least 1");
  if (rank >= options.world_size)
    return InvalidArgument("compile: rank " + std::to_string(rank) + " is outside a world of " +
                           std::to_string(options.world_size));
  if (options.parallel_mode == ParallelMode::AutoParallel || options.parallel_mode == ParallelMode::SemiAutoParallel)
    return Unimplemented("compile graph '" + network.name() + "' for rank " + std::to_string(rank) +
                         " alone: " + ParallelModeName(options.parallel_mode) +
                         " plans every rank's slice together; compile the whole job (CompileJob)");
  CompiledJob out;
  out.network_name = network.name();
  out.network_hash = NetworkHash(network);
  out.network_structure_hash = NetworkStructureHash(network);
  out.label_column = HostLossLabel(network);
  out.options = ForRank(options, rank);
  Stats().compiles.fetch_add(1);
  SINKRT_ASSIGN_OR_RETURN(CompiledStream s, Compile(network, out.options));
  out.ranks.push_back(std::move(s));
  return out;
}

}  // namespace sinkrt::host
