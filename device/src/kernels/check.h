// Load-time checks shared by every kernel's prepare().
//
// Each helper returns an InvalidArgument whose message starts with the op's
// name and names the operand ("input 1", "output 0", "fused bias") and what
// was expected, so a bad task stream is diagnosed from the error alone.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

#include "device/src/kernels/kernel.h"

namespace sinkrt::device {

// Kernels accept tensors of at most this rank; fixed so that run() state can
// live in plain arrays.
inline constexpr int kMaxRank = 8;

// One operand of a task, for messages and lookups.
struct Operand {
  enum Kind : uint8_t { kInput, kOutput } kind;
  int index;
  std::string Name() const;
};
inline Operand In(int i) { return {Operand::kInput, i}; }
inline Operand Out(int i) { return {Operand::kOutput, i}; }

const char* OpName(const KernelArgs& args);
const TensorRef& Get(const KernelArgs& args, Operand o);

// "<Op>: <message>" as InvalidArgument.
Status OpError(const KernelArgs& args, const std::string& message);

// Exact operand counts, a present task, consistent TensorRefs (numel agrees
// with the shape, data present), rank ≤ kMaxRank, and no fusion unless the op
// supports it (only MatMul and Conv2D call with allow_fusion).
Status CheckOperands(const KernelArgs& args, size_t inputs, size_t outputs, bool allow_fusion = false);
// As above with a variable number of inputs (AddN).
Status CheckOperandsAtLeast(const KernelArgs& args, size_t min_inputs, size_t outputs);

Status CheckDType(const KernelArgs& args, Operand o, DType want);
// Mixed precision runs each op in one float type: every operand listed must
// be F32 or BF16, all the same (the first one sets it). Returns that dtype.
// Errors: "input 1 has dtype f32, expected bf16 (as input 0)" or
// "input 0 has dtype i32, expected f32 or bf16".
Result<DType> CheckFloatDType(const KernelArgs& args, std::span<const Operand> operands);
Result<DType> CheckFloatDType(const KernelArgs& args, std::initializer_list<Operand> operands);
// As above over every input and output of the task.
Result<DType> CheckAllFloatDType(const KernelArgs& args);
Status CheckRank(const KernelArgs& args, Operand o, int rank, const char* layout = nullptr);
// `expected` describes the shape for the message, e.g. "[K=256, N]".
Status CheckShape(const KernelArgs& args, Operand o, std::span<const int64_t> want, const std::string& expected = "");
Status CheckSameShape(const KernelArgs& args, Operand o, Operand like);

// Whether two tensors share any byte.
bool Overlaps(const TensorRef& a, const TensorRef& b);

// Rejects an output that shares bytes with any input or other output.
// `allow_exact_alias`: an output may be exactly an input of the same shape
// and dtype (in-place elementwise ops write y[i] only after reading x[i]).
Status CheckNoOverlap(const KernelArgs& args, bool allow_exact_alias);
// For optimizer updates, which mutate inputs: no two inputs may overlap.
Status CheckInputsDisjoint(const KernelArgs& args);

// The task's options as T, or an error naming the op and the expected table.
template <typename T>
Result<const T*> GetOptions(const KernelArgs& args) {
  const T* opts = args.task->template options_as<T>();
  if (opts == nullptr) {
    return OpError(args, std::string("options missing, expected ") +
                             fb::EnumNameOpOptions(fb::OpOptionsTraits<T>::enum_value) + ", got " +
                             fb::EnumNameOpOptions(args.task->options_type()));
  }
  return opts;
}
// An axis option the builder normalised: 0 ≤ axis < rank.
Status CheckAxis(const KernelArgs& args, int axis, int rank, Operand of);

// Ops whose contract lists no options refuse any.
Status CheckNoOptions(const KernelArgs& args);

// Bytes of a tensor (numel × element size).
inline uint64_t Bytes(const TensorRef& t) { return static_cast<uint64_t>(t.numel) * DTypeSize(t.dtype); }

}  // namespace sinkrt::device
