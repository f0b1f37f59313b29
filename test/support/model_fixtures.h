// Helpers for the Model, callback and checkpoint suites: a small MLP
// network without a loss (Model appends it), datasets over SyntheticData, a
// DeviceLink that counts what the host asks of the device, and a callback
// that records every hook call.
#pragma once

#include <dirent.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "sinkrt/device/in_process_device.h"
#include "sinkrt/host/callback.h"
#include "sinkrt/host/dataset.h"
#include "sinkrt/host/graph.h"
#include "sinkrt/host/model.h"
#include "support/test_models.h"

namespace sinkrt::testing {

// widths[0] -> ... -> widths.back() ReLU MLP on input "image" [batch,
// widths[0]]; the logits are outputs()[0]; no loss.
inline host::Graph MlpNetwork(int64_t batch, std::vector<int64_t> widths = {16, 12, 4}, uint64_t seed = 1) {
  host::Graph g("mlp");
  host::TensorId h = g.Input("image", {batch, widths.front()});
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    std::string n = "fc" + std::to_string(i + 1);
    host::TensorId w = g.Param(n + ".weight", {widths[i], widths[i + 1]}, host::InitSpec::HeUniform(seed + i));
    host::TensorId b = g.Param(n + ".bias", {widths[i + 1]}, host::InitSpec::Zeros());
    h = g.BiasAdd(g.MatMul(h, w), b);
    if (i + 2 < widths.size()) h = g.Relu(h);
  }
  g.AddOutput(h);
  return g;
}

inline host::Tensor ImagesTensor(const SyntheticData& d) {
  host::Tensor t{DType::F32, {d.size(), d.features}, {}};
  t.data.resize(d.images.size() * sizeof(float));
  std::memcpy(t.data.data(), d.images.data(), t.data.size());
  return t;
}

inline host::Tensor LabelsTensor(const SyntheticData& d) {
  host::Tensor t{DType::I32, {d.size()}, {}};
  t.data.resize(d.labels.size() * sizeof(int32_t));
  std::memcpy(t.data.data(), d.labels.data(), t.data.size());
  return t;
}

// Columns "image" f32 [n, features] and "label" i32 [n], in order, batched.
inline host::Dataset MakeDataset(const SyntheticData& d, int64_t batch, bool drop_remainder = true) {
  return host::Dataset::FromArrays({{"image", ImagesTensor(d)}, {"label", LabelsTensor(d)}})
      .Batch(batch, drop_remainder);
}

// Forwards to an InProcessDevice and counts: batches pushed or filled per
// queue (from any thread), every RunSink (program, steps), ClearQueue calls.
class CountingDevice final : public DeviceLink {
 public:
  explicit CountingDevice(device::DeviceOptions options = device::DeviceOptions::FromEnvironment()) : dev_(options) {}

  Result<LoadInfo> Load(const VerifiedStream& stream) override { return dev_.Load(stream); }
  Status PushBatch(uint32_t queue, std::span<const ConstBytes> columns) override {
    Status st = dev_.PushBatch(queue, columns);
    if (st.ok() && queue < kQueues) ++pushed_[queue];
    return st;
  }
  Status FillBatch(uint32_t queue, const BatchFiller& fill) override {
    Status st = dev_.FillBatch(queue, fill);
    if (st.ok() && queue < kQueues) ++pushed_[queue];
    return st;
  }
  Result<SinkResult> RunSink(ProgramKind program, uint32_t steps) override {
    sinks_.push_back({program, steps});
    return dev_.RunSink(program, steps);
  }
  Status ClearQueue(uint32_t queue) override {
    ++clears_;
    return dev_.ClearQueue(queue);
  }
  Result<std::vector<uint8_t>> ReadTensor(uint32_t buffer) override { return dev_.ReadTensor(buffer); }
  Status WriteTensor(uint32_t buffer, ConstBytes bytes) override { return dev_.WriteTensor(buffer, bytes); }
  uint64_t control_round_trips() const override { return dev_.control_round_trips(); }

