// ChromeTrace and ProfileDataFromTrace. Every event that stands for a
// record keeps the record's raw fields in its args (device times as integer
// ns), and otherData keeps what no event stands for (task tables, memory
// plans, clock samples), so reading a trace back never inverts the clock
// mapping or rounds a µs double.
#include "host/src/profile/chrome_trace.h"

#include <algorithm>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace sinkrt::host {
namespace {

using nlohmann::json;

constexpr const char* kFormat = "sinkrt-profile";
constexpr int kVersion = 1;

// Thread ids. Ranks: by what a task does. Host: a control and a feeder
// thread per rank, one credits thread.
constexpr int kComputeTid = 0, kCommTid = 1, kQueueTid = 2;
constexpr int kHostFeederTid = 1000, kHostCreditsTid = 2000;

double Us(int64_t ns) { return static_cast<double>(ns) / 1e3; }

std::string ProgramName(const RankData& rank, uint8_t program) {
  if (program < kProfilePrograms && !rank.programs[program].name.empty()) return rank.programs[program].name;
  std::string name = "program ";
  name += std::to_string(program);
  return name;
}

int HostPid(const ProfileData& data) {
  int pid = static_cast<int>(data.ranks.size());
  for (const RankData& r : data.ranks) pid = std::max(pid, r.rank + 1);
  return pid;
}

json Meta(const char* name, int pid, int tid, json args) {
  return {{"ph", "M"}, {"name", name}, {"pid", pid}, {"tid", tid}, {"args", std::move(args)}};
}

json TaskEvent(const RankData& rank, const ProfileRecord& r, int64_t origin) {
  const TaskInfo* task = FindTaskInfo(rank, r);
  int64_t begin = ToHostNs(rank, r.begin_ns), end = ToHostNs(rank, r.end_ns);
  json args = {{"step", static_cast<uint64_t>(r.step) + 1},
               {"task", r.task},
               {"stream", r.stream},
               {"program", ProgramName(rank, r.program)},
               {"program_kind", r.program},
               {"device_begin_ns", r.begin_ns},
               {"device_end_ns", r.end_ns}};
  std::string name;
  int tid = r.stream == 0 ? kComputeTid : kCommTid;
  if (task) {
    name = task->name.empty() ? task->op : task->name;
    args["op"] = task->op;
    if (task->collective) {
      args["bytes"] = task->bytes;
      args["group_size"] = task->group.size();
    }
    if (task->get_next) tid = kQueueTid;
    if (task->neighbour_wait) args["bubble"] = true;  // the summary's bubble, not exposed comm
  } else {
    name = "task " + std::to_string(r.task) + " (not in the stream)";
  }
  if (r.wait_ns != 0 || (task && task->get_next)) {
    args["wait_us"] = Us(r.wait_ns);
    args["wait_ns"] = r.wait_ns;
  }
  if (r.depth != 0 || (task && task->get_next)) args["depth"] = r.depth;
  return {{"ph", "X"},
          {"cat", "task"},
          {"name", std::move(name)},
          {"ts", Us(begin - origin)},
          {"dur", Us(std::max<int64_t>(0, end - begin))},
          {"pid", rank.rank},
          {"tid", tid},
          {"args", std::move(args)}};
}

json SinkEvent(const RankData& rank, const ProfileRecord& r, int64_t origin) {
  int64_t begin = ToHostNs(rank, r.begin_ns), end = ToHostNs(rank, r.end_ns);
  std::string program = ProgramName(rank, r.program);
  json args = {{"program", program}, {"program_kind", r.program},     {"first_step", static_cast<uint64_t>(r.step) + 1},
               {"steps", r.depth},   {"device_begin_ns", r.begin_ns}, {"device_end_ns", r.end_ns}};
  if (r.task != 0) args["task"] = r.task;
  if (r.wait_ns != 0) args["wait_ns"] = r.wait_ns;
  if (r.stream != 0) args["stream"] = r.stream;
  return {{"ph", "X"},
          {"cat", "sink"},
          {"name", "sink " + program + " steps " + std::to_string(r.depth)},
          {"ts", Us(begin - origin)},
          {"dur", Us(std::max<int64_t>(0, end - begin))},
          {"pid", rank.rank},
          {"tid", kComputeTid},
          {"args", std::move(args)}};
}

json HostEventJson(const HostEvent& e, int pid, int64_t origin) {
  json args = {{"rank", e.rank}, {"queue", e.queue}, {"host_begin_ns", e.begin_ns}, {"host_end_ns", e.end_ns}};
  json ev = {{"cat", "host"}, {"pid", pid}, {"ts", Us(e.begin_ns - origin)}};
  switch (e.kind) {
    case HostEvent::Kind::kPush:
      args["kind"] = "push";
      args["batch"] = e.arg;
      ev["ph"] = "X";
      ev["name"] = "push batch " + std::to_string(e.arg);
      ev["tid"] = kHostFeederTid + e.rank;
      ev["dur"] = Us(std::max<int64_t>(0, e.end_ns - e.begin_ns));
      break;
    case HostEvent::Kind::kCredit:
      args["kind"] = "credit";
      args["slots"] = e.arg;
      ev["ph"] = "i";
      ev["s"] = "t";
      ev["name"] = "credit " + std::to_string(e.arg) + " rank " + std::to_string(e.rank);
      ev["tid"] = kHostCreditsTid;
      break;
    case HostEvent::Kind::kRunSink:
      args["kind"] = "run_sink";
      args["steps"] = e.arg;
      args["program_kind"] = e.program;
      ev["ph"] = "X";
      ev["name"] = "RunSink steps " + std::to_string(e.arg);
      ev["tid"] = e.rank;
      ev["dur"] = Us(std::max<int64_t>(0, e.end_ns - e.begin_ns));
      break;
  }
  if (e.program != 1 && e.kind != HostEvent::Kind::kRunSink) args["program_kind"] = e.program;
  ev["args"] = std::move(args);
  return ev;
}

json TaskJson(const TaskInfo& t) {
  json j = {{"name", t.name}, {"op", t.op}};
  if (t.collective) j["collective"] = true;
  if (t.get_next) j["get_next"] = true;
  if (t.event_wait) j["event_wait"] = true;
  if (t.neighbour_wait) j["neighbour_wait"] = true;
  if (t.bytes) j["bytes"] = t.bytes;
  if (!t.group.empty()) j["group"] = t.group;
  return j;
}

json ClockJson(const ClockSample& c) {
  return {{"offset_ns", c.offset_ns}, {"uncertainty_ns", c.uncertainty_ns}, {"host_ns", c.host_ns}};
}

json RankJson(const RankData& r) {
  json roles = json::array();
  for (const auto& [role, bytes] : r.memory.by_role) roles.push_back({{"role", role}, {"bytes", bytes}});
  json tasks = json::array();
  for (int p = 0; p < kProfilePrograms; ++p) {
    const ProgramInfo& prog = r.programs[p];
    if (!prog.present) continue;
    json streams = json::array();
    for (const auto& stream : prog.streams) {
      json s = json::array();
      for (const TaskInfo& t : stream) s.push_back(TaskJson(t));
      streams.push_back(std::move(s));
    }
    tasks.push_back({{"program", p}, {"name", prog.name}, {"streams", std::move(streams)}});
  }
  return {
      {"rank", r.rank},
      {"dropped_steps", r.dropped_steps},
      {"clock_start", ClockJson(r.clock_start)},
      {"clock_end", ClockJson(r.clock_end)},
      {"memory", {{"arena_bytes", r.memory.arena_bytes}, {"queue_bytes", r.memory.queue_bytes}, {"by_role", roles}}},
      {"tasks", std::move(tasks)}};
}

//===--- Reading back ---===//

// Field access that names what is wrong. `where` is the JSON path of `obj`.
class Fields {
 public:
  Fields(const json& obj, std::string where) : obj_(obj), where_(std::move(where)) {}

