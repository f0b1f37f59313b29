#include "device/src/kernels/check.h"

#include <algorithm>
#include <vector>

namespace sinkrt::device {

std::string Operand::Name() const { return (kind == kInput ? "input " : "output ") + std::to_string(index); }

const char* OpName(const KernelArgs& args) {
  if (args.task == nullptr) return "kernel";
  const char* name = fb::EnumNameOpCode(args.task->op());
  return (name != nullptr && *name != '\0') ? name : "unknown op";
}

const TensorRef& Get(const KernelArgs& args, Operand o) {
  return o.kind == Operand::kInput ? args.inputs[o.index] : args.outputs[o.index];
}

Status OpError(const KernelArgs& args, const std::string& message) {
  return InvalidArgument(std::string(OpName(args)) + ": " + message);
}

namespace {

Status CheckTensor(const KernelArgs& args, const TensorRef& t, const std::string& name) {
  if (t.rank() > kMaxRank) {
    return OpError(
        args, name + " has rank " + std::to_string(t.rank()) + ", kernels take at most " + std::to_string(kMaxRank));
  }
  if (NumElements(t.shape) != t.numel) {
    return OpError(args, name + " has shape " + ShapeToString(t.shape) + " but numel " + std::to_string(t.numel));
  }
  if (DTypeSize(t.dtype) == 0) return OpError(args, name + " has an invalid dtype");
  if (t.data == nullptr && t.numel > 0) return OpError(args, name + " has no storage");
  return Status::Ok();
}

Status CheckCommon(const KernelArgs& args, bool allow_fusion) {
  for (size_t i = 0; i < args.inputs.size(); ++i) {
    SINKRT_RETURN_IF_ERROR(CheckTensor(args, args.inputs[i], In(static_cast<int>(i)).Name()));
  }
  for (size_t i = 0; i < args.outputs.size(); ++i) {
    SINKRT_RETURN_IF_ERROR(CheckTensor(args, args.outputs[i], Out(static_cast<int>(i)).Name()));
  }
  const bool fused = args.fused_bias.data != nullptr || args.task->fused_bias() >= 0 ||
                     args.task->fused_activation() != fb::Activation::None;
  if (fused && !allow_fusion) return OpError(args, "does not take a fused bias or activation");
  if (args.fused_bias.data != nullptr) {
    SINKRT_RETURN_IF_ERROR(CheckTensor(args, args.fused_bias, "fused bias"));
  }
  return Status::Ok();
}

// `at_least`: `inputs` is a minimum (variadic ops such as AddN).
Status CheckCounts(const KernelArgs& args, size_t inputs, size_t outputs, bool at_least, bool allow_fusion) {
  if (args.task == nullptr) return InvalidArgument("kernel: no task");
  const bool inputs_ok = at_least ? args.inputs.size() >= inputs : args.inputs.size() == inputs;
  if (!inputs_ok || args.outputs.size() != outputs) {
    return OpError(args, std::string("takes ") + (at_least ? "at least " : "") + std::to_string(inputs) +
                             " inputs and " + std::to_string(outputs) + " outputs, got " +
                             std::to_string(args.inputs.size()) + " and " + std::to_string(args.outputs.size()));
  }
  return CheckCommon(args, allow_fusion);
}

}  // namespace

Status CheckOperands(const KernelArgs& args, size_t inputs, size_t outputs, bool allow_fusion) {
  return CheckCounts(args, inputs, outputs, /*at_least=*/false, allow_fusion);
}

Status CheckOperandsAtLeast(const KernelArgs& args, size_t min_inputs, size_t outputs) {
  return CheckCounts(args, min_inputs, outputs, /*at_least=*/true, /*allow_fusion=*/false);
}

Status CheckDType(const KernelArgs& args, Operand o, DType want) {
  const TensorRef& t = Get(args, o);
  if (t.dtype == want) return Status::Ok();
  return OpError(args, o.Name() + " has dtype " + DTypeName(t.dtype) + ", expected " + DTypeName(want));
}

Result<DType> CheckFloatDType(const KernelArgs& args, std::span<const Operand> operands) {
  if (operands.empty()) return DType::F32;
  const Operand first = operands[0];
  const DType want = Get(args, first).dtype;
  if (want != DType::F32 && want != DType::BF16) {
    return OpError(args, first.Name() + " has dtype " + DTypeName(want) + ", expected f32 or bf16");
  }
  for (const Operand& o : operands.subspan(1)) {
    const DType got = Get(args, o).dtype;
    if (got != want) {
      return OpError(args, o.Name() + " has dtype " + DTypeName(got) + ", expected " + DTypeName(want) + " (as " +
                               first.Name() + ")");
    }
  }
  return want;
}

Result<DType> CheckFloatDType(const KernelArgs& args, std::initializer_list<Operand> operands) {
  return CheckFloatDType(args, std::span<const Operand>(operands.begin(), operands.size()));
}

Result<DType> CheckAllFloatDType(const KernelArgs& args) {
  // Inputs first, so that input 0 sets the dtype; an op with no inputs
  // (Fill) takes output 0's.
  std::vector<Operand> all;
  for (size_t i = 0; i < args.inputs.size(); ++i) all.push_back(In(static_cast<int>(i)));
  for (size_t i = 0; i < args.outputs.size(); ++i) all.push_back(Out(static_cast<int>(i)));
  return CheckFloatDType(args, all);
}

Status CheckRank(const KernelArgs& args, Operand o, int rank, const char* layout) {
  const TensorRef& t = Get(args, o);
  if (t.rank() == rank) return Status::Ok();
  std::string want = std::to_string(rank) + "-D";
  if (layout != nullptr) want += std::string(" ") + layout;
  return OpError(args, o.Name() + " has shape " + ShapeToString(t.shape) + ", expected " + want);
}

Status CheckShape(const KernelArgs& args, Operand o, std::span<const int64_t> want, const std::string& expected) {
  const TensorRef& t = Get(args, o);
  if (std::equal(t.shape.begin(), t.shape.end(), want.begin(), want.end())) return Status::Ok();
  return OpError(args, o.Name() + " has shape " + ShapeToString(t.shape) + ", expected " +
                           (expected.empty() ? ShapeToString(want) : expected));
}

Status CheckSameShape(const KernelArgs& args, Operand o, Operand like) {
  return CheckShape(args, o, Get(args, like).shape, ShapeToString(Get(args, like).shape) + " like " + like.Name());
}

bool Overlaps(const TensorRef& a, const TensorRef& b) {
  if (a.numel == 0 || b.numel == 0) return false;
  auto a0 = reinterpret_cast<uintptr_t>(a.data), b0 = reinterpret_cast<uintptr_t>(b.data);
  return a0 < b0 + Bytes(b) && b0 < a0 + Bytes(a);
}

namespace {

bool ExactAlias(const TensorRef& a, const TensorRef& b) {
  return a.data == b.data && a.dtype == b.dtype && a.shape == b.shape;
}

}  // namespace

Status CheckNoOverlap(const KernelArgs& args, bool allow_exact_alias) {
  for (size_t o = 0; o < args.outputs.size(); ++o) {
    const TensorRef& y = args.outputs[o];
    for (size_t i = 0; i < args.inputs.size(); ++i) {
      const TensorRef& x = args.inputs[i];
      if (!Overlaps(y, x) || (allow_exact_alias && ExactAlias(y, x))) continue;
      return OpError(args,
                     Out(static_cast<int>(o)).Name() + " overlaps " + In(static_cast<int>(i)).Name() + " in the arena");
    }
    for (size_t p = 0; p < o; ++p) {
      if (Overlaps(y, args.outputs[p])) {
        return OpError(
            args, Out(static_cast<int>(o)).Name() + " overlaps " + Out(static_cast<int>(p)).Name() + " in the arena");
      }
    }
  }
  return Status::Ok();
}

Status CheckInputsDisjoint(const KernelArgs& args) {
  for (size_t i = 0; i < args.inputs.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (Overlaps(args.inputs[i], args.inputs[j])) {
        return OpError(
            args, In(static_cast<int>(i)).Name() + " overlaps " + In(static_cast<int>(j)).Name() + " in the arena");
      }
    }
  }
  return Status::Ok();
}

Status CheckAxis(const KernelArgs& args, int axis, int rank, Operand of) {
  if (axis >= 0 && axis < rank) return Status::Ok();
  return OpError(args, "axis " + std::to_string(axis) + " is out of range [0, " + std::to_string(rank) + ") for " +
                           of.Name() + " " + ShapeToString(Get(args, of).shape) + " (axes must be stored normalised)");
}

Status CheckNoOptions(const KernelArgs& args) {
  if (args.task->options_type() == fb::OpOptions::NONE) return Status::Ok();
  return OpError(args, std::string("takes no options, got ") + fb::EnumNameOpOptions(args.task->options_type()));
}

}  // namespace sinkrt::device
