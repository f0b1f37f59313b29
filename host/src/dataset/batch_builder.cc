#include "host/src/dataset/batch_builder.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

namespace sinkrt::host {
namespace {

using Node = Dataset::Node;

std::string SpecString(DType dtype, const Shape& shape) {
  return std::string(DTypeName(dtype)) + " " + ShapeToString(shape);
}

constexpr int64_t kPrefetchAhead = 2;

// Column c's fused maps, from the Map nodes in application order.
FusedColumn FuseSourceColumn(const SamplePlan& plan, size_t c) {
  std::vector<const Transform*> transforms;
  std::vector<const ColumnSpec*> specs;
  for (const Node* map : plan.maps) {
    if (static_cast<size_t>(map->column) != c) continue;
    for (size_t i = 0; i < map->transforms.size(); ++i) {
      transforms.push_back(&map->transforms[i]);
      specs.push_back(&map->transform_specs[i]);
    }
  }
  return FuseColumn(plan.source->columns()[c], transforms, specs);
}

}  // namespace

SamplePlan MakeSamplePlan(std::shared_ptr<const Node> root, bool fuse) {
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
  plan.fused.resize(plan.columns.size());
  // Unbatched plans hand out the sample row itself: nothing to fuse into.
  if (fuse && plan.batched)
    for (size_t c = 0; c < plan.columns.size(); ++c) plan.fused[c] = FuseSourceColumn(plan, c);
  plan.in_memory = plan.source->size() > 0;
  for (size_t c = 0; c < plan.columns.size(); ++c) plan.in_memory &= plan.source->SampleBytes(0, c) != nullptr;
  plan.all_fused = plan.batched && std::all_of(plan.fused.begin(), plan.fused.end(), [](const FusedColumn& f) {
                     return f.kind != FusedColumn::Kind::kUnfused;
                   });
  return plan;
}

BatchBuilder::BatchBuilder(const SamplePlan& plan) : plan_(plan) {}

Status BatchBuilder::ReadSample(int64_t index, Row* row) { return ReadMapped(index, row, /*only_unfused=*/false); }

Status BatchBuilder::ReadMapped(int64_t index, Row* row, bool only_unfused) {
  row->resize(plan_.source->columns().size());
  SINKRT_RETURN_IF_ERROR(plan_.source->Read(index, row));
  for (const Node* map : plan_.maps) {
    if (only_unfused && plan_.fused[map->column].kind != FusedColumn::Kind::kUnfused) continue;
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
  if (plan_.all_fused) {
    std::span<uint8_t> dst[16];
    std::vector<std::span<uint8_t>> many;
    std::span<uint8_t>* spans = dst;
    if (columns > 16) {
      many.resize(columns);
      spans = many.data();
    }
    for (size_t c = 0; c < columns; ++c) {
      const FusedColumn& f = plan_.fused[c];
      Tensor& b = (*out)[c];
      b.dtype = f.out_dtype;
      b.shape.resize(f.out_shape.size() + 1);
      b.shape[0] = batch;
      std::copy(f.out_shape.begin(), f.out_shape.end(), b.shape.begin() + 1);
      b.data.resize(f.out_bytes * batch);
      spans[c] = b.data;
    }
    return Write(samples, std::span<const std::span<uint8_t>>(spans, columns));
  }
  for (int64_t k = 0; k < std::min(batch, kPrefetchAhead); ++k) plan_.source->Prefetch(samples[k]);
  for (int64_t k = 0; k < batch; ++k) {
    if (k + kPrefetchAhead < batch) plan_.source->Prefetch(samples[k + kPrefetchAhead]);
    SINKRT_RETURN_IF_ERROR(ReadMapped(samples[k], &sample_, /*only_unfused=*/true));
    for (size_t c = 0; c < columns; ++c) {
      const Tensor& s = sample_[c];
      Tensor& b = (*out)[c];
      const FusedColumn& f = plan_.fused[c];
      if (f.kind != FusedColumn::Kind::kUnfused) {
        // The row holds the source's bytes of this column, checked by Read.
        if (k == 0) {
          b.dtype = f.out_dtype;
          b.shape.resize(f.out_shape.size() + 1);
          b.shape[0] = batch;
          std::copy(f.out_shape.begin(), f.out_shape.end(), b.shape.begin() + 1);
          b.data.resize(f.out_bytes * batch);
        }
        if (s.data.size() != f.in_bytes)
          return Internal("Batch: column '" + plan_.columns[c].name + "', sample " + std::to_string(samples[k]) +
                          ": the source gave " + std::to_string(s.data.size()) + " bytes, its spec needs " +
                          std::to_string(f.in_bytes));
        WriteFused(f, s.data.data(), b.data.data() + f.out_bytes * k);
        continue;
      }
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
        return InvalidArgument("Batch: column '" + plan_.columns[c].name + "', sample " + std::to_string(samples[k]) +
                               " has shape " + ShapeToString(s.shape) + " but sample " + std::to_string(samples[0]) +
                               " of the same batch has " + ShapeToString(std::span<const int64_t>(b.shape).subspan(1)) +
                               "; every sample of a batch needs one shape");
      }
      std::memcpy(b.data.data() + bytes * k, s.data.data(), bytes);
    }
  }
  return Status::Ok();
}

Status BatchBuilder::Write(std::span<const int64_t> samples, std::span<const std::span<uint8_t>> dst) {
  const size_t columns = plan_.columns.size();
  const int64_t batch = static_cast<int64_t>(samples.size());
  if (!plan_.all_fused || dst.size() != columns)
    return Internal("Batch: Write needs a fused batched pipeline and one span per column");
  for (size_t c = 0; c < columns; ++c)
    if (!dst[c].empty() && dst[c].size() != plan_.fused[c].out_bytes * batch)
      return Internal("Batch: column '" + plan_.columns[c].name + "' of " + std::to_string(batch) + " samples needs " +
                      std::to_string(plan_.fused[c].out_bytes * batch) + " bytes, the destination has " +
                      std::to_string(dst[c].size()));
  for (int64_t k = 0; k < std::min(batch, kPrefetchAhead); ++k) plan_.source->Prefetch(samples[k]);
  for (int64_t k = 0; k < batch; ++k) {
    if (k + kPrefetchAhead < batch) plan_.source->Prefetch(samples[k + kPrefetchAhead]);
    const int64_t index = samples[k];
    bool read = false;  // sample_ holds this sample (a source without SampleBytes)
    for (size_t c = 0; c < columns; ++c) {
      if (dst[c].empty()) continue;
      const FusedColumn& f = plan_.fused[c];
      const uint8_t* in = plan_.source->SampleBytes(index, c);
      if (!in) {
        if (!read) {
          sample_.resize(columns);
          SINKRT_RETURN_IF_ERROR(plan_.source->Read(index, &sample_));
          read = true;
        }
        if (sample_[c].data.size() != f.in_bytes)
          return Internal("Batch: column '" + plan_.columns[c].name + "', sample " + std::to_string(index) +
                          ": the source gave " + std::to_string(sample_[c].data.size()) + " bytes, its spec needs " +
                          std::to_string(f.in_bytes));
        in = sample_[c].data.data();
      }
      WriteFused(f, in, dst[c].data() + f.out_bytes * k);
    }
  }
  return Status::Ok();
}

}  // namespace sinkrt::host