  const std::string& where() const { return where_; }

  Status Object(const char* key, const json** out) const { return Typed(key, json::value_t::object, "an object", out); }
  Status Array(const char* key, const json** out) const { return Typed(key, json::value_t::array, "an array", out); }

  Status String(const char* key, std::string* out, bool required = true) const {
    const json* v = Find(key);
    if (!v) return required ? Missing(key) : Status::Ok();
    if (!v->is_string()) return Bad(key, "a string");
    *out = v->get<std::string>();
    return Status::Ok();
  }
  Status Bool(const char* key, bool* out) const {
    const json* v = Find(key);
    if (!v) return Status::Ok();
    if (!v->is_boolean()) return Bad(key, "true or false");
    *out = v->get<bool>();
    return Status::Ok();
  }
  // An integer that fits T; absent gives `fallback` unless `required`.
  template <typename T>
  Status Int(const char* key, T* out, bool required = true, T fallback = T{}) const {
    const json* v = Find(key);
    if (!v) {
      if (required) return Missing(key);
      *out = fallback;
      return Status::Ok();
    }
    if (v->is_number_unsigned()) {
      uint64_t u = v->get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<T>::max())) return Bad(key, "a smaller integer");
      *out = static_cast<T>(u);
      return Status::Ok();
    }
    if (v->is_number_integer()) {
      int64_t i = v->get<int64_t>();
      if constexpr (std::is_unsigned_v<T>) {
        if (i < 0) return Bad(key, "a non-negative integer");
        if (static_cast<uint64_t>(i) > static_cast<uint64_t>(std::numeric_limits<T>::max()))
          return Bad(key, "a smaller integer");
      } else {
        if (i < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
            i > static_cast<int64_t>(std::numeric_limits<T>::max()))
          return Bad(key, "a smaller integer");
      }
      *out = static_cast<T>(i);
      return Status::Ok();
    }
    return Bad(key, "an integer");
  }

 private:
  const json* Find(const char* key) const {
    if (!obj_.is_object()) return nullptr;
    auto it = obj_.find(key);
    return it == obj_.end() ? nullptr : &*it;
  }
  Status Typed(const char* key, json::value_t type, const char* what, const json** out) const {
    const json* v = Find(key);
    if (!v) return Missing(key);
    if (v->type() != type) return Bad(key, what);
    *out = v;
    return Status::Ok();
  }
  Status Missing(const char* key) const { return InvalidArgument(where_ + " has no '" + key + "'"); }
  Status Bad(const char* key, const char* what) const {
    return InvalidArgument(where_ + "." + key + " is not " + what);
  }

  const json& obj_;
  std::string where_;
};

