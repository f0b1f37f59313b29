// Dataset's operations: each makes one node from its upstream, working out
// the node's column specs and units per pass statically, so that sizes,
// specs and argument errors are known before any data is read.
#include <limits>
#include <string>
#include <utility>

#include "host/src/dataset/node.h"
#include "sinkrt/host/dataset.h"

namespace sinkrt::host {
namespace {

using Node = Dataset::Node;

const Status& EmptyDatasetStatus() {
  static const Status kEmpty =
      FailedPrecondition("Dataset: empty (default-constructed); start from a source such as Dataset::Mnist");
  return kEmpty;
}

// A node of `kind` that inherits its upstream's state; carries the upstream's
// error (or the empty-dataset error) unchanged if there is one.
std::shared_ptr<Node> Derive(const std::shared_ptr<const Node>& up, Node::Kind kind) {
  auto n = std::make_shared<Node>();
  n->kind = kind;
  n->up = up;
  if (!up) {
    n->status = EmptyDatasetStatus();
    return n;
  }
  n->status = up->status;
  n->columns = up->columns;
  n->units = up->units;
  n->batch_size = up->batch_size;
  return n;
}

Dataset Fail(std::shared_ptr<Node> n, Status status) {
  n->status = std::move(status);
  return DatasetAccess::Make(std::move(n));
}

std::string ColumnNames(const std::vector<ColumnSpec>& columns) {
  std::string s;
  for (const auto& c : columns) s += (s.empty() ? "'" : ", '") + c.name + "'";
  return s;
}

}  // namespace

bool ShapeMatches(const Shape& spec, const Shape& shape) {
  if (spec.size() != shape.size()) return false;
  for (size_t i = 0; i < spec.size(); ++i)
    if (spec[i] != -1 && spec[i] != shape[i]) return false;
  return true;
}

Status ValidateColumnSpecs(const std::vector<ColumnSpec>& columns, const char* who) {
  if (columns.empty()) return InvalidArgument(std::string(who) + ": no columns");
  for (size_t i = 0; i < columns.size(); ++i) {
    const ColumnSpec& c = columns[i];
    if (c.name.empty()) return InvalidArgument(std::string(who) + ": column " + std::to_string(i) + " has no name");
    for (size_t j = 0; j < i; ++j)
      if (columns[j].name == c.name)
        return InvalidArgument(std::string(who) + ": column name '" + c.name + "' appears twice");
    if (DTypeSize(c.dtype) == 0)
      return InvalidArgument(std::string(who) + ": column '" + c.name + "' has an invalid dtype");
    for (int64_t d : c.shape)
      if (d < -1)
        return InvalidArgument(std::string(who) + ": column '" + c.name + "' has shape " + ShapeToString(c.shape) +
                               "; dims must be >= 0, or -1 for one that varies");
  }
  return Status::Ok();
}

Dataset MakeSourceDataset(Result<std::shared_ptr<const Source>> source) {
  auto n = std::make_shared<Node>();
  n->kind = Node::Kind::Source;
  if (!source.ok()) return Fail(std::move(n), source.status());
  n->source = std::move(source).value();
  n->columns = n->source->columns();
  n->units = n->source->size();
  n->status = ValidateColumnSpecs(n->columns, n->source->name());
  return DatasetAccess::Make(std::move(n));
}

Dataset Dataset::Map(const std::string& column, std::vector<Transform> transforms) const {
  auto n = Derive(node_, Node::Kind::Map);
  if (!n->status.ok()) return DatasetAccess::Make(std::move(n));
  const std::string where = "Map(column '" + column + "')";
  if (n->batch_size > 0)
    return Fail(std::move(n), Unimplemented(where + ": Map after Batch is not supported; map samples before Batch"));
  int index = -1;
  for (size_t i = 0; i < n->columns.size(); ++i)
    if (n->columns[i].name == column) index = static_cast<int>(i);
  if (index < 0)
    return Fail(std::move(n), NotFound(where + ": no such column; the columns are " + ColumnNames(n->columns)));
  ColumnSpec spec = n->columns[index];
  n->transform_specs.reserve(transforms.size());
  for (size_t i = 0; i < transforms.size(); ++i) {
    const Transform& t = transforms[i];
    const std::string tname = "transform " + std::to_string(i) + " '" + t.name + "'";
    if (!t.apply) return Fail(std::move(n), InvalidArgument(where + ": " + tname + " has no apply function"));
    if (t.output_spec) {
      Result<ColumnSpec> out = t.output_spec(spec);
      if (!out.ok())
        return Fail(std::move(n), out.status().WithContext(where + ", " + tname + " on " + DTypeName(spec.dtype) + " " +
                                                           ShapeToString(spec.shape)));
      out->name = spec.name;  // a transform changes a column's contents, never its name
      spec = std::move(out).value();
    }
    n->transform_specs.push_back(spec);
  }
  n->columns[index] = spec;
  n->column = index;
  n->transforms = std::move(transforms);
  return DatasetAccess::Make(std::move(n));
}

Dataset Dataset::Shuffle(uint64_t seed) const {
  auto n = Derive(node_, Node::Kind::Shuffle);
  n->seed = seed;
  return DatasetAccess::Make(std::move(n));
}

Dataset Dataset::Shard(int num_shards, int shard_id) const {
  auto n = Derive(node_, Node::Kind::Shard);
  if (!n->status.ok()) return DatasetAccess::Make(std::move(n));
  if (num_shards < 1 || shard_id < 0 || shard_id >= num_shards)
    return Fail(std::move(n), InvalidArgument("Shard: num_shards must be >= 1 and shard_id in [0, num_shards), got "
                                              "num_shards " +
                                              std::to_string(num_shards) + ", shard_id " + std::to_string(shard_id)));
  n->num_shards = num_shards;
  n->shard_id = shard_id;
  n->units = (n->units + num_shards - 1) / num_shards;
  return DatasetAccess::Make(std::move(n));
}

Dataset Dataset::Batch(int64_t batch_size, bool drop_remainder) const {
  auto n = Derive(node_, Node::Kind::Batch);
  if (!n->status.ok()) return DatasetAccess::Make(std::move(n));
  if (batch_size < 1)
    return Fail(std::move(n), InvalidArgument("Batch: batch_size must be >= 1, got " + std::to_string(batch_size)));
  if (n->batch_size > 0)
    return Fail(std::move(n), Unimplemented("Batch: the pipeline is already batched (batch_size " +
                                            std::to_string(n->batch_size) + ")"));
  n->batch_size = batch_size;
  n->drop_remainder = drop_remainder;
  n->units = drop_remainder ? n->units / batch_size : (n->units + batch_size - 1) / batch_size;
  return DatasetAccess::Make(std::move(n));
}

Dataset Dataset::Repeat(int count) const {
  auto n = Derive(node_, Node::Kind::Repeat);
  if (!n->status.ok()) return DatasetAccess::Make(std::move(n));
  if (count < 1) return Fail(std::move(n), InvalidArgument("Repeat: count must be >= 1, got " + std::to_string(count)));
  if (n->units > std::numeric_limits<int64_t>::max() / 4 / count)
    return Fail(std::move(n), InvalidArgument("Repeat: " + std::to_string(count) + " passes of " +
                                              std::to_string(n->units) + " overflow"));
  n->count = count;
  n->units *= count;
  return DatasetAccess::Make(std::move(n));
}

Dataset Dataset::ShardBelowBatch(int num_shards, int shard_id) const {
  if (!status().ok()) return *this;
  // The nodes from the top down to Batch, replayed on the sharded upstream.
  std::vector<const Node*> above;
  const Node* n = node_.get();
  for (; n && n->kind != Node::Kind::Batch; n = n->up.get()) above.push_back(n);
  if (!n)
    return Fail(Derive(node_, Node::Kind::Shard),
                InvalidArgument("data parallel: the dataset has no Batch, so it cannot be sharded by rank below it"));
  for (const Node* m = node_.get(); m; m = m->up.get())
    if (m->kind == Node::Kind::Shard)
      return Fail(Derive(node_, Node::Kind::Shard),
                  InvalidArgument("data parallel: the dataset already has Shard(" + std::to_string(m->num_shards) +
                                  ", " + std::to_string(m->shard_id) +
                                  "); the Model shards it by rank itself, pass the unsharded pipeline"));
  Dataset d = DatasetAccess::Make(n->up).Shard(num_shards, shard_id).Batch(n->batch_size, n->drop_remainder);
  for (auto it = above.rbegin(); it != above.rend(); ++it) {
    const Node& m = **it;
    switch (m.kind) {
      case Node::Kind::Shuffle:
        d = d.Shuffle(m.seed);
        break;
      case Node::Kind::Repeat:
        d = d.Repeat(m.count);
        break;
      default:  // Map after Batch is refused by Map; Source and Batch cannot be above Batch
        return Fail(Derive(node_, Node::Kind::Shard), Internal("data parallel: unexpected node above Batch"));
    }
  }
  return d;
}

const Status& Dataset::status() const { return node_ ? node_->status : EmptyDatasetStatus(); }

int64_t Dataset::get_dataset_size() const { return status().ok() ? node_->units : 0; }

int64_t Dataset::get_batch_size() const { return status().ok() ? node_->batch_size : 0; }

std::vector<ColumnSpec> Dataset::output_columns() const {
  if (!status().ok()) return {};
  std::vector<ColumnSpec> out = node_->columns;
  if (node_->batch_size > 0)
    for (auto& c : out) c.shape.insert(c.shape.begin(), node_->batch_size);
  return out;
}

}  // namespace sinkrt::host
