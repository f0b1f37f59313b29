// sinkdump --diff: what differs between two verified task streams, as JSON.
//
// Table entries with names (buffers, queues, groups) are matched by name:
// two compiles of one network name everything alike while indices and
// offsets shift. Programs are matched by kind; streams and tasks by
// position, the order a device runs them in. Tasks compare as their
// one-line descriptions, which name buffers rather than index them, so a
// buffer added to the table does not make every task differ.
#include <algorithm>
#include <map>
#include <utility>

#include "dump_format.h"
#include "sinkrt/runtime/dtype.h"

namespace sinkrt::tools {
namespace {

// A named table entry: `fields` are compared one by one and are also what an
// added or removed entry shows.
struct Entry {
  std::string name;
  Json fields;  // object, without the name
};

void AddChange(Json& changes, const std::string& field, const Json& a, const Json& b) {
  if (a != b) changes.push_back({{"field", field}, {"a", a}, {"b", b}});
}

// Field-by-field changes between two objects with the same keys; a key only
// one side has compares with null.
Json FieldChanges(const Json& a, const Json& b) {
  Json changes = Json::array();
  for (const auto& [key, value] : a.items()) AddChange(changes, key, value, b.contains(key) ? b[key] : Json());
  for (const auto& [key, value] : b.items())
    if (!a.contains(key)) AddChange(changes, key, Json(), value);
  return changes;
}

Json Shown(const Entry& e) {
  Json j = {{"name", e.name}};
  j.update(e.fields);
  return j;
}

// {"added": [...], "removed": [...], "changed": [{"name", "changes"}]}, or
// null when the tables agree. A name that repeats matches the same
// occurrence on the other side.
Json DiffEntries(const std::vector<Entry>& a, const std::vector<Entry>& b) {
  std::map<std::string, std::vector<size_t>> in_b;
  for (size_t i = 0; i < b.size(); ++i) in_b[b[i].name].push_back(i);
  std::vector<bool> matched(b.size(), false);
  Json added = Json::array(), removed = Json::array(), changed = Json::array();
  for (const Entry& e : a) {
    std::vector<size_t>& candidates = in_b[e.name];
    if (candidates.empty()) {
      removed.push_back(Shown(e));
      continue;
    }
    size_t j = candidates.front();
    candidates.erase(candidates.begin());
    matched[j] = true;
    Json changes = FieldChanges(e.fields, b[j].fields);
    if (!changes.empty()) changed.push_back({{"name", e.name}, {"changes", std::move(changes)}});
  }
  for (size_t j = 0; j < b.size(); ++j)
    if (!matched[j]) added.push_back(Shown(b[j]));
  if (added.empty() && removed.empty() && changed.empty()) return nullptr;
  return {{"a_count", a.size()},
          {"b_count", b.size()},
          {"added", std::move(added)},
          {"removed", std::move(removed)},
          {"changed", std::move(changed)}};
}

// Header fields and the stream-wide sizes next to them, in text-dump order.
Json HeaderFields(const fb::TaskStream& s) {
  const fb::Header* h = s.header();
  Json j;
  j["format_version"] = h ? Json(std::to_string(h->format_major()) + "." + std::to_string(h->format_minor())) : Json();
  j["rank"] = h ? Json(h->rank()) : Json();
  j["world_size"] = h ? Json(h->world_size()) : Json();
  j["target"] = h ? Json(Str(h->target())) : Json();
  j["graph_hash"] = h ? Json(Hex64(h->graph_hash())) : Json();
  std::string features;
  for (const std::string& f : RequirementNames(h ? h->requirements() : 0))
    features += (features.empty() ? "" : ", ") + f;
  j["features"] = features.empty() ? "none" : features;
  j["producer"] = h ? Json(Str(h->producer())) : Json();
  j["arena_bytes"] = s.arena_bytes();
  j["arena_alignment"] = s.arena_alignment();
  j["liveness_lower_bound"] = s.liveness_lower_bound();
  return j;
}

// The entry's name, or "#<index>" when it has none. Appends: GCC 12 warns
// (-Wrestrict) on "#" + temporaries.
std::string EntryName(const flatbuffers::String* name, uint32_t index) {
  std::string s = Str(name);
  if (!s.empty()) return s;
  s = "#";
  s += std::to_string(index);
  return s;
}

std::string InitText(const fb::Init* d) {
  if (!d) return "(missing)";
  const char* kind = fb::EnumNameInitKind(d->kind());
  std::string s = (kind && *kind) ? kind : "kind" + std::to_string(int(d->kind()));
  std::string params = AttrsText(InitParams(*d));
  return params.empty() ? s : s + " " + params;
}

std::vector<Entry> BufferEntries(const VerifiedStream& view) {
  std::vector<Entry> out;
  const fb::TaskStream& s = *view.root();
  if (!s.buffers()) return out;
  // A buffer's initialiser belongs to it: a changed seed or fill value is a
  // change of that buffer.
  std::map<uint32_t, std::string> init;
  if (s.initializers())
    for (const fb::Initializer* in : *s.initializers()) init[in->buffer()] = InitText(in->init());
  for (uint32_t i = 0; i < s.buffers()->size(); ++i) {
    const fb::Buffer* b = s.buffers()->Get(i);
    Json f;
    f["role"] = std::string(BufferRoleName(b->role()));
    f["dtype"] = DTypeName(b->dtype());
    f["shape"] = ShapeOf(b->shape());
    f["offset"] = b->offset();
    f["bytes"] = b->bytes();
    auto it = init.find(i);
    f["init"] = it == init.end() ? Json() : Json(it->second);
    out.push_back({BufferLabel(view, i), std::move(f)});
  }
  return out;
}

// Columns are flattened to "image.shape" and the like, so a changed batch
// size reads as the shapes that changed rather than one opaque column list.
std::vector<Entry> QueueEntries(const VerifiedStream& view) {
  std::vector<Entry> out;
  const auto* queues = view.root()->queues();
  if (!queues) return out;
  for (uint32_t q = 0; q < queues->size(); ++q) {
    const fb::QueueSpec* spec = queues->Get(q);
    Json f;
    f["capacity"] = spec->capacity();
    f["bytes_per_batch"] = QueueBatchBytes(*spec);
    std::vector<std::string> names;
    Json columns;
    if (spec->columns()) {
      for (const fb::QueueColumn* c : *spec->columns()) {
        std::string name = Str(c->name());
        names.push_back(name);
        columns[name + ".dtype"] = DTypeName(c->dtype());
        columns[name + ".shape"] = ShapeOf(c->shape());
      }
    }
    f["columns"] = names;
    if (!columns.is_null()) f.update(columns);
    out.push_back({EntryName(spec->name(), q), std::move(f)});
  }
  return out;
}

std::vector<Entry> GroupEntries(const VerifiedStream& view) {
  std::vector<Entry> out;
  const auto* groups = view.root()->groups();
  if (!groups) return out;
  for (uint32_t g = 0; g < groups->size(); ++g) {
    const fb::CommGroup* grp = groups->Get(g);
    std::vector<uint32_t> ranks;
    if (grp->ranks()) ranks.assign(grp->ranks()->begin(), grp->ranks()->end());
    out.push_back({EntryName(grp->name(), g), {{"ranks", ranks}}});
  }
  return out;
}

std::vector<std::string> TaskLines(const VerifiedStream& view, const fb::Stream* stream) {
  std::vector<std::string> lines;
  if (stream && stream->tasks())
    for (const fb::Task* t : *stream->tasks()) lines.push_back(TaskLine(view, DescribeTask(view, *t)));
  return lines;
}

// One stream position of a program; null when both sides run the same tasks.
Json DiffStream(const VerifiedStream& va, const fb::Stream* a, const VerifiedStream& vb, const fb::Stream* b,
                uint32_t index, const DumpOptions& options) {
  std::vector<std::string> la = TaskLines(va, a), lb = TaskLines(vb, b);
  Json changes = Json::array();
  AddChange(changes, "name", a ? Json(Str(a->name())) : Json(), b ? Json(Str(b->name())) : Json());
  Json tasks = Json::array();
  size_t differing = 0;
  for (size_t i = 0; i < std::max(la.size(), lb.size()); ++i) {
    Json ta = i < la.size() ? Json(la[i]) : Json(), tb = i < lb.size() ? Json(lb[i]) : Json();
    if (ta == tb) continue;
    ++differing;
    if (options.tasks) tasks.push_back({{"index", i}, {"a", std::move(ta)}, {"b", std::move(tb)}});
  }
  if (changes.empty() && differing == 0) return nullptr;
  Json j;
  j["index"] = index;
  j["name"] = Str((b ? b : a)->name());
  j["changes"] = std::move(changes);
  j["a_tasks"] = a ? Json(la.size()) : Json();
  j["b_tasks"] = b ? Json(lb.size()) : Json();
  j["differing_tasks"] = differing;
  if (options.tasks) j["tasks"] = std::move(tasks);
  return j;
}

std::vector<int64_t> Reports(const fb::Program& p) {
  return p.reports() ? std::vector<int64_t>(p.reports()->begin(), p.reports()->end()) : std::vector<int64_t>{};
}

std::vector<int64_t> Accumulators(const fb::Program& p) {
  return p.accumulators() ? std::vector<int64_t>(p.accumulators()->begin(), p.accumulators()->end())
                          : std::vector<int64_t>{};
}

Json DiffProgram(const VerifiedStream& va, const fb::Program& a, const VerifiedStream& vb, const fb::Program& b,
                 const DumpOptions& options) {
  uint32_t na = a.streams() ? a.streams()->size() : 0, nb = b.streams() ? b.streams()->size() : 0;
  Json changes = Json::array();
  AddChange(changes, "name", Str(a.name()), Str(b.name()));
  AddChange(changes, "streams", na, nb);
  AddChange(changes, "num_events", a.num_events(), b.num_events());
  AddChange(changes, "reports", NamesText(va, Reports(a)), NamesText(vb, Reports(b)));
  AddChange(changes, "accumulators", NamesText(va, Accumulators(a)), NamesText(vb, Accumulators(b)));
  Json streams = Json::array();
  for (uint32_t st = 0; st < std::max(na, nb); ++st) {
    Json s = DiffStream(va, st < na ? a.streams()->Get(st) : nullptr, vb, st < nb ? b.streams()->Get(st) : nullptr, st,
                        options);
    if (!s.is_null()) streams.push_back(std::move(s));
  }
  if (changes.empty() && streams.empty()) return nullptr;
  return {{"kind", std::string(ProgramKindName(b.kind()))},
          {"changes", std::move(changes)},
          {"streams", std::move(streams)}};
}

std::map<fb::ProgramKind, const fb::Program*> ProgramsByKind(const VerifiedStream& view, const DumpOptions& options) {
  std::map<fb::ProgramKind, const fb::Program*> out;
  for (const fb::Program* p : SelectPrograms(view, options)) out.emplace(p->kind(), p);
  return out;
}

Json DiffPrograms(const VerifiedStream& a, const VerifiedStream& b, const DumpOptions& options) {
  auto pa = ProgramsByKind(a, options), pb = ProgramsByKind(b, options);
  Json added = Json::array(), removed = Json::array(), changed = Json::array();
  for (const auto& [kind, p] : pa) {
    auto it = pb.find(kind);
    if (it == pb.end()) {
      removed.push_back(std::string(ProgramKindName(kind)));
    } else if (Json d = DiffProgram(a, *p, b, *it->second, options); !d.is_null()) {
      changed.push_back(std::move(d));
    }
  }
  for (const auto& [kind, p] : pb)
    if (!pa.count(kind)) added.push_back(std::string(ProgramKindName(kind)));
  if (added.empty() && removed.empty() && changed.empty()) return nullptr;
  return {{"added", std::move(added)}, {"removed", std::move(removed)}, {"changed", std::move(changed)}};
}

Json BucketJson(const VerifiedStream& view, const BucketInfo& b) {
  Json names = Json::array();
  for (int64_t i : b.buffers) names.push_back(BufferLabel(view, i));
  return {{"name", b.name},
          {"group", b.group},
          {"op", b.op},
          {"gradients", b.buffers.size()},
          {"offset", b.offset},
          {"end", b.end},
          {"bytes", b.end - b.offset},
          {"buffers", std::move(names)}};
}

Json BucketTotals(const std::vector<BucketInfo>& buckets) {
  uint64_t bytes = 0;
  for (const BucketInfo& b : buckets) bytes += b.end - b.offset;
  return {{"count", buckets.size()}, {"bytes", bytes}};
}

// Fusion buckets by position, per program kind: what each step communicates.
// Where a bucket's task sits is left to the programs section, so a bucket
// that only moved within its stream is not reported here too.
Json DiffBuckets(const VerifiedStream& a, const VerifiedStream& b, const DumpOptions& options) {
  auto pa = ProgramsByKind(a, options), pb = ProgramsByKind(b, options);
  std::vector<fb::ProgramKind> kinds;
  for (const auto& [kind, p] : pa) kinds.push_back(kind);
  for (const auto& [kind, p] : pb)
    if (!pa.count(kind)) kinds.push_back(kind);
  std::sort(kinds.begin(), kinds.end());
  Json out = Json::array();
  for (fb::ProgramKind kind : kinds) {
    std::vector<BucketInfo> ba = pa.count(kind) ? Buckets(a, *pa[kind]) : std::vector<BucketInfo>{};
    std::vector<BucketInfo> bb = pb.count(kind) ? Buckets(b, *pb[kind]) : std::vector<BucketInfo>{};
    Json changed = Json::array();
    for (size_t i = 0; i < std::max(ba.size(), bb.size()); ++i) {
      Json ja = i < ba.size() ? BucketJson(a, ba[i]) : Json(), jb = i < bb.size() ? BucketJson(b, bb[i]) : Json();
      if (ja != jb) changed.push_back({{"index", i}, {"a", std::move(ja)}, {"b", std::move(jb)}});
    }
    if (changed.empty()) continue;
    out.push_back({{"program", std::string(ProgramKindName(kind))},
                   {"a", BucketTotals(ba)},
                   {"b", BucketTotals(bb)},
                   {"changed", std::move(changed)}});
  }
  return out.empty() ? Json() : out;
}

// ---- sharded streams: layouts, collectives, memory per role ----------------

// A buffer's local shape and layout: "[32,32] of [32,64] dm [1,1,2] map
// (1,0) at [0,32]", or "[32,64] whole" for a buffer that is not a slice.
Json LayoutEntry(const fb::Buffer& b) {
  std::string text = ShapeToString(ShapeOf(b.shape()));
  text += b.slice() ? " " + LayoutText(*b.slice()) : std::string(" whole");
  return {{"shape", ShapeOf(b.shape())},
          {"layout", b.slice() ? Json(LayoutText(*b.slice())) : Json()},
          {"text", std::move(text)}};
}

// Buffers both streams have (by name) whose layout or local shape differs:
// where two strategies shard a network apart. A buffer only one side has is
// the buffers section's.
Json DiffLayouts(const VerifiedStream& a, const VerifiedStream& b) {
  std::map<std::string, const fb::Buffer*> in_b;
  if (b.root()->buffers())
    for (uint32_t i = 0; i < b.root()->buffers()->size(); ++i)
      in_b.emplace(BufferLabel(b, i), b.root()->buffers()->Get(i));
  Json changed = Json::array();
  if (a.root()->buffers())
    for (uint32_t i = 0; i < a.root()->buffers()->size(); ++i) {
      auto it = in_b.find(BufferLabel(a, i));
      if (it == in_b.end()) continue;  // the buffers section lists what only one side has
      Json ja = LayoutEntry(*a.root()->buffers()->Get(i)), jb = LayoutEntry(*it->second);
      if (ja["text"] == jb["text"]) continue;
      changed.push_back({{"name", it->first}, {"a", std::move(ja)}, {"b", std::move(jb)}});
    }
  if (changed.empty()) return nullptr;
  return {{"a_slices", ShardingOf(a).sliced_buffers},
          {"b_slices", ShardingOf(b).sliced_buffers},
          {"changed", std::move(changed)}};
}

// "AllReduce forward [0, 1] 320": a collective as the multiset compares it;
// its name and position are the programs section's business.
Json CollectiveKey(const CollectiveInfo& c) {
  return {{"kind", c.kind}, {"purpose", c.purpose}, {"group", c.group}, {"ranks", c.ranks}, {"bytes", c.bytes}};
}

// Collectives present in one program and not the other, by kind, purpose,
// group and bytes, with how many of each; and both summaries.
Json DiffCollectives(const VerifiedStream& a, const VerifiedStream& b, const DumpOptions& options) {
  auto pa = ProgramsByKind(a, options), pb = ProgramsByKind(b, options);
  std::vector<fb::ProgramKind> kinds;
  for (const auto& [kind, p] : pa) kinds.push_back(kind);
  for (const auto& [kind, p] : pb)
    if (!pa.count(kind)) kinds.push_back(kind);
  std::sort(kinds.begin(), kinds.end());
  Json out = Json::array();
  for (fb::ProgramKind kind : kinds) {
    const std::vector<CollectiveInfo> ca = pa.count(kind) ? Collectives(a, *pa[kind]) : std::vector<CollectiveInfo>{};
    const std::vector<CollectiveInfo> cb = pb.count(kind) ? Collectives(b, *pb[kind]) : std::vector<CollectiveInfo>{};
    // Counted by key, in order of first appearance (a's, then b's).
    std::vector<std::pair<Json, std::pair<int64_t, int64_t>>> counts;
    auto count = [&](const CollectiveInfo& c, bool in_a) {
      Json key = CollectiveKey(c);
      auto it = std::find_if(counts.begin(), counts.end(), [&](const auto& e) { return e.first == key; });
      if (it == counts.end()) {
        counts.push_back({std::move(key), {0, 0}});
        it = counts.end() - 1;
      }
      ++(in_a ? it->second.first : it->second.second);
    };
    for (const CollectiveInfo& c : ca) count(c, true);
    for (const CollectiveInfo& c : cb) count(c, false);
    Json only_a = Json::array(), only_b = Json::array();
    for (const auto& [key, n] : counts) {
      if (n.first > n.second) {
        Json e = key;
        e["count"] = n.first - n.second;
        only_a.push_back(std::move(e));
      } else if (n.second > n.first) {
        Json e = key;
        e["count"] = n.second - n.first;
        only_b.push_back(std::move(e));
      }
    }
    if (only_a.empty() && only_b.empty()) continue;
    out.push_back({{"program", std::string(ProgramKindName(kind))},
                   {"a", CollectiveSummary(CollectiveTotals(ca))},
                   {"b", CollectiveSummary(CollectiveTotals(cb))},
                   {"only_a", std::move(only_a)},
                   {"only_b", std::move(only_b)}});
  }
  return out.empty() ? Json() : out;
}

// The arena and each role's bytes (and the whole tensors' bytes) side by
// side; null when they agree.
Json DiffMemory(const VerifiedStream& a, const VerifiedStream& b) {
  auto totals = [](const VerifiedStream& v) {
    std::map<std::string, RoleTotal> m;
    for (const RoleTotal& r : BytesByRole(v)) m.emplace(std::string(BufferRoleName(r.role)), r);
    return m;
  };
  const auto ta = totals(a), tb = totals(b);
  auto side = [](const std::map<std::string, RoleTotal>& t, const std::string& role) -> Json {
    auto it = t.find(role);
    if (it == t.end()) return nullptr;
    return {{"bytes", it->second.bytes}, {"arena", it->second.arena}, {"whole_bytes", it->second.whole_bytes}};
  };
  Json roles = Json::array();
  bool differ = a.root()->arena_bytes() != b.root()->arena_bytes();
  // Role order, as the dump lists them.
  constexpr int kRoles = static_cast<int>(fb::BufferRole::MAX) + 1;
  for (int r = 0; r < kRoles; ++r) {
    const std::string role(BufferRoleName(static_cast<fb::BufferRole>(r)));
    Json ja = side(ta, role), jb = side(tb, role);
    if (ja.is_null() && jb.is_null()) continue;
    differ = differ || ja != jb;
    roles.push_back({{"role", role}, {"a", std::move(ja)}, {"b", std::move(jb)}});
  }
  if (!differ) return nullptr;
  return {{"arena_bytes", {{"a", a.root()->arena_bytes()}, {"b", b.root()->arena_bytes()}}},
          {"roles", std::move(roles)}};
}

bool SameBytes(std::span<const uint8_t> a, std::span<const uint8_t> b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}

}  // namespace

Json DiffJson(const VerifiedStream& a, const std::string& a_source, const VerifiedStream& b,
              const std::string& b_source, const DumpOptions& options) {
  Json j;
  j["a"] = a_source;
  j["b"] = b_source;
  j["identical"] = false;  // both filled in last; here for the key order
  j["graph_hash"] = nullptr;
  j["sections"] = Json::array();
  Json sections = Json::array();
  auto add = [&](const char* section, Json d) {
    if (d.is_null() || (d.is_array() && d.empty())) return;
    sections.push_back(section);
    j[section] = std::move(d);
  };
  // Two sharded compiles (two strategies of one network, or one against a
  // replicated compile) first say how they shard apart; streams where
  // neither side is sharded diff as they always have.
  const bool sharded = ShardingOf(a).sharded() || ShardingOf(b).sharded();
  add("header", FieldChanges(HeaderFields(*a.root()), HeaderFields(*b.root())));
  if (sharded) {
    add("memory", DiffMemory(a, b));
    add("layouts", DiffLayouts(a, b));
    add("collectives", DiffCollectives(a, b, options));
  }
  add("buffers", DiffEntries(BufferEntries(a), BufferEntries(b)));
  add("queues", DiffEntries(QueueEntries(a), QueueEntries(b)));
  add("groups", DiffEntries(GroupEntries(a), GroupEntries(b)));
  add("programs", DiffPrograms(a, b, options));
  add("buckets", DiffBuckets(a, b, options));
  if (!SameBytes(a.blobs(), b.blobs()))
    add("blob", {{"a_bytes", a.blobs().size()}, {"b_bytes", b.blobs().size()}, {"equal", false}});
  // Nothing above differs but the FlatBuffers do (another writer's layout, or
  // a field sinkdump does not show): still not identical files.
  if (sections.empty() && !options.program && !SameBytes(a.flatbuffer(), b.flatbuffer()))
    add("layout", {{"a_bytes", a.flatbuffer().size()}, {"b_bytes", b.flatbuffer().size()}});
  j["identical"] = sections.empty();
  const fb::Header *ha = a.root()->header(), *hb = b.root()->header();
  if (ha && hb && ha->graph_hash() == hb->graph_hash()) j["graph_hash"] = Hex64(ha->graph_hash());
  j["sections"] = std::move(sections);
  return j;
}

}  // namespace sinkrt::tools