std::string At(const std::string& where, size_t i) { return where + "[" + std::to_string(i) + "]"; }

Status ReadClock(const Fields& rank, const char* key, ClockSample* out) {
  const json* c = nullptr;
  SINKRT_RETURN_IF_ERROR(rank.Object(key, &c));
  Fields f(*c, rank.where() + "." + key);
  SINKRT_RETURN_IF_ERROR(f.Int("offset_ns", &out->offset_ns));
  SINKRT_RETURN_IF_ERROR(f.Int("uncertainty_ns", &out->uncertainty_ns));
  return f.Int("host_ns", &out->host_ns);
}

Status ReadTask(const json& j, const std::string& where, TaskInfo* t) {
  if (!j.is_object()) return InvalidArgument(where + " is not an object");
  Fields f(j, where);
  SINKRT_RETURN_IF_ERROR(f.String("name", &t->name));
  SINKRT_RETURN_IF_ERROR(f.String("op", &t->op));
  SINKRT_RETURN_IF_ERROR(f.Bool("collective", &t->collective));
  SINKRT_RETURN_IF_ERROR(f.Bool("get_next", &t->get_next));
  SINKRT_RETURN_IF_ERROR(f.Bool("event_wait", &t->event_wait));
  SINKRT_RETURN_IF_ERROR(f.Bool("neighbour_wait", &t->neighbour_wait));
  SINKRT_RETURN_IF_ERROR(f.Int("bytes", &t->bytes, /*required=*/false));
  if (j.contains("group")) {
    const json* g = nullptr;
    SINKRT_RETURN_IF_ERROR(f.Array("group", &g));
    for (size_t i = 0; i < g->size(); ++i) {
      const json& m = (*g)[i];
      if (!m.is_number_integer() || m.get<int64_t>() < 0 || m.get<int64_t>() > std::numeric_limits<uint32_t>::max())
        return InvalidArgument(At(where + ".group", i) + " is not a rank");
      t->group.push_back(m.get<uint32_t>());
    }
  }
  return Status::Ok();
}

