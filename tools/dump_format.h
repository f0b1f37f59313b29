// sinkdump's formatting: a verified task stream as text for people and as
// JSON for scripts. Both renderings read the same descriptions
// (dump_describe.cc), so they always carry the same information.
//
// Everything here takes a VerifiedStream, i.e. a stream that passed
// VerifyTaskStream, but still tolerates the optional parts a valid stream may
// leave out (names, shapes, table vectors, union bodies), because the
// Verifier accepts a union whose type is set but whose value is absent.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sinkrt/fb/task_stream_generated.h"
#include "sinkrt/runtime/task_stream_verifier.h"

namespace sinkrt::tools {

using Json = nlohmann::ordered_json;  // keeps keys in insertion order: stable output

struct DumpOptions {
  std::optional<fb::ProgramKind> program;  // only this program; every program when empty
  bool tasks = true;                       // one line (or JSON object) per task
};

// The whole report. `source` names the file in the first line / "file" key.
std::string DumpText(const VerifiedStream& view, const std::string& source, const DumpOptions& options);
Json DumpJson(const VerifiedStream& view, const std::string& source, const DumpOptions& options);

// ---- shared descriptions (dump_describe.cc) --------------------------------

// A string from the file, "" when absent, control characters replaced. JSON
// output must still be dumped with error_handler_t::replace: names need not
// be valid UTF-8.
std::string Str(const flatbuffers::String* s);
std::vector<int64_t> ShapeOf(const flatbuffers::Vector<int64_t>* v);
std::string Hex64(uint64_t v);             // "0x0123456789abcdef"
std::string HumanBytes(uint64_t bytes);    // "1.50 MiB"
// Shortest text that reads back as the same float, as a JSON number: 0.01f
// prints as 0.01, not 0.009999999776482582.
double CleanFloat(float f);

// The buffer's name, or "#<index>" when it has none (or is not in the table).
std::string BufferLabel(const VerifiedStream& view, int64_t index);

// Names of the feature bits set in Header.requirements.
std::vector<std::string> RequirementNames(uint64_t bits);

// arena / liveness lower bound; empty when the bound is 0.
std::optional<double> ArenaRatio(const fb::TaskStream& s);

struct RoleTotal {
  fb::BufferRole role;
  uint64_t buffers = 0;
  uint64_t bytes = 0;
};
// One entry per role that has buffers, in role order.
std::vector<RoleTotal> BytesByRole(const VerifiedStream& view);

uint64_t QueueBatchBytes(const fb::QueueSpec& q);

// The kind-specific fields of an initialiser ({"low":..., "seed":...}).
Json InitParams(const fb::InitDef& d);

struct TaskInfo {
  std::string kind;              // "Kernel", "GetNext", "EventRecord", ...
  std::string op;                // op code for kernels; empty for other tasks
  std::string name;
  std::vector<int64_t> inputs;   // buffer indices read
  std::vector<int64_t> outputs;  // buffer indices written (in place: also in inputs)
  // Short options: true renders as the bare key ("transpose_b"), anything
  // else as key=value ("stride=2", "pad=0,1,0,1", "fused_bias=fc1.bias").
  Json attrs = Json::object();
};
TaskInfo DescribeTask(const VerifiedStream& view, const fb::Task& task);

// "transpose_b stride=2 pad=1": the text form of TaskInfo::attrs.
std::string AttrsText(const Json& attrs);

// "fc1.weight, fc1.bias", or "-" for none.
std::string NamesText(const VerifiedStream& view, const std::vector<int64_t>& indices);

// A task as one line, the columns of the text dump's task table less the
// empty ones: "Kernel MatMul fc1 image, fc1.weight -> fc1.out transpose_b",
// "EventRecord bucket0/ready event=0". Names, not indices, so two streams
// whose buffer tables differ still compare equal where they run the same task.
std::string TaskLine(const VerifiedStream& view, const TaskInfo& info);

// One fused gradient AllReduce (a DATA_PARALLEL fusion bucket): where it is,
// and the arena byte range [offset, end) it reduces in place.
struct BucketInfo {
  uint32_t stream = 0, task = 0;
  std::string name, group, op;
  std::vector<int64_t> buffers;  // the gradients, in arena order
  uint64_t offset = 0, end = 0;
};
// "[offset, end)".
std::string RangeText(uint64_t begin, uint64_t end);
// The AllReduce tasks of `program`, in stream then task order.
std::vector<BucketInfo> Buckets(const VerifiedStream& view, const fb::Program& program);

// Programs to show, in stream order.
std::vector<const fb::Program*> SelectPrograms(const VerifiedStream& view, const DumpOptions& options);

// ---- sinkdump --diff (dump_diff.cc, dump_diff_text.cc) ---------------------

// What differs between two verified streams, section by section, as one JSON
// document (the --json output; the text rendering reads it too). Buffers,
// queues and groups are matched by name, programs by kind, streams and tasks
// by position. Only differing sections appear, and "sections" lists them;
// "identical" is true when none does.
Json DiffJson(const VerifiedStream& a, const std::string& a_source, const VerifiedStream& b, const std::string& b_source,
              const DumpOptions& options);

// The text rendering of DiffJson: at most `limit` entries per list (0: all),
// the rest summarised as "... N more".
std::string DiffText(const Json& diff, size_t limit);

}  // namespace sinkrt::tools
