// The text rendering of sinkdump --diff, read from DiffJson's document so the
// two forms always carry the same differences. Like diff -u: "-" is the
// first file, "+" the second, and "~" an entry both have that changed. Long
// lists stop after `limit` entries: the point is one screen.
#include <algorithm>
#include <sstream>

#include "dump_format.h"

namespace sinkrt::tools {
namespace {

// "[8, 16]" for shapes, "-" for an absent value, strings unquoted; an
// object (a queue column) as its values separated by spaces.
std::string ValueText(const Json& v);

std::string Joined(const Json& items, const char* separator) {
  std::string s;
  for (const auto& item : items) s += (s.empty() ? "" : separator) + ValueText(item);
  return s;
}

std::string ValueText(const Json& v) {
  if (v.is_null()) return "-";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_array()) {
    std::string s = "[";  // appends: GCC 12 warns (-Wrestrict) on "[" + temporaries
    s += Joined(v, ", ");
    s += ']';
    return s;
  }
  if (v.is_object()) return Joined(v, " ");
  return v.dump();
}

std::string FieldName(std::string field) {
  for (char& c : field)
    if (c == '_') c = ' ';
  return field;
}

// "shape [8, 16] -> [16, 16], bytes 512 -> 1024".
std::string ChangesText(const Json& changes) {
  std::string s;
  for (const Json& c : changes) {
    if (!s.empty()) s += ", ";
    s += FieldName(c["field"].get<std::string>()) + " " + ValueText(c["a"]) + " -> " + ValueText(c["b"]);
  }
  return s;
}

// "role=Param dtype=f32 shape=[4]": an entry only one file has.
std::string EntryText(const Json& entry) {
  std::string s = entry["name"].get<std::string>();
  for (const auto& [key, value] : entry.items())
    if (key != "name") s += " " + key + "=" + ValueText(value);
  return s;
}

// Counts what it was given, prints at most `limit` of it (0: all), and
// closes with "... N more".
class Limited {
 public:
  Limited(std::ostream& out, std::string indent, size_t limit) : out_(out), indent_(std::move(indent)), limit_(limit) {}
  ~Limited() {
    if (skipped_) out_ << indent_ << "... " << skipped_ << " more\n";
  }
  // One entry, possibly several lines.
  void Add(const std::string& lines) {
    if (limit_ && shown_ == limit_) {
      ++skipped_;
      return;
    }
    ++shown_;
    std::istringstream in(lines);
    for (std::string line; std::getline(in, line);) out_ << indent_ << line << '\n';
  }

