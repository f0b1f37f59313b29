// MetricSum (sunk eval): sums[i] += f64(in[i]) * weights[i], for k f32
// scalar inputs into one f64 [k] output that the program lists among its
// accumulators, so the executor zeroes it when a sink starts and the host
// reads it once at the end.
//
// The host used to add every batch's figure itself, in double, in batch
// order: loss_sum += f64(mean loss) * rows and correct += f64(count). This
// kernel does the same operations in the same order, so the sums are the
// host's to the bit. The product is exact (24 significant bits times a
// weight below 2^29 fits a double's 53), which also makes the result
// independent of whether the compiler fuses the multiply and the add.
#include <cmath>
#include <string>

#include "device/src/kernels/check.h"
#include "device/src/kernels/kernel_list.h"

namespace sinkrt::device {
namespace {

struct MetricSumState : KernelState {
  std::vector<double> weights;  // copied at load: run() reads no FlatBuffer
};

Status MetricSumPrepare(const KernelArgs& args, PrepareContext&, std::unique_ptr<KernelState>* state) {
  SINKRT_RETURN_IF_ERROR(CheckOperandsAtLeast(args, 1, 1));
  SINKRT_ASSIGN_OR_RETURN(const fb::MetricSumOptions* o, GetOptions<fb::MetricSumOptions>(args));
  const size_t k = args.inputs.size();
  const size_t weights = o->weights() ? o->weights()->size() : 0;
  if (weights != k) return OpError(args, std::to_string(weights) + " weights for " + std::to_string(k) + " inputs");
  for (size_t i = 0; i < k; ++i) {
    SINKRT_RETURN_IF_ERROR(CheckDType(args, In(static_cast<int>(i)), DType::F32));
    SINKRT_RETURN_IF_ERROR(CheckShape(args, In(static_cast<int>(i)), Shape{}, "[] (a scalar)"));
    const double w = o->weights()->Get(static_cast<flatbuffers::uoffset_t>(i));
    if (!std::isfinite(w)) return OpError(args, "weight " + std::to_string(i) + " is not finite");
  }
  SINKRT_RETURN_IF_ERROR(CheckDType(args, Out(0), DType::F64));
  std::string expected(1, '[');  // appended: GCC 12 -O3 warns a false -Wrestrict on "[" + std::string
  expected += std::to_string(k);
  expected += "] (one sum per input)";
  SINKRT_RETURN_IF_ERROR(CheckShape(args, Out(0), Shape{static_cast<int64_t>(k)}, expected));
  SINKRT_RETURN_IF_ERROR(CheckNoOverlap(args, /*allow_exact_alias=*/false));
  auto s = std::make_unique<MetricSumState>();
  s->weights.assign(o->weights()->begin(), o->weights()->end());
  *state = std::move(s);
  return Status::Ok();
}

Status MetricSumRun(const KernelArgs& args, KernelState* state, RunContext&) {
  const auto& s = *static_cast<MetricSumState*>(state);
  double* sums = static_cast<double*>(args.outputs[0].data);
  for (size_t i = 0; i < s.weights.size(); ++i) {
    const double product = static_cast<double>(*args.inputs[i].f32()) * s.weights[i];
    sums[i] += product;
  }
  return Status::Ok();
}

}  // namespace

const KernelImpl kMetricSumKernel = {MetricSumPrepare, MetricSumRun};

}  // namespace sinkrt::device
