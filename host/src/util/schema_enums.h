// The one place where the host's public enums (OpCode, InitKind,
// BufferRole) meet the schemas' (fb::OpCode, fb::InitKind, fb::BufferRole):
// the public enums copy the schemas' enumerators and values, so the mapping
// is a cast, and the static_asserts below stop the build if one drifts. A
// value the schema gains that the API lacks fails SchemaEnums.* (test),
// which walks the schema's values. The graph-file reader and writer, the
// stream writer and every other host file that builds or reads a FlatBuffer
// convert here. Runtime's enums (DType, ProgramKind) come with
// runtime/src/schema_enums.h.
#pragma once

#include <cstdint>

#include "runtime/src/schema_enums.h"
#include "sinkrt/fb/common_generated.h"
#include "sinkrt/fb/task_stream_generated.h"
#include "sinkrt/host/buffer_role.h"
#include "sinkrt/host/init_kind.h"
#include "sinkrt/host/op_code.h"

namespace sinkrt {

// Every enumerator of each pair, by name (also the name functions' cases,
// enum_names.cc).
// One list a reader can scan (the formatter would staircase it).
// clang-format off
#define SINKRT_OP_CODE_ENUMERATORS(X) \
  X(Invalid) X(MatMul) X(BiasAdd) X(Add) X(Sub) X(Mul) X(Relu) X(Gelu) X(Tanh) X(Sigmoid) \
  X(Softmax) X(LogSoftmax) X(SparseSoftmaxCrossEntropy) X(ReduceSum) X(ReduceMean) X(Reshape) \
  X(Conv2D) X(MaxPool2D) X(AvgPool2D) X(Flatten) X(LayerNorm) X(BatchMatMul) X(Transpose) \
  X(Gather) X(Concat) X(Split) X(Cast) X(ReluGrad) X(GeluGrad) X(TanhGrad) X(SigmoidGrad) \
  X(SoftmaxGrad) X(LogSoftmaxGrad) X(SparseSoftmaxCrossEntropyGrad) X(BiasAddGrad) X(SumToShape) \
  X(BroadcastTo) X(Conv2DBackpropInput) X(Conv2DBackpropFilter) X(MaxPool2DGrad) X(AvgPool2DGrad) \
  X(AddN) X(Neg) X(Copy) X(Fill) X(LayerNormGrad) X(GatherGrad) X(AccumulateGrad) X(SgdUpdate) \
  X(MomentumUpdate) X(AdamUpdate) X(AdamPowers) X(GradOverflow) X(LossScaleUpdate) \
  X(ArgMaxAccuracy) X(MetricSum) X(AllReduce) X(AllGather) X(ReduceScatter) X(AllToAll) \
  X(ShardSlice) X(GradAllReduce) X(Send) X(Recv) X(Exp) X(Log) X(Sqrt) X(Rsqrt) X(Square) X(Abs) \
  X(AbsGrad) X(LrSchedule) X(StepAdvance) X(Div) X(Maximum) X(Minimum) X(Pow) X(Erf) X(GeluErf) \
  X(MaximumGradMask) X(MinimumGradMask) X(PowGradBase) X(PowGradLog) X(ErfGrad) X(GeluErfGrad) X(Dropout) \
  X(DropoutGrad) X(DropoutStep) X(AdamWeightDecay) X(LambUpdate) X(LambNorms) \
  X(BatchNorm) X(BatchNormInfer) X(BatchNormStats) X(BatchNormGrad) X(BatchNormGradStats) \
  X(ReduceMax) X(EqualMask) X(Select) X(CausalMask) X(SumSquares) X(ClipByGlobalNorm) \
  X(OneHot) X(Pad) X(PadGrad)
// clang-format on
#define SINKRT_INIT_KIND_ENUMERATORS(X) \
  X(None) X(Zeros) X(Constant) X(Uniform) X(Normal) X(XavierUniform) X(XavierNormal) X(HeUniform) X(HeNormal) X(Inline)
#define SINKRT_BUFFER_ROLE_ENUMERATORS(X) \
  X(Activation)                           \
  X(Input) X(Param) X(Grad) X(OptState) X(Const) X(Workspace) X(Output) X(ParamSlice) X(GradSlice) X(State)

#define SINKRT_SAME_OP_CODE(name) SINKRT_SAME_ENUMERATOR(OpCode, fb::OpCode, name)
#define SINKRT_SAME_INIT_KIND(name) SINKRT_SAME_ENUMERATOR(InitKind, fb::InitKind, name)
#define SINKRT_SAME_BUFFER_ROLE(name) SINKRT_SAME_ENUMERATOR(BufferRole, fb::BufferRole, name)
SINKRT_OP_CODE_ENUMERATORS(SINKRT_SAME_OP_CODE)
SINKRT_INIT_KIND_ENUMERATORS(SINKRT_SAME_INIT_KIND)
SINKRT_BUFFER_ROLE_ENUMERATORS(SINKRT_SAME_BUFFER_ROLE)
#undef SINKRT_SAME_OP_CODE
#undef SINKRT_SAME_INIT_KIND
#undef SINKRT_SAME_BUFFER_ROLE

/// API enum -> schema enum, where a FlatBuffer is built.
/// @{
constexpr fb::OpCode ToFb(OpCode op) { return static_cast<fb::OpCode>(op); }
constexpr fb::InitKind ToFb(InitKind k) { return static_cast<fb::InitKind>(k); }
constexpr fb::BufferRole ToFb(BufferRole r) { return static_cast<fb::BufferRole>(r); }
/// @}
/// Schema enum -> API enum, where a FlatBuffer is read (a value from outside
/// the enum stays as it is; its name is "").
/// @{
constexpr OpCode FromFb(fb::OpCode op) { return static_cast<OpCode>(op); }
constexpr InitKind FromFb(fb::InitKind k) { return static_cast<InitKind>(k); }
constexpr BufferRole FromFb(fb::BufferRole r) { return static_cast<BufferRole>(r); }

/// The largest value of each enum (the schemas' MAX), for tables indexed by it.
/// @{
inline constexpr OpCode kOpCodeMax = FromFb(fb::OpCode::MAX);
inline constexpr InitKind kInitKindMax = FromFb(fb::InitKind::MAX);
/// @}
/// @}

}  // namespace sinkrt
