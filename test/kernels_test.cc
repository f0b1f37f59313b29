// Device kernels against naive references (double-precision loops written
// straight from docs/ops.md), their load-time validation, determinism, the
// no-allocation rule of run(), and the initialisers.
//
// Each kernel runs as the executor runs it: a real KernelTask FlatBuffer,
// TensorRefs over storage owned by the test, prepare() once, run() after.
#include <flatbuffers/flatbuffers.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <new>
#include <numbers>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "../device/src/init/initializer.h"
#include "../device/src/kernels/dnnl_runtime.h"
#include "../device/src/kernels/kernel.h"

//===--- Allocation counter ------------------------------------------------===//
// Replaces global operator new for this binary so a test can assert that
// run() of our kernels never allocates.

namespace {
std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_allocations{0};
}  // namespace

void* operator new(size_t n) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
// GCC cannot see that this operator new is malloc, and flags the pairing.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace sinkrt::device {
namespace {

using fb::OpCode;

//===--- Harness ------------------------------------------------------------===//

DnnlRuntime& Dnnl() {
  static DnnlRuntime* rt = [] {
    auto* r = new DnnlRuntime;
    r->engine = dnnl::engine(dnnl::engine::kind::cpu, 0);
    r->stream = dnnl::stream(r->engine);
    return r;
  }();
  return *rt;
}

// A tensor with its own 64-byte-aligned storage, like an arena buffer.
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(Shape shape, DType dtype = DType::F32)
      : shape_(std::move(shape)),
        dtype_(dtype),
        numel_(NumElements(shape_)),
        mem_(static_cast<size_t>(numel_) * DTypeSize(dtype) + 64, 0) {}

  uint8_t* bytes() const {
    auto p = reinterpret_cast<uintptr_t>(mem_.data());
    return reinterpret_cast<uint8_t*>((p + 63) & ~uintptr_t{63});
  }
  float* f32() const { return reinterpret_cast<float*>(bytes()); }
  int32_t* i32() const { return reinterpret_cast<int32_t*>(bytes()); }
  float& operator[](int64_t i) const { return f32()[i]; }
  const Shape& shape() const { return shape_; }
  int64_t numel() const { return numel_; }
  std::vector<float> values() const { return {f32(), f32() + numel_}; }
  void set(const std::vector<float>& v) { std::copy(v.begin(), v.end(), f32()); }

  TensorRef ref() const {
    TensorRef r;
    r.data = bytes();
    r.dtype = dtype_;
    r.shape = shape_;
    r.numel = numel_;
    return r;
  }

 private:
  Shape shape_;
  DType dtype_ = DType::F32;
  int64_t numel_ = 0;
  mutable std::vector<uint8_t> mem_;
};

Tensor Random(Shape shape, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  Tensor t(std::move(shape));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t[i] = dist(rng);
  return t;
}

Tensor Labels(std::vector<int32_t> v) {
  Tensor t({static_cast<int64_t>(v.size())}, DType::I32);
  std::copy(v.begin(), v.end(), t.i32());
  return t;
}

// A view of `t` with another shape (same bytes), for aliasing cases.
TensorRef View(const Tensor& t, Shape shape) {
  TensorRef r = t.ref();
  r.numel = NumElements(shape);
  r.shape = std::move(shape);
  return r;
}

struct ConvParams {
  int sh = 1, sw = 1, pt = 0, pb = 0, pl = 0, pr = 0, dh = 1, dw = 1;
};
struct PoolParams {
  int kh = 2, kw = 2, sh = 2, sw = 2, pt = 0, pb = 0, pl = 0, pr = 0;
};

// One kernel task: a real KernelTask FlatBuffer plus resolved operands.
class Op {
 public:
  explicit Op(OpCode code) : code_(code) {}

  Op& In(const TensorRef& t) { args_.inputs.push_back(t); return *this; }
  Op& In(const Tensor& t) { return In(t.ref()); }
  Op& Out(const TensorRef& t) { args_.outputs.push_back(t); return *this; }
  Op& Out(const Tensor& t) { return Out(t.ref()); }
  Op& Bias(const Tensor& t) {
    args_.fused_bias = t.ref();
    bias_index_ = 7;
    return *this;
  }
  Op& Relu() { act_ = fb::Activation::Relu; return *this; }
  Op& NoDnnl() { use_dnnl_ = false; return *this; }

  Op& Axis(int axis) {
    return Options(fb::OpOptions::AxisOptions, fb::CreateAxisOptions(fbb_, axis).Union());
  }
  Op& Axes(std::vector<int32_t> axes, bool keep_dims) {
    return Options(fb::OpOptions::AxisOptions,
                   fb::CreateAxisOptionsDirect(fbb_, -1, &axes, keep_dims).Union());
  }
  Op& Scale(float scale) {
    return Options(fb::OpOptions::AxisOptions,
                   fb::CreateAxisOptions(fbb_, -1, 0, false, scale).Union());
  }
  Op& MatMulOpts(bool ta, bool tb) {
    return Options(fb::OpOptions::MatMulOptions, fb::CreateMatMulOptions(fbb_, ta, tb).Union());
  }
  Op& Conv(const ConvParams& p) {
    return Options(fb::OpOptions::Conv2DOptions,
                   fb::CreateConv2DOptions(fbb_, p.sh, p.sw, p.pt, p.pb, p.pl, p.pr, p.dh, p.dw)
                       .Union());
  }
  Op& Pool(const PoolParams& p) {
    return Options(fb::OpOptions::Pool2DOptions,
                   fb::CreatePool2DOptions(fbb_, p.kh, p.kw, p.sh, p.sw, p.pt, p.pb, p.pl, p.pr)
                       .Union());
  }
  Op& FillValue(float v) {
    return Options(fb::OpOptions::FillOptions, fb::CreateFillOptions(fbb_, v).Union());
  }
  Op& Sgd(float lr, float wd) {
    return Options(fb::OpOptions::SgdOptions, fb::CreateSgdOptions(fbb_, lr, wd).Union());
  }
  Op& Momentum(float lr, float mu, bool nesterov, float wd) {
    return Options(fb::OpOptions::MomentumOptions,
                   fb::CreateMomentumOptions(fbb_, lr, mu, nesterov, wd).Union());
  }
  Op& Adam(float lr, float b1, float b2, float eps, float wd) {
    return Options(fb::OpOptions::AdamOptions,
                   fb::CreateAdamOptions(fbb_, lr, b1, b2, eps, wd).Union());
  }
  Op& Options(fb::OpOptions type, flatbuffers::Offset<void> value) {
    opt_type_ = type;
    opt_ = value;
    return *this;
  }

  Status Prepare() {
    std::vector<uint32_t> in(args_.inputs.size()), out(args_.outputs.size());
    std::iota(in.begin(), in.end(), 0u);
    std::iota(out.begin(), out.end(), 100u);
    fbb_.Finish(fb::CreateKernelTask(fbb_, code_, fbb_.CreateVector(in), fbb_.CreateVector(out),
                                     opt_type_, opt_, act_, bias_index_));
    flatbuffers::Verifier verifier(fbb_.GetBufferPointer(), fbb_.GetSize());
    if (!verifier.VerifyBuffer<fb::KernelTask>(nullptr)) return Internal("task does not verify");
    args_.task = flatbuffers::GetRoot<fb::KernelTask>(fbb_.GetBufferPointer());
    impl_ = FindKernel(code_);
    if (impl_ == nullptr) return NotFound("no kernel");
    PrepareContext ctx;
    ctx.dnnl = use_dnnl_ ? &Dnnl() : nullptr;
    SINKRT_RETURN_IF_ERROR(impl_->prepare(args_, ctx, &state_));
    scratch_bytes_ = ctx.scratch_bytes;
    scratch_.assign(scratch_bytes_ + 64, 0);
    auto p = reinterpret_cast<uintptr_t>(scratch_.data());
    run_ctx_.dnnl = ctx.dnnl;
    run_ctx_.scratch = reinterpret_cast<uint8_t*>((p + 63) & ~uintptr_t{63});
    return Status::Ok();
  }

  Status Run() { return impl_->run(args_, state_.get(), run_ctx_); }

  // Prepare (which must succeed) and run once.
  void PrepareAndRun() {
    Status st = Prepare();
    ASSERT_TRUE(st.ok()) << st.ToString();
    st = Run();
    ASSERT_TRUE(st.ok()) << st.ToString();
  }

  uint64_t scratch_bytes() const { return scratch_bytes_; }

 private:
  OpCode code_;
  flatbuffers::FlatBufferBuilder fbb_;
  fb::OpOptions opt_type_ = fb::OpOptions::NONE;
  flatbuffers::Offset<void> opt_;
  fb::Activation act_ = fb::Activation::None;
  int32_t bias_index_ = -1;
  bool use_dnnl_ = true;
  KernelArgs args_;
  const KernelImpl* impl_ = nullptr;
  std::unique_ptr<KernelState> state_;
  std::vector<uint8_t> scratch_;
  uint64_t scratch_bytes_ = 0;
  RunContext run_ctx_;
};

// prepare() must fail with InvalidArgument naming the op and each of `parts`.
void ExpectPrepareError(Op& op, const char* op_name, std::initializer_list<std::string> parts,
                        StatusCode code = StatusCode::kInvalidArgument) {
  const Status st = op.Prepare();
  ASSERT_FALSE(st.ok()) << "prepare accepted a bad " << op_name;
  EXPECT_EQ(st.code(), code) << st.ToString();
  EXPECT_EQ(st.message().rfind(std::string(op_name) + ":", 0), 0u) << st.message();
  for (const std::string& p : parts) {
    EXPECT_NE(st.message().find(p), std::string::npos) << "'" << p << "' not in: " << st.message();
  }
}

void ExpectClose(const Tensor& got, const std::vector<double>& want, double rtol, double atol,
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

void ExpectBitwise(const Tensor& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(static_cast<size_t>(got.numel()), want.size()) << what;
  EXPECT_EQ(std::memcmp(got.f32(), want.data(), want.size() * sizeof(float)), 0) << what;
}

//===--- Reference helpers ---------------------------------------------------===//

std::vector<int64_t> Strides(const Shape& s) {
  std::vector<int64_t> st(s.size());
  int64_t k = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = k;
    k *= s[i];
  }
  return st;
}

