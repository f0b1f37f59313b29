#include "host/src/compiler/graph_hash.h"

#include <bit>

#include "sinkrt/runtime/stream_format.h"

namespace sinkrt::host {
namespace compiler {

void Fnv1a64::Bytes(std::span<const uint8_t> bytes) {
  for (uint8_t b : bytes) {
    h_ ^= b;
    h_ *= 0x100000001b3ull;  // FNV-1a 64 prime
  }
}

void Fnv1a64::U32(uint32_t v) {
  for (int i = 0; i < 4; ++i) U8(static_cast<uint8_t>(v >> (8 * i)));
}

void Fnv1a64::U64(uint64_t v) {
  for (int i = 0; i < 8; ++i) U8(static_cast<uint8_t>(v >> (8 * i)));
}

void Fnv1a64::F32(float v) { U32(std::bit_cast<uint32_t>(v)); }

void Fnv1a64::String(std::string_view s) {
  U64(s.size());
  Bytes({reinterpret_cast<const uint8_t*>(s.data()), s.size()});
}

uint64_t StreamHash(uint64_t graph_hash, const CompileOptions& o) {
  Fnv1a64 h;
  h.String("sinkrt.stream");
  h.U32(kFormatMajor);
  h.U32(kFormatMinor);
  h.U64(graph_hash);
  const OptimizerSpec& opt = o.optimizer;
  h.U8(static_cast<uint8_t>(opt.kind));
  h.F32(opt.learning_rate);
  h.F32(opt.momentum);
  h.Bool(opt.nesterov);
  h.F32(opt.beta1);
  h.F32(opt.beta2);
  h.F32(opt.epsilon);
  h.F32(opt.weight_decay);
  // Absent without groups, so that those streams keep their hashes.
  if (!opt.groups.empty()) {
    h.String("groups");
    h.U64(opt.groups.size());
    for (const ParamGroup& group : opt.groups) {
      h.U64(group.names.size());
      for (const std::string& n : group.names) h.String(n);
      h.F32(group.weight_decay);
      h.F32(group.learning_rate);
    }
  }
  // Absent without clipping, so that those streams keep their hashes.
  if (opt.clip_grad_norm != 0) {
    h.String("clip_grad_norm");
    h.F32(opt.clip_grad_norm);
  }
  h.U32(o.queue_capacity);
  h.U32(o.rank);
  h.U32(o.world_size);
  h.U32(o.arena_alignment);
  h.Bool(o.fuse);
  h.Bool(o.eval_program);
  h.Bool(o.predict_program);
  // Stand-alone ignores the parallel fields; leaving them out keeps its
  // hashes (and so its streams) what they were before they existed.
  if (o.parallel_mode != ParallelMode::StandAlone) {
    h.String("parallel");
    h.U8(static_cast<uint8_t>(o.parallel_mode));
    h.Bool(o.gradients_mean);
    h.Bool(o.parameter_broadcast);
    const CommFusion& f = o.comm_fusion;
    h.Bool(f.openstate);
    h.String(f.mode);
    h.U64(std::bit_cast<uint64_t>(f.size_mb));
    h.U64(f.indices.size());
    for (int i : f.indices) h.I64(i);
  }
  if (o.pipeline.stages > 1) {
    const PipelineConfig& p = o.pipeline;
    h.String("pipeline");
    h.I64(p.stages);
    h.I64(p.micro_size);
    h.String(p.scheduler);
    h.String(o.calibration);  // prices the balanced split
    h.U64(p.stage_of.size());
    for (const auto& [layer, stage] : p.stage_of) {
      h.String(layer);
      h.I64(stage);
    }
  }
  // Only when it can shard something, so that other streams keep their
  // hashes.
  if (o.enable_parallel_optimizer && o.parallel_mode != ParallelMode::StandAlone) {
    const ParallelOptimizerConfig& c = o.parallel_optimizer_config;
    h.String("parallel_optimizer");
    h.I64(c.threshold_kb);
    h.I64(c.optimizer_weight_shard_size);
    h.String(c.optimizer_level);
    h.Bool(c.gradient_accumulation_shard);
  }
  if (o.grad_accumulation > 1) {
    h.String("grad_accumulation");
    h.I64(o.grad_accumulation);
  }
  if (o.amp_level != AmpLevel::O0) {
    h.String("amp_level");
    h.String(AmpLevelName(o.amp_level));
  }
  if (o.loss_scale.enabled()) {
    const LossScaleManager& m = o.loss_scale;
    h.String("loss_scale");
    h.I64(static_cast<int64_t>(m.kind));
    h.U64(std::bit_cast<uint32_t>(m.loss_scale));
    h.Bool(m.drop_overflow_update);
    h.U64(std::bit_cast<uint32_t>(m.scale_factor));
    h.I64(m.scale_window);
  }
  // How the batch reaches the ranks changes their streams (queue shapes,
  // slices); only semi_auto_parallel has a say.
  if (o.parallel_mode == ParallelMode::SemiAutoParallel) {
    h.Bool(o.full_batch);
    h.U64(o.dataset_strategy.size());
    for (const std::vector<int64_t>& s : o.dataset_strategy) {
      h.U64(s.size());
      for (int64_t v : s) h.I64(v);
    }
  }
  return h.value();
}

}  // namespace compiler

namespace {

// `batch_free`: the leading dimension of every tensor the batch flows
// through (inputs and intermediates) and of every Reshape's sizes is left
// out, so one network built at two batch sizes hashes alike.
// `with_init` false: initialisers (kind, constants, seed, inline data) are
// left out, so one network built with another seed hashes alike.
uint64_t Hash(const Graph& g, bool with_strategies, bool batch_free = false, bool with_init = true) {
  compiler::Fnv1a64 h;
  auto shape = [&](const Shape& s, bool batched) {
    h.U64(s.size());
    for (size_t i = batched ? 1 : 0; i < s.size(); ++i) h.I64(s[i]);
  };
  h.String(!with_init ? "sinkrt.graph.v1.structure" : batch_free ? "sinkrt.graph.v1.batch-free" : "sinkrt.graph.v1");
  h.String(g.name());

  h.U64(g.tensors().size());
  for (const TensorInfo& t : g.tensors()) {
    h.String(t.name);
    h.U8(static_cast<uint8_t>(t.dtype));
    shape(t.shape, batch_free && (t.kind == TensorKind::Input || t.kind == TensorKind::Intermediate));
    h.U8(static_cast<uint8_t>(t.kind));
    if (!with_init) continue;
    const InitSpec& i = t.init;
    h.U8(static_cast<uint8_t>(i.kind));
    for (float v : {i.value, i.low, i.high, i.mean, i.stddev}) h.F32(v);
    h.U64(i.seed);
    h.I64(i.fan_in);
    h.I64(i.fan_out);
    h.U64(i.data.size());
    h.Bytes(i.data);
  }

  h.U64(g.ops().size());
  for (const OpNode& op : g.ops()) {
    h.String(op.name);
    h.U32(static_cast<uint32_t>(op.op));
    h.U64(op.inputs.size());
    for (TensorId t : op.inputs) h.U32(t);
    h.U64(op.outputs.size());
    for (TensorId t : op.outputs) h.U32(t);
    const OpAttrs& a = op.attrs;
    h.Bool(a.transpose_a);
    h.Bool(a.transpose_b);
    h.I64(a.axis);
    h.U64(a.axes.size());
    for (int x : a.axes) h.I64(x);
    h.Bool(a.keep_dims);
    h.F32(a.scale);
    for (int v : {a.stride_h, a.stride_w, a.pad_top, a.pad_bottom, a.pad_left, a.pad_right, a.dilation_h, a.dilation_w,
                  a.kernel_h, a.kernel_w})
      h.I64(v);
    h.F32(a.value);
    h.F32(a.learning_rate);
    h.F32(a.momentum);
    h.F32(a.weight_decay);
    h.Bool(a.nesterov);
    h.F32(a.beta1);
    h.F32(a.beta2);
    h.F32(a.epsilon);
    // Hashed only where set, so that graphs without these ops keep the
    // hashes (and so the streams) they had before the fields existed.
    if (a.layer_norm_epsilon != OpAttrs{}.layer_norm_epsilon) {
      h.String("layer_norm_epsilon");
      h.F32(a.layer_norm_epsilon);
    }
    if (op.op == OpCode::BatchNorm) {
      h.String("batch_norm");
      h.F32(a.bn_momentum);
      h.Bool(a.bn_sync);
    }
    if (a.cast_to != DType::Invalid) {
      h.String("cast_to");
      h.U8(static_cast<uint8_t>(a.cast_to));
    }
    if (!a.perm.empty()) {
      h.String("perm");
      h.U64(a.perm.size());
      for (int v : a.perm) h.I64(v);
    }
    if (!a.sizes.empty()) {
      h.String("sizes");
      h.U64(a.sizes.size());
      for (size_t i = batch_free ? 1 : 0; i < a.sizes.size(); ++i) h.I64(a.sizes[i]);
    }
    if (op.op == OpCode::Dropout || op.op == OpCode::DropoutGrad) {
      // The masks: another p, seed or op id is another training run. The
      // placement is the compiler's, derived from the rest.
      h.String("dropout");
      h.F32(a.dropout_p);
      h.U64(a.dropout_seed);
      h.U32(a.dropout_op_id);
    }
    if (op.op == OpCode::OneHot) {
      h.String("one_hot");
      h.I64(a.depth);
      h.I64(a.one_hot_axis);
      h.F32(a.on_value);
      h.F32(a.off_value);
    }
    if (op.op == OpCode::Pad || op.op == OpCode::PadGrad) {
      h.String("pad");
      h.U8(static_cast<uint8_t>(a.pad_mode));
      h.U64(a.paddings.size());
      for (int64_t v : a.paddings) h.I64(v);
    }
    if (!op.recompute.empty()) {
      h.String("recompute");
      h.String(op.recompute);
    }
    // A strategy changes what is compiled; absent, it leaves the hash as
    // it was before strategies existed.
    if (with_strategies && !op.strategy.empty()) {
      h.String("strategy");
      h.U64(op.strategy.size());
      for (const std::vector<int64_t>& entry : op.strategy) {
        h.U64(entry.size());
        for (int64_t v : entry) h.I64(v);
      }
    }
  }

  h.U32(g.loss());
  h.U64(g.outputs().size());
  for (TensorId t : g.outputs()) h.U32(t);
  return h.value();
}

}  // namespace

uint64_t GraphHash(const Graph& g) { return Hash(g, true); }
uint64_t GraphHashWithoutStrategies(const Graph& g) { return Hash(g, false); }
uint64_t NetworkHash(const Graph& g) { return Hash(g, false, /*batch_free=*/true); }
uint64_t NetworkStructureHash(const Graph& g) { return Hash(g, false, /*batch_free=*/true, /*with_init=*/false); }

}  // namespace sinkrt::host