 private:
  std::ostream& out_;
  std::string indent_;
  size_t limit_, shown_ = 0, skipped_ = 0;
};

std::string Plural(size_t n, const std::string& one, const std::string& many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

void PrintHeader(const Json& changes, std::ostream& out) {
  out << "header\n";
  size_t width = 0;
  for (const Json& c : changes) width = std::max(width, c["field"].get<std::string>().size());
  for (const Json& c : changes) {
    std::string field = FieldName(c["field"].get<std::string>());
    out << "  " << field << std::string(width + 2 - field.size(), ' ') << ValueText(c["a"]) << " -> "
        << ValueText(c["b"]) << '\n';
  }
}

// Buffers, queues and groups: "- removed", "+ added", "~ name: changes".
void PrintEntries(const std::string& title, const Json& d, size_t limit, std::ostream& out) {
  std::string counts;
  for (const char* part : {"added", "removed", "changed"})
    if (!d[part].empty()) counts += (counts.empty() ? "" : ", ") + std::to_string(d[part].size()) + " " + part;
  const std::string na = d["a_count"].dump(), nb = d["b_count"].dump();
  out << title << ": " << counts << " (" << (na == nb ? "of " + na : na + " -> " + nb) << ")\n";
  Limited lines(out, "  ", limit);
  for (const Json& e : d["removed"]) lines.Add("- " + EntryText(e));
  for (const Json& e : d["added"]) lines.Add("+ " + EntryText(e));
  for (const Json& e : d["changed"]) lines.Add("~ " + e["name"].get<std::string>() + ": " + ChangesText(e["changes"]));
}

std::string TaskCount(const Json& n) { return n.is_null() ? "-" : n.dump(); }

// A task or bucket only one file has at this position.
std::string OrNone(const Json& v) { return v.is_null() ? "(none)" : v.get<std::string>(); }

void PrintStream(const Json& s, size_t limit, std::ostream& out) {
  out << "  stream " << s["index"].dump() << " '" << s["name"].get<std::string>() << "': ";
  if (s["a_tasks"].is_null())
    out << "only in +, " << Plural(s["b_tasks"].get<size_t>(), "task", "tasks") << '\n';
  else if (s["b_tasks"].is_null())
    out << "only in -, " << Plural(s["a_tasks"].get<size_t>(), "task", "tasks") << '\n';
  else
    out << TaskCount(s["a_tasks"]) << " -> " << TaskCount(s["b_tasks"]) << " tasks, " << s["differing_tasks"].dump()
        << " differ\n";
  if (!s["changes"].empty()) out << "    " << ChangesText(s["changes"]) << '\n';
  if (!s.contains("tasks")) return;
  // The index column is as wide as the widest index shown, so "-" and "+" line up.
  size_t width = 0;
  for (const Json& t : s["tasks"]) width = std::max(width, t["index"].dump().size());
  Limited lines(out, "    ", limit);
  for (const Json& t : s["tasks"]) {
    std::string index = t["index"].dump();
    std::string text = std::string(width - index.size(), ' ') + index + " - " + OrNone(t["a"]) + "\n" +
                       std::string(width, ' ') + " + " + OrNone(t["b"]);
    lines.Add(text);
  }
}

void PrintPrograms(const Json& d, size_t limit, std::ostream& out) {
  for (const Json& kind : d["removed"]) out << "program " << kind.get<std::string>() << ": only in -\n";
  for (const Json& kind : d["added"]) out << "program " << kind.get<std::string>() << ": only in +\n";
  for (const Json& p : d["changed"]) {
    out << "program " << p["kind"].get<std::string>() << '\n';
    if (!p["changes"].empty()) out << "  " << ChangesText(p["changes"]) << '\n';
    for (const Json& s : p["streams"]) PrintStream(s, limit, out);
  }
}

std::string BucketTotal(const Json& t) {
  size_t n = t["count"].get<size_t>();
  return Plural(n, "AllReduce", "AllReduces") + " over " + HumanBytes(t["bytes"].get<uint64_t>());
}

// "grad_fc1 group=world op=Mean gradients=1 bytes=[0, 256): fc1.weight.grad"
std::string BucketText(const Json& b) {
  if (b.is_null()) return "(none)";
  return b["name"].get<std::string>() + " group=" + b["group"].get<std::string>() +
         " op=" + b["op"].get<std::string>() + " gradients=" + b["gradients"].dump() +
         " bytes=" + RangeText(b["offset"].get<uint64_t>(), b["end"].get<uint64_t>()) + ": " +
         Joined(b["buffers"], ", ");
}

void PrintBuckets(const Json& d, size_t limit, std::ostream& out) {
  for (const Json& p : d) {
    out << "buckets (" << p["program"].get<std::string>() << "): " << BucketTotal(p["a"]) << " -> "
        << BucketTotal(p["b"]) << '\n';
    size_t width = 0;
    for (const Json& c : p["changed"]) width = std::max(width, c["index"].dump().size());
    Limited lines(out, "  ", limit);
    for (const Json& c : p["changed"]) {
      std::string index = c["index"].dump();
      lines.Add(std::string(width - index.size(), ' ') + index + " - " + BucketText(c["a"]) + "\n" +
                std::string(width, ' ') + " + " + BucketText(c["b"]));
    }
  }
}

// "~ w1: [32,32] of [32,64] dm [1,1,2] map (1,0) at [0,0] -> [32,64] whole".
void PrintLayouts(const Json& d, size_t limit, std::ostream& out) {
  out << "layouts: " << Plural(d["changed"].size(), "buffer differs", "buffers differ") << " (slices "
      << d["a_slices"].dump() << " -> " << d["b_slices"].dump() << ")\n";
  Limited lines(out, "  ", limit);
  for (const Json& e : d["changed"])
    lines.Add("~ " + e["name"].get<std::string>() + ": " + e["a"]["text"].get<std::string>() + " -> " +
              e["b"]["text"].get<std::string>());
}

// "1 AllReduce forward, group world [0, 1], 320 B each".
std::string CollectiveText(const Json& c) {
  return c["count"].dump() + " " + c["kind"].get<std::string>() + " " + c["purpose"].get<std::string>() + ", group " +
         c["group"].get<std::string>() + " " + RanksText(c["ranks"].get<std::vector<uint32_t>>()) + ", " +
         CountBytes(c["bytes"].get<uint64_t>()) + " each";
}

void PrintCollectives(const Json& d, size_t limit, std::ostream& out) {
  for (const Json& p : d) {
    out << "collectives (" << p["program"].get<std::string>() << ")\n  - " << p["a"].get<std::string>() << "\n  + "
        << p["b"].get<std::string>() << '\n';
    Limited lines(out, "  ", limit);
    for (const Json& c : p["only_a"]) lines.Add("- only: " + CollectiveText(c));
    for (const Json& c : p["only_b"]) lines.Add("+ only: " + CollectiveText(c));
  }
}

// "Param  5,544 B of 11,048 B whole -> 11,048 B of 11,048 B whole".
std::string RoleSide(const Json& side) {
  if (side.is_null()) return "-";
  return CountBytes(side["bytes"].get<uint64_t>()) + " of " + CountBytes(side["whole_bytes"].get<uint64_t>()) +
         " whole, " + CountBytes(side["arena"].get<uint64_t>()) + " in arena";
}

void PrintMemory(const Json& d, std::ostream& out) {
  out << "memory: arena " << CountBytes(d["arena_bytes"]["a"].get<uint64_t>()) << " -> "
      << CountBytes(d["arena_bytes"]["b"].get<uint64_t>()) << '\n';
  size_t width = 0;
  for (const Json& r : d["roles"]) width = std::max(width, r["role"].get<std::string>().size());
  for (const Json& r : d["roles"]) {
    const std::string role = r["role"].get<std::string>();
    out << "  " << role << std::string(width + 2 - role.size(), ' ') << RoleSide(r["a"]);
    if (r["a"] == r["b"])
      out << " (same)\n";
    else
      out << " -> " << RoleSide(r["b"]) << '\n';
  }
}

}  // namespace

std::string DiffText(const Json& diff, size_t limit) {
  std::ostringstream out;
  const std::string a = diff["a"].get<std::string>(), b = diff["b"].get<std::string>();
  if (diff["identical"].get<bool>()) {
    out << "identical: " << a << " and " << b;
    if (!diff["graph_hash"].is_null()) out << " (graph hash " << diff["graph_hash"].get<std::string>() << ')';
    out << '\n';
    return out.str();
  }
  out << "--- " << a << "\n+++ " << b << '\n';
  std::string sections;
  for (const Json& s : diff["sections"]) sections += (sections.empty() ? "" : ", ") + s.get<std::string>();
  out << "differ in: " << sections << "\n";
  for (const Json& s : diff["sections"]) {
    const std::string section = s.get<std::string>();
    const Json& d = diff[section];
    out << '\n';
    if (section == "header") {
      PrintHeader(d, out);
    } else if (section == "buffers") {
      PrintEntries("buffers", d, limit, out);
    } else if (section == "queues") {
      PrintEntries("queues", d, limit, out);
    } else if (section == "groups") {
      PrintEntries("communicator groups", d, limit, out);
    } else if (section == "programs") {
      PrintPrograms(d, limit, out);
    } else if (section == "buckets") {
      PrintBuckets(d, limit, out);
    } else if (section == "memory") {
      PrintMemory(d, out);
    } else if (section == "layouts") {
      PrintLayouts(d, limit, out);
    } else if (section == "collectives") {
      PrintCollectives(d, limit, out);
    } else if (section == "blob") {
      uint64_t ba = d["a_bytes"].get<uint64_t>(), bb = d["b_bytes"].get<uint64_t>();
      if (ba == bb)
        out << "blob: " << ba << " bytes in both, contents differ\n";
      else
        out << "blob: " << ba << " -> " << bb << " bytes\n";
    } else if (section == "layout") {
      out << "layout: every field sinkdump shows is equal, but the FlatBuffers differ (" << d["a_bytes"].dump()
          << " and " << d["b_bytes"].dump() << " bytes)\n";
    }
  }
  return out.str();
}

}  // namespace sinkrt::tools