// Flat index into `s` (right-aligned, size-1 dims broadcast) of element i of `y`.
int64_t BroadcastIndex(const Shape& y, int64_t i, const Shape& s) {
  const auto ys = Strides(y), ss = Strides(s);
  int64_t idx = 0;
  const size_t off = y.size() - s.size();
  for (size_t d = 0; d < y.size(); ++d) {
    const int64_t c = (i / ys[d]) % y[d];
    if (d >= off && s[d - off] != 1) idx += c * ss[d - off];
  }
  return idx;
}

Shape BroadcastShape(const Shape& a, const Shape& b) {
  const size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    const int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    const int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// Σ of x into `y` (a shape that broadcasts to x), in double.
std::vector<double> RefSumTo(const Tensor& x, const Shape& y) {
  std::vector<double> out(NumElements(y), 0.0);
  // Invert the broadcast: element i of x lands at BroadcastIndex(x, i, y).
  for (int64_t i = 0; i < x.numel(); ++i) out[BroadcastIndex(x.shape(), i, y)] += x[i];
  return out;
}

double Gelu(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
}

//===--- Registry -----------------------------------------------------------===//

TEST(KernelRegistry, EveryOpCodeHasAKernel) {
  for (OpCode op : fb::EnumValuesOpCode()) {
    if (op == OpCode::Invalid) {
      EXPECT_EQ(FindKernel(op), nullptr);
      continue;
    }
    const KernelImpl* k = FindKernel(op);
    ASSERT_NE(k, nullptr) << fb::EnumNameOpCode(op);
    EXPECT_NE(k->prepare, nullptr);
    EXPECT_NE(k->run, nullptr);
  }
  EXPECT_EQ(FindKernel(static_cast<OpCode>(999)), nullptr);
}

//===--- Elementwise --------------------------------------------------------===//

struct BinaryCase {
  Shape a, b;
};

TEST(ElementwiseKernels, AddSubMulBroadcastLikeNumPy) {
  const std::vector<BinaryCase> cases = {
      {{3, 4}, {3, 4}},        {{2, 3, 4}, {4}},          {{4}, {2, 3, 4}},
      {{2, 1, 4}, {3, 1}},     {{}, {5, 6}},              {{5, 6}, {}},
      {{1}, {3}},              {{2, 3, 4, 5}, {1, 3, 1, 1}}, {{7, 1}, {1, 9}},
      {{2, 3, 4, 5}, {2, 1, 4, 1}}, {{64, 10}, {10}},     {{1, 1}, {1}},
  };
  struct Kind {
    OpCode op;
    float (*f)(float, float);
  };
  const Kind kinds[] = {{OpCode::Add, [](float a, float b) { return a + b; }},
                        {OpCode::Sub, [](float a, float b) { return a - b; }},
                        {OpCode::Mul, [](float a, float b) { return a * b; }}};
  uint32_t seed = 1;
  for (const auto& c : cases) {
    for (const Kind& k : kinds) {
      const Tensor a = Random(c.a, seed++), b = Random(c.b, seed++);
      const Shape ys = BroadcastShape(c.a, c.b);
      Tensor y(ys);
      Op op(k.op);
      op.In(a).In(b).Out(y).PrepareAndRun();
      std::vector<float> want(y.numel());
      for (int64_t i = 0; i < y.numel(); ++i) {
        want[i] = k.f(a[BroadcastIndex(ys, i, c.a)], b[BroadcastIndex(ys, i, c.b)]);
      }
      ExpectBitwise(y, want,
                    std::string(fb::EnumNameOpCode(k.op)) + " " + ShapeToString(c.a) + " " +
                        ShapeToString(c.b));
    }
  }
}

TEST(ElementwiseKernels, AddRunsInPlace) {
  Tensor a = Random({4, 6}, 1);
  const Tensor b = Random({6}, 2);
  const std::vector<float> a0 = a.values();
  Op op(OpCode::Add);
  op.In(a).In(b).Out(a).PrepareAndRun();
  for (int64_t i = 0; i < a.numel(); ++i) ASSERT_EQ(a[i], a0[i] + b[i % 6]);
}

TEST(ElementwiseKernels, PrepareRejectsBadOperands) {
  const Tensor a = Random({2, 3}, 1), b = Random({4}, 2), y({2, 3}), yi({2, 3}, DType::I32);
  {
    Op op(OpCode::Add);
    op.In(a).In(b).Out(y);
    ExpectPrepareError(op, "Add", {"input 0 [2,3]", "input 1 [4]", "do not broadcast"});
  }
  {
    const Tensor wrong({3, 2});
    Op op(OpCode::Sub);
    op.In(a).In(a).Out(wrong);
    ExpectPrepareError(op, "Sub", {"output 0 has shape [3,2]", "expected [2,3]"});
  }
  {
    Op op(OpCode::Mul);
    op.In(a).In(a).Out(yi);
    ExpectPrepareError(op, "Mul", {"output 0 has dtype i32, expected f32"});
  }
  {
    Op op(OpCode::Add);
    op.In(a).Out(y);
    ExpectPrepareError(op, "Add", {"takes 2 inputs and 1 outputs, got 1 and 1"});
  }
  {
    Op op(OpCode::Add);
    op.In(a).In(a).Out(y).Axis(0);
    ExpectPrepareError(op, "Add", {"takes no options, got AxisOptions"});
  }
  {
    Op op(OpCode::Add);
    op.In(a).In(a).Out(y).Relu();
    ExpectPrepareError(op, "Add", {"does not take a fused bias or activation"});
  }
  {
    // Output starts one element into input 0: a broken memory plan.
    const Tensor big({8});
    TensorRef shifted = View(big, {2, 3});
    shifted.data = big.f32() + 1;
    Op op(OpCode::Add);
    op.In(View(big, {2, 3})).In(a).Out(shifted);
    ExpectPrepareError(op, "Add", {"output 0 overlaps input 0"});
  }
}

TEST(ElementwiseKernels, AddNSumsInOrderAndAllowsInPlace) {
  for (int n : {2, 3, 5}) {
    std::vector<Tensor> xs;
    for (int i = 0; i < n; ++i) xs.push_back(Random({3, 700}, 10 + i));
    std::vector<float> want(xs[0].numel());
    for (int64_t j = 0; j < xs[0].numel(); ++j) {
      float s = xs[0][j] + xs[1][j];
      for (int i = 2; i < n; ++i) s += xs[i][j];
      want[j] = s;
    }
    Tensor y({3, 700});
    Op op(OpCode::AddN);
    for (const Tensor& x : xs) op.In(x);
    op.Out(y).PrepareAndRun();
    ExpectBitwise(y, want, "AddN of " + std::to_string(n));
    // Writing into the last input must not disturb the sum.
    Op in_place(OpCode::AddN);
    for (const Tensor& x : xs) in_place.In(x);
    in_place.Out(xs.back()).PrepareAndRun();
    ExpectBitwise(xs.back(), want, "AddN in place");
  }
  const Tensor a({2}), b({3}), y({2});
  Op op(OpCode::AddN);
  op.In(a).In(b).Out(y);
  ExpectPrepareError(op, "AddN", {"input 1 has shape [3], expected [2]"});
  Op one(OpCode::AddN);
  one.In(a).Out(y);
  ExpectPrepareError(one, "AddN", {"at least 2 inputs"});
}

//===--- Activations --------------------------------------------------------===//

TEST(ActivationKernels, ForwardMatchesReference) {
  struct Case {
    OpCode op;
    double (*f)(double);
  };
  const Case cases[] = {
      {OpCode::Relu, [](double x) { return x > 0 ? x : 0.0; }},
      {OpCode::Gelu, Gelu},
      {OpCode::Tanh, [](double x) { return std::tanh(x); }},
      {OpCode::Sigmoid, [](double x) { return 1.0 / (1.0 + std::exp(-x)); }},
      {OpCode::Neg, [](double x) { return -x; }},
  };
  for (const Case& c : cases) {
    for (const Shape& s : {Shape{}, Shape{17}, Shape{3, 5, 7}}) {
      Tensor x = Random(s, 3, -6.0f, 6.0f);
      if (x.numel() > 2) x[0] = -100.0f, x[1] = 100.0f;  // saturation, no overflow
      Tensor y(s);
      Op op(c.op);
      op.In(x).Out(y).PrepareAndRun();
      std::vector<double> want(x.numel());
      for (int64_t i = 0; i < x.numel(); ++i) want[i] = c.f(x[i]);
      ExpectClose(y, want, 2e-6, 1e-7, fb::EnumNameOpCode(c.op));
    }
  }
}

TEST(ActivationKernels, ReluPropagatesNaNAndRunsInPlace) {
  Tensor x({3});
  x.set({-1.0f, std::numeric_limits<float>::quiet_NaN(), 2.0f});
  Op op(OpCode::Relu);
  op.In(x).Out(x).PrepareAndRun();
  EXPECT_EQ(x[0], 0.0f);
  EXPECT_TRUE(std::isnan(x[1]));
  EXPECT_EQ(x[2], 2.0f);
}

TEST(ActivationKernels, GradientsMatchContract) {
  const Tensor x = Random({4, 33}, 5, -4.0f, 4.0f), dy = Random({4, 33}, 6);
  // Forward outputs the gradients take.
  Tensor relu_y({4, 33}), tanh_y({4, 33}), sig_y({4, 33});
  Op(OpCode::Relu).In(x).Out(relu_y).PrepareAndRun();
  Op(OpCode::Tanh).In(x).Out(tanh_y).PrepareAndRun();
  Op(OpCode::Sigmoid).In(x).Out(sig_y).PrepareAndRun();
  const int64_t n = x.numel();
  {
    Tensor dx({4, 33});
    Op(OpCode::ReluGrad).In(dy).In(relu_y).Out(dx).PrepareAndRun();
    std::vector<double> want(n);
    for (int64_t i = 0; i < n; ++i) want[i] = relu_y[i] > 0 ? dy[i] : 0.0;
    ExpectClose(dx, want, 0, 0, "ReluGrad");
  }
  {
    Tensor dx({4, 33});
    Op(OpCode::TanhGrad).In(dy).In(tanh_y).Out(dx).PrepareAndRun();
    std::vector<double> want(n);
    for (int64_t i = 0; i < n; ++i) want[i] = dy[i] * (1.0 - double(tanh_y[i]) * tanh_y[i]);
    ExpectClose(dx, want, 1e-6, 1e-7, "TanhGrad");
  }
  {
    Tensor dx({4, 33});
    Op(OpCode::SigmoidGrad).In(dy).In(sig_y).Out(dx).PrepareAndRun();
    std::vector<double> want(n);
    for (int64_t i = 0; i < n; ++i) want[i] = dy[i] * double(sig_y[i]) * (1.0 - sig_y[i]);
    ExpectClose(dx, want, 1e-6, 1e-7, "SigmoidGrad");
  }
  {
    // GeluGrad takes the forward input; check it against a central
    // difference of the tanh-approximation Gelu.
    Tensor dx({4, 33});
    Op(OpCode::GeluGrad).In(dy).In(x).Out(dx).PrepareAndRun();
    std::vector<double> want(n);
    for (int64_t i = 0; i < n; ++i) {
      const double h = 1e-5;
      want[i] = dy[i] * (Gelu(x[i] + h) - Gelu(x[i] - h)) / (2 * h);
    }
    ExpectClose(dx, want, 1e-5, 1e-6, "GeluGrad");
  }
  const Tensor other = Random({4, 32}, 1);
  Tensor dx({4, 33});
  Op op(OpCode::ReluGrad);
  op.In(dy).In(other).Out(dx);
  ExpectPrepareError(op, "ReluGrad", {"input 1 has shape [4,32], expected [4,33] like input 0"});
}

//===--- Softmax ------------------------------------------------------------===//

// Softmax (or log-softmax) of x along `axis`, in double.
std::vector<double> RefSoftmax(const Tensor& x, int axis, bool log) {
  const Shape& s = x.shape();
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= s[d];
  for (size_t d = axis + 1; d < s.size(); ++d) inner *= s[d];
  const int64_t a_len = s[axis];
  std::vector<double> y(x.numel());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t a) { return (o * a_len + a) * inner + i; };
      double m = -INFINITY, sum = 0;
      for (int64_t a = 0; a < a_len; ++a) m = std::max(m, double(x[at(a)]));
      for (int64_t a = 0; a < a_len; ++a) sum += std::exp(x[at(a)] - m);
      for (int64_t a = 0; a < a_len; ++a) {
        y[at(a)] = log ? x[at(a)] - m - std::log(sum) : std::exp(x[at(a)] - m) / sum;
      }
    }
  }
  return y;
}

