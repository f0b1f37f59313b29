// KernelRunner: one device kernel run as the executor runs it, outside any
// task stream (TFLM's KernelRunner idea).
//
// The runner builds a real KernelTask FlatBuffer (op, operand indices,
// options, fused bias and activation), resolves its operands to TensorRefs
// over KernelTensor storage the test owns (64-byte aligned like arena
// buffers), calls prepare() once and run() as often as the test likes. Tests
// check outputs against test/support/reference_ops.h through ToRef() and
// ExpectClose()/ExpectBitwise().
//
// Everything here is single-threaded test code; a KernelRunner must outlive
// no KernelTensor it was given (it keeps raw pointers into them).
#pragma once

#include <flatbuffers/flatbuffers.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "device/src/kernels/kernel.h"
#include "support/reference_ops.h"

namespace sinkrt::testing {

// A tensor with its own 64-byte-aligned storage, like an arena buffer.
class KernelTensor {
 public:
  KernelTensor() = default;
  explicit KernelTensor(Shape shape, DType dtype = DType::F32);

  uint8_t* bytes() const;
  float* f32() const { return reinterpret_cast<float*>(bytes()); }
  int32_t* i32() const { return reinterpret_cast<int32_t*>(bytes()); }
  float& operator[](int64_t i) const { return f32()[i]; }
  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  int64_t numel() const { return numel_; }
  std::vector<float> values() const { return {f32(), f32() + numel_}; }
  void set(const std::vector<float>& v);
  device::TensorRef ref() const;

 private:
  Shape shape_;
  DType dtype_ = DType::F32;
  int64_t numel_ = 0;
  mutable std::vector<uint8_t> mem_;
};

// Uniform values in [lo, hi) from a fixed-seed std::mt19937.
KernelTensor RandomTensor(Shape shape, uint32_t seed, float lo = -1.0f, float hi = 1.0f);
// A 1-D i32 tensor.
KernelTensor Labels(std::vector<int32_t> v);
// A view of `t` with another shape (same bytes), for aliasing cases.
device::TensorRef View(const KernelTensor& t, Shape shape);
// The values of an f32 tensor in double, for the reference ops.
RefTensor ToRef(const KernelTensor& t);
// The i32 values of a labels tensor.
std::vector<int32_t> LabelValues(const KernelTensor& t);

struct ConvParams {
  int sh = 1, sw = 1, pt = 0, pb = 0, pl = 0, pr = 0, dh = 1, dw = 1;
};
struct PoolParams {
  int kh = 2, kw = 2, sh = 2, sw = 2, pt = 0, pb = 0, pl = 0, pr = 0;
};
RefWindow ToRefWindow(const ConvParams& p);
RefWindow ToRefWindow(const PoolParams& p);

class KernelRunner {
 public:
  explicit KernelRunner(fb::OpCode code);
  ~KernelRunner();
  KernelRunner(const KernelRunner&) = delete;
  KernelRunner& operator=(const KernelRunner&) = delete;

  KernelRunner& In(const device::TensorRef& t);
  KernelRunner& In(const KernelTensor& t) { return In(t.ref()); }
  KernelRunner& Out(const device::TensorRef& t);
  KernelRunner& Out(const KernelTensor& t) { return Out(t.ref()); }
  KernelRunner& Bias(const KernelTensor& t);
  KernelRunner& Relu();
  // Prepares without a oneDNN runtime (a device built without one).
  KernelRunner& NoDnnl();
  // Prepares and runs with `team` (at most 8 threads; the test owns it), as
  // the compute stream of a device with that many threads.
  KernelRunner& Team(device::WorkerTeam* team);

  KernelRunner& Axis(int axis);
  KernelRunner& Axes(std::vector<int32_t> axes, bool keep_dims);
  KernelRunner& Scale(float scale);
  KernelRunner& MatMulOpts(bool transpose_a, bool transpose_b);
  KernelRunner& Conv(const ConvParams& p);
  KernelRunner& Pool(const PoolParams& p);
  KernelRunner& FillValue(float v);
  KernelRunner& Sgd(float lr, float wd);
  KernelRunner& Momentum(float lr, float mu, bool nesterov, float wd);
  KernelRunner& Adam(float lr, float b1, float b2, float eps, float wd);
  KernelRunner& LayerNormEpsilon(float epsilon);
  KernelRunner& BatchNormOpts(float epsilon, float momentum, uint32_t group_size = 1);
  KernelRunner& CastTo(DType to);
  KernelRunner& LossScale(bool check, bool dynamic, float scale_factor, int scale_window);
  KernelRunner& Perm(std::vector<int32_t> perm);
  KernelRunner& SplitOpts(int axis, std::vector<int64_t> sizes);
  KernelRunner& CommOpts(int axis, uint32_t position, std::vector<uint32_t> group);
  KernelRunner& MetricWeights(std::vector<double> weights);
  // Dropout/DropoutGrad: p, seed, op id, and the block's place (both empty: whole).
  KernelRunner& DropoutOpts(float p, uint64_t seed, uint32_t op_id, std::vector<int64_t> global_shape = {},
                            std::vector<int64_t> offset = {}, int64_t row_stride = 1);
  KernelRunner& Options(fb::OpOptions type, flatbuffers::Offset<void> value);
  // The builder Options' tables are made in (for tables without a helper).
  flatbuffers::FlatBufferBuilder& fbb() { return fbb_; }

  // Builds the task and runs the kernel's prepare(); call once.
  Status Prepare();
  // Runs the prepared kernel (any number of times).
  Status Run();
  // Prepare (which must succeed) and run once; fails the test otherwise.
  void PrepareAndRun();

  uint64_t scratch_bytes() const { return scratch_bytes_; }

 private:
  fb::OpCode code_;
  flatbuffers::FlatBufferBuilder fbb_;
  fb::OpOptions opt_type_ = fb::OpOptions::NONE;
  flatbuffers::Offset<void> opt_;
  fb::Activation act_ = fb::Activation::None;
  int32_t bias_index_ = -1;
  bool use_dnnl_ = true;
  device::WorkerTeam* team_ = nullptr;
  device::KernelArgs args_;
  const device::KernelImpl* impl_ = nullptr;
  std::unique_ptr<device::KernelState> state_;
  std::vector<uint8_t> scratch_;
  uint64_t scratch_bytes_ = 0;
  device::RunContext run_ctx_;
};

// prepare() must fail with `code` and a message that starts with "OPNAME:"
// and contains each of `parts`.
void ExpectPrepareError(KernelRunner& op, const char* op_name, std::initializer_list<std::string> parts,
                        StatusCode code = StatusCode::kInvalidArgument);

// |got - want| <= atol + rtol * |want| element by element (the first five
// misses reported); shapes must agree where `want` has one.
void ExpectClose(const KernelTensor& got, const std::vector<double>& want, double rtol, double atol,
                 const std::string& what);
void ExpectClose(const KernelTensor& got, const RefTensor& want, double rtol, double atol, const std::string& what);
// Bit-for-bit equality with float values (or a reference rounded to float).
void ExpectBitwise(const KernelTensor& got, const std::vector<float>& want, const std::string& what);
void ExpectBitwise(const KernelTensor& got, const RefTensor& want, const std::string& what);

}  // namespace sinkrt::testing
