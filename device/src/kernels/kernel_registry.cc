// The fixed op → kernel table. Looked up once per task at load, so a linear
// scan is fine; a stream naming an op this device lacks fails at load.
#include "device/src/kernels/kernel_list.h"

namespace sinkrt::device {
namespace {

using fb::OpCode;

struct Entry {
  OpCode op;
  const KernelImpl* impl;
};

constexpr Entry kKernels[] = {
    {OpCode::MatMul, &kMatMulKernel},
    {OpCode::BiasAdd, &kBiasAddKernel},
    {OpCode::Add, &kAddKernel},
    {OpCode::Sub, &kSubKernel},
    {OpCode::Mul, &kMulKernel},
    {OpCode::Relu, &kReluKernel},
    {OpCode::Gelu, &kGeluKernel},
    {OpCode::Tanh, &kTanhKernel},
    {OpCode::Sigmoid, &kSigmoidKernel},
    {OpCode::Exp, &kExpKernel},
    {OpCode::Log, &kLogKernel},
    {OpCode::Sqrt, &kSqrtKernel},
    {OpCode::Rsqrt, &kRsqrtKernel},
    {OpCode::Square, &kSquareKernel},
    {OpCode::Abs, &kAbsKernel},
    {OpCode::Div, &kDivKernel},
    {OpCode::Maximum, &kMaximumKernel},
    {OpCode::Minimum, &kMinimumKernel},
    {OpCode::Pow, &kPowKernel},
    {OpCode::Erf, &kErfKernel},
    {OpCode::GeluErf, &kGeluErfKernel},
    {OpCode::ReduceMax, &kReduceMaxKernel},
    {OpCode::Select, &kSelectKernel},
    {OpCode::CausalMask, &kCausalMaskKernel},
    {OpCode::OneHot, &kOneHotKernel},
    {OpCode::Pad, &kPadKernel},
    {OpCode::Softmax, &kSoftmaxKernel},
    {OpCode::LogSoftmax, &kLogSoftmaxKernel},
    {OpCode::SparseSoftmaxCrossEntropy, &kSparseSoftmaxCrossEntropyKernel},
    {OpCode::ReduceSum, &kReduceSumKernel},
    {OpCode::ReduceMean, &kReduceMeanKernel},
    {OpCode::Reshape, &kCopyKernel},
    {OpCode::Conv2D, &kConv2DKernel},
    {OpCode::MaxPool2D, &kMaxPool2DKernel},
    {OpCode::AvgPool2D, &kAvgPool2DKernel},
    {OpCode::Flatten, &kFlattenKernel},
    {OpCode::BatchMatMul, &kBatchMatMulKernel},
    {OpCode::Transpose, &kTransposeKernel},
    {OpCode::Concat, &kConcatKernel},
    {OpCode::Split, &kSplitKernel},
    {OpCode::ShardSlice, &kShardSliceKernel},
    {OpCode::ReluGrad, &kReluGradKernel},
    {OpCode::GeluGrad, &kGeluGradKernel},
    {OpCode::TanhGrad, &kTanhGradKernel},
    {OpCode::SigmoidGrad, &kSigmoidGradKernel},
    {OpCode::AbsGrad, &kAbsGradKernel},
    {OpCode::MaximumGradMask, &kMaximumGradMaskKernel},
    {OpCode::MinimumGradMask, &kMinimumGradMaskKernel},
    {OpCode::PowGradBase, &kPowGradBaseKernel},
    {OpCode::PowGradLog, &kPowGradLogKernel},
    {OpCode::ErfGrad, &kErfGradKernel},
    {OpCode::GeluErfGrad, &kGeluErfGradKernel},
    {OpCode::Dropout, &kDropoutKernel},
    {OpCode::DropoutGrad, &kDropoutKernel},
    {OpCode::DropoutStep, &kDropoutStepKernel},
    {OpCode::EqualMask, &kEqualMaskKernel},
    {OpCode::PadGrad, &kPadGradKernel},
    {OpCode::SoftmaxGrad, &kSoftmaxGradKernel},
    {OpCode::LogSoftmaxGrad, &kLogSoftmaxGradKernel},
    {OpCode::SparseSoftmaxCrossEntropyGrad, &kSparseSoftmaxCrossEntropyGradKernel},
    {OpCode::BiasAddGrad, &kBiasAddGradKernel},
    {OpCode::SumToShape, &kSumToShapeKernel},
    {OpCode::BroadcastTo, &kBroadcastToKernel},
    {OpCode::Conv2DBackpropInput, &kConv2DBackpropInputKernel},
    {OpCode::Conv2DBackpropFilter, &kConv2DBackpropFilterKernel},
    {OpCode::MaxPool2DGrad, &kMaxPool2DGradKernel},
    {OpCode::AvgPool2DGrad, &kAvgPool2DGradKernel},
    {OpCode::AddN, &kAddNKernel},
    {OpCode::Neg, &kNegKernel},
    {OpCode::Copy, &kCopyKernel},
    {OpCode::Fill, &kFillKernel},
    {OpCode::SgdUpdate, &kSgdUpdateKernel},
    {OpCode::MomentumUpdate, &kMomentumUpdateKernel},
    {OpCode::AdamUpdate, &kAdamUpdateKernel},
    {OpCode::AdamPowers, &kAdamPowersKernel},
    {OpCode::LrSchedule, &kLrScheduleKernel},
    {OpCode::StepAdvance, &kStepAdvanceKernel},
    {OpCode::AdamWeightDecay, &kAdamWeightDecayKernel},
    {OpCode::LambNorms, &kLambNormsKernel},
    {OpCode::LambUpdate, &kLambUpdateKernel},
    {OpCode::SumSquares, &kSumSquaresKernel},
    {OpCode::ClipByGlobalNorm, &kClipByGlobalNormKernel},
    {OpCode::GradOverflow, &kGradOverflowKernel},
    {OpCode::LossScaleUpdate, &kLossScaleUpdateKernel},
    {OpCode::ArgMaxAccuracy, &kArgMaxAccuracyKernel},
    {OpCode::MetricSum, &kMetricSumKernel},
    {OpCode::LayerNorm, &kLayerNormKernel},
    {OpCode::LayerNormGrad, &kLayerNormGradKernel},
    {OpCode::BatchNorm, &kBatchNormKernel},
    {OpCode::BatchNormInfer, &kBatchNormInferKernel},
    {OpCode::BatchNormStats, &kBatchNormStatsKernel},
    {OpCode::BatchNormGrad, &kBatchNormGradKernel},
    {OpCode::BatchNormGradStats, &kBatchNormGradStatsKernel},
    {OpCode::Gather, &kGatherKernel},
    {OpCode::GatherGrad, &kGatherGradKernel},
    {OpCode::Cast, &kCastKernel},
};

}  // namespace

const KernelImpl* FindKernel(fb::OpCode op) {
  for (const Entry& e : kKernels) {
    if (e.op == op) return e.impl;
  }
  return nullptr;
}

}  // namespace sinkrt::device