struct AxisCase {
  Shape shape;
  int axis;
};
const std::vector<AxisCase> kAxisCases = {
    {{4, 10}, 1}, {{2, 5, 3, 4}, 1}, {{6, 3}, 0}, {{7}, 0}, {{3, 1000}, 1}, {{2, 3, 4}, 2},
};

TEST(SoftmaxKernels, ForwardMatchesReferenceOnEveryAxis) {
  for (bool log : {false, true}) {
    for (const AxisCase& c : kAxisCases) {
      Tensor x = Random(c.shape, 7, -20.0f, 20.0f);
      x[0] = 80.0f;  // would overflow exp without the max subtracted
      Tensor y(c.shape);
      Op op(log ? OpCode::LogSoftmax : OpCode::Softmax);
      op.In(x).Out(y).Axis(c.axis).PrepareAndRun();
      ExpectClose(y, RefSoftmax(x, c.axis, log), 2e-5, 1e-7,
                  std::string(log ? "LogSoftmax " : "Softmax ") + ShapeToString(c.shape) +
                      " axis " + std::to_string(c.axis));
    }
  }
}

TEST(SoftmaxKernels, GradientsMatchContract) {
  for (bool log : {false, true}) {
    for (const AxisCase& c : kAxisCases) {
      const Tensor x = Random(c.shape, 8, -3.0f, 3.0f), dy = Random(c.shape, 9);
      Tensor y(c.shape), dx(c.shape);
      Op(log ? OpCode::LogSoftmax : OpCode::Softmax).In(x).Out(y).Axis(c.axis).PrepareAndRun();
      Op(log ? OpCode::LogSoftmaxGrad : OpCode::SoftmaxGrad)
          .In(dy).In(y).Out(dx).Axis(c.axis).PrepareAndRun();
      // dx = y·(dy − Σ dy·y)  or  dx = dy − exp(y)·Σ dy, along the axis.
      const Shape& s = c.shape;
      int64_t outer = 1, inner = 1;
      for (int d = 0; d < c.axis; ++d) outer *= s[d];
      for (size_t d = c.axis + 1; d < s.size(); ++d) inner *= s[d];
      std::vector<double> want(x.numel());
      for (int64_t o = 0; o < outer; ++o) {
        for (int64_t i = 0; i < inner; ++i) {
          auto at = [&](int64_t a) { return (o * s[c.axis] + a) * inner + i; };
          double acc = 0;
          for (int64_t a = 0; a < s[c.axis]; ++a) acc += log ? dy[at(a)] : dy[at(a)] * y[at(a)];
          for (int64_t a = 0; a < s[c.axis]; ++a) {
            want[at(a)] = log ? dy[at(a)] - std::exp(double(y[at(a)])) * acc
                              : y[at(a)] * (dy[at(a)] - acc);
          }
        }
      }
      ExpectClose(dx, want, 1e-5, 1e-6,
                  std::string(log ? "LogSoftmaxGrad " : "SoftmaxGrad ") + ShapeToString(s));
    }
  }
}

TEST(SoftmaxKernels, ScratchOnlyForInnerAxes) {
  const Tensor x = Random({2, 5, 3}, 1);
  Tensor y({2, 5, 3});
  Op last(OpCode::Softmax);
  last.In(x).Out(y).Axis(2).PrepareAndRun();
  EXPECT_EQ(last.scratch_bytes(), 0u);
  Op middle(OpCode::Softmax);
  middle.In(x).Out(y).Axis(1).PrepareAndRun();
  EXPECT_EQ(middle.scratch_bytes(), 2 * 3 * sizeof(float));
}

TEST(SoftmaxKernels, PrepareRejectsBadAxis) {
  const Tensor x({2, 5});
  Tensor y({2, 5});
  Op neg(OpCode::Softmax);
  neg.In(x).Out(y).Axis(-1);
  ExpectPrepareError(neg, "Softmax", {"axis -1 is out of range [0, 2)", "normalised"});
  Op big(OpCode::LogSoftmax);
  big.In(x).Out(y).Axis(2);
  ExpectPrepareError(big, "LogSoftmax", {"axis 2 is out of range"});
  Op none(OpCode::Softmax);
  none.In(x).Out(y);
  ExpectPrepareError(none, "Softmax", {"options missing, expected AxisOptions, got NONE"});
  Op wrong(OpCode::SoftmaxGrad);
  wrong.In(x).In(x).Out(y).MatMulOpts(false, false);
  ExpectPrepareError(wrong, "SoftmaxGrad", {"expected AxisOptions, got MatMulOptions"});
}

//===--- Loss ---------------------------------------------------------------===//

TEST(LossKernels, SparseSoftmaxCrossEntropyAndGrad) {
  for (const Shape& s : {Shape{1, 1}, Shape{4, 10}, Shape{64, 10}, Shape{3, 1000}}) {
    const int64_t n = s[0], c = s[1];
    const Tensor logits = Random(s, 11, -5.0f, 5.0f);
    std::vector<int32_t> lv(n);
    for (int64_t r = 0; r < n; ++r) lv[r] = static_cast<int32_t>((r * 7 + 3) % c);
    const Tensor labels = Labels(lv);
    Tensor loss(Shape{});
    Op(OpCode::SparseSoftmaxCrossEntropy).In(logits).In(labels).Out(loss).PrepareAndRun();
    const std::vector<double> logp = RefSoftmax(logits, 1, /*log=*/true);
    double want = 0;
    for (int64_t r = 0; r < n; ++r) want -= logp[r * c + lv[r]];
    want /= n;
    ExpectClose(loss, {want}, 1e-5, 1e-6, "loss " + ShapeToString(s));

    Tensor dloss(Shape{});
    dloss[0] = 0.5f;
    Tensor dlogits(s);
    Op(OpCode::SparseSoftmaxCrossEntropyGrad)
        .In(logits).In(labels).In(dloss).Out(dlogits).PrepareAndRun();
    std::vector<double> wg(n * c);
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t j = 0; j < c; ++j) {
        wg[r * c + j] = (std::exp(logp[r * c + j]) - (j == lv[r] ? 1.0 : 0.0)) * 0.5 / n;
      }
    }
    ExpectClose(dlogits, wg, 1e-5, 1e-8, "loss grad " + ShapeToString(s));
  }
}

TEST(LossKernels, LabelOutOfRangeFailsTheStepNamingRowAndValue) {
  const Tensor logits = Random({3, 5}, 1);
  const Tensor labels = Labels({0, 5, 1});
  Tensor loss(Shape{});
  Op op(OpCode::SparseSoftmaxCrossEntropy);
  op.In(logits).In(labels).Out(loss);
  ASSERT_TRUE(op.Prepare().ok());
  Status st = op.Run();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "SparseSoftmaxCrossEntropy: label 5 in row 1 is outside [0, 5)");

  const Tensor negative = Labels({0, 1, -2});
  Tensor dloss(Shape{}), dlogits({3, 5});
  Op grad(OpCode::SparseSoftmaxCrossEntropyGrad);
  grad.In(logits).In(negative).In(dloss).Out(dlogits);
  ASSERT_TRUE(grad.Prepare().ok());
  st = grad.Run();
  EXPECT_NE(st.message().find("label -2 in row 2"), std::string::npos) << st.message();
}

TEST(LossKernels, PrepareRejectsBadOperands) {
  const Tensor logits = Random({3, 5}, 1), labels = Labels({0, 1});
  Tensor loss(Shape{});
  Op op(OpCode::SparseSoftmaxCrossEntropy);
  op.In(logits).In(labels).Out(loss);
  ExpectPrepareError(op, "SparseSoftmaxCrossEntropy",
                     {"input 1 has shape [2], expected [N=3] for [3,5] logits"});
  const Tensor float_labels({3});
  Op dt(OpCode::SparseSoftmaxCrossEntropy);
  dt.In(logits).In(float_labels).Out(loss);
  ExpectPrepareError(dt, "SparseSoftmaxCrossEntropy", {"input 1 has dtype f32, expected i32"});
  Tensor vec_loss({1});
  Op out(OpCode::SparseSoftmaxCrossEntropy);
  out.In(logits).In(Labels({0, 1, 2})).Out(vec_loss);
  ExpectPrepareError(out, "SparseSoftmaxCrossEntropy", {"output 0 has shape [1], expected []"});
}

