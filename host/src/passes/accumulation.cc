// Gradient accumulation (passes/accumulation.h).
#include "host/src/passes/accumulation.h"

#include <string>
#include <utility>
#include <vector>

#include "host/src/passes/dropout.h"
#include "host/src/passes/op_clone.h"

namespace sinkrt::host::passes {

Status AccumulateGradients(TrainingGraph& tg, int steps) {
  Graph& g = tg.graph;
  const std::string where = "gradient accumulation over " + std::to_string(steps) + " batches";
  if (steps < 2) return Internal(where + ": needs at least 2");
  if (tg.backward_ops < tg.forward_ops || tg.backward_ops > tg.train_ops)
    return Internal(where + ": the training graph does not mark its backward ops");
  const size_t nt = g.tensors().size();
  std::vector<bool> is_grad(nt, false);
  for (const ParamGrad& pg : tg.grads) is_grad[pg.grad] = true;

  std::vector<size_t> program;
  for (size_t i = 0; i < tg.backward_ops; ++i) program.push_back(i);
  std::vector<TensorId> train_inputs = tg.inputs;
  std::vector<TensorId> losses = {tg.loss};
  // Dropout: micro-step m's rows follow the m before (passes/dropout.h).
  auto is_dropout = [&](size_t i) { return g.ops()[i].op == OpCode::Dropout || g.ops()[i].op == OpCode::DropoutGrad; };
  std::vector<OpAttrs> dropout_attrs(tg.backward_ops);
  for (size_t i = 0; i < tg.backward_ops; ++i)
    if (is_dropout(i)) dropout_attrs[i] = g.ops()[i].attrs;
  for (int m = 1; m < steps; ++m) {
    const std::string prefix = "mb" + std::to_string(m) + "/";
    // Micro-step m's tensors: its own Inputs and intermediates; the leaves
    // (parameters, constants, optimizer state) shared.
    std::vector<TensorId> map(nt, kInvalidTensor);
    for (TensorId t = 0; t < nt; ++t) {
      const TensorInfo& info = g.tensor(t);
      if (info.kind == TensorKind::Param || info.kind == TensorKind::Const || info.kind == TensorKind::OptState ||
          info.kind == TensorKind::State)
        map[t] = t;
    }
    for (TensorId t : tg.inputs) {
      TensorInfo info = g.tensor(t);
      info.name = prefix + info.name;
      map[t] = g.AddTensor(std::move(info));
      train_inputs.push_back(map[t]);
    }
    for (size_t i = 0; i < tg.backward_ops; ++i) {
      OpNode op = g.ops()[i];
      if (is_dropout(i)) op.attrs = DropoutForMicroStep(dropout_attrs[i], g.tensor(op.inputs[0]).shape, m, steps);
      SINKRT_RETURN_IF_ERROR(CloneOp(g, op, prefix, g, map, where));
      program.push_back(g.ops().size() - 1);
      // A Grad the original writes is this micro-step's part here: added in.
      const std::vector<TensorId> written = g.ops()[i].outputs;
      for (TensorId t : written) {
        if (!is_grad[t]) continue;
        g.AddOp(OpCode::AccumulateGrad, {t, map[t]}, OpAttrs{}, {}, prefix + "accumulate/" + g.tensor(t).name);
        program.push_back(g.ops().size() - 1);
      }
      SINKRT_RETURN_IF_ERROR(g.status(), where);
    }
    losses.push_back(map[tg.loss]);
  }
  for (size_t i = 0; i < tg.backward_ops; ++i)
    if (is_dropout(i))
      g.ExtendOp(i, {}, DropoutForMicroStep(dropout_attrs[i], g.tensor(g.ops()[i].inputs[0]).shape, 0, steps));
  // The step's loss: the mean of the micro-steps' (each the mean of its
  // rows), i.e. the loss of the K·b rows.
  const TensorId sum =
      g.AddOp(OpCode::AddN, losses, OpAttrs{}, {{g.tensor(tg.loss).shape, DType::F32}}, "loss/accumulated/sum").at(0);
  OpAttrs scale;
  scale.scale = 1.0f / static_cast<float>(steps);
  const TensorId mean =
      g.AddOp(OpCode::BroadcastTo, {sum}, scale, {{g.tensor(tg.loss).shape, DType::F32}}, "loss/accumulated").at(0);
  SINKRT_RETURN_IF_ERROR(g.status(), where);
  program.push_back(g.ops().size() - 2);
  program.push_back(g.ops().size() - 1);
  for (size_t i = tg.backward_ops; i < tg.train_ops; ++i) program.push_back(i);
  tg.train_program = std::move(program);
  tg.train_inputs = std::move(train_inputs);
  // The step's loss in the loss's place; what follows it (the loss scale
  // and its counters) is the step's, reported as without accumulation.
  tg.train_reports.at(0) = mean;
  return Status::Ok();
}

}  // namespace sinkrt::host::passes
