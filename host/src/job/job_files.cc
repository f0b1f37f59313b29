// A compiled job on disk: DIR/rank_K.tstream and DIR/manifest.json.
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>

#include "job/manifest.h"
#include "job/stream_report.h"
#include "sinkrt/host/compiled_job.h"
#include "sinkrt/runtime/file_io.h"
#include "sinkrt/runtime/stream_view.h"

namespace sinkrt::host {
namespace {

namespace fs = std::filesystem;

bool SameQueues(const StreamView& a, const StreamView& b) {
  const auto* qa = a.root->queues();
  const auto* qb = b.root->queues();
  const size_t na = qa ? qa->size() : 0, nb = qb ? qb->size() : 0;
  if (na != nb) return false;
  for (size_t i = 0; i < na; ++i) {
    const fb::QueueSpec* x = qa->Get(i);
    const fb::QueueSpec* y = qb->Get(i);
    if (x->capacity() != y->capacity() || !x->name() != !y->name() ||
        (x->name() && x->name()->str() != y->name()->str()))
      return false;
    const size_t cx = x->columns() ? x->columns()->size() : 0, cy = y->columns() ? y->columns()->size() : 0;
    if (cx != cy) return false;
    for (size_t c = 0; c < cx; ++c) {
      const fb::QueueColumn* u = x->columns()->Get(c);
      const fb::QueueColumn* v = y->columns()->Get(c);
      if (u->dtype() != v->dtype() || (u->name() ? u->name()->str() : "") != (v->name() ? v->name()->str() : ""))
        return false;
      const std::vector<int64_t> su = u->shape() ? std::vector<int64_t>(u->shape()->begin(), u->shape()->end())
                                                 : std::vector<int64_t>{};
      const std::vector<int64_t> sv = v->shape() ? std::vector<int64_t>(v->shape()->begin(), v->shape()->end())
                                                 : std::vector<int64_t>{};
      if (su != sv) return false;
    }
  }
  return true;
}

}  // namespace

std::vector<ColumnSpec> CompiledJob::train_columns() const {
  std::vector<ColumnSpec> out;
  if (ranks.empty()) return out;
  auto view = VerifyTaskStream(ranks[0].bytes, kSupportedFeatures);
  if (!view.ok() || !view->root->queues()) return out;
  for (const fb::QueueSpec* q : *view->root->queues()) {
    if (!q->name() || q->name()->str() != "train" || !q->columns()) continue;
    for (const fb::QueueColumn* c : *q->columns()) {
      ColumnSpec col{.name = c->name() ? c->name()->str() : "", .dtype = c->dtype(), .shape = {}};
      if (c->shape()) col.shape.assign(c->shape()->begin(), c->shape()->end());
      out.push_back(std::move(col));
    }
  }
  return out;
}

std::string ManifestJson(const CompiledJob& job) { return job::ManifestToJson(job).dump(2) + "\n"; }

Status WriteCompiledJob(const CompiledJob& job, const std::string& dir) {
  if (job.ranks.empty()) return InvalidArgument("compiled job for '" + dir + "' has no ranks");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Unavailable("cannot create directory '" + dir + "': " + ec.message());
  for (uint32_t r = 0; r < job.ranks.size(); ++r)
    SINKRT_RETURN_IF_ERROR(WriteFileBytes(dir + "/" + job::RankFileName(r), job.ranks[r].bytes));
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
  auto text = ReadFileBytes(manifest_path);
  if (!text.ok()) return text.status().WithContext("compiled job '" + dir + "'");
  SINKRT_ASSIGN_OR_RETURN(job::Manifest m,
                          job::ParseManifest(std::string(text->begin(), text->end()), manifest_path));
  CompiledJob out;
  out.network_name = m.network_name;
  out.network_hash = m.network_hash;
  out.label_column = m.label_column;
  out.options = m.options;
  out.options.rank = 0;
  const uint32_t n = static_cast<uint32_t>(m.ranks.size());
  StreamView rank0;
  for (uint32_t r = 0; r < n; ++r) {
    const job::RankEntry& e = m.ranks[r];
    const std::string path = dir + "/" + e.file;
    SINKRT_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadFileBytes(path));
    if (bytes.size() != e.bytes || job::ContentHash(bytes) != e.content_hash)
      return InvalidArgument(path + ": " + std::to_string(bytes.size()) + " bytes with content hash " +
                      job::Hex64(job::ContentHash(bytes)) + ", but the manifest lists " + std::to_string(e.bytes) +
                      " bytes with " + job::Hex64(e.content_hash) + ": the file was changed or damaged");
    auto view = VerifyTaskStream(bytes, kSupportedFeatures);
    if (!view.ok()) return view.status().WithContext(path);
    const fb::Header& h = *view->root->header();
    if (h.rank() != r || h.world_size() != n)
      return InvalidArgument(path + ": the stream is rank " + std::to_string(h.rank()) + " of " +
                             std::to_string(h.world_size()) + ", the manifest says rank " + std::to_string(r) +
                             " of " + std::to_string(n));
    if (h.graph_hash() != e.stream_hash)
      return InvalidArgument(path + ": graph hash " + job::Hex64(h.graph_hash()) + ", the manifest says " +
                             job::Hex64(e.stream_hash) + ": the file belongs to another compile");
    if (r == 0) {
      rank0 = *view;
    } else if (!SameQueues(rank0, *view)) {
      return InvalidArgument(path + ": its queues differ from rank 0's: the ranks were compiled apart");
    }
    out.ranks.push_back(job::StreamFromView(std::move(bytes), *view));
    // StreamFromView moved the bytes: rank0's view must point at the kept copy.
    if (r == 0) {
      auto again = VerifyTaskStream(out.ranks[0].bytes, kSupportedFeatures);
      if (!again.ok()) return again.status().WithContext(path);
      rank0 = *again;
    }
  }
  return out;
}

}  // namespace sinkrt::host