//===--- Reductions and broadcasts --------------------------------------------===//

TEST(ReduceKernels, ReduceSumAndMeanOverAxes) {
  struct Case {
    Shape shape;
    std::vector<int32_t> axes;
  };
  const std::vector<Case> cases = {
      {{3, 4, 5}, {}},     {{3, 4, 5}, {0}},       {{3, 4, 5}, {1}},     {{3, 4, 5}, {2}},
      {{3, 4, 5}, {0, 2}}, {{3, 4, 5}, {1, 2}},    {{2, 3, 4, 5}, {1, 3}}, {{2, 3, 4, 5}, {0, 1, 3}},
      {{}, {}},            {{6, 1, 7}, {1}},       {{300, 513}, {0}},    {{5, 1}, {0, 1}},
  };
  for (bool mean : {false, true}) {
    for (bool keep : {false, true}) {
      for (const Case& c : cases) {
        const Tensor x = Random(c.shape, 21);
        Shape kept = c.shape, dropped;
        std::vector<bool> red(c.shape.size(), c.axes.empty());
        for (int a : c.axes) red[a] = true;
        int64_t count = 1;
        for (size_t d = 0; d < c.shape.size(); ++d) {
          if (red[d]) {
            kept[d] = 1;
            count *= c.shape[d];
          } else {
            dropped.push_back(c.shape[d]);
          }
        }
        Tensor y(keep ? kept : dropped);
        Op op(mean ? OpCode::ReduceMean : OpCode::ReduceSum);
        op.In(x).Out(y).Axes(c.axes, keep).PrepareAndRun();
        std::vector<double> want = RefSumTo(x, kept);
        if (mean) {
          for (double& w : want) w /= count;
        }
        ExpectClose(y, want, 1e-5, 1e-5,
                    std::string(mean ? "ReduceMean " : "ReduceSum ") + ShapeToString(c.shape));
      }
    }
  }
}

TEST(ReduceKernels, LongSumsStayAccurate) {
  // 2^21 values in [0, 1): a naive float loop drifts by ~1e-4 relative here.
  const Tensor x = Random({1 << 21}, 3, 0.0f, 1.0f);
  Tensor y(Shape{});
  Op(OpCode::ReduceSum).In(x).Out(y).Axes({}, false).PrepareAndRun();
  double want = 0;
  for (int64_t i = 0; i < x.numel(); ++i) want += x[i];
  EXPECT_NEAR(y[0], want, want * 1e-6);
  // Column sums over many rows (a bias gradient over a big batch).
  const Tensor dy = Random({200000, 3}, 4, 0.0f, 1.0f);
  Tensor db({3});
  Op(OpCode::BiasAddGrad).In(dy).Out(db).Axis(1).PrepareAndRun();
  const std::vector<double> w = RefSumTo(dy, {3});
  for (int j = 0; j < 3; ++j) EXPECT_NEAR(db[j], w[j], w[j] * 1e-6);
}

TEST(ReduceKernels, PrepareRejectsBadAxes) {
  const Tensor x({3, 4, 5});
  Tensor y({3});
  Op unsorted(OpCode::ReduceSum);
  unsorted.In(x).Out(y).Axes({2, 1}, false);
  ExpectPrepareError(unsorted, "ReduceSum", {"axes must be sorted and distinct, got 1 after 2"});
  Op range(OpCode::ReduceMean);
  range.In(x).Out(y).Axes({1, 3}, false);
  ExpectPrepareError(range, "ReduceMean", {"axis 3 is out of range [0, 3)"});
  Op keep(OpCode::ReduceSum);
  keep.In(x).Out(y).Axes({1, 2}, true);
  ExpectPrepareError(keep, "ReduceSum", {"output 0 has shape [3], expected [3,1,1]"});
}

TEST(ReduceKernels, SumToShapeInvertsBroadcasting) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{2, 3, 4}, {4}},    {{2, 3, 4}, {3, 1}},  {{2, 3, 4}, {1, 3, 1}}, {{2, 3, 4}, {2, 1, 4}},
      {{2, 3, 4}, {}},     {{5, 6}, {5, 6}},     {{64, 512}, {512}},     {{2, 3, 4, 5}, {3, 1, 1}},
      {{7, 1, 9}, {1, 9}}, {{4, 6}, {1, 1}},
  };
  for (const auto& [dy_shape, dx_shape] : cases) {
    const Tensor dy = Random(dy_shape, 31);
    Tensor dx(dx_shape);
    Op(OpCode::SumToShape).In(dy).Out(dx).PrepareAndRun();
    ExpectClose(dx, RefSumTo(dy, dx_shape), 1e-5, 1e-5,
                "SumToShape " + ShapeToString(dy_shape) + " -> " + ShapeToString(dx_shape));
  }
  const Tensor dy({2, 3});
  Tensor dx({4});
  Op op(OpCode::SumToShape);
  op.In(dy).Out(dx);
  ExpectPrepareError(op, "SumToShape", {"output 0 has shape [4]", "broadcasts to input 0's [2,3]"});
}

TEST(ReduceKernels, BroadcastToScales) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{4}, {2, 3, 4}}, {{3, 1}, {2, 3, 5}}, {{}, {3, 3}}, {{2, 2}, {2, 2}}, {{1}, {4}},
      {{1, 1}, {2, 3}},  {{2, 1, 4}, {3, 2, 5, 4}},
  };
  for (const auto& [xs, ys] : cases) {
    const Tensor x = Random(xs, 41);
    Tensor y(ys);
    Op(OpCode::BroadcastTo).In(x).Out(y).Scale(0.25f).PrepareAndRun();
    std::vector<float> want(y.numel());
    for (int64_t i = 0; i < y.numel(); ++i) want[i] = 0.25f * x[BroadcastIndex(ys, i, xs)];
    ExpectBitwise(y, want, "BroadcastTo " + ShapeToString(xs) + " -> " + ShapeToString(ys));
  }
  const Tensor x({3});
  Tensor y({2, 4});
  Op op(OpCode::BroadcastTo);
  op.In(x).Out(y).Scale(1.0f);
  ExpectPrepareError(op, "BroadcastTo", {"input 0 has shape [3]", "output 0's [2,4]"});
  const Tensor x2({1, 1});
  Tensor y4({4});
  Op higher(OpCode::BroadcastTo);  // NumPy never drops leading dims either
  higher.In(x2).Out(y4).Scale(1.0f);
  ExpectPrepareError(higher, "BroadcastTo", {"input 0 has shape [1,1]", "output 0's [4]"});
}

TEST(ReduceKernels, BiasAddAndGradAlongTheChannelAxis) {
  // The channel axis is always 1: [N,C], [N,C,L], NCHW.
  for (const Shape& shape : {Shape{8, 5}, Shape{2, 3, 4, 5}, Shape{4, 7, 9}, Shape{1, 6}, Shape{3, 1, 2, 2}}) {
    const int axis = 1;
    const int64_t c = shape[axis];
    const Tensor x = Random(shape, 51), bias = Random({c}, 52);
    Tensor y(shape);
    Op(OpCode::BiasAdd).In(x).In(bias).Out(y).Axis(axis).PrepareAndRun();
    const int64_t inner = Strides(shape)[axis];
    std::vector<float> want(x.numel());
    for (int64_t i = 0; i < x.numel(); ++i) want[i] = x[i] + bias[(i / inner) % c];
    ExpectBitwise(y, want, "BiasAdd " + ShapeToString(shape));

    Tensor db({c});
    Op(OpCode::BiasAddGrad).In(x).Out(db).Axis(axis).PrepareAndRun();
    std::vector<double> wd(c, 0.0);
    for (int64_t i = 0; i < x.numel(); ++i) wd[(i / inner) % c] += x[i];
    ExpectClose(db, wd, 1e-5, 1e-5, "BiasAddGrad " + ShapeToString(shape));
  }
  const Tensor x({4, 5}), bias({4});
  Tensor y({4, 5});
  Op op(OpCode::BiasAdd);
  op.In(x).In(bias).Out(y).Axis(1);
  ExpectPrepareError(op, "BiasAdd", {"input 1 has shape [4], expected [C=5] (axis 1 of input 0 [4,5])"});
  Tensor db({4});
  Op grad(OpCode::BiasAddGrad);
  grad.In(x).Out(db).Axis(1);
  ExpectPrepareError(grad, "BiasAddGrad", {"output 0 has shape [4], expected [C=5]"});
  Op axis0(OpCode::BiasAdd);
  axis0.In(x).In(bias).Out(y).Axis(0);
  ExpectPrepareError(axis0, "BiasAdd", {"axis is 0, expected 1 (the channel axis of [N, C, ...])"});
  const Tensor v({5});
  Tensor dv({5});
  Op rank1(OpCode::BiasAddGrad);
  rank1.In(v).Out(dv).Axis(1);
  ExpectPrepareError(rank1, "BiasAddGrad", {"input 0 has shape [5], expected rank >= 2"});
}

//===--- Copy and Fill ------------------------------------------------------===//

TEST(CopyKernels, ReshapeFlattenCopyMoveBytes) {
  for (OpCode code : {OpCode::Reshape, OpCode::Flatten, OpCode::Copy}) {
    const Tensor x = Random({2, 3, 4}, 61);
    Tensor y({2, 12});
    Op(code).In(x).Out(y).PrepareAndRun();
    ExpectBitwise(y, x.values(), fb::EnumNameOpCode(code));
  }
  // Flatten's output shape is fixed: [N, ...] -> [N, prod(...)], [N] -> [N, 1].
  const Tensor v = Random({5}, 63);
  Tensor v1({5, 1});
  Op(OpCode::Flatten).In(v).Out(v1).PrepareAndRun();
  ExpectBitwise(v1, v.values(), "Flatten [5]");
  const Tensor x4 = Random({2, 3, 4}, 64);
  Tensor flat_wrong({4, 6});
  Op flat(OpCode::Flatten);
  flat.In(x4).Out(flat_wrong);
  ExpectPrepareError(flat, "Flatten", {"output 0 has shape [4,6], expected [2,12] ([N, prod(...)] of input 0 [2,3,4])"});
  Tensor reshaped({4, 6});
  Op(OpCode::Reshape).In(x4).Out(reshaped).PrepareAndRun();
  ExpectBitwise(reshaped, x4.values(), "Reshape [2,3,4] -> [4,6]");
  // Labels copy as bytes too.
  const Tensor l = Labels({1, 2, 3});
  Tensor l2({3}, DType::I32);
  Op(OpCode::Copy).In(l).Out(l2).PrepareAndRun();
  EXPECT_EQ(std::memcmp(l.i32(), l2.i32(), 12), 0);
  // Shared memory: nothing to do, nothing to break.
  Tensor x = Random({6}, 62);
  const std::vector<float> before = x.values();
  Op(OpCode::Reshape).In(x).Out(View(x, {2, 3})).PrepareAndRun();
  ExpectBitwise(x, before, "Reshape in place");

  Tensor wrong({5});
  Op count(OpCode::Reshape);
  count.In(x).Out(wrong);
  ExpectPrepareError(count, "Reshape", {"output 0 has shape [5] (5 elements), expected 6 elements"});
  Tensor wrong_type({6}, DType::I32);
  Op type(OpCode::Flatten);
  type.In(x).Out(wrong_type);
  ExpectPrepareError(type, "Flatten", {"output 0 has dtype i32, expected f32"});
}

