// In-memory columns as a source: sample i is row i of every column.
#include <cstring>
#include <string>
#include <utility>

#include "host/src/dataset/node.h"

namespace sinkrt::host {
namespace {

class ArraySource final : public Source {
 public:
  ArraySource(const char* name, std::vector<Tensor> arrays, std::vector<ColumnSpec> columns, int64_t rows)
      : name_(name), arrays_(std::move(arrays)), columns_(std::move(columns)), rows_(rows) {
    for (const Tensor& t : arrays_) row_bytes_.push_back(rows_ == 0 ? 0 : t.data.size() / rows_);
  }

  const char* name() const override { return name_; }
  int64_t size() const override { return rows_; }
  const std::vector<ColumnSpec>& columns() const override { return columns_; }

  void Prefetch(int64_t index) const override {
    if (index < 0 || index >= rows_) return;
    for (size_t c = 0; c < arrays_.size(); ++c) {
      const uint8_t* p = arrays_[c].data.data() + row_bytes_[c] * index;
      for (size_t off = 0; off < row_bytes_[c]; off += 64) __builtin_prefetch(p + off);
    }
  }

  const uint8_t* SampleBytes(int64_t index, size_t column) const override {
    if (index < 0 || index >= rows_ || column >= arrays_.size()) return nullptr;
    return arrays_[column].data.data() + row_bytes_[column] * index;
  }

  Status Read(int64_t index, Row* row) const override {
    if (index < 0 || index >= rows_)
      return OutOfRange(std::string(name_) + ": sample " + std::to_string(index) + " outside [0, " +
                        std::to_string(rows_) + ")");
    for (size_t c = 0; c < arrays_.size(); ++c) {
      Tensor& out = (*row)[c];
      const size_t bytes = row_bytes_[c];
      out.dtype = columns_[c].dtype;
      out.shape.assign(arrays_[c].shape.begin() + 1, arrays_[c].shape.end());
      // resize + memcpy rather than assign(first, last): the same bytes moved,
      // without assign's per-call iterator distance and reallocation checks.
      out.data.resize(bytes);
      std::memcpy(out.data.data(), arrays_[c].data.data() + bytes * index, bytes);
    }
    return Status::Ok();
  }

 private:
  const char* name_;
  std::vector<Tensor> arrays_;
  std::vector<ColumnSpec> columns_;
  std::vector<size_t> row_bytes_;
  int64_t rows_;
};

}  // namespace

Result<std::shared_ptr<const Source>> MakeArraySource(const char* name,
                                                      std::vector<std::pair<std::string, Tensor>> columns) {
  const std::string who = name;
  if (columns.empty()) return InvalidArgument(who + ": no columns");
  std::vector<Tensor> arrays;
  std::vector<ColumnSpec> specs;
  const int64_t rows = columns[0].second.shape.empty() ? -1 : columns[0].second.shape[0];
  for (auto& [column, t] : columns) {
    if (t.shape.empty())
      return InvalidArgument(who + ": column '" + column + "' is a scalar; it needs a first (sample) dim");
    const int64_t numel = NumElements(t.shape);
    if (numel < 0 || DTypeSize(t.dtype) == 0 || t.data.size() != static_cast<size_t>(numel) * DTypeSize(t.dtype))
      return InvalidArgument(who + ": column '" + column + "' holds " + std::to_string(t.data.size()) +
                             " bytes, not those of " + DTypeName(t.dtype) + " " + ShapeToString(t.shape));
    if (t.shape[0] != rows)
      return InvalidArgument(who + ": column '" + column + "' has " + std::to_string(t.shape[0]) +
                             " rows but column '" + columns[0].first + "' has " + std::to_string(rows));
    specs.push_back({column, t.dtype, Shape(t.shape.begin() + 1, t.shape.end())});
    arrays.push_back(std::move(t));
  }
  SINKRT_RETURN_IF_ERROR(ValidateColumnSpecs(specs, name));
  return std::shared_ptr<const Source>(std::make_shared<ArraySource>(name, std::move(arrays), std::move(specs), rows));
}

Dataset Dataset::FromArrays(std::vector<std::pair<std::string, Tensor>> columns) {
  return MakeSourceDataset(MakeArraySource("FromArrays", std::move(columns)));
}

}  // namespace sinkrt::host
