// The machine-readable rendering: one JSON document, keys in a fixed order.
//
// 64-bit hashes are hex strings (JavaScript readers would round a number);
// sizes stay numbers, since no real arena reaches 2^53 bytes.
#include "dump_format.h"
#include "sinkrt/runtime/dtype.h"

namespace sinkrt::tools {
namespace {

Json Names(const VerifiedStream& view, const std::vector<int64_t>& indices) {
  Json names = Json::array();
  for (int64_t i : indices) names.push_back(BufferLabel(view, i));
  return names;
}

Json HeaderJson(const VerifiedStream& view) {
  const fb::Header* h = view.root()->header();
  if (!h) return nullptr;
  Json j;
  j["format_version"] = std::to_string(h->format_major()) + "." + std::to_string(h->format_minor());
  j["rank"] = h->rank();
  j["world_size"] = h->world_size();
  j["target"] = Str(h->target());
  j["graph_hash"] = Hex64(h->graph_hash());
  j["requirements"] = Hex64(h->requirements());
  j["requirement_names"] = RequirementNames(h->requirements());
  j["producer"] = Str(h->producer());
  j["parallel"] = ShardingJson(ShardingOf(view));
  return j;
}

Json MemoryJson(const VerifiedStream& view) {
  const fb::TaskStream& s = *view.root();
  Json j;
  j["arena_bytes"] = s.arena_bytes();
  j["arena_alignment"] = s.arena_alignment();
  j["liveness_lower_bound"] = s.liveness_lower_bound();
  std::optional<double> ratio = ArenaRatio(s);
  j["arena_to_lower_bound"] = ratio ? Json(*ratio) : Json(nullptr);
  j["blob_bytes"] = s.blob_bytes();
  Json roles = Json::object();
  for (const RoleTotal& r : BytesByRole(view))
    roles[std::string(BufferRoleName(r.role))] = {{"buffers", r.buffers},
                                                  {"bytes", r.bytes},
                                                  {"arena", r.arena},
                                                  {"slices", r.slices},
                                                  {"whole_bytes", r.whole_bytes}};
  j["bytes_per_role"] = std::move(roles);
  Json buffers = Json::array();
  if (s.buffers()) {
    for (uint32_t i = 0; i < s.buffers()->size(); ++i) {
      const fb::Buffer* b = s.buffers()->Get(i);
      Json e;
      e["index"] = i;
      e["name"] = Str(b->name());
      e["role"] = std::string(BufferRoleName(b->role()));
      e["dtype"] = DTypeName(b->dtype());
      e["shape"] = ShapeOf(b->shape());
      e["offset"] = b->offset();
      e["bytes"] = b->bytes();
      e["slice"] = b->slice() ? SliceJson(*b->slice()) : Json(nullptr);
      buffers.push_back(std::move(e));
    }
  }
  j["buffers"] = std::move(buffers);
  return j;
}

Json InitializersJson(const VerifiedStream& view) {
  Json list = Json::array();
  if (!view.root()->initializers()) return list;
  for (const fb::Initializer* in : *view.root()->initializers()) {
    Json e;
    e["buffer"] = in->buffer();
    e["name"] = BufferLabel(view, in->buffer());
    const fb::Init* d = in->init();
    const char* kind = d ? fb::EnumNameInitKind(d->kind()) : nullptr;
    e["kind"] = kind && *kind ? Json(kind) : Json(nullptr);
    e["params"] = d ? InitParams(*d) : Json::object();
    list.push_back(std::move(e));
  }
  return list;
}

Json QueuesJson(const VerifiedStream& view) {
  Json list = Json::array();
  if (!view.root()->queues()) return list;
  for (uint32_t q = 0; q < view.root()->queues()->size(); ++q) {
    const fb::QueueSpec* spec = view.root()->queues()->Get(q);
    Json e;
    e["index"] = q;
    e["name"] = Str(spec->name());
    e["capacity"] = spec->capacity();
    e["bytes_per_batch"] = QueueBatchBytes(*spec);
    Json cols = Json::array();
    if (spec->columns())
      for (const fb::QueueColumn* c : *spec->columns()) {
        Json slice = nullptr;
        if (c->slice()) {
          slice = SliceJson(*c->slice());
          slice["reads"] = QueueSliceText(*c);
        }
        cols.push_back({{"name", Str(c->name())},
                        {"dtype", DTypeName(c->dtype())},
                        {"shape", ShapeOf(c->shape())},
                        {"slice", std::move(slice)}});
      }
    e["columns"] = std::move(cols);
    list.push_back(std::move(e));
  }
  return list;
}

Json GroupsJson(const VerifiedStream& view) {
  Json list = Json::array();
  if (!view.root()->groups()) return list;
  for (uint32_t g = 0; g < view.root()->groups()->size(); ++g) {
    const fb::CommGroup* grp = view.root()->groups()->Get(g);
    std::vector<uint32_t> ranks;
    if (grp->ranks()) ranks.assign(grp->ranks()->begin(), grp->ranks()->end());
    list.push_back({{"index", g}, {"name", Str(grp->name())}, {"ranks", ranks}});
  }
  return list;
}

Json TaskJson(const VerifiedStream& view, const fb::Task& task, uint32_t index) {
  TaskInfo info = DescribeTask(view, task);
  Json j;
  j["index"] = index;
  j["kind"] = info.kind;
  j["op"] = info.op.empty() ? Json(nullptr) : Json(info.op);
  j["name"] = info.name;
  j["inputs"] = Names(view, info.inputs);
  j["outputs"] = Names(view, info.outputs);
  j["input_buffers"] = info.inputs;
  j["output_buffers"] = info.outputs;
  j["options"] = std::move(info.attrs);
  return j;
}

Json ProgramJson(const VerifiedStream& view, const fb::Program& p, const DumpOptions& options) {
  Json j;
  j["name"] = Str(p.name());
  j["kind"] = std::string(ProgramKindName(p.kind()));
  j["num_events"] = p.num_events();
  std::vector<int64_t> reports;
  if (p.reports()) reports.assign(p.reports()->begin(), p.reports()->end());
  j["reports"] = Names(view, reports);
  std::vector<int64_t> accumulators;
  if (p.accumulators()) accumulators.assign(p.accumulators()->begin(), p.accumulators()->end());
  j["accumulators"] = Names(view, accumulators);
  Json streams = Json::array();
  if (p.streams()) {
    for (uint32_t st = 0; st < p.streams()->size(); ++st) {
      const fb::Stream* stream = p.streams()->Get(st);
      uint32_t ntasks = stream->tasks() ? stream->tasks()->size() : 0;
      Json s;
      s["index"] = st;
      s["name"] = Str(stream->name());
      s["num_tasks"] = ntasks;
      if (options.tasks) {
        Json tasks = Json::array();
        for (uint32_t i = 0; i < ntasks; ++i) tasks.push_back(TaskJson(view, *stream->tasks()->Get(i), i));
        s["tasks"] = std::move(tasks);
      }
      streams.push_back(std::move(s));
    }
  }
  j["streams"] = std::move(streams);
  Json buckets = Json::array();
  for (const BucketInfo& b : Buckets(view, p))
    buckets.push_back({{"stream", b.stream},
                       {"task", b.task},
                       {"name", b.name},
                       {"group", b.group},
                       {"ranks", b.ranks},
                       {"op", b.op},
                       {"gradients", b.buffers.size()},
                       {"offset", b.offset},
                       {"end", b.end},
                       {"bytes", b.end - b.offset},
                       {"buffers", Names(view, b.buffers)},
                       {"buffer_indices", b.buffers}});
  j["buckets"] = std::move(buckets);
  const std::vector<CollectiveInfo> all = Collectives(view, p);
  Json collectives = Json::array();
  for (const CollectiveInfo& c : all)
    collectives.push_back({{"stream", c.stream},
                           {"task", c.task},
                           {"kind", c.kind},
                           {"purpose", c.purpose},
                           {"name", c.name},
                           {"group", c.group},
                           {"ranks", c.ranks},
                           {"bytes", c.bytes},
                           {"inputs", Names(view, c.inputs)},
                           {"outputs", Names(view, c.outputs)}});
  j["collectives"] = std::move(collectives);
  Json totals = Json::array();
  for (const CollectiveTotal& t : CollectiveTotals(all))
    totals.push_back(
        {{"kind", t.kind}, {"purpose", t.purpose}, {"ranks", t.ranks}, {"count", t.count}, {"bytes", t.bytes}});
  j["collective_totals"] = std::move(totals);
  j["collective_summary"] = CollectiveSummary(CollectiveTotals(all));
  return j;
}

}  // namespace

Json DumpJson(const VerifiedStream& view, const std::string& source, const DumpOptions& options) {
  Json j;
  j["file"] = source;
  j["flatbuffer_bytes"] = view.flatbuffer().size();
  j["header"] = HeaderJson(view);
  j["memory"] = MemoryJson(view);
  j["initializers"] = InitializersJson(view);
  j["queues"] = QueuesJson(view);
  j["groups"] = GroupsJson(view);
  Json programs = Json::array();
  for (const fb::Program* p : SelectPrograms(view, options)) programs.push_back(ProgramJson(view, *p, options));
  j["programs"] = std::move(programs);
  return j;
}

}  // namespace sinkrt::tools
