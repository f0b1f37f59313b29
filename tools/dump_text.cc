// The human-readable rendering: sections of aligned columns.
#include <algorithm>
#include <cstdio>
#include <sstream>

#include "dump_format.h"
#include "sinkrt/runtime/dtype.h"

namespace sinkrt::tools {
namespace {

// Column-aligned rows; numeric columns are right-aligned so that sizes and
// offsets line up by magnitude.
class Table {
 public:
  Table(std::vector<std::string> header, std::vector<bool> right_align) : right_(std::move(right_align)) {
    rows_.push_back(std::move(header));
  }
  void Add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }

  void Print(std::ostream& out, const std::string& indent) const {
    std::vector<size_t> width(rows_.front().size(), 0);
    for (const auto& row : rows_)
      for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
    for (const auto& row : rows_) {
      std::string line = indent;
      for (size_t c = 0; c < row.size(); ++c) {
        std::string pad(width[c] - row[c].size(), ' ');
        bool last = c + 1 == row.size();
        line += right_[c] ? pad + row[c] : (last ? row[c] : row[c] + pad);
        if (!last) line += "  ";
      }
      line.erase(line.find_last_not_of(' ') + 1);
      out << line << '\n';
    }
  }

 private:
  std::vector<bool> right_;
  std::vector<std::vector<std::string>> rows_;
};

std::string Bytes(uint64_t b) { return b < 1024 ? std::to_string(b) : std::to_string(b) + " (" + HumanBytes(b) + ")"; }

// "25.0%": local bytes against the whole tensors'.
std::string Share(uint64_t part, uint64_t whole) {
  if (whole == 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100.0 * static_cast<double>(part) / static_cast<double>(whole));
  return buf;
}

std::string InitKindName(fb::InitKind k) {
  const char* n = fb::EnumNameInitKind(k);
  return (n && *n) ? n : "kind" + std::to_string(int(k));
}

void PrintHeader(const VerifiedStream& view, std::ostream& out) {
  const fb::Header* h = view.root()->header();
  out << "header\n";
  if (!h) {
    out << "  (none)\n";
    return;
  }
  std::vector<std::string> req = RequirementNames(h->requirements());
  std::string req_names;
  for (const std::string& r : req) req_names += (req_names.empty() ? "" : ", ") + r;
  out << "  format        " << h->format_major() << '.' << h->format_minor() << '\n'
      << "  rank          " << h->rank() << " of world size " << h->world_size() << '\n'
      << "  target        " << Str(h->target()) << '\n'
      << "  graph hash    " << Hex64(h->graph_hash()) << '\n'
      << "  requirements  " << Hex64(h->requirements()) << " (" << (req.empty() ? "none" : req_names) << ")\n"
      << "  producer      " << Str(h->producer()) << '\n';
  const std::string parallel = ShardingText(ShardingOf(view));
  if (!parallel.empty()) out << "  parallel      " << parallel << '\n';
}

void PrintRoles(const VerifiedStream& view, bool sharded, std::ostream& out);

void PrintMemory(const VerifiedStream& view, std::ostream& out) {
  const fb::TaskStream& s = *view.root();
  uint32_t n = s.buffers() ? s.buffers()->size() : 0;
  out << "\nmemory plan: " << n << " buffers, arena alignment " << s.arena_alignment() << '\n';
  // A sharded stream's buffers show their layouts; others keep the table as it was.
  const bool sharded = ShardingOf(view).sharded();
  std::vector<std::string> header = {"idx", "name", "role", "dtype", "shape", "offset", "bytes"};
  std::vector<bool> right = {true, false, false, false, false, true, true};
  if (sharded) {
    header.push_back("layout");
    right.push_back(false);
  }
  Table t(std::move(header), std::move(right));
  for (uint32_t i = 0; i < n; ++i) {
    const fb::Buffer* b = s.buffers()->Get(i);
    std::vector<std::string> row = {std::to_string(i),
                                    Str(b->name()),
                                    std::string(BufferRoleName(b->role())),
                                    DTypeName(b->dtype()),
                                    ShapeToString(ShapeOf(b->shape())),
                                    std::to_string(b->offset()),
                                    std::to_string(b->bytes())};
    if (sharded) row.push_back(b->slice() ? LayoutText(*b->slice()) : "");
    t.Add(std::move(row));
  }
  t.Print(out, "  ");
  std::optional<double> ratio = ArenaRatio(s);
  char ratio_text[32] = "n/a";
  if (ratio) std::snprintf(ratio_text, sizeof ratio_text, "%.3f", *ratio);
  out << "  arena                 " << Bytes(s.arena_bytes()) << '\n'
      << "  liveness lower bound  " << Bytes(s.liveness_lower_bound()) << '\n'
      << "  arena / lower bound   " << ratio_text << '\n'
      << "  blob section          " << Bytes(s.blob_bytes()) << '\n';
  PrintRoles(view, sharded, out);
}

// Bytes per role; sharded, also how much of the whole tensors this rank holds.
void PrintRoles(const VerifiedStream& view, bool sharded, std::ostream& out) {
  out << "  bytes per role (in arena: the arena bytes its buffers cover, as transients share space; ParamSlice and\n"
         "  GradSlice are blocks inside a Param or Grad and cover none of their own):\n";
  std::vector<std::string> header = {"role", "buffers", "bytes", "", "in arena"};
  std::vector<bool> right = {false, true, true, false, true};
  if (sharded) {
    header.insert(header.end(), {"slices", "whole tensors", "local / whole"});
    right.insert(right.end(), {true, true, true});
  }
  Table roles(std::move(header), std::move(right));
  const std::vector<RoleTotal> totals = BytesByRole(view);
  for (const RoleTotal& r : totals) {
    std::vector<std::string> row = {std::string(BufferRoleName(r.role)), std::to_string(r.buffers),
                                    std::to_string(r.bytes), HumanBytes(r.bytes), std::to_string(r.arena)};
    if (sharded)
      row.insert(row.end(), {std::to_string(r.slices), std::to_string(r.whole_bytes), Share(r.bytes, r.whole_bytes)});
    roles.Add(std::move(row));
  }
  roles.Print(out, "    ");
  if (!sharded) return;
  // The sharding's memory claim in one line: what this rank keeps of the
  // trained state, against the whole model's.
  uint64_t state = 0, whole = 0;
  for (const RoleTotal& r : totals)
    if (r.role == fb::BufferRole::Param || r.role == fb::BufferRole::Grad || r.role == fb::BufferRole::OptState) {
      state += r.bytes;
      whole += r.whole_bytes;
    }
  out << "  this rank holds " << CountBytes(state) << " of " << CountBytes(whole)
      << " of parameters, gradients and optimizer state (" << Share(state, whole) << ")\n";
}

void PrintInitializers(const VerifiedStream& view, std::ostream& out) {
  const auto* inits = view.root()->initializers();
  uint32_t n = inits ? inits->size() : 0;
  out << "\ninitializers: " << n << '\n';
  if (!n) return;
  Table t({"idx", "buffer", "kind", "parameters"}, {true, false, false, false});
  for (uint32_t i = 0; i < n; ++i) {
    const fb::Initializer* in = inits->Get(i);
    const fb::Init* d = in->init();
    t.Add({std::to_string(i), BufferLabel(view, in->buffer()), d ? InitKindName(d->kind()) : "(missing)",
           d ? AttrsText(InitParams(*d)) : ""});
  }
  t.Print(out, "  ");
}

void PrintQueues(const VerifiedStream& view, std::ostream& out) {
  const auto* queues = view.root()->queues();
  uint32_t n = queues ? queues->size() : 0;
  out << "\nqueues: " << n << '\n';
  for (uint32_t q = 0; q < n; ++q) {
    const fb::QueueSpec* spec = queues->Get(q);
    out << "  " << q << " '" << Str(spec->name()) << "': capacity " << spec->capacity() << ", "
        << Bytes(QueueBatchBytes(*spec)) << " per batch\n";
    if (!spec->columns()) continue;
    bool sliced = false;
    for (const fb::QueueColumn* c : *spec->columns()) sliced = sliced || c->slice();
    std::vector<std::string> header = {"column", "dtype", "shape"};
    if (sliced) header.insert(header.end(), {"slice", "layout"});
    Table t(header, std::vector<bool>(header.size(), false));
    const uint32_t rank = view.root()->header() ? view.root()->header()->rank() : 0;
    for (const fb::QueueColumn* c : *spec->columns()) {
      std::vector<std::string> row = {Str(c->name()), DTypeName(c->dtype()), ShapeToString(ShapeOf(c->shape()))};
      if (sliced && c->slice())
        row.insert(row.end(),
                   {"rank " + std::to_string(rank) + " reads " + QueueSliceText(*c), LayoutText(*c->slice())});
      else if (sliced)
        row.insert(row.end(), {"whole", ""});
      t.Add(std::move(row));
    }
    t.Print(out, "      ");
  }
}

void PrintGroups(const VerifiedStream& view, std::ostream& out) {
  const auto* groups = view.root()->groups();
  uint32_t n = groups ? groups->size() : 0;
  out << "\ncommunicator groups: " << n << '\n';
  for (uint32_t g = 0; g < n; ++g) {
    const fb::CommGroup* grp = groups->Get(g);
    std::string ranks;
    if (grp->ranks())
      for (uint32_t r : *grp->ranks()) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    out << "  " << g << " '" << Str(grp->name()) << "': ranks [" << ranks << "]\n";
  }
}

// The fused gradient AllReduces, shown even with --no-tasks: what a data
// parallel step communicates, bucket by bucket.
void PrintBuckets(const VerifiedStream& view, const fb::Program& p, std::ostream& out) {
  std::vector<BucketInfo> buckets = Buckets(view, p);
  if (buckets.empty()) return;
  uint64_t total = 0;
  for (const BucketInfo& b : buckets) total += b.end - b.offset;
  out << "  buckets: " << buckets.size() << (buckets.size() == 1 ? " AllReduce" : " AllReduces") << " over "
      << Bytes(total) << '\n';
  Table t({"bucket", "stream", "task", "name", "group", "ranks", "op", "gradients", "bytes [offset, end)", "bytes",
           "buffers"},
          {true, true, true, false, false, false, false, true, false, true, false});
  for (size_t i = 0; i < buckets.size(); ++i) {
    const BucketInfo& b = buckets[i];
    t.Add({std::to_string(i), std::to_string(b.stream), std::to_string(b.task), b.name, b.group, RanksText(b.ranks),
           b.op, std::to_string(b.buffers.size()), RangeText(b.offset, b.end), std::to_string(b.end - b.offset),
           NamesText(view, b.buffers)});
  }
  t.Print(out, "    ");
}

// Every communication task but the buckets (listed below it) and every
// ShardSlice, shown even with --no-tasks: what the sharding costs per step.
void PrintCollectives(const VerifiedStream& view, const fb::Program& p, std::ostream& out) {
  const std::vector<CollectiveInfo> all = Collectives(view, p);
  if (all.empty()) return;
  out << "  collectives: " << CollectiveSummary(CollectiveTotals(all)) << '\n';
  Table t({"stream", "task", "kind", "purpose", "name", "group", "ranks", "bytes/rank", "inputs -> outputs"},
          {true, true, false, false, false, false, false, true, false});
  bool any = false;
  for (const CollectiveInfo& c : all) {
    if (c.purpose == "gradient bucket") continue;
    any = true;
    t.Add({std::to_string(c.stream), std::to_string(c.task), c.kind, c.purpose, c.name, c.group, RanksText(c.ranks),
           std::to_string(c.bytes), NamesText(view, c.inputs) + " -> " + NamesText(view, c.outputs)});
  }
  if (any) t.Print(out, "    ");
}

void PrintProgram(const VerifiedStream& view, const fb::Program& p, const DumpOptions& options, std::ostream& out) {
  uint32_t nstreams = p.streams() ? p.streams()->size() : 0;
  std::vector<int64_t> reports;
  if (p.reports()) reports.assign(p.reports()->begin(), p.reports()->end());
  out << "\nprogram '" << Str(p.name()) << "' (" << ProgramKindName(p.kind()) << "): " << nstreams
      << (nstreams == 1 ? " stream, " : " streams, ") << p.num_events() << " events, reports ["
      << (reports.empty() ? "" : NamesText(view, reports)) << "]\n";
  // Format 1.4: the sums the device zeroes when a sink starts (sunk eval).
  if (p.accumulators() && p.accumulators()->size() > 0) {
    std::vector<int64_t> acc(p.accumulators()->begin(), p.accumulators()->end());
    out << "  accumulators [" << NamesText(view, acc) << "], zeroed when a sink starts\n";
  }
  for (uint32_t st = 0; st < nstreams; ++st) {
    const fb::Stream* stream = p.streams()->Get(st);
    uint32_t ntasks = stream->tasks() ? stream->tasks()->size() : 0;
    out << "  stream " << st << " '" << Str(stream->name()) << "': " << ntasks
        << (ntasks == 1 ? " task\n" : " tasks\n");
    if (!options.tasks || !ntasks) continue;
    Table t({"idx", "kind", "op", "name", "inputs -> outputs", "options"}, {true, false, false, false, false, false});
    for (uint32_t i = 0; i < ntasks; ++i) {
      TaskInfo info = DescribeTask(view, *stream->tasks()->Get(i));
      t.Add({std::to_string(i), info.kind, info.op.empty() ? "-" : info.op, info.name,
             NamesText(view, info.inputs) + " -> " + NamesText(view, info.outputs), AttrsText(info.attrs)});
    }
    t.Print(out, "    ");
  }
  PrintCollectives(view, p, out);
  PrintBuckets(view, p, out);
}

}  // namespace

std::string DumpText(const VerifiedStream& view, const std::string& source, const DumpOptions& options) {
  std::ostringstream out;
  out << "task stream " << source << ": " << view.flatbuffer().size() << " bytes of FlatBuffer, " << view.blobs().size()
      << " bytes of blobs\n\n";
  PrintHeader(view, out);
  PrintMemory(view, out);
  PrintInitializers(view, out);
  PrintQueues(view, out);
  PrintGroups(view, out);
  for (const fb::Program* p : SelectPrograms(view, options)) PrintProgram(view, *p, options, out);
  return out.str();
}

}  // namespace sinkrt::tools
