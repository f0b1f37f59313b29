#include "support/kernel_runner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "device/src/kernels/dnnl_runtime.h"
#include "device/src/team/worker_team.h"
#include "runtime/src/schema_enums.h"

namespace sinkrt::testing {
namespace {

using device::TensorRef;

// One oneDNN engine and stream for the whole binary, like one per device.
// Never destroyed: kernels' primitives may outlive any test's scope.
device::DnnlRuntime& Dnnl() {
  static device::DnnlRuntime* rt = [] {
    auto* r = new device::DnnlRuntime;
    r->engine = dnnl::engine(dnnl::engine::kind::cpu, 0);
    r->stream = dnnl::stream(r->engine);
    // Enough part streams for any KernelRunner::Team a test makes.
    r->part_streams.push_back(r->stream);
    for (int p = 1; p < 8; ++p) r->part_streams.emplace_back(r->engine);
    return r;
  }();
  return *rt;
}

}  // namespace

//===--- KernelTensor --------------------------------------------------------===//

KernelTensor::KernelTensor(Shape shape, DType dtype)
    : shape_(std::move(shape)),
      dtype_(dtype),
      numel_(NumElements(shape_)),
      mem_(static_cast<size_t>(numel_) * DTypeSize(dtype) + 64, 0) {}

uint8_t* KernelTensor::bytes() const {
  auto p = reinterpret_cast<uintptr_t>(mem_.data());
  return reinterpret_cast<uint8_t*>((p + 63) & ~uintptr_t{63});
}

void KernelTensor::set(const std::vector<float>& v) { std::copy(v.begin(), v.end(), f32()); }

TensorRef KernelTensor::ref() const {
  TensorRef r;
  r.data = bytes();
  r.dtype = dtype_;
  r.shape = shape_;
  r.numel = numel_;
  return r;
}

KernelTensor RandomTensor(Shape shape, uint32_t seed, float lo, float hi) {
  KernelTensor t(std::move(shape));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t[i] = dist(rng);
  return t;
}

KernelTensor Labels(std::vector<int32_t> v) {
  KernelTensor t({static_cast<int64_t>(v.size())}, DType::I32);
  std::copy(v.begin(), v.end(), t.i32());
  return t;
}

TensorRef View(const KernelTensor& t, Shape shape) {
  TensorRef r = t.ref();
  r.numel = NumElements(shape);
  r.shape = std::move(shape);
  return r;
}

RefTensor ToRef(const KernelTensor& t) {
  return RefTensor(t.shape(), std::vector<double>(t.f32(), t.f32() + t.numel()));
}

std::vector<int32_t> LabelValues(const KernelTensor& t) { return {t.i32(), t.i32() + t.numel()}; }

RefWindow ToRefWindow(const ConvParams& p) {
  RefWindow w;
  w.stride_h = p.sh, w.stride_w = p.sw;
  w.pad_top = p.pt, w.pad_bottom = p.pb, w.pad_left = p.pl, w.pad_right = p.pr;
  w.dilation_h = p.dh, w.dilation_w = p.dw;
  return w;
}

RefWindow ToRefWindow(const PoolParams& p) {
  RefWindow w;
  w.kernel_h = p.kh, w.kernel_w = p.kw;
  w.stride_h = p.sh, w.stride_w = p.sw;
  w.pad_top = p.pt, w.pad_bottom = p.pb, w.pad_left = p.pl, w.pad_right = p.pr;
  return w;
}

//===--- KernelRunner --------------------------------------------------------===//

KernelRunner::KernelRunner(fb::OpCode code) : code_(code) {}
KernelRunner::~KernelRunner() = default;

KernelRunner& KernelRunner::In(const TensorRef& t) {
  args_.inputs.push_back(t);
  return *this;
}
KernelRunner& KernelRunner::Out(const TensorRef& t) {
  args_.outputs.push_back(t);
  return *this;
}
KernelRunner& KernelRunner::Bias(const KernelTensor& t) {
  args_.fused_bias = t.ref();
  bias_index_ = 7;  // any index: the runner resolves operands itself
  return *this;
}
KernelRunner& KernelRunner::Relu() {
  act_ = fb::Activation::Relu;
  return *this;
}
KernelRunner& KernelRunner::Team(device::WorkerTeam* team) {
  team_ = team;
  return *this;
}

KernelRunner& KernelRunner::NoDnnl() {
  use_dnnl_ = false;
  return *this;
}

KernelRunner& KernelRunner::Axis(int axis) {
  return Options(fb::OpOptions::AxisOptions, fb::CreateAxisOptions(fbb_, axis).Union());
}
KernelRunner& KernelRunner::Axes(std::vector<int32_t> axes, bool keep_dims) {
  return Options(fb::OpOptions::AxisOptions, fb::CreateAxisOptionsDirect(fbb_, -1, &axes, keep_dims).Union());
}
KernelRunner& KernelRunner::Scale(float scale) {
  return Options(fb::OpOptions::AxisOptions, fb::CreateAxisOptions(fbb_, -1, 0, false, scale).Union());
}
KernelRunner& KernelRunner::MatMulOpts(bool transpose_a, bool transpose_b) {
  return Options(fb::OpOptions::MatMulOptions, fb::CreateMatMulOptions(fbb_, transpose_a, transpose_b).Union());
}
KernelRunner& KernelRunner::Conv(const ConvParams& p) {
  return Options(fb::OpOptions::Conv2DOptions,
                 fb::CreateConv2DOptions(fbb_, p.sh, p.sw, p.pt, p.pb, p.pl, p.pr, p.dh, p.dw).Union());
}
KernelRunner& KernelRunner::Pool(const PoolParams& p) {
  return Options(fb::OpOptions::Pool2DOptions,
                 fb::CreatePool2DOptions(fbb_, p.kh, p.kw, p.sh, p.sw, p.pt, p.pb, p.pl, p.pr).Union());
}
KernelRunner& KernelRunner::FillValue(float v) {
  return Options(fb::OpOptions::FillOptions, fb::CreateFillOptions(fbb_, v).Union());
}
KernelRunner& KernelRunner::DropoutOpts(float p, uint64_t seed, uint32_t op_id, std::vector<int64_t> global_shape,
                                        std::vector<int64_t> offset, int64_t row_stride) {
  return Options(fb::OpOptions::DropoutOptions,
                 fb::CreateDropoutOptionsDirect(fbb_, p, seed, op_id, global_shape.empty() ? nullptr : &global_shape,
                                                offset.empty() ? nullptr : &offset, row_stride)
                     .Union());
}
KernelRunner& KernelRunner::Sgd(float lr, float wd) {
  return Options(fb::OpOptions::SgdOptions, fb::CreateSgdOptions(fbb_, lr, wd).Union());
}
KernelRunner& KernelRunner::Momentum(float lr, float mu, bool nesterov, float wd) {
  return Options(fb::OpOptions::MomentumOptions, fb::CreateMomentumOptions(fbb_, lr, mu, nesterov, wd).Union());
}
KernelRunner& KernelRunner::Adam(float lr, float b1, float b2, float eps, float wd) {
  return Options(fb::OpOptions::AdamOptions, fb::CreateAdamOptions(fbb_, lr, b1, b2, eps, wd).Union());
}
KernelRunner& KernelRunner::LayerNormEpsilon(float epsilon) {
  return Options(fb::OpOptions::LayerNormOptions, fb::CreateLayerNormOptions(fbb_, epsilon).Union());
}
KernelRunner& KernelRunner::BatchNormOpts(float epsilon, float momentum, uint32_t group_size) {
  return Options(fb::OpOptions::BatchNormOptions,
                 fb::CreateBatchNormOptions(fbb_, epsilon, momentum, false, group_size).Union());
}
KernelRunner& KernelRunner::CastTo(DType to) {
  return Options(fb::OpOptions::CastOptions, fb::CreateCastOptions(fbb_, ToFb(to)).Union());
}
KernelRunner& KernelRunner::LossScale(bool check, bool dynamic, float scale_factor, int scale_window) {
  return Options(fb::OpOptions::LossScaleOptions,
                 fb::CreateLossScaleOptions(fbb_, check, dynamic, scale_factor, scale_window).Union());
}
KernelRunner& KernelRunner::Perm(std::vector<int32_t> perm) {
  return Options(fb::OpOptions::TransposeOptions, fb::CreateTransposeOptionsDirect(fbb_, &perm).Union());
}
KernelRunner& KernelRunner::SplitOpts(int axis, std::vector<int64_t> sizes) {
  return Options(fb::OpOptions::SplitOptions, fb::CreateSplitOptionsDirect(fbb_, axis, &sizes).Union());
}
KernelRunner& KernelRunner::CommOpts(int axis, uint32_t position, std::vector<uint32_t> group) {
  return Options(fb::OpOptions::CommOptions, fb::CreateCommOptionsDirect(fbb_, &group, position, false, axis).Union());
}
KernelRunner& KernelRunner::MetricWeights(std::vector<double> weights) {
  return Options(fb::OpOptions::MetricSumOptions, fb::CreateMetricSumOptionsDirect(fbb_, &weights).Union());
}

KernelRunner& KernelRunner::Options(fb::OpOptions type, flatbuffers::Offset<void> value) {
  opt_type_ = type;
  opt_ = value;
  return *this;
}

Status KernelRunner::Prepare() {
  // Operand indices are arbitrary: the runner hands the kernel resolved
  // TensorRefs, as the executor does after resolving them in the arena.
  std::vector<uint32_t> in(args_.inputs.size()), out(args_.outputs.size());
  std::iota(in.begin(), in.end(), 0u);
  std::iota(out.begin(), out.end(), 100u);
  fbb_.Finish(fb::CreateKernelTask(fbb_, code_, fbb_.CreateVector(in), fbb_.CreateVector(out), opt_type_, opt_, act_,
                                   bias_index_));
  flatbuffers::Verifier verifier(fbb_.GetBufferPointer(), fbb_.GetSize());
  if (!verifier.VerifyBuffer<fb::KernelTask>(nullptr)) return Internal("task does not verify");
  args_.task = flatbuffers::GetRoot<fb::KernelTask>(fbb_.GetBufferPointer());
  impl_ = device::FindKernel(code_);
  if (impl_ == nullptr) return NotFound(std::string("no kernel for ") + fb::EnumNameOpCode(code_));
  device::PrepareContext ctx;
  ctx.dnnl = use_dnnl_ ? &Dnnl() : nullptr;
  ctx.team_size = team_ ? team_->size() : 1;
  SINKRT_RETURN_IF_ERROR(impl_->prepare(args_, ctx, &state_));
  scratch_bytes_ = ctx.scratch_bytes;
  scratch_.assign(scratch_bytes_ + 64, 0);
  auto p = reinterpret_cast<uintptr_t>(scratch_.data());
  run_ctx_.dnnl = ctx.dnnl;
  run_ctx_.team = team_;
  run_ctx_.scratch = reinterpret_cast<uint8_t*>((p + 63) & ~uintptr_t{63});
  return Status::Ok();
}

Status KernelRunner::Run() { return impl_->run(args_, state_.get(), run_ctx_); }

void KernelRunner::PrepareAndRun() {
  Status st = Prepare();
  ASSERT_TRUE(st.ok()) << st.ToString();
  st = Run();
  ASSERT_TRUE(st.ok()) << st.ToString();
}

//===--- Expectations --------------------------------------------------------===//

void ExpectPrepareError(KernelRunner& op, const char* op_name, std::initializer_list<std::string> parts,
                        StatusCode code) {
  const Status st = op.Prepare();
  ASSERT_FALSE(st.ok()) << "prepare accepted a bad " << op_name;
  EXPECT_EQ(st.code(), code) << st.ToString();
  EXPECT_EQ(st.message().rfind(std::string(op_name) + ":", 0), 0u) << st.message();
  for (const std::string& p : parts) {
    EXPECT_NE(st.message().find(p), std::string::npos) << "'" << p << "' not in: " << st.message();
  }
}

void ExpectClose(const KernelTensor& got, const std::vector<double>& want, double rtol, double atol,
                 const std::string& what) {
  ASSERT_EQ(static_cast<size_t>(got.numel()), want.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = got[i];
    if (std::abs(g - want[i]) > atol + rtol * std::abs(want[i])) {
      ADD_FAILURE() << what << ": element " << i << " is " << g << ", expected " << want[i];
      if (++reported == 5) return;
    }
  }
}

void ExpectClose(const KernelTensor& got, const RefTensor& want, double rtol, double atol, const std::string& what) {
  ASSERT_EQ(ShapeToString(got.shape()), ShapeToString(want.shape)) << what;
  ExpectClose(got, want.data, rtol, atol, what);
}

void ExpectBitwise(const KernelTensor& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(static_cast<size_t>(got.numel()), want.size()) << what;
  EXPECT_EQ(std::memcmp(got.f32(), want.data(), want.size() * sizeof(float)), 0) << what;
}

void ExpectBitwise(const KernelTensor& got, const RefTensor& want, const std::string& what) {
  ASSERT_EQ(ShapeToString(got.shape()), ShapeToString(want.shape)) << what;
  std::vector<float> rounded(want.data.begin(), want.data.end());
  ExpectBitwise(got, rounded, what);
}

}  // namespace sinkrt::testing