TEST(CopyKernels, FillWritesTheValue) {
  Tensor y({3, 3});
  Op(OpCode::Fill).Out(y).FillValue(1.5f).PrepareAndRun();
  for (int64_t i = 0; i < y.numel(); ++i) EXPECT_EQ(y[i], 1.5f);
  Op missing(OpCode::Fill);
  missing.Out(y);
  ExpectPrepareError(missing, "Fill", {"expected FillOptions"});
}

//===--- Optimizer updates ----------------------------------------------------===//

TEST(OptimizerKernels, SgdUpdate) {
  Tensor p = Random({5, 7}, 71);
  const Tensor g = Random({5, 7}, 72);
  std::vector<double> want(p.numel());
  for (int64_t i = 0; i < p.numel(); ++i) want[i] = p[i] - 0.1 * (g[i] + 0.01 * p[i]);
  Op(OpCode::SgdUpdate).In(p).In(g).Sgd(0.1f, 0.01f).PrepareAndRun();
  ExpectClose(p, want, 1e-6, 1e-7, "SgdUpdate");
}

TEST(OptimizerKernels, MomentumUpdateOverSteps) {
  for (bool nesterov : {false, true}) {
    Tensor p = Random({300}, 73), acc({300});
    const Tensor g = Random({300}, 74);
    std::vector<double> wp(p.numel()), wa(p.numel(), 0.0);
    for (int64_t i = 0; i < p.numel(); ++i) wp[i] = p[i];
    Op op(OpCode::MomentumUpdate);
    op.In(p).In(g).In(acc).Momentum(0.05f, 0.9f, nesterov, 1e-3f);
    ASSERT_TRUE(op.Prepare().ok());
    for (int step = 0; step < 3; ++step) {
      ASSERT_TRUE(op.Run().ok());
      for (int64_t i = 0; i < p.numel(); ++i) {
        const double gg = g[i] + 1e-3 * wp[i];
        wa[i] = 0.9 * wa[i] + gg;
        wp[i] -= nesterov ? 0.05 * (gg + 0.9 * wa[i]) : 0.05 * wa[i];
      }
    }
    ExpectClose(p, wp, 1e-5, 1e-6, nesterov ? "Nesterov param" : "Momentum param");
    ExpectClose(acc, wa, 1e-5, 1e-6, "Momentum accum");
  }
}

TEST(OptimizerKernels, AdamPowersThenAdamUpdate) {
  const float lr = 0.01f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.1f;
  Tensor p = Random({4, 50}, 75), m({4, 50}), v({4, 50}), powers({2});
  powers.set({1.0f, 1.0f});
  std::vector<double> wp(p.numel()), wm(p.numel(), 0), wv(p.numel(), 0);
  for (int64_t i = 0; i < p.numel(); ++i) wp[i] = p[i];
  double pw1 = 1, pw2 = 1;
  Op pw(OpCode::AdamPowers);
  pw.In(powers).Adam(lr, b1, b2, eps, wd);
  ASSERT_TRUE(pw.Prepare().ok());
  std::vector<Tensor> grads;
  for (int step = 0; step < 3; ++step) grads.push_back(Random({4, 50}, 80 + step));
  for (int step = 0; step < 3; ++step) {
    Op up(OpCode::AdamUpdate);
    up.In(p).In(grads[step]).In(m).In(v).In(powers).Adam(lr, b1, b2, eps, wd);
    ASSERT_TRUE(pw.Run().ok());
    up.PrepareAndRun();
    pw1 *= b1, pw2 *= b2;
    const double lr_t = lr * std::sqrt(1 - pw2) / (1 - pw1);
    for (int64_t i = 0; i < p.numel(); ++i) {
      const double g = grads[step][i] + wd * wp[i];
      wm[i] = b1 * wm[i] + (1 - b1) * g;
      wv[i] = b2 * wv[i] + (1 - b2) * g * g;
      wp[i] -= lr_t * wm[i] / (std::sqrt(wv[i]) + eps);
    }
  }
  ExpectClose(powers, {pw1, pw2}, 1e-6, 0, "AdamPowers");
  ExpectClose(p, wp, 1e-5, 1e-6, "Adam param");
  ExpectClose(m, wm, 1e-5, 1e-7, "Adam m");
  ExpectClose(v, wv, 1e-4, 1e-9, "Adam v");
}

TEST(OptimizerKernels, PrepareRejectsBadOptionsAndOperands) {
  Tensor p({4}), g({4}), m({4}), v({4}), powers({2}), short_g({3});
  Op beta(OpCode::AdamUpdate);
  beta.In(p).In(g).In(m).In(v).In(powers).Adam(0.1f, 1.0f, 0.999f, 1e-8f, 0);
  ExpectPrepareError(beta, "AdamUpdate", {"beta1 is 1.000000, expected [0, 1)"});
  Op eps(OpCode::AdamPowers);
  eps.In(powers).Adam(0.1f, 0.9f, 0.999f, 0.0f, 0);
  ExpectPrepareError(eps, "AdamPowers", {"epsilon", "expected a finite value > 0"});
  Op pw(OpCode::AdamUpdate);
  pw.In(p).In(g).In(m).In(v).In(p).Adam(0.1f, 0.9f, 0.999f, 1e-8f, 0);
  ExpectPrepareError(pw, "AdamUpdate", {"input 4 has shape [4], expected [2] (beta1^t, beta2^t)"});
  Op shape(OpCode::SgdUpdate);
  shape.In(p).In(short_g).Sgd(0.1f, 0);
  ExpectPrepareError(shape, "SgdUpdate", {"input 1 has shape [3], expected [4] like input 0"});
  Op same(OpCode::MomentumUpdate);
  same.In(p).In(g).In(p).Momentum(0.1f, 0.9f, false, 0);
  ExpectPrepareError(same, "MomentumUpdate", {"input 2 overlaps input 0"});
  Op opts(OpCode::SgdUpdate);
  opts.In(p).In(g).Momentum(0.1f, 0.9f, false, 0);
  ExpectPrepareError(opts, "SgdUpdate", {"expected SgdOptions, got MomentumOptions"});
  Op nan(OpCode::SgdUpdate);
  nan.In(p).In(g).Sgd(std::numeric_limits<float>::quiet_NaN(), 0);
  ExpectPrepareError(nan, "SgdUpdate", {"learning_rate", "finite"});
}

//===--- Accuracy -----------------------------------------------------------===//

TEST(AccuracyKernels, CountsArgMaxHitsFirstOnTies) {
  Tensor logits({4, 3});
  logits.set({0.1f, 0.9f, 0.0f,    // argmax 1
              2.0f, 2.0f, 1.0f,    // tie: first, 0
              -1.0f, -3.0f, -0.5f, // argmax 2
              0.0f, 0.0f, 0.0f});  // tie: 0
  const Tensor labels = Labels({1, 1, 2, 7});  // hit, miss (tie goes to 0), hit, out of range
  Tensor count(Shape{});
  Op(OpCode::ArgMaxAccuracy).In(logits).In(labels).Out(count).PrepareAndRun();
  EXPECT_EQ(count[0], 2.0f);
  Tensor bad({2});
  Op op(OpCode::ArgMaxAccuracy);
  op.In(logits).In(labels).Out(bad);
  ExpectPrepareError(op, "ArgMaxAccuracy", {"output 0 has shape [2], expected []"});
}

//===--- MatMul -------------------------------------------------------------===//

TEST(MatMulKernel, TransposesBiasAndReluMatchReference) {
  struct Dims {
    int64_t m, k, n;
  };
  for (const Dims d : {Dims{1, 1, 1}, Dims{3, 5, 4}, Dims{64, 33, 17}, Dims{16, 784, 10}}) {
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      for (int fuse = 0; fuse < 3; ++fuse) {  // none, bias, bias + relu
        const Tensor a = Random(ta ? Shape{d.k, d.m} : Shape{d.m, d.k}, 91);
        const Tensor b = Random(tb ? Shape{d.n, d.k} : Shape{d.k, d.n}, 92);
        const Tensor bias = Random({d.n}, 93);
        Tensor y({d.m, d.n});
        Op op(OpCode::MatMul);
        op.In(a).In(b).Out(y).MatMulOpts(ta, tb);
        if (fuse >= 1) op.Bias(bias);
        if (fuse == 2) op.Relu();
        op.PrepareAndRun();
        std::vector<double> want(d.m * d.n);
        for (int64_t i = 0; i < d.m; ++i) {
          for (int64_t j = 0; j < d.n; ++j) {
            double s = fuse >= 1 ? bias[j] : 0.0;
            for (int64_t k = 0; k < d.k; ++k) {
              s += double(ta ? a[k * d.m + i] : a[i * d.k + k]) *
                   (tb ? b[j * d.k + k] : b[k * d.n + j]);
            }
            want[i * d.n + j] = fuse == 2 ? std::max(s, 0.0) : s;
          }
        }
        ExpectClose(y, want, 1e-4, 1e-5,
                    "MatMul " + std::to_string(d.m) + "x" + std::to_string(d.k) + "x" +
                        std::to_string(d.n) + " t" + std::to_string(t) + " fuse" +
                        std::to_string(fuse));
      }
    }
  }
}

