// Every kernel this device implements; kernel_registry.cc maps op codes to
// them. Each is defined in the file named for its family.
#pragma once

#include "device/src/kernels/kernel.h"

namespace sinkrt::device {

// elementwise.cc
extern const KernelImpl kAddKernel, kSubKernel, kMulKernel, kAddNKernel;
extern const KernelImpl kDivKernel, kMaximumKernel, kMinimumKernel, kPowKernel;
extern const KernelImpl kMaximumGradMaskKernel, kMinimumGradMaskKernel, kPowGradBaseKernel;
extern const KernelImpl kSelectKernel, kEqualMaskKernel;
// activation.cc
extern const KernelImpl kReluKernel, kGeluKernel, kTanhKernel, kSigmoidKernel, kNegKernel;
extern const KernelImpl kReluGradKernel, kGeluGradKernel, kTanhGradKernel, kSigmoidGradKernel;
// dropout.cc (Dropout and DropoutGrad share one kernel)
extern const KernelImpl kDropoutKernel, kDropoutStepKernel;
extern const KernelImpl kExpKernel, kLogKernel, kSqrtKernel, kRsqrtKernel, kSquareKernel, kAbsKernel, kAbsGradKernel;
extern const KernelImpl kErfKernel, kGeluErfKernel, kPowGradLogKernel, kErfGradKernel, kGeluErfGradKernel;
// softmax.cc
extern const KernelImpl kSoftmaxKernel, kLogSoftmaxKernel, kSoftmaxGradKernel, kLogSoftmaxGradKernel;
// loss.cc
extern const KernelImpl kSparseSoftmaxCrossEntropyKernel, kSparseSoftmaxCrossEntropyGradKernel;
// reduce.cc
extern const KernelImpl kReduceSumKernel, kReduceMeanKernel, kSumToShapeKernel, kBroadcastToKernel, kBiasAddKernel,
    kBiasAddGradKernel;
extern const KernelImpl kReduceMaxKernel;
// copy.cc
extern const KernelImpl kCopyKernel, kFlattenKernel, kFillKernel;
extern const KernelImpl kCausalMaskKernel;
// one_hot.cc, pad.cc
extern const KernelImpl kOneHotKernel, kPadKernel, kPadGradKernel;
// optimizer_update.cc
extern const KernelImpl kSgdUpdateKernel, kMomentumUpdateKernel, kAdamUpdateKernel, kAdamPowersKernel;
extern const KernelImpl kLrScheduleKernel, kStepAdvanceKernel;
// adam_weight_decay.cc, lamb.cc
extern const KernelImpl kAdamWeightDecayKernel, kLambNormsKernel, kLambUpdateKernel;
// clip.cc
extern const KernelImpl kSumSquaresKernel, kClipByGlobalNormKernel;
// loss_scale.cc
extern const KernelImpl kGradOverflowKernel, kLossScaleUpdateKernel;
// accuracy.cc
extern const KernelImpl kArgMaxAccuracyKernel;
// metric_sum.cc
extern const KernelImpl kMetricSumKernel;
// matmul.cc
extern const KernelImpl kMatMulKernel;
// conv.cc
extern const KernelImpl kConv2DKernel, kConv2DBackpropInputKernel, kConv2DBackpropFilterKernel;
// pool.cc
extern const KernelImpl kMaxPool2DKernel, kMaxPool2DGradKernel, kAvgPool2DKernel, kAvgPool2DGradKernel;
// layer_norm.cc
extern const KernelImpl kLayerNormKernel, kLayerNormGradKernel;
// batch_norm.cc
extern const KernelImpl kBatchNormKernel, kBatchNormInferKernel, kBatchNormStatsKernel, kBatchNormGradKernel,
    kBatchNormGradStatsKernel;
// gather.cc
extern const KernelImpl kGatherKernel, kGatherGradKernel;
// cast.cc
extern const KernelImpl kCastKernel;
// batch_matmul.cc
extern const KernelImpl kBatchMatMulKernel;
// transpose.cc
extern const KernelImpl kTransposeKernel;
// concat_split.cc
extern const KernelImpl kConcatKernel, kSplitKernel;
// shard_slice.cc
extern const KernelImpl kShardSliceKernel;

}  // namespace sinkrt::device
