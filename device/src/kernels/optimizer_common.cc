#include "device/src/kernels/optimizer_common.h"

#include <cmath>

namespace sinkrt::device {

Status CheckFinite(const KernelArgs& args, const char* name, float v) {
  if (std::isfinite(v)) return Status::Ok();
  return OpError(args, std::string(name) + " is " + std::to_string(v) + ", expected a finite value");
}

Status CheckBeta(const KernelArgs& args, const char* name, float v) {
  if (v >= 0.0f && v < 1.0f) return Status::Ok();
  return OpError(args, std::string(name) + " is " + std::to_string(v) + ", expected [0, 1)");
}

Result<bool> CheckStatusInput(const KernelArgs& args, size_t n) {
  if (args.inputs.size() != n + 1) return false;
  const int i = static_cast<int>(n);
  SINKRT_RETURN_IF_ERROR(CheckDType(args, In(i), DType::F32));
  SINKRT_RETURN_IF_ERROR(CheckShape(args, In(i), Shape{2}, "[2] (GradOverflow's status)"));
  return true;
}

Result<Extras> CheckExtras(const KernelArgs& args, size_t n, bool lr_input, size_t outputs) {
  const size_t base = n + (lr_input ? 1 : 0);
  SINKRT_RETURN_IF_ERROR(CheckOperands(args, args.inputs.size() == base + 1 ? base + 1 : base, outputs));
  Extras e;
  if (lr_input) {
    e.lr_at = static_cast<int>(n);
    SINKRT_RETURN_IF_ERROR(CheckDType(args, In(e.lr_at), DType::F32));
    SINKRT_RETURN_IF_ERROR(CheckShape(args, In(e.lr_at), Shape{1}, "[1] (the step's learning rate, LrSchedule's)"));
  }
  e.status_at = base;
  SINKRT_ASSIGN_OR_RETURN(e.scaled, CheckStatusInput(args, base));
  return e;
}

Result<Extras> CheckParamInputs(const KernelArgs& args, size_t n, bool lr_input) {
  SINKRT_ASSIGN_OR_RETURN(const Extras e, CheckExtras(args, n, lr_input));
  for (size_t i = 0; i < n; ++i) {
    SINKRT_RETURN_IF_ERROR(CheckDType(args, In(static_cast<int>(i)), DType::F32));
    SINKRT_RETURN_IF_ERROR(CheckSameShape(args, In(static_cast<int>(i)), In(0)));
  }
  return e;
}

bool SkipStep(const KernelArgs& args, const Extras& e, float* inv) {
  if (!e.scaled) return false;
  const float* status = args.inputs[e.status_at].f32();
  *inv = status[1];
  return status[0] != 0.0f;
}

Status ReadAdamOptions(const KernelArgs& args, AdamSettings* s) {
  SINKRT_ASSIGN_OR_RETURN(const fb::AdamOptions* opts, GetOptions<fb::AdamOptions>(args));
  SINKRT_RETURN_IF_ERROR(CheckFinite(args, "learning_rate", opts->learning_rate()));
  SINKRT_RETURN_IF_ERROR(CheckBeta(args, "beta1", opts->beta1()));
  SINKRT_RETURN_IF_ERROR(CheckBeta(args, "beta2", opts->beta2()));
  SINKRT_RETURN_IF_ERROR(CheckFinite(args, "weight_decay", opts->weight_decay()));
  if (!(opts->epsilon() > 0.0f) || !std::isfinite(opts->epsilon())) {
    return OpError(args, "epsilon is " + std::to_string(opts->epsilon()) + ", expected a finite value > 0");
  }
  s->lr = opts->learning_rate();
  s->beta1 = opts->beta1();
  s->beta2 = opts->beta2();
  s->eps = opts->epsilon();
  s->wd = opts->weight_decay();
  s->lr_input = opts->lr_input();
  return Status::Ok();
}

Status CheckPowers(const KernelArgs& args, int index) {
  SINKRT_RETURN_IF_ERROR(CheckDType(args, In(index), DType::F32));
  return CheckShape(args, In(index), Shape{2}, "[2] (beta1^t, beta2^t)");
}

}  // namespace sinkrt::device
