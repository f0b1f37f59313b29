// Dropout's step counter and global index (passes/dropout.h).
#include "host/src/passes/dropout.h"

#include <utility>

namespace sinkrt::host::passes {

Status PlaceDropout(Graph& g, const DropoutPlacement& where) {
  for (size_t i = 0; i < g.ops().size(); ++i) {
    const OpNode& op = g.ops()[i];
    if (op.op != OpCode::Dropout) continue;
    const TensorId x = op.inputs.at(0);
    const Shape& local = g.tensor(x).shape;
    if (local.empty()) return Internal("Dropout '" + op.name + "': x has no dims to place");
    OpAttrs a = op.attrs;
    a.dropout_global_shape = local;
    a.dropout_offset.assign(local.size(), 0);
    if (where.block_of) {
      if (std::optional<DropoutBlock> b = where.block_of(x)) {
        if (b->global_shape.size() != local.size() || b->offset.size() != local.size())
          return Internal("Dropout '" + op.name + "': its input " + ShapeToString(local) + " is not a block of " +
                          ShapeToString(b->global_shape));
        a.dropout_global_shape = b->global_shape;
        a.dropout_offset = b->offset;
      }
    }
    // Dataset::ShardBelowBatch: rank r's sample i is sample i·n + r of the
    // global batch. A tensor of T rows per sample ([B·T, D]) is placed as
    // [B, T, D] (the kernel reads dim 0 so when the global shape has one
    // more dim), its samples strided.
    if (where.replicas > 1) {
      const int64_t rows = local[0];
      const int64_t per_sample = where.batch > 0 && rows % where.batch == 0 ? rows / where.batch : 1;
      if (per_sample > 1) {
        a.dropout_global_shape.insert(a.dropout_global_shape.begin() + 1, per_sample);
        a.dropout_global_shape[0] = rows / per_sample;
        a.dropout_offset.insert(a.dropout_offset.begin() + 1, 0);
      }
      a.dropout_offset[0] = a.dropout_offset[0] * where.replicas + where.replica;
      a.dropout_row_stride *= where.replicas;
      a.dropout_global_shape[0] *= where.replicas;
    }
    g.ExtendOp(i, {}, std::move(a));
  }
  return g.status();
}

TensorId AttachDropoutStep(Graph& g) {
  std::vector<size_t> dropouts;
  for (size_t i = 0; i < g.ops().size(); ++i)
    if (g.ops()[i].op == OpCode::Dropout) dropouts.push_back(i);
  if (dropouts.empty()) return kInvalidTensor;
  const TensorId step = g.AddTensor({.name = kDropoutStepName,
                                     .dtype = DType::I64,
                                     .shape = {},
                                     .kind = TensorKind::OptState,
                                     .init = InitSpec::Zeros()});
  for (size_t i : dropouts) g.ExtendOp(i, {step}, g.ops()[i].attrs);
  return step;
}

void AdvanceDropoutStep(Graph& g, TensorId step) {
  if (step != kInvalidTensor) g.AddOp(OpCode::DropoutStep, {step}, OpAttrs{}, {}, "dropout/advance");
}

OpAttrs DropoutForMicroStep(const OpAttrs& op, const Shape& local, int micro, int steps) {
  OpAttrs a = op;
  if (a.dropout_global_shape.empty()) {  // not placed: the tensor is the whole
    a.dropout_global_shape = local;
    a.dropout_offset.assign(local.size(), 0);
  }
  if (a.dropout_global_shape.empty()) return a;
  a.dropout_offset[0] += static_cast<int64_t>(micro) * a.dropout_global_shape[0];
  a.dropout_global_shape[0] *= steps;
  return a;
}

}  // namespace sinkrt::host::passes