TEST(MatMulKernel, PrepareNamesTheMismatch) {
  const Tensor a({64, 256}), b({784, 512}), b_ok({256, 10}), bias({11});
  Tensor y({64, 512}), y10({64, 10});
  Op op(OpCode::MatMul);
  op.In(a).In(b).Out(y).MatMulOpts(false, false);
  ExpectPrepareError(op, "MatMul",
                     {"input 1 has shape [784,512], expected [K=256, N] for a [64,256] input 0"});
  Op tb(OpCode::MatMul);
  tb.In(a).In(b_ok).Out(y10).MatMulOpts(false, true);
  ExpectPrepareError(tb, "MatMul", {"expected [N, K=256] (transpose_b)"});
  Op out(OpCode::MatMul);
  out.In(a).In(b_ok).Out(y).MatMulOpts(false, false);
  ExpectPrepareError(out, "MatMul", {"output 0 has shape [64,512], expected [M=64, N=10]"});
  Op fb_bias(OpCode::MatMul);
  fb_bias.In(a).In(b_ok).Out(y10).MatMulOpts(false, false).Bias(bias);
  ExpectPrepareError(fb_bias, "MatMul", {"fused bias has shape [11], expected [N=10]"});
  const Tensor a3({2, 3, 4});
  Op rank(OpCode::MatMul);
  rank.In(a3).In(b_ok).Out(y10).MatMulOpts(false, false);
  ExpectPrepareError(rank, "MatMul", {"input 0 has shape [2,3,4], expected 2-D [M, K]"});
  Op no_opts(OpCode::MatMul);
  no_opts.In(a).In(b_ok).Out(y10);
  ExpectPrepareError(no_opts, "MatMul", {"expected MatMulOptions"});
  Op no_dnnl(OpCode::MatMul);
  no_dnnl.In(a).In(b_ok).Out(y10).MatMulOpts(false, false).NoDnnl();
  ExpectPrepareError(no_dnnl, "MatMul", {"no oneDNN runtime"}, StatusCode::kFailedPrecondition);
}

//===--- Convolution ----------------------------------------------------------===//

struct ConvCase {
  Shape x, w;
  ConvParams p;
};
const std::vector<ConvCase> kConvCases = {
    {{2, 3, 7, 7}, {4, 3, 3, 3}, {1, 1, 1, 1, 1, 1, 1, 1}},
    {{2, 3, 8, 9}, {5, 3, 3, 3}, {2, 2, 1, 1, 1, 1, 1, 1}},  // stride 2, pad 1
    {{1, 2, 9, 8}, {3, 2, 3, 2}, {2, 1, 0, 1, 1, 0, 1, 1}},  // asymmetric pads
    {{1, 2, 9, 9}, {2, 2, 3, 3}, {1, 1, 2, 2, 2, 2, 2, 2}},  // dilation 2
    {{3, 4, 5, 5}, {6, 4, 1, 1}, {1, 1, 0, 0, 0, 0, 1, 1}},  // 1x1
    {{2, 1, 28, 28}, {6, 1, 5, 5}, {1, 1, 2, 2, 2, 2, 1, 1}},  // LeNet conv1
};

struct ConvDims {
  int64_t n, c, h, w, o, kh, kw, oh, ow;
};
ConvDims Dims(const ConvCase& cc) {
  ConvDims d{cc.x[0], cc.x[1], cc.x[2], cc.x[3], cc.w[0], cc.w[2], cc.w[3], 0, 0};
  d.oh = (d.h + cc.p.pt + cc.p.pb - cc.p.dh * (d.kh - 1) - 1) / cc.p.sh + 1;
  d.ow = (d.w + cc.p.pl + cc.p.pr - cc.p.dw * (d.kw - 1) - 1) / cc.p.sw + 1;
  return d;
}

// Calls f(x_index, w_index, y_index) for every multiply of the convolution.
template <typename F>
void ForEachConvTap(const ConvCase& cc, F f) {
  const ConvDims d = Dims(cc);
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t o = 0; o < d.o; ++o)
      for (int64_t oh = 0; oh < d.oh; ++oh)
        for (int64_t ow = 0; ow < d.ow; ++ow)
          for (int64_t c = 0; c < d.c; ++c)
            for (int64_t kh = 0; kh < d.kh; ++kh)
              for (int64_t kw = 0; kw < d.kw; ++kw) {
                const int64_t ih = oh * cc.p.sh - cc.p.pt + kh * cc.p.dh;
                const int64_t iw = ow * cc.p.sw - cc.p.pl + kw * cc.p.dw;
                if (ih < 0 || ih >= d.h || iw < 0 || iw >= d.w) continue;
                f(((n * d.c + c) * d.h + ih) * d.w + iw, ((o * d.c + c) * d.kh + kh) * d.kw + kw,
                  ((n * d.o + o) * d.oh + oh) * d.ow + ow);
              }
}

TEST(ConvKernels, ForwardWithFusedBiasAndRelu) {
  for (const ConvCase& cc : kConvCases) {
    const ConvDims d = Dims(cc);
    for (int fuse = 0; fuse < 3; ++fuse) {
      const Tensor x = Random(cc.x, 101), w = Random(cc.w, 102), bias = Random({d.o}, 103);
      Tensor y({d.n, d.o, d.oh, d.ow});
      Op op(OpCode::Conv2D);
      op.In(x).In(w).Out(y).Conv(cc.p);
      if (fuse >= 1) op.Bias(bias);
      if (fuse == 2) op.Relu();
      op.PrepareAndRun();
      std::vector<double> want(y.numel(), 0.0);
      ForEachConvTap(cc, [&](int64_t xi, int64_t wi, int64_t yi) { want[yi] += double(x[xi]) * w[wi]; });
      const int64_t plane = d.oh * d.ow;
      for (int64_t i = 0; i < y.numel(); ++i) {
        if (fuse >= 1) want[i] += bias[(i / plane) % d.o];
        if (fuse == 2) want[i] = std::max(want[i], 0.0);
      }
      ExpectClose(y, want, 1e-4, 1e-5, "Conv2D " + ShapeToString(cc.x) + " fuse" + std::to_string(fuse));
    }
  }
}

TEST(ConvKernels, BackpropInputAndFilter) {
  for (const ConvCase& cc : kConvCases) {
    const ConvDims d = Dims(cc);
    const Tensor x = Random(cc.x, 111), w = Random(cc.w, 112);
    const Tensor dy = Random({d.n, d.o, d.oh, d.ow}, 113);
    Tensor dx(cc.x), dw(cc.w);
    Op(OpCode::Conv2DBackpropInput).In(dy).In(w).Out(dx).Conv(cc.p).PrepareAndRun();
    Op(OpCode::Conv2DBackpropFilter).In(dy).In(x).Out(dw).Conv(cc.p).PrepareAndRun();
    std::vector<double> want_dx(dx.numel(), 0.0), want_dw(dw.numel(), 0.0);
    ForEachConvTap(cc, [&](int64_t xi, int64_t wi, int64_t yi) {
      want_dx[xi] += double(dy[yi]) * w[wi];
      want_dw[wi] += double(dy[yi]) * x[xi];
    });
    ExpectClose(dx, want_dx, 1e-4, 1e-5, "Conv2DBackpropInput " + ShapeToString(cc.x));
    ExpectClose(dw, want_dw, 1e-4, 1e-4, "Conv2DBackpropFilter " + ShapeToString(cc.x));
  }
}

TEST(ConvKernels, PrepareNamesTheMismatch) {
  const Tensor x({2, 3, 8, 8}), w({4, 2, 3, 3}), w_ok({4, 3, 3, 3}), bias({5});
  Tensor y({2, 4, 6, 6}), y_bad({2, 4, 8, 8});
  Op chans(OpCode::Conv2D);
  chans.In(x).In(w).Out(y).Conv({});
  ExpectPrepareError(chans, "Conv2D",
                     {"input 1 has shape [4,2,3,3], expected [O, C=3, KH, KW] for a [2,3,8,8] input 0"});
  Op out(OpCode::Conv2D);
  out.In(x).In(w_ok).Out(y_bad).Conv({});
  ExpectPrepareError(out, "Conv2D", {"output 0 has shape [2,4,8,8], expected [N=2, O=4, OH=6, OW=6]"});
  Op stride(OpCode::Conv2D);
  stride.In(x).In(w_ok).Out(y).Conv({0, 1});
  ExpectPrepareError(stride, "Conv2D", {"strides (0, 1) must be ≥ 1"});
  Op b(OpCode::Conv2D);
  b.In(x).In(w_ok).Out(y).Conv({}).Bias(bias);
  ExpectPrepareError(b, "Conv2D", {"fused bias has shape [5], expected [O=4]"});
  Tensor dx({2, 3, 9, 9});
  Op bi(OpCode::Conv2DBackpropInput);
  bi.In(y).In(w_ok).Out(dx).Conv({});
  ExpectPrepareError(bi, "Conv2DBackpropInput", {"input 0 has shape [2,4,6,6], expected [N=2, O=4, OH=7, OW=7]"});
  Op bf_fuse(OpCode::Conv2DBackpropFilter);
  Tensor dw({4, 3, 3, 3});
  bf_fuse.In(y).In(x).Out(dw).Conv({}).Relu();
  ExpectPrepareError(bf_fuse, "Conv2DBackpropFilter", {"does not take a fused bias or activation"});
}

//===--- Pooling --------------------------------------------------------------===//

struct PoolCase {
  Shape x;
  PoolParams p;
};
const std::vector<PoolCase> kPoolCases = {
    {{2, 3, 8, 8}, {2, 2, 2, 2, 0, 0, 0, 0}},
    {{1, 2, 7, 9}, {3, 3, 2, 2, 1, 1, 1, 1}},   // padding 1
    {{2, 2, 6, 5}, {3, 2, 1, 2, 0, 2, 1, 0}},   // asymmetric padding
    {{1, 1, 5, 5}, {5, 5, 1, 1, 0, 0, 0, 0}},   // global
};

struct PoolDims {
  int64_t n, c, h, w, oh, ow;
};
PoolDims Dims(const PoolCase& pc) {
  PoolDims d{pc.x[0], pc.x[1], pc.x[2], pc.x[3], 0, 0};
  d.oh = (d.h + pc.p.pt + pc.p.pb - pc.p.kh) / pc.p.sh + 1;
  d.ow = (d.w + pc.p.pl + pc.p.pr - pc.p.kw) / pc.p.sw + 1;
  return d;
}