Status ReadPrograms(const Fields& rank, RankData* out) {
  const json* tasks = nullptr;
  SINKRT_RETURN_IF_ERROR(rank.Array("tasks", &tasks));
  for (size_t i = 0; i < tasks->size(); ++i) {
    std::string where = At(rank.where() + ".tasks", i);
    Fields f((*tasks)[i], where);
    int p = 0;
    SINKRT_RETURN_IF_ERROR(f.Int("program", &p));
    if (p < 0 || p >= kProfilePrograms)
      return InvalidArgument(where + ".program is " + std::to_string(p) + ", not a program kind (0.." +
                             std::to_string(kProfilePrograms - 1) + ")");
    ProgramInfo& prog = out->programs[p];
    if (prog.present) return InvalidArgument(where + " repeats program " + std::to_string(p));
    prog.present = true;
    SINKRT_RETURN_IF_ERROR(f.String("name", &prog.name));
    const json* streams = nullptr;
    SINKRT_RETURN_IF_ERROR(f.Array("streams", &streams));
    if (streams->size() > 2)
      return InvalidArgument(where + ".streams has " + std::to_string(streams->size()) + " streams, at most 2");
    for (size_t s = 0; s < streams->size(); ++s) {
      const json& list = (*streams)[s];
      std::string swhere = At(where + ".streams", s);
      if (!list.is_array()) return InvalidArgument(swhere + " is not an array");
      for (size_t t = 0; t < list.size(); ++t) {
        TaskInfo info;
        SINKRT_RETURN_IF_ERROR(ReadTask(list[t], At(swhere, t), &info));
        prog.streams[s].push_back(std::move(info));
      }
    }
  }
  return Status::Ok();
}

Status ReadRank(const json& j, const std::string& where, RankData* out) {
  if (!j.is_object()) return InvalidArgument(where + " is not an object");
  Fields f(j, where);
  SINKRT_RETURN_IF_ERROR(f.Int("rank", &out->rank));
  if (out->rank < 0) return InvalidArgument(where + ".rank is negative");
  SINKRT_RETURN_IF_ERROR(f.Int("dropped_steps", &out->dropped_steps, /*required=*/false));
  SINKRT_RETURN_IF_ERROR(ReadClock(f, "clock_start", &out->clock_start));
  SINKRT_RETURN_IF_ERROR(ReadClock(f, "clock_end", &out->clock_end));
  const json* memory = nullptr;
  SINKRT_RETURN_IF_ERROR(f.Object("memory", &memory));
  Fields m(*memory, where + ".memory");
  out->memory.rank = out->rank;
  SINKRT_RETURN_IF_ERROR(m.Int("arena_bytes", &out->memory.arena_bytes));
  SINKRT_RETURN_IF_ERROR(m.Int("queue_bytes", &out->memory.queue_bytes));
  const json* roles = nullptr;
  SINKRT_RETURN_IF_ERROR(m.Array("by_role", &roles));
  for (size_t i = 0; i < roles->size(); ++i) {
    Fields r((*roles)[i], At(where + ".memory.by_role", i));
    std::pair<std::string, uint64_t> role;
    SINKRT_RETURN_IF_ERROR(r.String("role", &role.first));
    SINKRT_RETURN_IF_ERROR(r.Int("bytes", &role.second));
    out->memory.by_role.push_back(std::move(role));
  }
  return ReadPrograms(f, out);
}

// A task or sink event's record, from its args.
Status ReadRecord(const Fields& args, bool sink, ProfileRecord* r) {
  r->kind = sink ? ProfileRecordKind::kSink : ProfileRecordKind::kTask;
  SINKRT_RETURN_IF_ERROR(args.Int("device_begin_ns", &r->begin_ns));
  SINKRT_RETURN_IF_ERROR(args.Int("device_end_ns", &r->end_ns));
  SINKRT_RETURN_IF_ERROR(args.Int("program_kind", &r->program));
  SINKRT_RETURN_IF_ERROR(args.Int("wait_ns", &r->wait_ns, /*required=*/false));
  SINKRT_RETURN_IF_ERROR(args.Int("stream", &r->stream, /*required=*/!sink));
  uint64_t step1 = 0;  // 1-based in the trace
  SINKRT_RETURN_IF_ERROR(args.Int(sink ? "first_step" : "step", &step1));
  if (step1 == 0 || step1 - 1 > std::numeric_limits<uint32_t>::max())
    return InvalidArgument(args.where() + (sink ? ".first_step" : ".step") + " is not a step (1.." +
                           std::to_string(uint64_t{std::numeric_limits<uint32_t>::max()} + 1) + ")");
  r->step = static_cast<uint32_t>(step1 - 1);
  if (sink) {
    SINKRT_RETURN_IF_ERROR(args.Int("steps", &r->depth));
    return args.Int("task", &r->task, /*required=*/false);
  }
  SINKRT_RETURN_IF_ERROR(args.Int("task", &r->task));
  return args.Int("depth", &r->depth, /*required=*/false);
}

