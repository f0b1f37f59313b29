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
  Table(std::vector<std::string> header, std::vector<bool> right_align)
      : right_(std::move(right_align)) {
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
}

void PrintMemory(const VerifiedStream& view, std::ostream& out) {
  const fb::TaskStream& s = *view.root();
  uint32_t n = s.buffers() ? s.buffers()->size() : 0;
  out << "\nmemory plan: " << n << " buffers, arena alignment " << s.arena_alignment() << '\n';
  Table t({"idx", "name", "role", "dtype", "shape", "offset", "bytes"},
          {true, false, false, false, false, true, true});
  for (uint32_t i = 0; i < n; ++i) {
    const fb::Buffer* b = s.buffers()->Get(i);
    t.Add({std::to_string(i), Str(b->name()), std::string(BufferRoleName(b->role())), DTypeName(b->dtype()),
           ShapeToString(ShapeOf(b->shape())), std::to_string(b->offset()), std::to_string(b->bytes())});
  }
  t.Print(out, "  ");
  std::optional<double> ratio = ArenaRatio(s);
  char ratio_text[32] = "n/a";
  if (ratio) std::snprintf(ratio_text, sizeof ratio_text, "%.3f", *ratio);
  out << "  arena                 " << Bytes(s.arena_bytes()) << '\n'
      << "  liveness lower bound  " << Bytes(s.liveness_lower_bound()) << '\n'
      << "  arena / lower bound   " << ratio_text << '\n'
      << "  blob section          " << Bytes(s.blob_bytes()) << '\n'
      << "  bytes per role:\n";
  Table roles({"role", "buffers", "bytes", ""}, {false, true, true, false});
  for (const RoleTotal& r : BytesByRole(view))
    roles.Add({std::string(BufferRoleName(r.role)), std::to_string(r.buffers), std::to_string(r.bytes),
               HumanBytes(r.bytes)});
  roles.Print(out, "    ");
}

void PrintInitializers(const VerifiedStream& view, std::ostream& out) {
  const auto* inits = view.root()->initializers();
  uint32_t n = inits ? inits->size() : 0;
  out << "\ninitializers: " << n << '\n';
  if (!n) return;
  Table t({"idx", "buffer", "kind", "parameters"}, {true, false, false, false});
  for (uint32_t i = 0; i < n; ++i) {
    const fb::Initializer* in = inits->Get(i);
    const fb::InitDef* d = in->init();
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
    Table t({"column", "dtype", "shape"}, {false, false, false});
    for (const fb::QueueColumn* c : *spec->columns())
      t.Add({Str(c->name()), DTypeName(c->dtype()), ShapeToString(ShapeOf(c->shape()))});
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
  Table t({"bucket", "stream", "task", "name", "group", "op", "gradients", "bytes [offset, end)", "bytes", "buffers"},
          {true, true, true, false, false, false, true, false, true, false});
  for (size_t i = 0; i < buckets.size(); ++i) {
    const BucketInfo& b = buckets[i];
    t.Add({std::to_string(i), std::to_string(b.stream), std::to_string(b.task), b.name, b.group, b.op,
           std::to_string(b.buffers.size()), RangeText(b.offset, b.end),
           std::to_string(b.end - b.offset), NamesText(view, b.buffers)});
  }
  t.Print(out, "    ");
}

void PrintProgram(const VerifiedStream& view, const fb::Program& p, const DumpOptions& options, std::ostream& out) {
  uint32_t nstreams = p.streams() ? p.streams()->size() : 0;
  std::vector<int64_t> reports;
  if (p.reports()) reports.assign(p.reports()->begin(), p.reports()->end());
  out << "\nprogram '" << Str(p.name()) << "' (" << ProgramKindName(p.kind()) << "): " << nstreams
      << (nstreams == 1 ? " stream, " : " streams, ") << p.num_events() << " events, reports ["
      << (reports.empty() ? "" : NamesText(view, reports)) << "]\n";
  for (uint32_t st = 0; st < nstreams; ++st) {
    const fb::Stream* stream = p.streams()->Get(st);
    uint32_t ntasks = stream->tasks() ? stream->tasks()->size() : 0;
    out << "  stream " << st << " '" << Str(stream->name()) << "': " << ntasks << (ntasks == 1 ? " task\n" : " tasks\n");
    if (!options.tasks || !ntasks) continue;
    Table t({"idx", "kind", "op", "name", "inputs -> outputs", "options"},
            {true, false, false, false, false, false});
    for (uint32_t i = 0; i < ntasks; ++i) {
      TaskInfo info = DescribeTask(view, *stream->tasks()->Get(i));
      t.Add({std::to_string(i), info.kind, info.op.empty() ? "-" : info.op, info.name,
             NamesText(view, info.inputs) + " -> " + NamesText(view, info.outputs), AttrsText(info.attrs)});
    }
    t.Print(out, "    ");
  }
  PrintBuckets(view, p, out);
}

}  // namespace

std::string DumpText(const VerifiedStream& view, const std::string& source, const DumpOptions& options) {
  std::ostringstream out;
  out << "task stream " << source << ": " << view.flatbuffer().size() << " bytes of FlatBuffer, "
      << view.blobs().size() << " bytes of blobs\n\n";
  PrintHeader(view, out);
  PrintMemory(view, out);
  PrintInitializers(view, out);
  PrintQueues(view, out);
  PrintGroups(view, out);
  for (const fb::Program* p : SelectPrograms(view, options)) PrintProgram(view, *p, options, out);
  return out.str();
}

}  // namespace sinkrt::tools
