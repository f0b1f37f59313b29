// Plain descriptions of stream parts, shared by the text and JSON renderings.
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <tuple>
#include <utility>

#include "dump_format.h"
#include "sinkrt/runtime/dtype.h"
#include "sinkrt/runtime/stream_format.h"

namespace sinkrt::tools {
namespace {

std::string_view StripTaskSuffix(std::string_view kind) {
  constexpr std::string_view kSuffix = "Task";
  if (kind.size() > kSuffix.size() && kind.ends_with(kSuffix)) kind.remove_suffix(kSuffix.size());
  return kind;
}

// "#7": a table entry with no name.
std::string IndexLabel(int64_t index) {
  std::string s = "#";
  s += std::to_string(index);
  return s;
}

std::vector<int64_t> Indices(const flatbuffers::Vector<uint32_t>* v) {
  return v ? std::vector<int64_t>(v->begin(), v->end()) : std::vector<int64_t>{};
}

// One number when both (or all four) sides agree, else the list: keeps the
// common symmetric case as short as "stride=2 pad=1".
Json Collapse(std::initializer_list<int> values) {
  bool same = true;
  for (int v : values) same = same && v == *values.begin();
  return same ? Json(*values.begin()) : Json(std::vector<int>(values));
}

std::string GroupLabel(const VerifiedStream& view, uint32_t group) {
  const auto* groups = view.root()->groups();
  if (groups && group < groups->size()) {
    std::string name = Str(groups->Get(group)->name());
    if (!name.empty()) return name;
  }
  return IndexLabel(group);
}

bool UsesAxis(fb::OpCode op) {
  switch (op) {
    case fb::OpCode::Softmax:
    case fb::OpCode::LogSoftmax:
    case fb::OpCode::BiasAdd:
    case fb::OpCode::SoftmaxGrad:
    case fb::OpCode::LogSoftmaxGrad:
    case fb::OpCode::BiasAddGrad:
    case fb::OpCode::Concat:
      return true;
    default:
      return false;
  }
}

// A schedule's kind and the arguments its formula reads (a table: its
// length and ends).
void LrScheduleAttrs(const fb::LrScheduleOptions& o, Json& attrs) {
  const char* kind = fb::EnumNameLrScheduleKind(o.kind());
  attrs["schedule"] = (kind && *kind) ? std::string(kind) : std::to_string(static_cast<int>(o.kind()));
  switch (o.kind()) {
    case fb::LrScheduleKind::Table:
      if (o.values() && o.values()->size() > 0) {
        attrs["steps"] = o.values()->size();
        attrs["first"] = CleanFloat(o.values()->Get(0));
        attrs["last"] = CleanFloat(o.values()->Get(o.values()->size() - 1));
      }
      return;
    case fb::LrScheduleKind::WarmUp:
      attrs["learning_rate"] = o.learning_rate();
      attrs["warmup_steps"] = o.warmup_steps();
      return;
    default:
      break;
  }
  attrs["learning_rate"] = o.learning_rate();
  attrs["decay_steps"] = o.decay_steps();
  if (o.kind() == fb::LrScheduleKind::CosineDecay || o.kind() == fb::LrScheduleKind::WarmupCosine ||
      o.kind() == fb::LrScheduleKind::PolynomialDecay)
    attrs["end_learning_rate"] = o.end_learning_rate();
  if (o.kind() == fb::LrScheduleKind::WarmupCosine) attrs["warmup_steps"] = o.warmup_steps();
  if (o.kind() == fb::LrScheduleKind::PolynomialDecay) {
    attrs["power"] = o.power();
    if (o.update_decay_steps()) attrs["update_decay_steps"] = true;
  }
  if (o.kind() == fb::LrScheduleKind::ExponentialDecay || o.kind() == fb::LrScheduleKind::NaturalExpDecay ||
      o.kind() == fb::LrScheduleKind::InverseDecay) {
    attrs["decay_rate"] = o.decay_rate();
    if (o.is_stair()) attrs["is_stair"] = true;
  }
}

void AxisAttrs(fb::OpCode op, const fb::AxisOptions& o, Json& attrs) {
  std::vector<int> axes = o.axes() ? std::vector<int>(o.axes()->begin(), o.axes()->end()) : std::vector<int>{};
  if (op == fb::OpCode::ReduceSum || op == fb::OpCode::ReduceMean || op == fb::OpCode::ReduceMax) {
    attrs["axes"] = axes.empty() ? Json("all") : Json(axes);
  } else {
    if (UsesAxis(op) || o.axis() != -1) attrs["axis"] = o.axis();
    if (!axes.empty()) attrs["axes"] = axes;
  }
  if (o.keep_dims()) attrs["keep_dims"] = true;
  if (o.scale() != 1.0f) attrs["scale"] = CleanFloat(o.scale());
}

std::vector<int64_t> Longs(const flatbuffers::Vector<int64_t>* v) {
  return v ? std::vector<int64_t>(v->begin(), v->end()) : std::vector<int64_t>{};
}

void DropoutAttrs(const fb::DropoutOptions& o, Json& attrs) {
  attrs["p"] = o.p();
  attrs["seed"] = o.seed();
  attrs["op_id"] = o.op_id();
  if (o.global_shape()) attrs["global_shape"] = Longs(o.global_shape());
  if (o.offset()) attrs["offset"] = Longs(o.offset());
  if (o.row_stride() != 1) attrs["row_stride"] = o.row_stride();
}

void OneHotAttrs(const fb::OneHotOptions& o, Json& attrs) {
  attrs["depth"] = o.depth();
  attrs["axis"] = o.axis();
  attrs["on_value"] = CleanFloat(o.on_value());
  attrs["off_value"] = CleanFloat(o.off_value());
}

void PadAttrs(const fb::PadOptions& o, Json& attrs) {
  attrs["paddings"] = Longs(o.paddings());
  const char* mode = fb::EnumNamePadMode(o.mode());
  attrs["mode"] = (mode && *mode) ? std::string(mode) : std::to_string(int(o.mode()));
  if (o.mode() == fb::PadMode::Constant) attrs["value"] = CleanFloat(o.value());
}

void KernelAttrs(const VerifiedStream& view, const fb::KernelTask& k, Json& attrs) {
  switch (k.options_type()) {
    case fb::OpOptions::MatMulOptions:
      if (const auto* o = k.options_as_MatMulOptions()) {
        if (o->transpose_a()) attrs["transpose_a"] = true;
        if (o->transpose_b()) attrs["transpose_b"] = true;
      }
      break;
    case fb::OpOptions::AxisOptions:
      if (const auto* o = k.options_as_AxisOptions()) AxisAttrs(k.op(), *o, attrs);
      break;
    case fb::OpOptions::Conv2DOptions:
      if (const auto* o = k.options_as_Conv2DOptions()) {
        attrs["stride"] = Collapse({o->stride_h(), o->stride_w()});
        attrs["pad"] = Collapse({o->pad_top(), o->pad_bottom(), o->pad_left(), o->pad_right()});
        if (o->dilation_h() != 1 || o->dilation_w() != 1)
          attrs["dilation"] = Collapse({o->dilation_h(), o->dilation_w()});
      }
      break;
    case fb::OpOptions::Pool2DOptions:
      if (const auto* o = k.options_as_Pool2DOptions()) {
        attrs["kernel"] = Collapse({o->kernel_h(), o->kernel_w()});
        attrs["stride"] = Collapse({o->stride_h(), o->stride_w()});
        attrs["pad"] = Collapse({o->pad_top(), o->pad_bottom(), o->pad_left(), o->pad_right()});
      }
      break;
    case fb::OpOptions::FillOptions:
      if (const auto* o = k.options_as_FillOptions())
        attrs[k.op() == fb::OpCode::ClipByGlobalNorm ? "clip_norm" : "value"] = CleanFloat(o->value());
      break;
    case fb::OpOptions::SgdOptions:
      if (const auto* o = k.options_as_SgdOptions()) {
        if (o->lr_input())
          attrs["lr"] = "input";  // the schedule's tensor (docs/guide/lr_schedules.md)
        else
          attrs["lr"] = CleanFloat(o->learning_rate());
        if (o->weight_decay() != 0) attrs["weight_decay"] = CleanFloat(o->weight_decay());
      }
      break;
    case fb::OpOptions::MomentumOptions:
      if (const auto* o = k.options_as_MomentumOptions()) {
        if (o->lr_input())
          attrs["lr"] = "input";
        else
          attrs["lr"] = CleanFloat(o->learning_rate());
        attrs["momentum"] = CleanFloat(o->momentum());
        if (o->nesterov()) attrs["nesterov"] = true;
        if (o->weight_decay() != 0) attrs["weight_decay"] = CleanFloat(o->weight_decay());
      }
      break;
    case fb::OpOptions::AdamOptions:
      if (const auto* o = k.options_as_AdamOptions()) {
        if (k.op() == fb::OpCode::AdamPowers) {
          // reads no rate
        } else if (o->lr_input()) {
          attrs["lr"] = "input";
        } else {
          attrs["lr"] = CleanFloat(o->learning_rate());
        }
        attrs["beta1"] = CleanFloat(o->beta1());
        attrs["beta2"] = CleanFloat(o->beta2());
        attrs["epsilon"] = CleanFloat(o->epsilon());
        if (o->weight_decay() != 0) attrs["weight_decay"] = CleanFloat(o->weight_decay());
      }
      break;
    case fb::OpOptions::LayerNormOptions:
      if (const auto* o = k.options_as_LayerNormOptions()) attrs["epsilon"] = CleanFloat(o->epsilon());
      break;
    case fb::OpOptions::CastOptions:
      if (const auto* o = k.options_as_CastOptions()) attrs["to"] = std::string(DTypeName(o->to()));
      break;
    case fb::OpOptions::LossScaleOptions:
      if (const auto* o = k.options_as_LossScaleOptions()) {
        if (k.op() == fb::OpCode::GradOverflow) {
          attrs["check"] = o->check();
        } else if (o->dynamic()) {
          attrs["scale_factor"] = CleanFloat(o->scale_factor());
          attrs["scale_window"] = o->scale_window();
        } else {
          attrs["fixed"] = true;
        }
      }
      break;
    case fb::OpOptions::CommOptions:
      if (const auto* o = k.options_as_CommOptions()) {
        attrs["group"] = o->group() ? std::vector<int>(o->group()->begin(), o->group()->end()) : std::vector<int>{};
        attrs["position"] = static_cast<int>(o->position());
        attrs["axis"] = o->axis();
        if (o->max()) attrs["max"] = true;
      }
      break;
    case fb::OpOptions::TransposeOptions:
      if (const auto* o = k.options_as_TransposeOptions())
        attrs["perm"] = o->perm() ? std::vector<int>(o->perm()->begin(), o->perm()->end()) : std::vector<int>{};
      break;
    case fb::OpOptions::SplitOptions:
      if (const auto* o = k.options_as_SplitOptions()) {
        attrs["axis"] = o->axis();
        attrs["sizes"] =
            o->sizes() ? std::vector<int64_t>(o->sizes()->begin(), o->sizes()->end()) : std::vector<int64_t>{};
      }
      break;
    case fb::OpOptions::LrScheduleOptions:
      if (const auto* o = k.options_as_LrScheduleOptions()) LrScheduleAttrs(*o, attrs);
      break;
    case fb::OpOptions::MetricSumOptions:
      if (const auto* o = k.options_as_MetricSumOptions())
        attrs["weights"] =
            o->weights() ? std::vector<double>(o->weights()->begin(), o->weights()->end()) : std::vector<double>{};
      break;
    case fb::OpOptions::DropoutOptions:
      if (const auto* o = k.options_as_DropoutOptions()) DropoutAttrs(*o, attrs);
      break;
    case fb::OpOptions::OneHotOptions:
      if (const auto* o = k.options_as_OneHotOptions()) OneHotAttrs(*o, attrs);
      break;
    case fb::OpOptions::PadOptions:
      if (const auto* o = k.options_as_PadOptions()) PadAttrs(*o, attrs);
      break;
    default:
      break;
  }
  if (k.fused_bias() >= 0) attrs["fused_bias"] = BufferLabel(view, k.fused_bias());
  if (k.fused_activation() == fb::Activation::Relu) {
    attrs["fused_relu"] = true;
  } else if (k.fused_activation() != fb::Activation::None) {
    const char* n = fb::EnumNameActivation(k.fused_activation());
    attrs["fused_activation"] = (n && *n) ? std::string(n) : std::to_string(int(k.fused_activation()));
  }
}

std::string ReduceOpName(fb::ReduceOp op) {
  const char* n = fb::EnumNameReduceOp(op);
  return (n && *n) ? std::string(n) : std::to_string(int(op));
}

// [first buffer's offset, last buffer's end): what an AllReduce reduces,
// since the verifier holds its buffers contiguous and ascending.
std::pair<uint64_t, uint64_t> ByteRange(const VerifiedStream& view, const flatbuffers::Vector<uint32_t>* buffers) {
  const auto* table = view.root()->buffers();
  if (!buffers || buffers->size() == 0 || !table) return {0, 0};
  const uint32_t first = buffers->Get(0), last = buffers->Get(buffers->size() - 1);
  if (first >= table->size() || last >= table->size()) return {0, 0};
  return {table->Get(first)->offset(), table->Get(last)->offset() + table->Get(last)->bytes()};
}

}  // namespace

bool ReducesGradients(const VerifiedStream& view, const flatbuffers::Vector<uint32_t>* buffers) {
  const auto* table = view.root()->buffers();
  if (!buffers || buffers->size() == 0 || !table) return false;
  for (uint32_t b : *buffers)
    if (b >= table->size() || table->Get(b)->role() != fb::BufferRole::Grad) return false;
  return true;
}

std::string Str(const flatbuffers::String* s) {
  std::string out = s ? s->str() : std::string();
  // Names come from the file: a control character must not reach the terminal.
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return out;
}

std::vector<int64_t> ShapeOf(const flatbuffers::Vector<int64_t>* v) {
  return v ? std::vector<int64_t>(v->begin(), v->end()) : std::vector<int64_t>{};
}

std::string Hex64(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string HumanBytes(uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int unit = 0;
  while (v >= 1024 && unit < 4) {
    v /= 1024;
    ++unit;
  }
  char buf[32];
  if (unit == 0)
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  else
    std::snprintf(buf, sizeof buf, "%.2f %s", v, kUnits[unit]);
  return buf;
}

double CleanFloat(float f) {
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf - 1, f);
  if (ec != std::errc()) return f;
  *end = '\0';
  return std::strtod(buf, nullptr);
}

std::string BufferLabel(const VerifiedStream& view, int64_t index) {
  const auto* buffers = view.root()->buffers();
  if (index >= 0 && buffers && index < static_cast<int64_t>(buffers->size())) {
    std::string name = Str(buffers->Get(static_cast<uint32_t>(index))->name());
    if (!name.empty()) return name;
  }
  return IndexLabel(index);
}

std::vector<std::string> RequirementNames(uint64_t bits) {
  std::vector<std::string> names;
  if (bits & kFeatureCollectives) names.push_back("collectives");
  if (bits & kFeatureBlockedCollectives) names.push_back("blocked collectives");
  for (int b = 0; b < 64; ++b) {
    uint64_t bit = uint64_t{1} << b;
    if ((bits & bit) && bit != kFeatureCollectives && bit != kFeatureBlockedCollectives)
      names.push_back("bit" + std::to_string(b));
  }
  return names;
}

std::optional<double> ArenaRatio(const fb::TaskStream& s) {
  if (s.liveness_lower_bound() == 0) return std::nullopt;
  return static_cast<double>(s.arena_bytes()) / static_cast<double>(s.liveness_lower_bound());
}

std::vector<RoleTotal> BytesByRole(const VerifiedStream& view) {
  constexpr int kRoles = static_cast<int>(fb::BufferRole::MAX) + 1;
  std::vector<RoleTotal> all;
  for (int r = 0; r < kRoles; ++r) all.push_back({static_cast<fb::BufferRole>(r)});
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> ranges(kRoles);
  if (view.root()->buffers()) {
    for (const fb::Buffer* b : *view.root()->buffers()) {
      int r = static_cast<int>(b->role());
      if (r >= kRoles) continue;  // VerifyTaskStream refuses unknown roles
      ++all[r].buffers;
      all[r].bytes += b->bytes();
      // A parameter's or gradient's block lies inside it: its bytes are
      // counted there.
      if (b->role() != fb::BufferRole::ParamSlice && b->role() != fb::BufferRole::GradSlice)
        ranges[r].push_back({b->offset(), b->offset() + b->bytes()});
      const fb::Slice* slice = b->slice();
      const int64_t whole = slice ? NumElements(ShapeOf(slice->global_shape())) : -1;
      if (slice && whole >= 0) {
        ++all[r].slices;
        all[r].whole_bytes += static_cast<uint64_t>(whole) * DTypeSize(b->dtype());
      } else {
        all[r].whole_bytes += b->bytes();
      }
    }
  }
  std::vector<RoleTotal> used;
  for (int r = 0; r < kRoles; ++r) {
    std::sort(ranges[r].begin(), ranges[r].end());
    uint64_t covered_to = 0;
    for (auto [begin, end] : ranges[r]) {
      begin = std::max(begin, covered_to);
      if (end > begin) all[r].arena += end - begin;
      covered_to = std::max(covered_to, end);
    }
    if (all[r].buffers) used.push_back(all[r]);
  }
  return used;
}

uint64_t QueueBatchBytes(const fb::QueueSpec& q) {
  uint64_t total = 0;
  if (!q.columns()) return 0;
  for (const fb::QueueColumn* c : *q.columns()) {
    int64_t n = NumElements(ShapeOf(c->shape()));
    if (n > 0) total += static_cast<uint64_t>(n) * DTypeSize(c->dtype());
  }
  return total;
}

Json InitParams(const fb::Init& d) {
  Json p = Json::object();
  switch (d.kind()) {
    case fb::InitKind::Constant:
      p["value"] = CleanFloat(d.value());
      break;
    case fb::InitKind::Uniform:
      p["low"] = CleanFloat(d.low());
      p["high"] = CleanFloat(d.high());
      p["seed"] = d.seed();
      break;
    case fb::InitKind::Normal:
      p["mean"] = CleanFloat(d.mean());
      p["stddev"] = CleanFloat(d.stddev());
      p["seed"] = d.seed();
      break;
    case fb::InitKind::XavierUniform:
    case fb::InitKind::XavierNormal:
    case fb::InitKind::HeUniform:
    case fb::InitKind::HeNormal:
      p["seed"] = d.seed();
      p["fan_in"] = d.fan_in();
      p["fan_out"] = d.fan_out();
      break;
    case fb::InitKind::Inline:
      p["blob_offset"] = d.data_offset();
      p["blob_bytes"] = d.data_bytes();
      break;
    default:
      break;
  }
  return p;
}

TaskInfo DescribeTask(const VerifiedStream& view, const fb::Task& task) {
  TaskInfo info;
  info.kind = std::string(StripTaskSuffix(TaskKindName(task.body_type())));
  info.name = Str(task.name());
  switch (task.body_type()) {
    case fb::TaskBody::KernelTask:
      if (const auto* k = task.body_as_KernelTask()) {
        info.op = std::string(OpCodeName(k->op()));
        info.inputs = Indices(k->inputs());
        info.outputs = Indices(k->outputs());
        KernelAttrs(view, *k, info.attrs);
      }
      break;
    case fb::TaskBody::GetNextTask:
      if (const auto* g = task.body_as_GetNextTask()) {
        info.outputs = Indices(g->outputs());
        const auto* queues = view.root()->queues();
        std::string qname = queues && g->queue() < queues->size() ? Str(queues->Get(g->queue())->name()) : "";
        info.attrs["queue"] = qname.empty() ? IndexLabel(g->queue()) : qname;
      }
      break;
    case fb::TaskBody::EventRecordTask:
      if (const auto* e = task.body_as_EventRecordTask()) info.attrs["event"] = e->event();
      break;
    case fb::TaskBody::EventWaitTask:
      if (const auto* e = task.body_as_EventWaitTask()) info.attrs["event"] = e->event();
      break;
    case fb::TaskBody::InitTask:
      if (const auto* in = task.body_as_InitTask()) {
        const auto* inits = view.root()->initializers();
        if (in->initializers() && inits)
          for (uint32_t i : *in->initializers())
            if (i < inits->size()) info.outputs.push_back(inits->Get(i)->buffer());
        info.attrs["initializers"] = in->initializers() ? in->initializers()->size() : 0;
      }
      break;
    case fb::TaskBody::AllReduceTask:
      if (const auto* t = task.body_as_AllReduceTask()) {
        info.inputs = info.outputs = Indices(t->buffers());  // in place
        info.attrs["group"] = GroupLabel(view, t->group());
        info.attrs["op"] = ReduceOpName(t->op());
        auto [begin, end] = ByteRange(view, t->buffers());
        info.attrs["bytes"] = RangeText(begin, end);
        if (ReducesGradients(view, t->buffers())) info.attrs["gradients"] = info.inputs.size();
      }
      break;
    case fb::TaskBody::AllGatherTask:
      if (const auto* t = task.body_as_AllGatherTask()) {
        // Fused and blocked (optimizer parallel): its lists.
        const bool blocked = t->inputs() && t->inputs()->size() > 0;
        info.inputs = blocked ? Indices(t->inputs()) : std::vector<int64_t>{t->input()};
        info.outputs = blocked ? Indices(t->outputs()) : std::vector<int64_t>{t->output()};
        info.attrs["group"] = GroupLabel(view, t->group());
        if (blocked) info.attrs["fused"] = info.inputs.size();
      }
      break;
    case fb::TaskBody::ReduceScatterTask:
      if (const auto* t = task.body_as_ReduceScatterTask()) {
        const bool blocked = t->inputs() && t->inputs()->size() > 0;
        info.inputs = blocked ? Indices(t->inputs()) : std::vector<int64_t>{t->input()};
        info.outputs = blocked ? Indices(t->outputs()) : std::vector<int64_t>{t->output()};
        info.attrs["group"] = GroupLabel(view, t->group());
        info.attrs["op"] = ReduceOpName(t->op());
        if (blocked) info.attrs["fused"] = info.inputs.size();
      }
      break;
    case fb::TaskBody::AllToAllTask:
      if (const auto* t = task.body_as_AllToAllTask()) {
        info.inputs = {t->input()};
        info.outputs = {t->output()};
        info.attrs["group"] = GroupLabel(view, t->group());
      }
      break;
    case fb::TaskBody::BroadcastTask:
      if (const auto* t = task.body_as_BroadcastTask()) {
        info.inputs = info.outputs = Indices(t->buffers());
        info.attrs["group"] = GroupLabel(view, t->group());
        info.attrs["root"] = t->root();
      }
      break;
    case fb::TaskBody::SendTask:
      if (const auto* t = task.body_as_SendTask()) {
        info.inputs = {t->buffer()};
        info.attrs["group"] = GroupLabel(view, t->group());
        info.attrs["peer"] = t->peer();
      }
      break;
    case fb::TaskBody::RecvTask:
      if (const auto* t = task.body_as_RecvTask()) {
        info.outputs = {t->buffer()};
        info.attrs["group"] = GroupLabel(view, t->group());
        info.attrs["peer"] = t->peer();
      }
      break;
    default:
      break;
  }
  return info;
}

std::string AttrsText(const Json& attrs) {
  std::string out;
  for (const auto& [key, value] : attrs.items()) {
    if (!out.empty()) out += ' ';
    out += key;
    if (value.is_boolean() && value.get<bool>()) continue;
    out += '=';
    if (value.is_string()) {
      out += value.get<std::string>();
    } else if (value.is_array()) {
      for (size_t i = 0; i < value.size(); ++i) {
        if (i) out += ',';
        out += value[i].dump();
      }
    } else {
      out += value.dump();
    }
  }
  return out;
}

std::string NamesText(const VerifiedStream& view, const std::vector<int64_t>& indices) {
  if (indices.empty()) return "-";
  std::string s;
  for (size_t i = 0; i < indices.size(); ++i) {
    if (i) s += ", ";
    s += BufferLabel(view, indices[i]);
  }
  return s;
}

std::string TaskLine(const VerifiedStream& view, const TaskInfo& info) {
  std::string s = info.kind;
  for (const std::string& part : {info.op, info.name}) {
    if (part.empty()) continue;
    s += ' ';
    s += part;
  }
  // Events and the like touch no buffer: "EventRecord bucket0/ready event=0".
  if (!info.inputs.empty() || !info.outputs.empty()) {
    s += ' ';
    s += NamesText(view, info.inputs);
    s += " -> ";
    s += NamesText(view, info.outputs);
  }
  std::string attrs = AttrsText(info.attrs);
  if (!attrs.empty()) {
    s += ' ';
    s += attrs;
  }
  return s;
}

std::string RangeText(uint64_t begin, uint64_t end) {
  // Appends, not "[" + ...: GCC 12 warns (-Wrestrict) on the temporaries.
  std::string s = "[";
  s += std::to_string(begin);
  s += ", ";
  s += std::to_string(end);
  s += ')';
  return s;
}

std::vector<BucketInfo> Buckets(const VerifiedStream& view, const fb::Program& program) {
  std::vector<BucketInfo> out;
  if (!program.streams()) return out;
  for (uint32_t st = 0; st < program.streams()->size(); ++st) {
    const auto* tasks = program.streams()->Get(st)->tasks();
    if (!tasks) continue;
    for (uint32_t i = 0; i < tasks->size(); ++i) {
      const fb::AllReduceTask* t = tasks->Get(i)->body_as_AllReduceTask();
      if (!t || !ReducesGradients(view, t->buffers())) continue;
      BucketInfo b;
      b.stream = st;
      b.task = i;
      b.name = Str(tasks->Get(i)->name());
      b.group = GroupLabel(view, t->group());
      if (const auto* groups = view.root()->groups(); groups && t->group() < groups->size())
        if (const auto* ranks = groups->Get(t->group())->ranks()) b.ranks.assign(ranks->begin(), ranks->end());
      b.op = ReduceOpName(t->op());
      b.buffers = Indices(t->buffers());
      std::tie(b.offset, b.end) = ByteRange(view, t->buffers());
      out.push_back(std::move(b));
    }
  }
  return out;
}

std::vector<const fb::Program*> SelectPrograms(const VerifiedStream& view, const DumpOptions& options) {
  std::vector<const fb::Program*> out;
  if (!view.root()->programs()) return out;
  for (const fb::Program* p : *view.root()->programs())
    if (!options.program || p->kind() == *options.program) out.push_back(p);
  return out;
}

}  // namespace sinkrt::tools
