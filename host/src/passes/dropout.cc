// Dropout's step counter and global index (passes/dropout.h).
#include "host/src/passes/dropout.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

namespace sinkrt::host::passes {
namespace {

// Rows [first, first + rows) of a Dropout's input, drawn as `attrs` place them.
struct Piece {
  int64_t first = 0, rows = 0;
  OpAttrs attrs;
};

// `a` holds a layout block of whole samples of one group, starting at layout
// sample `sample`: it becomes the rows' place as Model feeds them (group k:
// samples k, k + groups, ...), T = `per_sample` rows a sample kept
// together as under data parallel ([B·T, D] placed as [B, T, D]).
void PlaceInGroup(OpAttrs& a, int64_t sample, int64_t groups, int64_t batch, int64_t per_sample) {
  const int64_t per_group = batch / groups, group = sample / per_group;
  if (per_sample > 1) {
    a.dropout_global_shape.insert(a.dropout_global_shape.begin() + 1, per_sample);
    a.dropout_offset.insert(a.dropout_offset.begin() + 1, 0);
  }
  a.dropout_global_shape[0] = batch;
  a.dropout_offset[0] = (sample - group * per_group) * groups + group;
  a.dropout_row_stride = groups;
}

// SEMI_AUTO with a split batch: `a` holds the layout's block (group-major
// rows). The layout's dim 0 is T rows a sample (T = its dim 0 over the
// batch), and the block must hold whole samples. Its rows of each group it
// spans become one piece, placed at the samples Model feeds that group:
// one piece when dim 0 is split along the batch (alone or further inside
// each group's samples), several when the layout gathered the batch. Any
// other split is refused rather than drawn as another device's masks.
Result<std::vector<Piece>> InterleaveGroups(const OpNode& op, const Shape& local, const DropoutPlacement& where,
                                            const OpAttrs& a) {
  const int64_t groups = where.batch_groups, batch = where.global_batch;
  const int64_t rows = a.dropout_global_shape[0], first = a.dropout_offset[0], n = local[0];
  const std::string held = "Dropout '" + op.name + "': its input holds rows [" + std::to_string(first) + ", +" +
                           std::to_string(n) + ") of " + std::to_string(rows) + " while the batch of " +
                           std::to_string(batch) + " is split in " + std::to_string(groups) +
                           " data-parallel groups (group k reads samples k, k + " + std::to_string(groups) + ", ...); ";
  if (batch < groups || batch % groups != 0 || rows % batch != 0)
    return Unimplemented(held +
                         "its dim 0 is not the batch's samples (or rows a sample), so its masks cannot be "
                         "placed at the samples they belong to");
  const int64_t per_sample = rows / batch, per_group = batch / groups;
  if (first % per_sample != 0 || n % per_sample != 0 || n < 1)
    return Unimplemented(held + "a layout that splits dim 0 inside a sample's rows is not supported with dropout");
  std::vector<Piece> pieces;
  const int64_t begin = first / per_sample, end = begin + n / per_sample;  // layout samples
  for (int64_t s = begin; s < end;) {
    const int64_t stop = std::min(end, (s / per_group + 1) * per_group);
    Piece piece{.first = (s - begin) * per_sample, .rows = (stop - s) * per_sample, .attrs = a};
    PlaceInGroup(piece.attrs, s, groups, batch, per_sample);
    pieces.push_back(std::move(piece));
    s = stop;
  }
  return pieces;
}

// `g` with each Dropout of `split` (op index -> its pieces) cut into one
// Dropout a piece: Split along dim 0, the pieces, Concat into its output.
// Tensor ids stay (the new tensors come after), so layouts stay valid.
Result<Graph> SplitDropouts(const Graph& g, const std::map<size_t, std::vector<Piece>>& split) {
  Graph out(g.name());
  for (TensorId t = 0; t < g.tensors().size(); ++t) out.AddTensor(g.tensor(t));
  for (size_t i = 0; i < g.ops().size(); ++i) {
    const OpNode& op = g.ops()[i];
    const auto it = split.find(i);
    if (it == split.end()) {
      out.AddOpInto(op.op, op.inputs, op.attrs, op.outputs, op.name);
      if (!op.recompute.empty()) out.SetOpRecompute(out.ops().size() - 1, op.recompute);
      continue;
    }
    OpAttrs cut;
    cut.axis = 0;
    std::vector<TensorId> ins, outs;
    for (size_t k = 0; k < it->second.size(); ++k) {
      const std::string name = op.name + "/group" + std::to_string(k);
      TensorInfo in = g.tensor(op.outputs[0]);
      in.kind = TensorKind::Intermediate;
      in.shape[0] = it->second[k].rows;
      TensorInfo y = in;
      in.name = name + "/x";
      y.name = name + "/y";
      ins.push_back(out.AddTensor(std::move(in)));
      outs.push_back(out.AddTensor(std::move(y)));
      cut.sizes.push_back(it->second[k].rows);
    }
    out.AddOpInto(OpCode::Split, {op.inputs[0]}, cut, ins, op.name + "/split");
    for (size_t k = 0; k < it->second.size(); ++k)
      out.AddOpInto(OpCode::Dropout, {ins[k]}, it->second[k].attrs, {outs[k]}, op.name + "/group" + std::to_string(k));
    cut.sizes.clear();
    out.AddOpInto(OpCode::Concat, outs, cut, {op.outputs[0]}, op.name + "/concat");
  }
  if (g.valid(g.loss())) out.SetLoss(g.loss());
  for (TensorId t : g.outputs()) out.AddOutput(t);
  SINKRT_RETURN_IF_ERROR(out.status(), "placing Dropout by the batch's data-parallel groups");
  return out;
}

}  // namespace

Status PlaceDropout(Graph& g, const DropoutPlacement& where) {
  std::map<size_t, std::vector<Piece>> split;  // Dropouts whose rows span several groups
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
      } else if (where.batch_groups > 1) {
        return Unimplemented("Dropout '" + op.name + "': its input " + ShapeToString(local) +
                             " has no layout to place its rows by while the batch is split in " +
                             std::to_string(where.batch_groups) + " data-parallel groups");
      }
      if (where.batch_groups > 1) {
        SINKRT_ASSIGN_OR_RETURN(std::vector<Piece> pieces, InterleaveGroups(op, local, where, a));
        if (pieces.size() > 1 && g.tensor(x).dtype != DType::F32)
          return Unimplemented("Dropout '" + op.name + "': its input holds several data-parallel groups' rows (" +
                               std::to_string(pieces.size()) + "), which are drawn piece by piece, in f32 only (not " +
                               DTypeName(g.tensor(x).dtype) + ")");
        a = pieces[0].attrs;
        if (pieces.size() > 1) split[i] = std::move(pieces);
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
  SINKRT_RETURN_IF_ERROR(g.status());
  if (split.empty()) return Status::Ok();
  SINKRT_ASSIGN_OR_RETURN(Graph cut, SplitDropouts(g, split));
  g = std::move(cut);
  return Status::Ok();
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