  struct Sink {
    ProgramKind program;
    uint32_t steps;
    bool operator==(const Sink&) const = default;
  };
  int64_t pushed(uint32_t queue) const { return pushed_[queue].load(); }
  const std::vector<Sink>& sinks() const { return sinks_; }
  int clears() const { return clears_; }
  device::InProcessDevice& inner() { return dev_; }

 private:
  static constexpr uint32_t kQueues = 4;
  device::InProcessDevice dev_;
  std::atomic<int64_t> pushed_[kQueues] = {};
  std::vector<Sink> sinks_;
  int clears_ = 0;
};

// One hook call and the parameters it saw.
struct HookCall {
  std::string hook;
  int epoch_num = 0, cur_epoch_num = 0;
  int64_t batch_num = 0, cur_step_num = 0, sink_steps = 0, global_batch = 0;
  bool dataset_sink_mode = false;
  double net_outputs = 0;
};

// Records every hook; `stop_at` / `fail_at` decide per call whether to
// request a stop or return an error.
class RecordingCallback : public host::Callback {
 public:
  std::vector<HookCall> calls;
  std::function<bool(const HookCall&)> stop_at;
  std::function<bool(const HookCall&)> fail_at;

  Status on_train_begin(host::RunContext& c) override { return Record("begin", c); }
  Status on_train_epoch_begin(host::RunContext& c) override { return Record("epoch_begin", c); }
  Status on_train_step_begin(host::RunContext& c) override { return Record("step_begin", c); }
  Status on_train_step_end(host::RunContext& c) override { return Record("step_end", c); }
  Status on_train_epoch_end(host::RunContext& c) override { return Record("epoch_end", c); }
  Status on_train_end(host::RunContext& c) override { return Record("end", c); }

  int count(const std::string& hook) const {
    int n = 0;
    for (const HookCall& c : calls) n += c.hook == hook;
    return n;
  }
  std::vector<HookCall> of(const std::string& hook) const {
    std::vector<HookCall> out;
    for (const HookCall& c : calls)
      if (c.hook == hook) out.push_back(c);
    return out;
  }

 private:
  Status Record(const char* hook, host::RunContext& ctx) {
    const host::CallbackParams& p = ctx.original_args();
    HookCall c{hook,         p.epoch_num,    p.cur_epoch_num,     p.batch_num,  p.cur_step_num,
               p.sink_steps, p.global_batch, p.dataset_sink_mode, p.net_outputs};
    calls.push_back(c);
    if (stop_at && stop_at(c)) ctx.request_stop();
    if (fail_at && fail_at(c)) return Aborted(std::string("callback failed at ") + hook);
    return Status::Ok();
  }
};

// Threads of this process (/proc/self/task).
// Live threads of this process. A joined thread can linger in
// /proc/self/task for a moment after join() returns (the kernel wakes the
// joiner before it reaps the task), so exiting and dead tasks are not
// counted.
inline int ThreadCount() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      std::string path = std::string("/proc/self/task/") + e->d_name + "/stat";
      FILE* f = std::fopen(path.c_str(), "r");
      if (!f) continue;  // reaped meanwhile
      char buf[512] = {};
      size_t got = std::fread(buf, 1, sizeof buf - 1, f);
      std::fclose(f);
      // "tid (comm) S ...": the state follows the last ')'.
      std::string_view stat(buf, got);
      size_t paren = stat.rfind(')');
      char state = paren != std::string_view::npos && paren + 2 < stat.size() ? stat[paren + 2] : '?';
      // Field 9, the task flags: PF_EXITING (0x4) is set from the start of
      // the exit path, before the joiner wakes.
      unsigned long flags = 0;
      if (paren != std::string_view::npos) std::sscanf(buf + paren + 2, "%*c %*d %*d %*d %*d %*d %lu", &flags);
      if (state != 'Z' && state != 'X' && state != 'x' && !(flags & 0x4)) ++n;
    }
    closedir(d);
  }
  return n;
}

}  // namespace sinkrt::testing
