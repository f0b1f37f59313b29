#include "dataset/batch_builder.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

namespace sinkrt::host {
namespace {

using Node = Dataset::Node;

std::string SpecString(DType dtype, const Shape& shape) { return std::string(DTypeName(dtype)) + " " + ShapeToString(shape); }

}  // namespace

SamplePlan MakeSamplePlan(std::shared_ptr<const Node> root) {
  SamplePlan plan;
  const Node* n = root.get();
  for (; n->kind != Node::Kind::Source; n = n->up.get()) {
    if (n->kind == Node::Kind::Map) plan.maps.push_back(n);
    if (n->kind == Node::Kind::Batch) plan.batched = true;
  }
  plan.source = n->source.get();
  std::reverse(plan.maps.begin(), plan.maps.end());
  plan.columns = root->columns;  // nodes keep per-sample specs, also after Batch
  plan.root = std::move(root);
  return plan;
}

BatchBuilder::BatchBuilder(const SamplePlan& plan) : plan_(plan) {}

Status BatchBuilder::ReadSample(int64_t index, Row* row) {
  row->resize(plan_.source->columns().size());
  SINKRT_RETURN_IF_ERROR(plan_.source->Read(index, row));
  for (const Node* map : plan_.maps) {
    Tensor& column = (*row)[map->column];
    for (size_t i = 0; i < map->transforms.size(); ++i) {
      const Transform& t = map->transforms[i];
      const ColumnSpec& spec = map->transform_specs[i];
      SINKRT_RETURN_IF_ERROR(t.apply(column), "Map: column '" + spec.name + "', sample " + std::to_string(index) +
                                                  ", transform '" + t.name + "'");
      // A custom transform that disagrees with its own output_spec would
      // hand the device bytes of the wrong shape: stop it here.
      const int64_t numel = NumElements(column.shape);
      if (column.dtype != spec.dtype || !ShapeMatches(spec.shape, column.shape) || numel < 0 ||
          column.data.size() != static_cast<size_t>(numel) * DTypeSize(column.dtype))
        return Internal("Map: column '" + spec.name + "', sample " + std::to_string(index) + ", transform '" + t.name +
                        "': produced " + SpecString(column.dtype, column.shape) + " in " +
                        std::to_string(column.data.size()) + " bytes but its output_spec says " +
                        SpecString(spec.dtype, spec.shape));
    }
  }
  return Status::Ok();
}

Status BatchBuilder::Build(std::span<const int64_t> samples, Row* out) {
  if (!plan_.batched) return ReadSample(samples[0], out);
  const size_t columns = plan_.columns.size();
  const int64_t batch = static_cast<int64_t>(samples.size());
  out->resize(columns);
  constexpr int64_t kPrefetchAhead = 2;
  for (int64_t k = 0; k < std::min(batch, kPrefetchAhead); ++k) plan_.source->Prefetch(samples[k]);
  for (int64_t k = 0; k < batch; ++k) {
    if (k + kPrefetchAhead < batch) plan_.source->Prefetch(samples[k + kPrefetchAhead]);
    SINKRT_RETURN_IF_ERROR(ReadSample(samples[k], &sample_));
    for (size_t c = 0; c < columns; ++c) {
      const Tensor& s = sample_[c];
      Tensor& b = (*out)[c];
      const size_t bytes = s.data.size();
      if (k == 0) {
        // The first sample fixes each column's shape for the batch (it can
        // only vary where a spec has a -1 dim).
        b.dtype = s.dtype;
        b.shape.resize(s.shape.size() + 1);
        b.shape[0] = batch;
        std::copy(s.shape.begin(), s.shape.end(), b.shape.begin() + 1);
        b.data.resize(bytes * batch);
      } else if (!std::equal(s.shape.begin(), s.shape.end(), b.shape.begin() + 1, b.shape.end())) {
        return InvalidArgument("Batch: column '" + plan_.columns[c].name + "', sample " +
                               std::to_string(samples[k]) + " has shape " + ShapeToString(s.shape) + " but sample " +
                               std::to_string(samples[0]) + " of the same batch has " +
                               ShapeToString(std::span<const int64_t>(b.shape).subspan(1)) +
                               "; every sample of a batch needs one shape");
      }
      std::memcpy(b.data.data() + bytes * k, s.data.data(), bytes);
    }
  }
  return Status::Ok();
}

}  // namespace sinkrt::host