// Calls f(y_index, x_indices of the window's real (unpadded) elements).
template <typename F>
void ForEachWindow(const PoolCase& pc, F f) {
  const PoolDims d = Dims(pc);
  std::vector<int64_t> taps;
  for (int64_t nc = 0; nc < d.n * d.c; ++nc)
    for (int64_t oh = 0; oh < d.oh; ++oh)
      for (int64_t ow = 0; ow < d.ow; ++ow) {
        taps.clear();
        for (int64_t kh = 0; kh < pc.p.kh; ++kh)
          for (int64_t kw = 0; kw < pc.p.kw; ++kw) {
            const int64_t ih = oh * pc.p.sh - pc.p.pt + kh, iw = ow * pc.p.sw - pc.p.pl + kw;
            if (ih >= 0 && ih < d.h && iw >= 0 && iw < d.w) taps.push_back((nc * d.h + ih) * d.w + iw);
          }
        f((nc * d.oh + oh) * d.ow + ow, taps);
      }
}

TEST(PoolKernels, MaxPoolForwardAndGradThroughWorkspace) {
  for (const PoolCase& pc : kPoolCases) {
    const PoolDims d = Dims(pc);
    // Negative inputs: a padded zero must never win the max.
    const Tensor x = Random(pc.x, 121, -2.0f, -1.0f);
    Tensor y({d.n, d.c, d.oh, d.ow}), ws({4 * d.n * d.c * d.oh * d.ow}, DType::U8);
    Op(OpCode::MaxPool2D).In(x).Out(y).Out(ws).Pool(pc.p).PrepareAndRun();
    const Tensor dy = Random(y.shape(), 122);
    Tensor dx(pc.x);
    Op(OpCode::MaxPool2DGrad).In(dy).In(x).In(ws).Out(dx).Pool(pc.p).PrepareAndRun();
    std::vector<double> want_y(y.numel()), want_dx(x.numel(), 0.0);
    ForEachWindow(pc, [&](int64_t yi, const std::vector<int64_t>& taps) {
      int64_t best = taps[0];
      for (int64_t t : taps) best = x[t] > x[best] ? t : best;
      want_y[yi] = x[best];
      want_dx[best] += dy[yi];
    });
    ExpectClose(y, want_y, 0, 0, "MaxPool2D " + ShapeToString(pc.x));
    ExpectClose(dx, want_dx, 1e-6, 1e-6, "MaxPool2DGrad " + ShapeToString(pc.x));
  }
}

TEST(PoolKernels, AvgPoolExcludesPadding) {
  for (const PoolCase& pc : kPoolCases) {
    const PoolDims d = Dims(pc);
    const Tensor x = Random(pc.x, 131);
    Tensor y({d.n, d.c, d.oh, d.ow});
    Op(OpCode::AvgPool2D).In(x).Out(y).Pool(pc.p).PrepareAndRun();
    const Tensor dy = Random(y.shape(), 132);
    Tensor dx(pc.x);
    Op(OpCode::AvgPool2DGrad).In(dy).Out(dx).Pool(pc.p).PrepareAndRun();
    std::vector<double> want_y(y.numel()), want_dx(x.numel(), 0.0);
    ForEachWindow(pc, [&](int64_t yi, const std::vector<int64_t>& taps) {
      double s = 0;
      for (int64_t t : taps) s += x[t];
      want_y[yi] = s / taps.size();
      for (int64_t t : taps) want_dx[t] += dy[yi] / taps.size();
    });
    ExpectClose(y, want_y, 1e-5, 1e-6, "AvgPool2D " + ShapeToString(pc.x));
    ExpectClose(dx, want_dx, 1e-5, 1e-6, "AvgPool2DGrad " + ShapeToString(pc.x));
  }
}

TEST(PoolKernels, PrepareChecksWorkspaceAndGeometry) {
  const Tensor x({1, 2, 8, 8});
  Tensor y({1, 2, 4, 4}), ws({128}, DType::U8), ws_f32({128}), ws_small({64}, DType::U8);
  const PoolParams p{2, 2, 2, 2, 0, 0, 0, 0};
  Op type(OpCode::MaxPool2D);
  type.In(x).Out(y).Out(ws_f32).Pool(p);
  ExpectPrepareError(type, "MaxPool2D", {"output 1 has dtype f32, expected u8"});
  Op small(OpCode::MaxPool2D);
  small.In(x).Out(y).Out(ws_small).Pool(p);
  ExpectPrepareError(small, "MaxPool2D", {"output 1 has shape [64], expected [128] (4 bytes per element of y)"});
  Op pad(OpCode::AvgPool2D);
  pad.In(x).Out(y).Pool({2, 2, 2, 2, 2, 0, 0, 0});
  ExpectPrepareError(pad, "AvgPool2D", {"smaller than the kernel"});
  Tensor y_bad({1, 2, 3, 3});
  Op out(OpCode::AvgPool2D);
  out.In(x).Out(y_bad).Pool(p);
  ExpectPrepareError(out, "AvgPool2D", {"output 0 has shape [1,2,3,3], expected [N=1, C=2, OH=4, OW=4]"});
  Tensor dx({1, 2, 8, 8});
  const Tensor x_bad({1, 2, 8, 9});
  Op grad(OpCode::MaxPool2DGrad);
  grad.In(y).In(x_bad).In(ws).Out(dx).Pool(p);
  ExpectPrepareError(grad, "MaxPool2DGrad", {"input 1 has shape [1,2,8,9], expected [1,2,8,8] like output 0"});
  Op ok(OpCode::MaxPool2D);
  ok.In(x).Out(y).Out(ws).Pool(p);
  EXPECT_TRUE(ok.Prepare().ok());
}

//===--- Determinism and the run() rules ------------------------------------===//

// Builds each op twice over the same inputs and fresh outputs; the outputs
// of two runs must be bitwise equal.
TEST(KernelRules, RunsAreBitwiseDeterministic) {
  const Tensor a = Random({64, 300}, 141), b = Random({300, 70}, 142), bias = Random({70}, 143);
  const Tensor x = Random({4, 3, 12, 12}, 144), w = Random({8, 3, 3, 3}, 145);
  const ConvParams cp{2, 2, 1, 1, 1, 1, 1, 1};
  const Tensor dy = Random({4, 8, 6, 6}, 146);
  const Tensor big = Random({3000, 70}, 147);
  const Tensor labels = Labels(std::vector<int32_t>(64, 3));
  std::vector<std::function<void(Tensor*)>> runs = {
      [&](Tensor* y) {
        *y = Tensor({64, 70});
        Op(OpCode::MatMul).In(a).In(b).Out(*y).MatMulOpts(false, false).Bias(bias).Relu().PrepareAndRun();
      },
      [&](Tensor* y) {
        *y = Tensor({8, 3, 3, 3});
        Op(OpCode::Conv2DBackpropFilter).In(dy).In(x).Out(*y).Conv(cp).PrepareAndRun();
      },
      [&](Tensor* y) {
        *y = Tensor({70});
        Op(OpCode::BiasAddGrad).In(big).Out(*y).Axis(1).PrepareAndRun();
      },
      [&](Tensor* y) {
        *y = Tensor(Shape{});
        Op(OpCode::SparseSoftmaxCrossEntropy).In(b.ref()).In(Labels(std::vector<int32_t>(300, 5))).Out(*y).PrepareAndRun();
      },
      [&](Tensor* y) {
        *y = Tensor({3000});
        Op(OpCode::ReduceMean).In(big).Out(*y).Axes({1}, false).PrepareAndRun();
      },
  };
  for (size_t i = 0; i < runs.size(); ++i) {
    Tensor y1, y2;
    runs[i](&y1);
    runs[i](&y2);
    ExpectBitwise(y2, y1.values(), "run " + std::to_string(i));
  }
  // And the same prepared op run twice.
  Tensor y({64, 70});
  Op op(OpCode::MatMul);
  op.In(a).In(b).Out(y).MatMulOpts(false, false);
  ASSERT_TRUE(op.Prepare().ok());
  ASSERT_TRUE(op.Run().ok());
  const std::vector<float> first = y.values();
  ASSERT_TRUE(op.Run().ok());
  ExpectBitwise(y, first, "MatMul rerun");
}

// Our kernels' run() must not touch the heap (DESIGN §5).
TEST(KernelRules, RunDoesNotAllocate) {
  const Tensor x = Random({8, 6, 5}, 151), b = Random({5}, 152), c = Random({6}, 153);
  const Tensor logits = Random({8, 10}, 154), labels = Labels({0, 1, 2, 3, 4, 5, 6, 7});
  Tensor y({8, 6, 5}), y2({8, 6, 5}), s(Shape{}), v6({6}), l({8, 10}), one(Shape{}), p({8, 6, 5}),
      m({8, 6, 5}), pw({2});
  one[0] = 1.0f;
  pw.set({0.9f, 0.999f});
  std::vector<std::unique_ptr<Op>> ops;
  auto add = [&](OpCode code) -> Op& { return *ops.emplace_back(std::make_unique<Op>(code)); };
  add(OpCode::Add).In(x).In(b).Out(y);
  add(OpCode::Mul).In(x).In(x).Out(y);
  add(OpCode::AddN).In(x).In(x).In(y).Out(y2);
  add(OpCode::Gelu).In(x).Out(y);
  add(OpCode::GeluGrad).In(y).In(x).Out(y2);
  add(OpCode::Softmax).In(x).Out(y).Axis(1);
  add(OpCode::LogSoftmaxGrad).In(x).In(y).Out(y2).Axis(2);
  add(OpCode::SparseSoftmaxCrossEntropy).In(logits).In(labels).Out(s);
  add(OpCode::SparseSoftmaxCrossEntropyGrad).In(logits).In(labels).In(one).Out(l);
  add(OpCode::ReduceSum).In(x).Out(v6).Axes({0, 2}, false);
  add(OpCode::SumToShape).In(x).Out(View(v6, {6, 1}));
  add(OpCode::BroadcastTo).In(View(c, {6, 1})).Out(y).Scale(2.0f);
  add(OpCode::BiasAdd).In(x).In(c).Out(y).Axis(1);
  add(OpCode::BiasAddGrad).In(x).Out(v6).Axis(1);
  add(OpCode::Copy).In(x).Out(y);
  add(OpCode::Fill).Out(y).FillValue(2.0f);
  add(OpCode::ArgMaxAccuracy).In(logits).In(labels).Out(s);
  add(OpCode::SgdUpdate).In(p).In(x).Sgd(0.1f, 0.0f);
  add(OpCode::MomentumUpdate).In(p).In(x).In(m).Momentum(0.1f, 0.9f, true, 0.0f);
  add(OpCode::AdamPowers).In(pw).Adam(0.1f, 0.9f, 0.999f, 1e-8f, 0.0f);
  add(OpCode::AdamUpdate).In(p).In(x).In(m).In(y2).In(pw).Adam(0.1f, 0.9f, 0.999f, 1e-8f, 0.0f);
  for (auto& op : ops) ASSERT_TRUE(op->Prepare().ok());
  // The counter itself works (this binary's operator new is the counting one).
  g_allocations = 0;
  g_counting = true;
  int* volatile probe = new int(1);  // volatile: the pair cannot be elided
  delete probe;
  g_counting = false;
  ASSERT_EQ(g_allocations.load(), 1);
  g_allocations = 0;
  g_counting = true;
  for (int rep = 0; rep < 3; ++rep) {
    for (auto& op : ops) ASSERT_TRUE(op->Run().ok());
  }
  g_counting = false;
  EXPECT_EQ(g_allocations.load(), 0);
}

