// A compiled job on disk: DIR/rank_K.tstream and DIR/manifest.json.
#include <algorithm>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>

#include "host/src/job/manifest.h"
#include "host/src/job/stream_report.h"
#include "host/src/util/hex.h"
#include "runtime/src/file_io.h"
#include "sinkrt/fb/task_stream_generated.h"
#include "sinkrt/host/compiled_job.h"
#include "sinkrt/runtime/stream_format.h"
#include "sinkrt/runtime/task_stream_verifier.h"

namespace sinkrt::host {
namespace {

namespace fs = std::filesystem;

// Equal queues: names, capacities and columns (names, dtypes, shapes).
bool SameQueues(const VerifiedStream& a, const VerifiedStream& b) {
  const size_t na = a.root()->queues() ? a.root()->queues()->size() : 0;
  const size_t nb = b.root()->queues() ? b.root()->queues()->size() : 0;
  if (na != nb) return false;
  for (size_t i = 0; i < na; ++i) {
    const fb::QueueSpec* x = a.root()->queues()->Get(i);
    const fb::QueueSpec* y = b.root()->queues()->Get(i);
    const std::string_view name = x->name() ? x->name()->string_view() : "";
    if (x->capacity() != y->capacity() || name != (y->name() ? y->name()->string_view() : "")) return false;
    const auto cx = job::QueueColumns(a, name), cy = job::QueueColumns(b, name);
    if (!std::equal(cx.begin(), cx.end(), cy.begin(), cy.end(), [](const ColumnSpec& u, const ColumnSpec& v) {
          return u.name == v.name && u.dtype == v.dtype && u.shape == v.shape;
        }))
      return false;
  }
  return true;
}

}  // namespace

int64_t CompiledJob::train_batch_shards() const {
  if (ranks.empty()) return 1;
  const std::vector<ColumnSpec> columns = job::QueueColumns(ranks[0].stream, "train");
  const std::vector<std::optional<job::StreamSlice>> slices = job::QueueSlices(ranks[0].stream, "train");
  if (columns.empty() || slices.empty() || !slices[0] || columns[0].shape.empty() || columns[0].shape[0] < 1) return 1;
  return std::max<int64_t>(1, slices[0]->global_shape[0] / columns[0].shape[0]);
}

std::vector<ColumnSpec> CompiledJob::train_columns() const {
  if (ranks.empty()) return {};
  std::vector<ColumnSpec> columns = job::QueueColumns(ranks[0].stream, "train");
  // Gradient accumulation: the queue takes K batches' columns per step
  // (image, label, mb1/image, mb1/label, ...); the data is one batch's,
  // which the feeder pushes K times per step, as Model::train does.
  const size_t k = static_cast<size_t>(std::max(1, options.grad_accumulation));
  if (k > 1 && columns.size() % k == 0) columns.resize(columns.size() / k);
  return columns;
}

std::string ManifestJson(const CompiledJob& job) { return job::ManifestToJson(job).dump(2) + "\n"; }

Status WriteCompiledJob(const CompiledJob& job, const std::string& dir) {
  if (job.ranks.empty()) return InvalidArgument("compiled job for '" + dir + "' has no ranks");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Unavailable("cannot create directory '" + dir + "': " + ec.message());
  for (uint32_t r = 0; r < job.ranks.size(); ++r)
    SINKRT_RETURN_IF_ERROR(WriteFileBytes(dir + "/" + job::RankFileName(r), job.ranks[r].stream.bytes()));
  // Streams of an earlier, larger world would read as part of this one by
  // anyone who globs the directory.
  for (uint32_t r = job.world_size();; ++r) {
    const fs::path stale = fs::path(dir) / job::RankFileName(r);
    if (!fs::exists(stale, ec)) break;
    fs::remove(stale, ec);
  }
  const std::string manifest = ManifestJson(job);
  return WriteFileBytes(dir + "/manifest.json",
                        std::span(reinterpret_cast<const uint8_t*>(manifest.data()), manifest.size()));
}

Result<CompiledJob> ReadCompiledJob(const std::string& dir) {
  const std::string manifest_path = dir + "/manifest.json";
  SINKRT_ASSIGN_OR_RETURN(const std::vector<uint8_t> text,
                          ReadFileBytes(manifest_path, {kJsonFileLimit.max_bytes, "a manifest"}),
                          "compiled job '" + dir + "'");
  SINKRT_ASSIGN_OR_RETURN(job::Manifest m, job::ParseManifest(std::string(text.begin(), text.end()), manifest_path));
  CompiledJob out;
  out.network_name = m.network_name;
  out.network_hash = m.network_hash;
  out.network_structure_hash = m.network_structure_hash;
  out.label_column = m.label_column;
  out.options = m.options;
  out.options.rank = 0;
  const uint32_t n = static_cast<uint32_t>(m.ranks.size());
  const int stages = out.options.pipeline.stages;
  if (stages < 1 || n % static_cast<uint32_t>(stages) != 0)
    return InvalidArgument(manifest_path + ": options.parallel.pipeline.stages " + std::to_string(stages) +
                           " does not divide the " + std::to_string(n) + " ranks into equal stages");
  const uint32_t per_stage = n / static_cast<uint32_t>(stages);
  for (uint32_t r = 0; r < n; ++r) {
    const job::RankEntry& e = m.ranks[r];
    const std::string path = dir + "/" + e.file;
    SINKRT_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadFileBytes(path, {kMaxStreamBytes, "a task stream"}));
    if (bytes.size() != e.bytes || job::ContentHash(bytes) != e.content_hash)
      return InvalidArgument(path + ": " + std::to_string(bytes.size()) + " bytes with content hash " +
                             Hex64(job::ContentHash(bytes)) + ", but the manifest lists " + std::to_string(e.bytes) +
                             " bytes with " + Hex64(e.content_hash) + ": the file was changed or damaged");
    // Bytes from disk: verified here, once.
    SINKRT_ASSIGN_OR_RETURN(VerifiedStream stream, VerifyTaskStream(std::move(bytes)), path);
    const fb::Header& h = *stream.root()->header();
    if (h.rank() != r || h.world_size() != n)
      return InvalidArgument(path + ": the stream is rank " + std::to_string(h.rank()) + " of " +
                             std::to_string(h.world_size()) + ", the manifest says rank " + std::to_string(r) + " of " +
                             std::to_string(n));
    // A manifest edited by hand (or by a tool) must not show one arena and
    // load another.
    if (stream.root()->arena_bytes() != e.arena_bytes)
      return InvalidArgument(path + ": the stream's arena is " + std::to_string(stream.root()->arena_bytes()) +
                             " bytes, the manifest says " + std::to_string(e.arena_bytes));
    if (h.graph_hash() != e.stream_hash)
      return InvalidArgument(path + ": graph hash " + Hex64(h.graph_hash()) + ", the manifest says " +
                             Hex64(e.stream_hash) + ": the file belongs to another compile");
    // Pipeline stages read different columns (the first the inputs, the
    // last the labels); the ranks of one stage read the same.
    const uint32_t first = r - r % per_stage;
    if (r != first && !SameQueues(out.ranks[first].stream, stream))
      return InvalidArgument(path + ": its queues differ from rank " + std::to_string(first) + "'s" +
                             (stages > 1 ? " (its pipeline stage's first rank)" : "") +
                             ": the ranks were compiled apart");
    out.ranks.push_back(job::CompiledStreamFrom(std::move(stream)));
  }
  return out;
}

}  // namespace sinkrt::host
