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

#include "runtime/src/collective_kinds.h"
#include "runtime/src/schema_enums.h"
#include "runtime/src/stream_names.h"
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
std::string Hex64(uint64_t v);           // "0x0123456789abcdef"
std::string HumanBytes(uint64_t bytes);  // "1.50 MiB"
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
  // The arena bytes the role's buffers cover (the union of their ranges):
  // its share of the arena, since transients reuse one another's space.
  uint64_t arena = 0;
  uint64_t slices = 0;       // buffers with a fb::Slice
  uint64_t whole_bytes = 0;  // the whole tensors' bytes: `bytes` for a buffer that is not a slice
};
// One entry per role that has buffers, in role order.
std::vector<RoleTotal> BytesByRole(const VerifiedStream& view);

uint64_t QueueBatchBytes(const fb::QueueSpec& q);

// The kind-specific fields of an initialiser ({"low":..., "seed":...}).
Json InitParams(const fb::Init& d);

struct TaskInfo {
  std::string kind;  // "Kernel", "GetNext", "EventRecord", ...
  std::string op;    // op code for kernels; empty for other tasks
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
  std::vector<uint32_t> ranks;   // the group's
  std::vector<int64_t> buffers;  // the gradients, in arena order
  uint64_t offset = 0, end = 0;
};
// "[offset, end)".
std::string RangeText(uint64_t begin, uint64_t end);
// An AllReduce of gradients only: a fusion bucket (DATA_PARALLEL, or a
// mirror group's under SEMI_AUTO_PARALLEL), not an activation's AllReduce.
bool ReducesGradients(const VerifiedStream& view, const flatbuffers::Vector<uint32_t>* buffers);
// The fusion buckets of `program` (AllReduce tasks whose buffers are all
// gradients), in stream then task order.
std::vector<BucketInfo> Buckets(const VerifiedStream& view, const fb::Program& program);

// ---- SEMI_AUTO_PARALLEL: layouts and collectives (dump_parallel.cc) ------

// "4,096 B" below 1 MiB (exact, and comparable at a glance), HumanBytes above.
std::string CountBytes(uint64_t bytes);
// "[0, 2]".
std::string RanksText(const std::vector<uint32_t>& ranks);

// How much of the stream is sharded: buffers and queue columns with a slice.
struct Sharding {
  uint32_t world_size = 1;
  uint64_t buffers = 0, sliced_buffers = 0;
  uint64_t columns = 0, sliced_columns = 0;
  // Optimizer parallel (ZeRO-1 under data parallel): the sliced buffers
  // are optimizer state and parameter blocks only, and blocks of how many
  // parameters this rank updates.
  uint64_t optimizer_slices = 0, param_blocks = 0;
  bool sharded() const { return sliced_buffers + sliced_columns > 0; }
  bool optimizer_parallel() const { return sharded() && sliced_columns == 0 && optimizer_slices == sliced_buffers; }
};
Sharding ShardingOf(const VerifiedStream& view);
// "semi_auto_parallel on 2 ranks, sharded: 12 of 40 buffers are slices, 2 of
// 4 queue columns"; "data parallel on 4 ranks, optimizer parallel: 2
// parameters updated in blocks, 6 of 49 buffers are slices"; "data
// parallel on 2 ranks: no buffer is a slice"; "" for one device.
std::string ShardingText(const Sharding& s);
Json ShardingJson(const Sharding& s);

// A slice's layout, MindSpore's way: "of [32,64] dm [1,2] map (-1,0) at
// [0,32]", then " partial (0)" where addends of a sum are pending. Shapes
// and lists without spaces, so that a table column stays one word per part.
std::string LayoutText(const fb::Slice& slice);
// {"global_shape", "offset", "device_matrix", "tensor_map", "partial", "layout"}.
Json SliceJson(const fb::Slice& slice);
// What part of the global batch this rank's queue column holds: "rows
// [0,4) of 8", "rows [0,4) of 8, dim 1 [0,16) of 32", or "whole batch of 8".
std::string QueueSliceText(const fb::QueueColumn& column);

// One communication task of a program, or a ShardSlice kernel (the local
// cut of a redistribution, which moves nothing between ranks).
struct CollectiveInfo {
  uint32_t stream = 0, task = 0;
  // "AllReduce", "AllGather", "ReduceScatter", "AllToAll", "Broadcast", "Send", "Recv", "ShardSlice".
  std::string kind;
  std::string purpose;  // "forward", "backward", "gradient bucket", "parameters", "local"
  std::string name, group;
  std::vector<uint32_t> ranks;  // the group's world ranks
  std::vector<int64_t> inputs, outputs;
  uint64_t bytes = 0;  // what each rank puts in (its input), as parallel::RedistPlan counts; 0 for ShardSlice
};
// In stream then task order.
std::vector<CollectiveInfo> Collectives(const VerifiedStream& view, const fb::Program& program);

// Collectives of one purpose and kind (gradient buckets: and group), with
// their count and bytes, in order of first appearance.
struct CollectiveTotal {
  std::string kind, purpose;
  std::vector<uint32_t> ranks;  // gradient buckets only
  uint64_t count = 0, bytes = 0;
};
std::vector<CollectiveTotal> CollectiveTotals(const std::vector<CollectiveInfo>& collectives);
// "2 AllReduce (forward) 1,280 B, 1 AllGather (backward) 512 B; gradient
// buckets: 1 AllReduce 9,792 B over ranks [0, 2]"; "none".
std::string CollectiveSummary(const std::vector<CollectiveTotal>& totals);

// Programs to show, in stream order.
std::vector<const fb::Program*> SelectPrograms(const VerifiedStream& view, const DumpOptions& options);

// ---- sinkdump --diff (dump_diff.cc, dump_diff_text.cc) ---------------------

// What differs between two verified streams, section by section, as one JSON
// document (the --json output; the text rendering reads it too). Buffers,
// queues and groups are matched by name, programs by kind, streams and tasks
// by position. Only differing sections appear, and "sections" lists them;
// "identical" is true when none does.
Json DiffJson(const VerifiedStream& a, const std::string& a_source, const VerifiedStream& b,
              const std::string& b_source, const DumpOptions& options);

// The text rendering of DiffJson: at most `limit` entries per list (0: all),
// the rest summarised as "... N more".
std::string DiffText(const Json& diff, size_t limit);

}  // namespace sinkrt::tools
