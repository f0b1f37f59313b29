// sinkrt_app: sinkrt used as an installed library (docs/guide/install.md, "Use
// sinkrt from your C++ application"). It builds a small MLP with host::Graph, trains it
// sunk, 2 sinks of kSinkSize steps, on an in-process device and, given a
// sinkd's address, on that daemon too, then checks what a user relies on:
// the loss fell, a weight reads back, and the daemon ended with the local
// run's parameters bit for bit.
//
//   sinkrt_app             the in-process device only
//   sinkrt_app HOST:PORT   and the sinkd listening there (sinkd --listen HOST:PORT)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <sinkrt/sinkrt.h>

using namespace sinkrt;

namespace {

constexpr int64_t kBatch = 32, kFeatures = 16, kHidden = 32, kClasses = 4, kSamples = 640;
constexpr int kSinkSize = 10;
constexpr uint64_t kSeed = 7;

// 16 -> 32 -> 4 with a ReLU between; the Model appends the loss.
host::Graph Network() {
  host::Graph g("app_mlp");
  host::TensorId x = g.Input("image", {kBatch, kFeatures});
  auto w1 = g.Param("fc1.weight", {kFeatures, kHidden}, host::InitSpec::HeUniform(kSeed));
  auto b1 = g.Param("fc1.bias", {kHidden}, host::InitSpec::Zeros());
  auto w2 = g.Param("fc2.weight", {kHidden, kClasses}, host::InitSpec::HeUniform(kSeed + 1));
  auto b2 = g.Param("fc2.bias", {kClasses}, host::InitSpec::Zeros());
  g.AddOutput(g.BiasAdd(g.MatMul(g.Relu(g.BiasAdd(g.MatMul(x, w1), b1)), w2), b2));
  return g;
}

// kClasses noisy Gaussian clusters: learnable, but not in a handful of steps.
host::Dataset SyntheticClusters() {
  std::mt19937_64 rng(kSeed);
  std::normal_distribution<float> normal;
  std::vector<float> centers(kClasses * kFeatures);
  for (float& c : centers) c = normal(rng);
  host::Tensor image = host::Tensor::Zeros(DType::F32, {kSamples, kFeatures});
  host::Tensor label = host::Tensor::Zeros(DType::I32, {kSamples});
  for (int64_t i = 0; i < kSamples; ++i) {
    const int32_t c = static_cast<int32_t>(rng() % kClasses);
    label.as<int32_t>()[i] = c;
    for (int64_t f = 0; f < kFeatures; ++f)
      image.as<float>()[i * kFeatures + f] = centers[c * kFeatures + f] + 1.5f * normal(rng);
  }
  return host::Dataset::FromArrays({{"image", std::move(image)}, {"label", std::move(label)}})
      .Shuffle(kSeed)
      .Batch(kBatch, /*drop_remainder=*/true);
}

// In sink mode a step callback runs once per sink; net_outputs is the loss
// of the sink's last step.
struct SinkLosses : host::Callback {
  std::vector<double> losses;
  Status on_train_step_end(host::RunContext& run) override {
    losses.push_back(run.original_args().net_outputs);
    return Status::Ok();
  }
};

using State = std::vector<std::pair<std::string, host::Tensor>>;

// Trains on `device` and returns its parameters and optimizer state.
Result<State> TrainOn(const char* name, DeviceLink& device) {
  SINKRT_ASSIGN_OR_RETURN(std::unique_ptr<host::Model> model,
                          host::Model::Create(Network(), host::LossSpec::SparseSoftmaxCrossEntropy(),
                                              host::OptimizerSpec::Momentum(0.02f, 0.9f), device));
  SinkLosses sinks;
  SINKRT_RETURN_IF_ERROR(
      model->train(/*epoch=*/2, SyntheticClusters(), {&sinks}, /*dataset_sink_mode=*/true, kSinkSize));
  for (size_t s = 0; s < sinks.losses.size(); ++s)
    std::printf("%s: sink %zu of %d steps, loss %.4f\n", name, s + 1, kSinkSize, sinks.losses[s]);
  if (sinks.losses.size() != 2 || !(sinks.losses[1] < sinks.losses[0]))
    return Internal(std::string(name) + ": the loss did not fall from sink 1 to sink 2");
  std::printf("%s: loss fell from %.4f to %.4f in %llu control round trips\n", name, sinks.losses[0], sinks.losses[1],
              static_cast<unsigned long long>(model->host_round_trips()));

  SINKRT_ASSIGN_OR_RETURN(State state, model->ReadState());
  auto w = std::find_if(state.begin(), state.end(), [](const auto& buffer) { return buffer.first == "fc2.weight"; });
  if (w == state.end()) return NotFound(std::string(name) + ": no fc2.weight in the model's state");
  const float* values = w->second.as<float>();
  double norm = 0;
  for (int64_t i = 0; i < w->second.numel(); ++i) norm += double(values[i]) * values[i];
  std::printf("%s: read back fc2.weight [%lld x %lld], L2 norm %.6f, w[0][0] = %.6f\n", name,
              static_cast<long long>(w->second.shape[0]), static_cast<long long>(w->second.shape[1]), std::sqrt(norm),
              values[0]);
  return state;
}

Status Run(int argc, char** argv) {
  const Versions v = LinkedVersions();
  std::printf("sinkrt %s (task stream format %u.%u, wire protocol %u.%u); built against headers %s\n",
              v.library.c_str(), v.task_stream.major, v.task_stream.minor, v.wire_protocol.major, v.wire_protocol.minor,
              SINKRT_VERSION_STRING);

  // A split MatMul rounds differently from an unsplit one, and the split
  // follows the device's thread count: the local device takes the daemon's
  // so that both run the same program.
  device::DeviceOptions local_options = device::DeviceOptions::FromEnvironment();
  std::unique_ptr<host::RemoteDevice> remote;
  if (argc > 1) {
    SINKRT_ASSIGN_OR_RETURN(Address address, ParseAddress(argv[1]), "sinkd address '" + std::string(argv[1]) + "'");
    SINKRT_ASSIGN_OR_RETURN(remote, host::RemoteDevice::Connect(address));
    local_options.threads = static_cast<int>(remote->hello().cores);
    std::printf("sinkd at %s: pid %u, %u threads\n", address.ToString().c_str(), remote->hello().pid,
                remote->hello().cores);
  } else {
    std::printf("no sinkd address given (sinkrt_app HOST:PORT): the in-process device only\n");
  }

  device::InProcessDevice local(local_options);
  SINKRT_ASSIGN_OR_RETURN(State local_state, TrainOn("in-process", local));
  if (!remote) return Status::Ok();

  SINKRT_ASSIGN_OR_RETURN(State remote_state, TrainOn("sinkd", *remote));
  if (remote_state.size() != local_state.size()) return Internal("sinkd and in-process states differ in size");
  for (size_t i = 0; i < local_state.size(); ++i) {
    if (remote_state[i].first != local_state[i].first || remote_state[i].second.data != local_state[i].second.data)
      return Internal("sinkd and in-process differ in " + local_state[i].first);
  }
  std::printf("sinkd and in-process: all %zu parameter and optimizer tensors bitwise equal\n", local_state.size());
  return Status::Ok();
}

}  // namespace

int main(int argc, char** argv) {
  device::EnsurePassiveOpenMp(argv);
  if (argc > 2) {
    std::fprintf(stderr, "usage: %s [HOST:PORT of a sinkd]\n", argv[0]);
    return 2;
  }
  const Status s = Run(argc, argv);
  if (!s.ok()) {
    std::fprintf(stderr, "sinkrt_app: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("ok\n");
  return 0;
}