Status ReadHostEvent(const Fields& args, HostEvent* e) {
  std::string kind;
  SINKRT_RETURN_IF_ERROR(args.String("kind", &kind));
  SINKRT_RETURN_IF_ERROR(args.Int("rank", &e->rank));
  SINKRT_RETURN_IF_ERROR(args.Int("queue", &e->queue));
  SINKRT_RETURN_IF_ERROR(args.Int("host_begin_ns", &e->begin_ns));
  SINKRT_RETURN_IF_ERROR(args.Int("host_end_ns", &e->end_ns));
  SINKRT_RETURN_IF_ERROR(args.Int("program_kind", &e->program, /*required=*/false, uint8_t{1}));
  if (kind == "push") {
    e->kind = HostEvent::Kind::kPush;
    return args.Int("batch", &e->arg);
  }
  if (kind == "credit") {
    e->kind = HostEvent::Kind::kCredit;
    return args.Int("slots", &e->arg);
  }
  if (kind == "run_sink") {
    e->kind = HostEvent::Kind::kRunSink;
    return args.Int("steps", &e->arg);
  }
  return InvalidArgument(args.where() + ".kind is '" + kind + "', not push, credit or run_sink");
}

Status ReadTrace(const json& trace, ProfileData* out) {
  if (!trace.is_object()) return InvalidArgument("the trace is not a JSON object");
  Fields root(trace, "the trace");
  const json* other = nullptr;
  SINKRT_RETURN_IF_ERROR(root.Object("otherData", &other));
  Fields o(*other, "otherData");
  std::string format;
  SINKRT_RETURN_IF_ERROR(o.String("format", &format));
  if (format != kFormat) return InvalidArgument("otherData.format is '" + format + "', not '" + kFormat + "'");
  int version = 0;
  SINKRT_RETURN_IF_ERROR(o.Int("version", &version));
  if (version != kVersion)
    return InvalidArgument("otherData.version is " + std::to_string(version) + "; this build reads version " +
                           std::to_string(kVersion));
  SINKRT_RETURN_IF_ERROR(o.String("network", &out->network, /*required=*/false));
  SINKRT_RETURN_IF_ERROR(o.Int("origin_ns", &out->origin_ns));
  const json* ranks = nullptr;
  SINKRT_RETURN_IF_ERROR(o.Array("ranks", &ranks));
  for (size_t i = 0; i < ranks->size(); ++i) {
    RankData rank;
    SINKRT_RETURN_IF_ERROR(ReadRank((*ranks)[i], At("otherData.ranks", i), &rank));
    for (const RankData& r : out->ranks)
      if (r.rank == rank.rank)
        return InvalidArgument(At("otherData.ranks", i) + " repeats rank " + std::to_string(r.rank));
    out->ranks.push_back(std::move(rank));
  }

  const json* events = nullptr;
  SINKRT_RETURN_IF_ERROR(root.Array("traceEvents", &events));
  for (size_t i = 0; i < events->size(); ++i) {
    const json& ev = (*events)[i];
    std::string where = At("traceEvents", i);
    if (!ev.is_object()) return InvalidArgument(where + " is not an object");
    Fields f(ev, where);
    std::string cat;
    SINKRT_RETURN_IF_ERROR(f.String("cat", &cat, /*required=*/false));
    if (cat != "task" && cat != "sink" && cat != "host") continue;  // metadata, or someone else's events
    const json* args = nullptr;
    SINKRT_RETURN_IF_ERROR(f.Object("args", &args));
    Fields a(*args, where + ".args");
    if (cat == "host") {
      HostEvent e;
      SINKRT_RETURN_IF_ERROR(ReadHostEvent(a, &e));
      out->host.push_back(e);
      continue;
    }
    int pid = 0;
    SINKRT_RETURN_IF_ERROR(f.Int("pid", &pid));
    RankData* rank = nullptr;
    for (RankData& r : out->ranks)
      if (r.rank == pid) rank = &r;
    if (!rank)
      return InvalidArgument(where + " (" + cat + ") has pid " + std::to_string(pid) +
                             ", a rank otherData.ranks lacks");
    ProfileRecord r;
    SINKRT_RETURN_IF_ERROR(ReadRecord(a, cat == "sink", &r));
    rank->records.push_back(r);
  }
  return Status::Ok();
}

}  // namespace