//===--- Initialisers -------------------------------------------------------===//

struct InitBuilder {
  flatbuffers::FlatBufferBuilder fbb;
  const fb::InitDef* Build(fb::InitKind kind, std::function<void(fb::InitDefBuilder&)> set = {}) {
    fb::InitDefBuilder b(fbb);
    b.add_kind(kind);
    if (set) set(b);
    fbb.Finish(b.Finish());
    return flatbuffers::GetRoot<fb::InitDef>(fbb.GetBufferPointer());
  }
};

Status Init(const Tensor& t, fb::InitKind kind, std::function<void(fb::InitDefBuilder&)> set = {},
            std::span<const uint8_t> blobs = {}) {
  InitBuilder ib;
  return FillInitializer(*ib.Build(kind, std::move(set)), t.ref(), blobs);
}

void ExpectMoments(const Tensor& t, double mean, double stddev, const std::string& what) {
  double s = 0, s2 = 0;
  for (int64_t i = 0; i < t.numel(); ++i) s += t[i];
  const double m = s / t.numel();
  for (int64_t i = 0; i < t.numel(); ++i) s2 += (t[i] - m) * (t[i] - m);
  const double sd = std::sqrt(s2 / t.numel());
  // 4 standard errors of the mean; 2 % on the standard deviation.
  EXPECT_NEAR(m, mean, 4 * stddev / std::sqrt(double(t.numel())) + 1e-12) << what;
  EXPECT_NEAR(sd, stddev, 0.02 * stddev) << what;
}

TEST(Initializers, GeneratorFollowsSplitMix64) {
  // The first output of the reference SplitMix64 generator seeded with 0.
  EXPECT_EQ(SplitMix64(0), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(UniformAt(0, 0), static_cast<float>(0xE220A8397B1DCDAFull >> 40) / 16777216.0f);
  for (uint64_t i = 0; i < 1000; ++i) {
    const float u = UniformAt(42, i);
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
  }
}

TEST(Initializers, RandomKindsHaveTheirMoments) {
  Tensor t({256, 512});
  ASSERT_TRUE(Init(t, fb::InitKind::Uniform, [](auto& b) { b.add_low(-2.0f); b.add_high(4.0f); b.add_seed(1); }).ok());
  ExpectMoments(t, 1.0, 6.0 / std::sqrt(12.0), "Uniform");
  for (int64_t i = 0; i < t.numel(); ++i) ASSERT_TRUE(t[i] >= -2.0f && t[i] < 4.0f);
  ASSERT_TRUE(Init(t, fb::InitKind::Normal, [](auto& b) { b.add_mean(0.5f); b.add_stddev(2.0f); b.add_seed(2); }).ok());
  ExpectMoments(t, 0.5, 2.0, "Normal");
  const double fi = 784, fo = 512;
  auto fans = [&](auto& b) { b.add_fan_in(784); b.add_fan_out(512); b.add_seed(3); };
  ASSERT_TRUE(Init(t, fb::InitKind::XavierUniform, fans).ok());
  ExpectMoments(t, 0, std::sqrt(6 / (fi + fo)) / std::sqrt(3.0), "XavierUniform");
  ASSERT_TRUE(Init(t, fb::InitKind::XavierNormal, fans).ok());
  ExpectMoments(t, 0, std::sqrt(2 / (fi + fo)), "XavierNormal");
  ASSERT_TRUE(Init(t, fb::InitKind::HeUniform, fans).ok());
  ExpectMoments(t, 0, std::sqrt(6 / fi) / std::sqrt(3.0), "HeUniform");
  for (int64_t i = 0; i < t.numel(); ++i) ASSERT_LE(std::abs(t[i]), std::sqrt(6 / fi));
  ASSERT_TRUE(Init(t, fb::InitKind::HeNormal, fans).ok());
  ExpectMoments(t, 0, std::sqrt(2 / fi), "HeNormal");
}

TEST(Initializers, ValuesDependOnlyOnSeedAndIndex) {
  Tensor a({1001}), b({1001}), prefix({10}), other({1001});
  auto seed = [](uint64_t s) { return [s](fb::InitDefBuilder& b) { b.add_seed(s); b.add_stddev(1.0f); b.add_high(1.0f); }; };
  for (fb::InitKind kind : {fb::InitKind::Uniform, fb::InitKind::Normal}) {
    ASSERT_TRUE(Init(a, kind, seed(7)).ok());
    ASSERT_TRUE(Init(b, kind, seed(7)).ok());
    ASSERT_TRUE(Init(prefix, kind, seed(7)).ok());
    ASSERT_TRUE(Init(other, kind, seed(8)).ok());
    ExpectBitwise(b, a.values(), "same seed");
    EXPECT_EQ(std::memcmp(prefix.f32(), a.f32(), 10 * sizeof(float)), 0) << "prefix";
    EXPECT_NE(std::memcmp(other.f32(), a.f32(), 1001 * sizeof(float)), 0) << "other seed";
  }
  ASSERT_TRUE(Init(a, fb::InitKind::Uniform, seed(7)).ok());
  for (uint64_t i : {0ull, 1ull, 500ull, 1000ull}) EXPECT_EQ(a[i], UniformAt(7, i));
  ASSERT_TRUE(Init(a, fb::InitKind::Normal, seed(7)).ok());
  for (uint64_t i : {0ull, 1ull, 500ull, 1000ull}) EXPECT_EQ(a[i], NormalAt(7, i));
  // Box–Muller pairs: elements 2k and 2k+1 share a radius.
  const double r = std::sqrt(-2.0 * std::log(1.0 - double(UniformAt(7, 500))));
  EXPECT_NEAR(double(a[500]) * a[500] + double(a[501]) * a[501], r * r, 1e-4 * r * r);
}

TEST(Initializers, ConstantsZerosAndInline) {
  Tensor f({5}), i({4}, DType::I32), u({3}, DType::U8);
  ASSERT_TRUE(Init(f, fb::InitKind::Constant, [](auto& b) { b.add_value(0.25f); }).ok());
  for (int k = 0; k < 5; ++k) EXPECT_EQ(f[k], 0.25f);
  ASSERT_TRUE(Init(i, fb::InitKind::Constant, [](auto& b) { b.add_value(-3.0f); }).ok());
  for (int k = 0; k < 4; ++k) EXPECT_EQ(i.i32()[k], -3);
  ASSERT_TRUE(Init(f, fb::InitKind::Zeros).ok());
  for (int k = 0; k < 5; ++k) EXPECT_EQ(f[k], 0.0f);
  ASSERT_TRUE(Init(i, fb::InitKind::Zeros).ok());
  for (int k = 0; k < 4; ++k) EXPECT_EQ(i.i32()[k], 0);
  f[0] = 9.0f;
  ASSERT_TRUE(Init(f, fb::InitKind::None).ok());
  EXPECT_EQ(f[0], 9.0f);

  std::vector<uint8_t> blobs(64 + 20);
  const float vals[5] = {1, 2, 3, 4, 5};
  std::memcpy(blobs.data() + 64, vals, sizeof(vals));
  ASSERT_TRUE(Init(f, fb::InitKind::Inline, [](auto& b) { b.add_data_offset(64); b.add_data_bytes(20); }, blobs).ok());
  ExpectBitwise(f, {1, 2, 3, 4, 5}, "Inline");

  auto expect_error = [](Status st, const std::string& part) {
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find(part), std::string::npos) << st.message();
  };
  expect_error(Init(f, fb::InitKind::Inline, [](auto& b) { b.add_data_offset(68); b.add_data_bytes(20); }, blobs),
               "initializer Inline: bytes [68, +20) lie outside the 84-byte blob section");
  expect_error(Init(f, fb::InitKind::Inline, [](auto& b) { b.add_data_offset(UINT64_MAX - 4); b.add_data_bytes(20); }, blobs),
               "lie outside");
  expect_error(Init(f, fb::InitKind::Inline, [](auto& b) { b.add_data_offset(64); b.add_data_bytes(16); }, blobs),
               "16 bytes for a buffer of 20 ([5] f32)");
  expect_error(Init(i, fb::InitKind::Uniform, [](auto& b) { b.add_high(1.0f); }), "random kinds fill f32 only");
  expect_error(Init(f, fb::InitKind::HeNormal, [](auto& b) { b.add_fan_out(3); }), "fan_in 0 and fan_out 3: fan_in must be > 0");
  expect_error(Init(f, fb::InitKind::XavierUniform, [](auto& b) { b.add_fan_in(3); }), "must both be > 0");
  expect_error(Init(f, fb::InitKind::Normal, [](auto& b) { b.add_stddev(-1.0f); }), "stddev");
  expect_error(Init(f, fb::InitKind::Uniform, [](auto& b) { b.add_low(1.0f); }), "high 0.000000 is below low 1.000000");
  expect_error(Init(i, fb::InitKind::Constant, [](auto& b) { b.add_value(0.5f); }), "value 0.500000 is not an i32");
  expect_error(Init(u, fb::InitKind::Constant, [](auto& b) { b.add_value(1.0f); }), "expected f32 or i32");
}

}  // namespace
}  // namespace sinkrt::device
