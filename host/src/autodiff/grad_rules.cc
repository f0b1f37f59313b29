// The registry of gradient rules: one function per differentiable op
// (grad_rule.h), found by its op code.
#include "host/src/autodiff/grad_rules.h"

#include <array>
#include <string>

#include "host/src/autodiff/grad_rule.h"
#include "host/src/util/schema_enums.h"

namespace sinkrt::host::autodiff_internal {
namespace {

// Every family's rules by op code, built once.
class GradRuleRegistry {
 public:
  GradRuleRegistry() {
    for (std::span<const GradRule> family :
         {MatMulConvGradRules(), ElementwiseGradRules(), ShapeGradRules(), CommGradRules()})
      for (const GradRule& rule : family) rules_[static_cast<size_t>(rule.op)] = &rule;
  }

  const GradRule* Find(OpCode op) const {
    const size_t i = static_cast<size_t>(op);
    return i < rules_.size() ? rules_[i] : nullptr;
  }

 private:
  std::array<const GradRule*, static_cast<size_t>(kOpCodeMax) + 1> rules_{};
};

const GradRule* FindGradRule(OpCode op) {
  static const GradRuleRegistry registry;
  return registry.Find(op);
}

}  // namespace

bool DifferentiableInput(OpCode op, size_t slot) {
  switch (op) {
    case OpCode::SparseSoftmaxCrossEntropy:
      return slot == 0;
    case OpCode::ArgMaxAccuracy:
    case OpCode::OneHot:
      return false;  // piecewise constant (OneHot's input is i32): no gradient
    case OpCode::Gather:
      return slot == 0;  // not the indices
    case OpCode::BatchNorm:
      // x, gamma, beta; not the moving statistics (state) nor SyncBatchNorm's
      // reduced sums, whose path back to x its rule already covers.
      return slot < 3;
    case OpCode::Select:
      return slot != 0;  // not the condition
    default:
      return true;
  }
}

bool HasGradRule(OpCode op) { return FindGradRule(op) != nullptr; }

Status ApplyGradRule(Backward& b, const OpNode& op, const std::vector<std::optional<Ref>>& dy,
                     const std::vector<bool>& wants, std::vector<std::optional<Ref>>& dx) {
  dx.assign(op.inputs.size(), std::nullopt);
  const GradRule* rule = FindGradRule(op.op);
  const bool every_output = rule != nullptr && rule->reads_every_output;
  if (!every_output && (dy.empty() || !dy[0])) return Status::Ok();
  if (rule == nullptr)
    return Unimplemented(std::string("no gradient rule for op '") + op.name + "' (" + OpCodeName(op.op) + ")");
  const Rule r{b, op, every_output ? Ref{} : *dy[0], dy, wants};
  return rule->fn(r, dx);
}

}  // namespace sinkrt::host::autodiff_internal
