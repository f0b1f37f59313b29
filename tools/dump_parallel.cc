// What a sharded (SEMI_AUTO_PARALLEL) stream adds to a dump: each slice's
// layout, how much of the stream is sharded, and every communication task
// with its group and the bytes it moves. Shared by the text, JSON and diff
// renderings.
#include <algorithm>
#include <string_view>

#include "dump_format.h"
#include "sinkrt/runtime/dtype.h"

namespace sinkrt::tools {
namespace {

template <typename T>
std::vector<T> Vec(const flatbuffers::Vector<T>* v) {
  return v ? std::vector<T>(v->begin(), v->end()) : std::vector<T>{};
}

// "[1,2]", "(-1,0)": a list without spaces.
template <typename T>
std::string List(const std::vector<T>& v, char open, char close) {
  std::string s(1, open);
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  s += close;
  return s;
}

uint64_t BufferBytes(const VerifiedStream& view, int64_t index) {
  const auto* table = view.root()->buffers();
  if (!table || index < 0 || index >= static_cast<int64_t>(table->size())) return 0;
  return table->Get(static_cast<uint32_t>(index))->bytes();
}

std::vector<uint32_t> GroupRanks(const VerifiedStream& view, uint32_t group) {
  const auto* groups = view.root()->groups();
  if (!groups || group >= groups->size()) return {};
  return Vec(groups->Get(group)->ranks());
}

// A ShardSlice's group is a rank list in its options, not a table index:
// named as the table names the same ranks, when it does.
std::string GroupName(const VerifiedStream& view, const std::vector<uint32_t>& ranks) {
  const auto* groups = view.root()->groups();
  if (groups)
    for (const fb::CommGroup* g : *groups)
      if (Vec(g->ranks()) == ranks && !Str(g->name()).empty()) return Str(g->name());
  return "-";
}

// The autodiff names every gradient op "<op>/grad..." (autodiff.cc,
// grad_rules.cc), the backward communication included.
std::string Direction(const std::string& name) {
  return name.find("/grad") != std::string::npos ? "backward" : "forward";
}

std::string WithCommas(uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

bool HasRole(const VerifiedStream& view, const std::vector<int64_t>& buffers, fb::BufferRole role) {
  const auto* table = view.root()->buffers();
  for (int64_t b : buffers)
    if (table && b >= 0 && b < static_cast<int64_t>(table->size()) &&
        table->Get(static_cast<uint32_t>(b))->role() == role)
      return true;
  return false;
}

}  // namespace

std::string CountBytes(uint64_t bytes) {
  if (bytes >= (uint64_t{1} << 20)) return HumanBytes(bytes);
  std::string s = WithCommas(bytes);
  s += " B";
  return s;
}

std::string RanksText(const std::vector<uint32_t>& ranks) {
  std::string s = "[";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(ranks[i]);
  }
  s += ']';
  return s;
}

Sharding ShardingOf(const VerifiedStream& view) {
  Sharding s;
  const fb::TaskStream& root = *view.root();
  if (root.header()) s.world_size = root.header()->world_size();
  if (root.buffers()) {
    s.buffers = root.buffers()->size();
    for (const fb::Buffer* b : *root.buffers()) {
      if (!b->slice()) continue;
      ++s.sliced_buffers;
      s.optimizer_slices += b->role() == fb::BufferRole::OptState || b->role() == fb::BufferRole::ParamSlice;
      s.param_blocks += b->role() == fb::BufferRole::ParamSlice;
    }
  }
  if (root.queues())
    for (const fb::QueueSpec* q : *root.queues())
      if (q->columns())
        for (const fb::QueueColumn* c : *q->columns()) {
          ++s.columns;
          s.sliced_columns += c->slice() != nullptr;
        }
  return s;
}

std::string ShardingText(const Sharding& s) {
  const std::string ranks = " on " + std::to_string(s.world_size) + (s.world_size == 1 ? " rank" : " ranks");
  if (s.optimizer_parallel())
    return "data parallel" + ranks + ", optimizer parallel: " + std::to_string(s.param_blocks) +
           (s.param_blocks == 1 ? " parameter" : " parameters") + " updated in blocks, " +
           std::to_string(s.sliced_buffers) + " of " + std::to_string(s.buffers) + " buffers are slices";
  if (s.sharded())
    return "semi_auto_parallel" + ranks + ", sharded: " + std::to_string(s.sliced_buffers) + " of " +
           std::to_string(s.buffers) + " buffers are slices, " + std::to_string(s.sliced_columns) + " of " +
           std::to_string(s.columns) + " queue columns";
  if (s.world_size > 1) return "data parallel" + ranks + ": no buffer is a slice";
  return "";
}

Json ShardingJson(const Sharding& s) {
  const char* mode = s.optimizer_parallel() ? "data_parallel"
                     : s.sharded()          ? "semi_auto_parallel"
                     : s.world_size > 1     ? "data_parallel"
                                            : "stand_alone";
  return {{"mode", mode},
          {"world_size", s.world_size},
          {"sharded", s.sharded()},
          {"optimizer_parallel", s.optimizer_parallel()},
          {"parameters_updated_in_blocks", s.param_blocks},
          {"buffers", s.buffers},
          {"sliced_buffers", s.sliced_buffers},
          {"queue_columns", s.columns},
          {"sliced_queue_columns", s.sliced_columns}};
}

std::string LayoutText(const fb::Slice& slice) {
  std::string s = "of " + List(Vec(slice.global_shape()), '[', ']');
  s += " dm " + List(Vec(slice.device_matrix()), '[', ']');
  s += " map " + List(Vec(slice.tensor_map()), '(', ')');
  s += " at " + List(Vec(slice.offset()), '[', ']');
  const std::vector<int32_t> partial = Vec(slice.partial());
  if (!partial.empty()) s += " partial " + List(partial, '(', ')');
  return s;
}

Json SliceJson(const fb::Slice& slice) {
  return {{"global_shape", Vec(slice.global_shape())},
          {"offset", Vec(slice.offset())},
          {"device_matrix", Vec(slice.device_matrix())},
          {"tensor_map", Vec(slice.tensor_map())},
          {"partial", Vec(slice.partial())},
          {"layout", LayoutText(slice)}};
}

std::string QueueSliceText(const fb::QueueColumn& column) {
  if (!column.slice()) return "";
  const std::vector<int64_t> local = ShapeOf(column.shape()), global = Vec(column.slice()->global_shape()),
                             offset = Vec(column.slice()->offset());
  std::string s;
  for (size_t d = 0; d < global.size() && d < local.size(); ++d) {
    if (local[d] == global[d]) continue;
    const int64_t begin = d < offset.size() ? offset[d] : 0;
    if (!s.empty()) s += ", ";
    s += d == 0 ? std::string("rows") : "dim " + std::to_string(d);
    s += " [" + std::to_string(begin) + "," + std::to_string(begin + local[d]) + ") of " + std::to_string(global[d]);
  }
  if (s.empty()) s = "whole batch of " + (global.empty() ? std::string("1") : std::to_string(global[0]));
  return s;
}

std::vector<CollectiveInfo> Collectives(const VerifiedStream& view, const fb::Program& program) {
  std::vector<CollectiveInfo> out;
  if (!program.streams()) return out;
  for (uint32_t st = 0; st < program.streams()->size(); ++st) {
    const auto* tasks = program.streams()->Get(st)->tasks();
    if (!tasks) continue;
    for (uint32_t i = 0; i < tasks->size(); ++i) {
      const fb::Task& task = *tasks->Get(i);
      const fb::KernelTask* kernel = task.body_as_KernelTask();
      const bool shard_slice = kernel && kernel->op() == fb::OpCode::ShardSlice;
      TaskInfo info = DescribeTask(view, task);
      CollectiveInfo c;
      c.stream = st;
      c.task = i;
      c.kind = shard_slice ? "ShardSlice" : info.kind;
      c.name = info.name;
      c.inputs = info.inputs;
      c.outputs = info.outputs;
      c.purpose = Direction(c.name);
      uint32_t group = 0;
      switch (task.body_type()) {
        case fb::TaskBody::AllReduceTask: {
          const fb::AllReduceTask* t = task.body_as_AllReduceTask();
          if (!t) continue;
          group = t->group();
          if (ReducesGradients(view, t->buffers())) c.purpose = "gradient bucket";
          // A bucket reduces its whole byte range, the padding between its
          // gradients included, as sinkdump's bucket table shows it.
          for (int64_t b : c.inputs) c.bytes += BufferBytes(view, b);
          if (const auto* table = view.root()->buffers(); c.inputs.size() > 1 && table) {
            const int64_t first = c.inputs.front(), last = c.inputs.back();
            if (first < static_cast<int64_t>(table->size()) && last < static_cast<int64_t>(table->size())) {
              const fb::Buffer* f = table->Get(static_cast<uint32_t>(first));
              const fb::Buffer* l = table->Get(static_cast<uint32_t>(last));
              if (l->offset() + l->bytes() >= f->offset()) c.bytes = l->offset() + l->bytes() - f->offset();
            }
          }
          break;
        }
        case fb::TaskBody::BroadcastTask: {
          const fb::BroadcastTask* t = task.body_as_BroadcastTask();
          if (!t) continue;
          group = t->group();
          c.purpose = "parameters";
          for (int64_t b : c.inputs) c.bytes += BufferBytes(view, b);
          break;
        }
        case fb::TaskBody::AllGatherTask:
        case fb::TaskBody::ReduceScatterTask:
        case fb::TaskBody::AllToAllTask:
        case fb::TaskBody::SendTask:
        case fb::TaskBody::RecvTask: {
          if (const auto* t = task.body_as_AllGatherTask()) group = t->group();
          if (const auto* t = task.body_as_ReduceScatterTask()) group = t->group();
          if (const auto* t = task.body_as_AllToAllTask()) group = t->group();
          if (const auto* t = task.body_as_SendTask()) group = t->group();
          if (const auto* t = task.body_as_RecvTask()) group = t->group();
          // A Recv takes in what it receives; the others what they send.
          for (int64_t b : c.inputs.empty() ? c.outputs : c.inputs) c.bytes += BufferBytes(view, b);
          // Optimizer parallel: a gradient into its block, or the updated
          // blocks back into the parameter.
          if (HasRole(view, c.outputs, fb::BufferRole::GradSlice) ||
              HasRole(view, c.inputs, fb::BufferRole::ParamSlice))
            c.purpose = "optimizer parallel";
          break;
        }
        case fb::TaskBody::KernelTask:
          if (!shard_slice) continue;
          c.purpose = "local";
          if (const fb::CommOptions* o = kernel->options_as_CommOptions()) c.ranks = Vec(o->group());
          c.group = GroupName(view, c.ranks);
          out.push_back(std::move(c));
          continue;
        default:
          continue;
      }
      c.group = info.attrs.contains("group") ? info.attrs["group"].get<std::string>() : "-";
      c.ranks = GroupRanks(view, group);
      out.push_back(std::move(c));
    }
  }
  return out;
}

std::vector<CollectiveTotal> CollectiveTotals(const std::vector<CollectiveInfo>& collectives) {
  std::vector<CollectiveTotal> totals;
  for (const CollectiveInfo& c : collectives) {
    const bool bucket = c.purpose == "gradient bucket";
    const std::vector<uint32_t> ranks = bucket ? c.ranks : std::vector<uint32_t>{};
    auto it = std::find_if(totals.begin(), totals.end(), [&](const CollectiveTotal& t) {
      return t.kind == c.kind && t.purpose == c.purpose && t.ranks == ranks;
    });
    if (it == totals.end()) {
      totals.push_back({c.kind, c.purpose, ranks});
      it = totals.end() - 1;
    }
    ++it->count;
    it->bytes += c.bytes;
  }
  // Buckets last, as the summary reads them: after the activations' traffic.
  std::stable_partition(totals.begin(), totals.end(),
                        [](const CollectiveTotal& t) { return t.purpose != "gradient bucket"; });
  return totals;
}

std::string CollectiveSummary(const std::vector<CollectiveTotal>& totals) {
  if (totals.empty()) return "none";
  std::string s;
  bool in_buckets = false;
  for (const CollectiveTotal& t : totals) {
    const bool bucket = t.purpose == "gradient bucket";
    if (bucket && !in_buckets) {
      s += s.empty() ? "gradient buckets: " : "; gradient buckets: ";
      in_buckets = true;
    } else if (!s.empty()) {
      s += ", ";
    }
    s += std::to_string(t.count) + " " + t.kind;
    if (bucket) {
      s += " " + CountBytes(t.bytes) + " over ranks " + RanksText(t.ranks);
    } else if (t.purpose == "local") {
      s += " (local, moves nothing)";
    } else {
      s += " (" + t.purpose + ") " + CountBytes(t.bytes);
    }
  }
  return s;
}

}  // namespace sinkrt::tools
