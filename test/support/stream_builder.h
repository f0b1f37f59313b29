// HandStream: builds small task streams by hand, without the compiler, for
// benchmarks and tests that need exact control over tasks and buffers.
#pragma once

#include <flatbuffers/flatbuffers.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "runtime/src/schema_enums.h"
#include "sinkrt/fb/task_stream_generated.h"
#include "sinkrt/runtime/dtype.h"
#include "sinkrt/runtime/stream_format.h"

namespace sinkrt::testing {

class HandStream {
 public:
  // Adds a buffer after the previous one (64-byte aligned); returns its index.
  uint32_t AddBuffer(const std::string& name, Shape shape, DType dtype = DType::F32,
                     fb::BufferRole role = fb::BufferRole::Activation) {
    uint64_t bytes = static_cast<uint64_t>(NumElements(shape)) * DTypeSize(dtype);
    buffers_.push_back({name, arena_, bytes, dtype, shape, role});
    arena_ += (bytes + 63) / 64 * 64;
    return static_cast<uint32_t>(buffers_.size() - 1);
  }
  // Fills a buffer with uniform values in [-1, 1) at init.
  void InitUniform(uint32_t buffer, uint64_t seed) { inits_.push_back({buffer, seed}); }

  // A kernel task in train_step. `options` builds the options table in `fbb`.
  template <typename OptionsFn>
  void AddKernel(fb::OpCode op, std::vector<uint32_t> inputs, std::vector<uint32_t> outputs, fb::OpOptions type,
                 OptionsFn options, int32_t fused_bias = -1, fb::Activation act = fb::Activation::None) {
    kernels_.push_back({op, std::move(inputs), std::move(outputs), type, fused_bias, act});
    kernel_options_.push_back([options](flatbuffers::FlatBufferBuilder& fbb) { return options(fbb); });
  }
  void AddKernel(fb::OpCode op, std::vector<uint32_t> inputs, std::vector<uint32_t> outputs) {
    AddKernel(op, std::move(inputs), std::move(outputs), fb::OpOptions::NONE,
              [](flatbuffers::FlatBufferBuilder&) { return flatbuffers::Offset<void>(); });
  }

  std::vector<uint8_t> Finish() const {
    flatbuffers::FlatBufferBuilder fbb;
    std::vector<flatbuffers::Offset<fb::Buffer>> bufs;
    for (const auto& b : buffers_)
      bufs.push_back(fb::CreateBuffer(fbb, fbb.CreateString(b.name), b.offset, b.bytes, ToFb(b.dtype),
                                      fbb.CreateVector(b.shape), b.role));
    std::vector<flatbuffers::Offset<fb::Initializer>> inits;
    std::vector<uint32_t> init_ids;
    for (size_t i = 0; i < inits_.size(); ++i) {
      fb::InitBuilder d(fbb);
      d.add_kind(fb::InitKind::Uniform);
      d.add_low(-1.0f);
      d.add_high(1.0f);
      d.add_seed(inits_[i].seed);
      auto def = d.Finish();
      inits.push_back(fb::CreateInitializer(fbb, inits_[i].buffer, def));
      init_ids.push_back(static_cast<uint32_t>(i));
    }
    std::vector<flatbuffers::Offset<fb::Task>> init_tasks;
    init_tasks.push_back(fb::CreateTask(fbb, fb::TaskBody::InitTask,
                                        fb::CreateInitTask(fbb, fbb.CreateVector(init_ids)).Union(),
                                        fbb.CreateString("init")));
    std::vector<flatbuffers::Offset<fb::Task>> tasks;
    for (size_t i = 0; i < kernels_.size(); ++i) {
      const auto& k = kernels_[i];
      auto opts = kernel_options_[i](fbb);
      auto kt = fb::CreateKernelTask(fbb, k.op, fbb.CreateVector(k.inputs), fbb.CreateVector(k.outputs), k.type, opts,
                                     k.act, k.fused_bias);
      tasks.push_back(fb::CreateTask(fbb, fb::TaskBody::KernelTask, kt.Union(),
                                     fbb.CreateString(std::string(1, 'k') += std::to_string(i))));
    }
    auto init_stream = fb::CreateStream(fbb, fbb.CreateString("compute"), fbb.CreateVector(init_tasks));
    auto train_stream = fb::CreateStream(fbb, fbb.CreateString("compute"), fbb.CreateVector(tasks));
    std::vector<flatbuffers::Offset<fb::Program>> progs = {
        fb::CreateProgram(fbb, fbb.CreateString("init"), fb::ProgramKind::Init,
                          fbb.CreateVector(std::vector{init_stream})),
        fb::CreateProgram(fbb, fbb.CreateString("train_step"), fb::ProgramKind::TrainStep,
                          fbb.CreateVector(std::vector{train_stream}))};
    auto header = fb::CreateHeader(fbb, kFormatMajor, kFormatMinor, 0, 1, fbb.CreateString("cpu"));
    auto buf_vec = fbb.CreateVector(bufs);
    auto init_vec = fbb.CreateVector(inits);
    auto prog_vec = fbb.CreateVector(progs);
    fb::TaskStreamBuilder root(fbb);
    root.add_header(header);
    root.add_arena_bytes(arena_);
    root.add_buffers(buf_vec);
    root.add_initializers(init_vec);
    root.add_programs(prog_vec);
    auto r = root.Finish();
    fbb.FinishSizePrefixed(r, fb::TaskStreamIdentifier());
    return std::vector<uint8_t>(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
  }

 private:
  struct Buf {
    std::string name;
    uint64_t offset, bytes;
    DType dtype;
    Shape shape;
    fb::BufferRole role;
  };
  struct Init {
    uint32_t buffer;
    uint64_t seed;
  };
  struct Kernel {
    fb::OpCode op;
    std::vector<uint32_t> inputs, outputs;
    fb::OpOptions type;
    int32_t fused_bias;
    fb::Activation act;
  };
  std::vector<Buf> buffers_;
  std::vector<Init> inits_;
  std::vector<Kernel> kernels_;
  std::vector<std::function<flatbuffers::Offset<void>(flatbuffers::FlatBufferBuilder&)>> kernel_options_;
  uint64_t arena_ = 0;
};

}  // namespace sinkrt::testing
