// A source whose samples come from a user function, checked against the
// declared specs so that a wrong sample fails where it is made, naming it.
#include <string>
#include <utility>

#include "host/src/dataset/node.h"

namespace sinkrt::host {
namespace {

class GeneratorSource final : public Source {
 public:
  GeneratorSource(std::vector<ColumnSpec> columns, int64_t size, std::function<Status(int64_t, Row*)> fn)
      : columns_(std::move(columns)), size_(size), fn_(std::move(fn)) {}

  const char* name() const override { return "GeneratorDataset"; }
  int64_t size() const override { return size_; }
  const std::vector<ColumnSpec>& columns() const override { return columns_; }

  Status Read(int64_t index, Row* row) const override {
    // Built only for an error: an eager string was a heap allocation per sample.
    auto where = [index] { return "GeneratorDataset: sample " + std::to_string(index); };
    SINKRT_RETURN_IF_ERROR(fn_(index, row), where());
    if (row->size() != columns_.size())
      return InvalidArgument(where() + ": produced " + std::to_string(row->size()) + " columns, the spec has " +
                             std::to_string(columns_.size()));
    for (size_t c = 0; c < columns_.size(); ++c) {
      const ColumnSpec& spec = columns_[c];
      const Tensor& t = (*row)[c];
      if (t.dtype != spec.dtype || !ShapeMatches(spec.shape, t.shape))
        return InvalidArgument(where() + ", column '" + spec.name + "': produced " + DTypeName(t.dtype) + " " +
                               ShapeToString(t.shape) + " but the spec says " + DTypeName(spec.dtype) + " " +
                               ShapeToString(spec.shape));
      const int64_t numel = NumElements(t.shape);
      if (numel < 0 || t.data.size() != static_cast<size_t>(numel) * DTypeSize(t.dtype))
        return InvalidArgument(where() + ", column '" + spec.name + "': holds " + std::to_string(t.data.size()) +
                               " bytes, not those of " + DTypeName(t.dtype) + " " + ShapeToString(t.shape));
    }
    return Status::Ok();
  }

 private:
  std::vector<ColumnSpec> columns_;
  int64_t size_;
  std::function<Status(int64_t, Row*)> fn_;
};

}  // namespace

Dataset Dataset::FromGenerator(std::vector<ColumnSpec> columns, int64_t size,
                               std::function<Status(int64_t index, Row* row)> fn) {
  auto make = [&]() -> Result<std::shared_ptr<const Source>> {
    if (size < 0) return InvalidArgument("GeneratorDataset: size must be >= 0, got " + std::to_string(size));
    if (!fn) return InvalidArgument("GeneratorDataset: no generator function");
    SINKRT_RETURN_IF_ERROR(ValidateColumnSpecs(columns, "GeneratorDataset"));
    return std::shared_ptr<const Source>(std::make_shared<GeneratorSource>(std::move(columns), size, std::move(fn)));
  };
  return MakeSourceDataset(make());
}

}  // namespace sinkrt::host