json ChromeTrace(const ProfileData& data) {
  json events = json::array();
  const int64_t origin = data.origin_ns;
  for (const RankData& rank : data.ranks) {
    events.push_back(Meta("process_name", rank.rank, 0, {{"name", "rank " + std::to_string(rank.rank)}}));
    events.push_back(Meta("process_sort_index", rank.rank, 0, {{"sort_index", rank.rank}}));
    const char* threads[] = {"compute", "comm", "queue"};
    for (int tid = 0; tid < 3; ++tid) {
      events.push_back(Meta("thread_name", rank.rank, tid, {{"name", threads[tid]}}));
      events.push_back(Meta("thread_sort_index", rank.rank, tid, {{"sort_index", tid}}));
    }
    for (const ProfileRecord& r : rank.records) {
      if (r.kind == ProfileRecordKind::kTask)
        events.push_back(TaskEvent(rank, r, origin));
      else if (r.kind == ProfileRecordKind::kSink)
        events.push_back(SinkEvent(rank, r, origin));
    }
  }
  const int host = HostPid(data);
  events.push_back(Meta("process_name", host, 0, {{"name", "host"}}));
  events.push_back(Meta("process_sort_index", host, 0, {{"sort_index", host}}));
  std::vector<int> host_ranks;
  for (const HostEvent& e : data.host)
    if (std::find(host_ranks.begin(), host_ranks.end(), e.rank) == host_ranks.end()) host_ranks.push_back(e.rank);
  std::sort(host_ranks.begin(), host_ranks.end());
  for (int r : host_ranks) {
    std::string rank = std::to_string(r);
    events.push_back(Meta("thread_name", host, r, {{"name", "control rank " + rank}}));
    events.push_back(Meta("thread_sort_index", host, r, {{"sort_index", r}}));
    events.push_back(Meta("thread_name", host, kHostFeederTid + r, {{"name", "feeder rank " + rank}}));
    events.push_back(Meta("thread_sort_index", host, kHostFeederTid + r, {{"sort_index", kHostFeederTid + r}}));
  }
  events.push_back(Meta("thread_name", host, kHostCreditsTid, {{"name", "credits"}}));
  events.push_back(Meta("thread_sort_index", host, kHostCreditsTid, {{"sort_index", kHostCreditsTid}}));
  for (const HostEvent& e : data.host) events.push_back(HostEventJson(e, host, origin));

  json ranks = json::array();
  for (const RankData& r : data.ranks) ranks.push_back(RankJson(r));
  return {{"traceEvents", std::move(events)},
          {"displayTimeUnit", "ns"},
          {"otherData",
           {{"format", kFormat},
            {"version", kVersion},
            {"network", data.network},
            {"origin_ns", data.origin_ns},
            {"world_size", data.ranks.size()},
            {"ranks", std::move(ranks)}}}};
}

Result<ProfileData> ProfileDataFromTrace(const json& trace) {
  ProfileData data;
  // nlohmann throws only on misuse; Fields checks types first, so reaching
  // this handler is a bug of ours, reported as one rather than a crash.
  try {
    SINKRT_RETURN_IF_ERROR(ReadTrace(trace, &data));
  } catch (const std::exception& e) {
    return Internal(std::string("reading the trace: ") + e.what());
  }
  return data;
}

}  // namespace sinkrt::host
