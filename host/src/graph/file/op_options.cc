#include "host/src/graph/file/op_options.h"

#include "host/src/graph/file/lr_schedule_options.h"

#include "host/src/util/fb_vectors.h"
#include "host/src/util/schema_enums.h"

namespace sinkrt::host {
namespace {

namespace fbs = flatbuffers;

std::string TypeName(fb::OpOptions t) {
  const char* n = fb::EnumNameOpOptions(t);
  return (n && *n) ? n : "OpOptions(" + std::to_string(static_cast<int>(t)) + ")";
}

// The fields a table left out read as the schema's defaults: a default-built
// table from an empty builder gives exactly those.
template <typename T>
const T* DefaultTable() {
  static const std::vector<uint8_t> bytes = [] {
    fbs::FlatBufferBuilder fbb;
    typename T::Builder b(fbb);
    fbb.Finish(b.Finish());
    return std::vector<uint8_t>(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
  }();
  return fbs::GetRoot<T>(bytes.data());
}

template <typename T>
const T* OrDefault(const void* options) {
  return options ? static_cast<const T*>(options) : DefaultTable<T>();
}

// The window fields convolution and pooling options share.
template <typename T>
void ReadStridesAndPads(const T* o, OpAttrs& a) {
  a.stride_h = o->stride_h();
  a.stride_w = o->stride_w();
  a.pad_top = o->pad_top();
  a.pad_bottom = o->pad_bottom();
  a.pad_left = o->pad_left();
  a.pad_right = o->pad_right();
}

// The fields every optimizer's options share.
template <typename T>
void ReadRateAndDecay(const T* o, OpAttrs& a) {
  a.learning_rate = o->learning_rate();
  a.weight_decay = o->weight_decay();
  a.lr_input = o->lr_input();
}

// OneHotOptions and PadOptions into `a`; a PadMode the schema lacks is refused.
Status ReadOneHotOrPad(fb::OpOptions type, const void* options, OpAttrs& a) {
  if (type == fb::OpOptions::OneHotOptions) {
    const auto* o = OrDefault<fb::OneHotOptions>(options);
    a.depth = o->depth();
    a.on_value = o->on_value();
    a.off_value = o->off_value();
    a.one_hot_axis = o->axis();
    return Status::Ok();
  }
  const auto* o = OrDefault<fb::PadOptions>(options);
  a.paddings = Longs(o->paddings());
  const auto mode = static_cast<uint8_t>(o->mode());
  if (mode > static_cast<uint8_t>(fb::PadMode::MAX))
    return InvalidArgument("field 'options': PadOptions.mode " + std::to_string(mode) +
                           " is not a pad mode (0 constant, 1 reflect, 2 symmetric)");
  a.pad_mode = static_cast<PadMode>(mode);
  a.value = o->value();
  return Status::Ok();
}

}  // namespace

fb::OpOptions OpOptionsTypeFor(OpCode op) {
  using fb::OpOptions;
  switch (op) {
    case OpCode::MatMul:
    case OpCode::BatchMatMul:
      return OpOptions::MatMulOptions;
    case OpCode::Transpose:
      return OpOptions::TransposeOptions;
    case OpCode::Split:
      return OpOptions::SplitOptions;
    case OpCode::BiasAdd:
    case OpCode::Softmax:
    case OpCode::LogSoftmax:
    case OpCode::SoftmaxGrad:
    case OpCode::LogSoftmaxGrad:
    case OpCode::BiasAddGrad:
    case OpCode::ReduceSum:
    case OpCode::ReduceMean:
    case OpCode::ReduceMax:
    case OpCode::BroadcastTo:
    case OpCode::Concat:
      return OpOptions::AxisOptions;
    case OpCode::Conv2D:
    case OpCode::Conv2DBackpropInput:
    case OpCode::Conv2DBackpropFilter:
      return OpOptions::Conv2DOptions;
    case OpCode::MaxPool2D:
    case OpCode::AvgPool2D:
    case OpCode::MaxPool2DGrad:
    case OpCode::AvgPool2DGrad:
      return OpOptions::Pool2DOptions;
    case OpCode::Fill:
    case OpCode::CausalMask:
    case OpCode::ClipByGlobalNorm:  // value: clip_norm
      return OpOptions::FillOptions;
    case OpCode::SgdUpdate:
      return OpOptions::SgdOptions;
    case OpCode::MomentumUpdate:
      return OpOptions::MomentumOptions;
    case OpCode::AdamUpdate:
    case OpCode::AdamPowers:
    case OpCode::AdamWeightDecay:
    case OpCode::LambNorms:
    case OpCode::LambUpdate:
      return OpOptions::AdamOptions;
    case OpCode::LrSchedule:
      return OpOptions::LrScheduleOptions;
    case OpCode::LayerNorm:
    case OpCode::LayerNormGrad:
      return OpOptions::LayerNormOptions;
    case OpCode::Cast:
      return OpOptions::CastOptions;
    case OpCode::BatchNorm:
    case OpCode::BatchNormInfer:
    case OpCode::BatchNormStats:
    case OpCode::BatchNormGrad:
    case OpCode::BatchNormGradStats:
      return OpOptions::BatchNormOptions;
    case OpCode::GradOverflow:
    case OpCode::LossScaleUpdate:
      return OpOptions::LossScaleOptions;
    case OpCode::AllReduce:
    case OpCode::AllGather:
    case OpCode::ReduceScatter:
    case OpCode::AllToAll:
    case OpCode::ShardSlice:
    case OpCode::GradAllReduce:
      return OpOptions::CommOptions;
    case OpCode::MetricSum:
      return OpOptions::MetricSumOptions;
    case OpCode::Dropout:
    case OpCode::DropoutGrad:
      return OpOptions::DropoutOptions;
    case OpCode::OneHot:
      return OpOptions::OneHotOptions;
    case OpCode::Pad:
    case OpCode::PadGrad:
      return OpOptions::PadOptions;
    default:
      return OpOptions::NONE;
  }
}

std::pair<fb::OpOptions, fbs::Offset<void>> OpAttrsFor(fbs::FlatBufferBuilder& fbb, OpCode op, const OpAttrs& a) {
  using fb::OpOptions;
  const OpOptions type = OpOptionsTypeFor(op);
  switch (type) {
    case OpOptions::MatMulOptions:
      return {type, fb::CreateMatMulOptions(fbb, a.transpose_a, a.transpose_b).Union()};
    case OpOptions::AxisOptions:
      // One table, three uses: only the fields `op` reads travel, so equal
      // ops give equal bytes.
      if (op == OpCode::ReduceSum || op == OpCode::ReduceMean || op == OpCode::ReduceMax) {
        auto axes = fbb.CreateVector(a.axes);
        return {type, fb::CreateAxisOptions(fbb, -1, axes, a.keep_dims).Union()};
      }
      if (op == OpCode::BroadcastTo) return {type, fb::CreateAxisOptions(fbb, -1, 0, false, a.scale).Union()};
      return {type, fb::CreateAxisOptions(fbb, a.axis).Union()};
    case OpOptions::Conv2DOptions:
      return {type, fb::CreateConv2DOptions(fbb, a.stride_h, a.stride_w, a.pad_top, a.pad_bottom, a.pad_left,
                                            a.pad_right, a.dilation_h, a.dilation_w)
                        .Union()};
    case OpOptions::Pool2DOptions:
      return {type, fb::CreatePool2DOptions(fbb, a.kernel_h, a.kernel_w, a.stride_h, a.stride_w, a.pad_top,
                                            a.pad_bottom, a.pad_left, a.pad_right)
                        .Union()};
    case OpOptions::FillOptions:
      return {type, fb::CreateFillOptions(fbb, a.value).Union()};
    case OpOptions::SgdOptions:
      return {type, fb::CreateSgdOptions(fbb, a.learning_rate, a.weight_decay, a.lr_input).Union()};
    case OpOptions::MomentumOptions:
      return {
          type,
          fb::CreateMomentumOptions(fbb, a.learning_rate, a.momentum, a.nesterov, a.weight_decay, a.lr_input).Union()};
    case OpOptions::AdamOptions:
      // AdamPowers and LambNorms read no rate: lr_input travels with the
      // ops that step (AdamUpdate, AdamWeightDecay, LambUpdate).
      return {type, fb::CreateAdamOptions(fbb, a.learning_rate, a.beta1, a.beta2, a.epsilon, a.weight_decay,
                                          op != OpCode::AdamPowers && op != OpCode::LambNorms && a.lr_input)
                        .Union()};
    case OpOptions::LrScheduleOptions:
      return {type, WriteLrSchedule(fbb, a.lr_schedule).Union()};
    case OpOptions::LayerNormOptions:
      return {type, fb::CreateLayerNormOptions(fbb, a.layer_norm_epsilon).Union()};
    case OpOptions::CastOptions:
      return {type, fb::CreateCastOptions(fbb, ToFb(a.cast_to)).Union()};
    case OpOptions::BatchNormOptions: {
      // group_size: the ranks the reduced sums input (SyncBatchNorm, once
      // expanded) covers; the group's members travel with its AllReduce.
      const uint32_t group = a.group.empty() ? 1u : static_cast<uint32_t>(a.group.size());
      return {type, fb::CreateBatchNormOptions(fbb, a.layer_norm_epsilon, a.bn_momentum, a.bn_sync, group).Union()};
    }
    case OpOptions::LossScaleOptions:
      // Only the fields `op` reads travel; equal ops give equal bytes.
      if (op == OpCode::GradOverflow) return {type, fb::CreateLossScaleOptions(fbb, a.loss_scale_check).Union()};
      return {type,
              fb::CreateLossScaleOptions(fbb, true, a.loss_scale_dynamic, a.scale_factor, a.scale_window).Union()};
    case OpOptions::TransposeOptions:
      return {type, fb::CreateTransposeOptions(fbb, fbb.CreateVector(a.perm)).Union()};
    case OpOptions::SplitOptions:
      return {type, fb::CreateSplitOptions(fbb, a.axis, fbb.CreateVector(a.sizes)).Union()};
    case OpOptions::CommOptions: {
      // Only ShardSlice reads the axis; equal ops give equal bytes.
      const int axis = op == OpCode::ShardSlice ? a.axis : 0;
      return {type, fb::CreateCommOptions(fbb, fbb.CreateVector(a.group), a.group_position, a.mean, axis,
                                          op == OpCode::AllReduce && a.max)
                        .Union()};
    }
    case OpOptions::MetricSumOptions:
      return {type, fb::CreateMetricSumOptions(fbb, fbb.CreateVector(a.weights)).Union()};
    case OpOptions::DropoutOptions: {
      // The placement is the compiler's: absent from a graph file's op.
      auto global = a.dropout_global_shape.empty() ? 0 : fbb.CreateVector(a.dropout_global_shape);
      auto offset = a.dropout_offset.empty() ? 0 : fbb.CreateVector(a.dropout_offset);
      return {type, fb::CreateDropoutOptions(fbb, a.dropout_p, a.dropout_seed, a.dropout_op_id, global, offset,
                                             a.dropout_row_stride)
                        .Union()};
    }
    case OpOptions::OneHotOptions:
      return {type, fb::CreateOneHotOptions(fbb, a.depth, a.on_value, a.off_value, a.one_hot_axis).Union()};
    case OpOptions::PadOptions:
      // value travels with the constant mode only; equal ops give equal bytes.
      return {type, fb::CreatePadOptions(fbb, fbb.CreateVector(a.paddings), static_cast<fb::PadMode>(a.pad_mode),
                                         a.pad_mode == PadMode::Constant ? a.value : 0.0f)
                        .Union()};
    default:
      return {OpOptions::NONE, 0};
  }
}

Result<OpAttrs> OpAttrsFromOptions(OpCode op, fb::OpOptions type, const void* options) {
  using fb::OpOptions;
  const OpOptions want = OpOptionsTypeFor(op);
  if (type != OpOptions::NONE && type != want) {
    const char* op_name = OpCodeName(op);
    const std::string who = (op_name && *op_name) ? op_name : "this op";
    if (want == OpOptions::NONE)
      return InvalidArgument("field 'options': " + who + " takes no options, got " + TypeName(type));
    return InvalidArgument("field 'options': " + who + " takes " + TypeName(want) + ", got " + TypeName(type));
  }
  // With type NONE the Verifier never looked at the union's table: its
  // offset may point anywhere, so only the defaults are read.
  if (type == OpOptions::NONE) options = nullptr;
  OpAttrs a;
  switch (want) {
    case OpOptions::MatMulOptions: {
      const auto* o = OrDefault<fb::MatMulOptions>(options);
      a.transpose_a = o->transpose_a();
      a.transpose_b = o->transpose_b();
      break;
    }
    case OpOptions::AxisOptions: {
      const auto* o = OrDefault<fb::AxisOptions>(options);
      if (op == OpCode::ReduceSum || op == OpCode::ReduceMean || op == OpCode::ReduceMax) {
        if (o->axes()) a.axes.assign(o->axes()->begin(), o->axes()->end());
        a.keep_dims = o->keep_dims();
      } else if (op == OpCode::BroadcastTo) {
        a.scale = o->scale();
      } else {
        a.axis = o->axis();
      }
      break;
    }
    case OpOptions::Conv2DOptions: {
      const auto* o = OrDefault<fb::Conv2DOptions>(options);
      ReadStridesAndPads(o, a);
      a.dilation_h = o->dilation_h();
      a.dilation_w = o->dilation_w();
      break;
    }
    case OpOptions::Pool2DOptions: {
      const auto* o = OrDefault<fb::Pool2DOptions>(options);
      a.kernel_h = o->kernel_h();
      a.kernel_w = o->kernel_w();
      ReadStridesAndPads(o, a);
      break;
    }
    case OpOptions::FillOptions:
      a.value = OrDefault<fb::FillOptions>(options)->value();
      break;
    case OpOptions::SgdOptions:
      ReadRateAndDecay(OrDefault<fb::SgdOptions>(options), a);
      break;
    case OpOptions::MomentumOptions: {
      const auto* o = OrDefault<fb::MomentumOptions>(options);
      ReadRateAndDecay(o, a);
      a.momentum = o->momentum();
      a.nesterov = o->nesterov();
      break;
    }
    case OpOptions::AdamOptions: {
      const auto* o = OrDefault<fb::AdamOptions>(options);
      ReadRateAndDecay(o, a);
      a.beta1 = o->beta1();
      a.beta2 = o->beta2();
      a.epsilon = o->epsilon();
      break;
    }
    case OpOptions::LayerNormOptions:
      a.layer_norm_epsilon = OrDefault<fb::LayerNormOptions>(options)->epsilon();
      break;
    case OpOptions::CastOptions:
      a.cast_to = FromFb(OrDefault<fb::CastOptions>(options)->to());
      break;
    case OpOptions::BatchNormOptions: {
      const auto* o = OrDefault<fb::BatchNormOptions>(options);
      a.layer_norm_epsilon = o->epsilon();
      a.bn_momentum = o->momentum();
      a.bn_sync = o->sync();
      break;
    }
    case OpOptions::TransposeOptions: {
      const auto* o = OrDefault<fb::TransposeOptions>(options);
      if (o->perm()) a.perm.assign(o->perm()->begin(), o->perm()->end());
      break;
    }
    case OpOptions::SplitOptions: {
      const auto* o = OrDefault<fb::SplitOptions>(options);
      a.axis = o->axis();
      a.sizes = Longs(o->sizes());
      break;
    }
    case OpOptions::CommOptions: {
      const auto* o = OrDefault<fb::CommOptions>(options);
      if (o->group()) a.group.assign(o->group()->begin(), o->group()->end());
      a.group_position = o->position();
      a.mean = o->mean();
      if (op == OpCode::ShardSlice) a.axis = o->axis();
      if (op == OpCode::AllReduce) a.max = o->max();
      break;
    }
    case OpOptions::MetricSumOptions: {
      const auto* o = OrDefault<fb::MetricSumOptions>(options);
      if (o->weights()) a.weights.assign(o->weights()->begin(), o->weights()->end());
      break;
    }
    case OpOptions::LrScheduleOptions: {
      SINKRT_ASSIGN_OR_RETURN(a.lr_schedule, ReadLrSchedule(static_cast<const fb::LrScheduleOptions*>(options)),
                              "field 'options'");
      break;
    }
    case OpOptions::DropoutOptions: {
      const auto* o = OrDefault<fb::DropoutOptions>(options);
      a.dropout_p = o->p();
      a.dropout_seed = o->seed();
      a.dropout_op_id = o->op_id();
      a.dropout_global_shape = Longs(o->global_shape());
      a.dropout_offset = Longs(o->offset());
      a.dropout_row_stride = o->row_stride();
      break;
    }
    case OpOptions::LossScaleOptions: {
      const auto* o = OrDefault<fb::LossScaleOptions>(options);
      a.loss_scale_check = o->check();
      a.loss_scale_dynamic = o->dynamic();
      a.scale_factor = o->scale_factor();
      a.scale_window = o->scale_window();
      break;
    }
    case OpOptions::OneHotOptions:
    case OpOptions::PadOptions:
      SINKRT_RETURN_IF_ERROR(ReadOneHotOrPad(want, options, a));
      break;
    default:
      break;
  }
  return a;
}

}  // namespace sinkrt::host
