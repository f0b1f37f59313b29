// ShardSlice (the local half of a whole -> split redistribution): every
// position of every axis against a naive index walk, and its load checks.
#include <gtest/gtest.h>

#include <vector>

#include "support/kernel_runner.h"

namespace sinkrt::device {
namespace {

using namespace ::sinkrt::testing;
using Tensor = KernelTensor;

// x[..., position-th block of `axis`, ...] by walking every output index.
std::vector<float> Reference(const Tensor& x, int axis, int parts, int position) {
  const Shape& s = x.shape();
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= s[d];
  for (size_t d = axis + 1; d < s.size(); ++d) inner *= s[d];
  const int64_t block = s[axis] / parts;
  std::vector<float> y;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t b = 0; b < block; ++b)
      for (int64_t i = 0; i < inner; ++i) y.push_back(x.f32()[(o * s[axis] + position * block + b) * inner + i]);
  return y;
}

TEST(ShardSliceKernel, EveryPositionOfEveryAxis) {
  const Tensor x = RandomTensor({4, 6, 8}, 7);
  for (int axis = 0; axis < 3; ++axis) {
    for (int parts : {1, 2}) {
      for (int position = 0; position < parts; ++position) {
        Shape ys = x.shape();
        ys[axis] /= parts;
        Tensor y(ys);
        KernelRunner op(fb::OpCode::ShardSlice);
        op.In(x).Out(y);
        std::vector<uint32_t> group;
        for (int p = 0; p < parts; ++p) group.push_back(static_cast<uint32_t>(2 * p + 1));  // any world ranks
        op.CommOpts(axis, static_cast<uint32_t>(position), group).PrepareAndRun();
        ExpectBitwise(
            y, Reference(x, axis, parts, position),
            "axis " + std::to_string(axis) + " part " + std::to_string(position) + "/" + std::to_string(parts));
      }
    }
  }
  // Three parts of 6 along axis 1, and a negative axis.
  Tensor y({4, 2, 8});
  KernelRunner op(fb::OpCode::ShardSlice);
  op.In(x).Out(y);
  op.CommOpts(-2, 2, {0, 1, 2}).PrepareAndRun();
  ExpectBitwise(y, Reference(x, 1, 3, 2), "axis -2 part 2/3");
}

TEST(ShardSliceKernel, RefusesWhatItCannotCut) {
  const Tensor x = RandomTensor({4, 6}, 8);
  {
    Tensor y({4, 3});
    KernelRunner op(fb::OpCode::ShardSlice);
    op.In(x).Out(y);
    op.CommOpts(1, 2, {0, 1});
    ExpectPrepareError(op, "ShardSlice", {"position 2 is outside a group of 2"});
  }
  {
    Tensor y({4, 1});
    KernelRunner op(fb::OpCode::ShardSlice);
    op.In(x).Out(y);
    op.CommOpts(1, 0, {0, 1, 2, 3});
    ExpectPrepareError(op, "ShardSlice", {"axis 1 of input 0 [4,6] does not cut into 4 equal parts"});
  }
  {
    Tensor y({4, 6});
    KernelRunner op(fb::OpCode::ShardSlice);
    op.In(x).Out(y);
    op.CommOpts(1, 0, {0, 1});
    ExpectPrepareError(op, "ShardSlice", {"output 0", "[4,3]"});
  }
  {
    Tensor y({4, 6});
    KernelRunner op(fb::OpCode::ShardSlice);
    op.In(x).Out(y);
    op.CommOpts(2, 0, {0});
    ExpectPrepareError(op, "ShardSlice", {"axis 2 is out of range"});
  }
}

}  // namespace
}  // namespace sinkrt::device
