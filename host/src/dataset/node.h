// The pipeline's nodes and sources (internal to host/src/dataset).
//
// A Dataset is a chain of immutable Nodes from one Source to the root. Each
// node carries what Dataset's accessors need without walking the chain: the
// sticky status, its output column specs and its units per pass (samples
// before Batch, batches after).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sinkrt/host/dataset.h"
#include "sinkrt/host/tensor.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host {

// Random access to the samples of a source. Read() is called concurrently
// from every worker; it writes one tensor per column into *row, reusing the
// storage already there (row arrives sized to columns().size()).
class Source {
 public:
  virtual ~Source() = default;
  virtual const char* name() const = 0;  // MindSpore's op name, for errors
  virtual int64_t size() const = 0;
  virtual const std::vector<ColumnSpec>& columns() const = 0;
  virtual Status Read(int64_t index, Row* row) const = 0;
  // A hint that Read(index) comes soon: in-memory sources start loading the
  // sample's cache lines, hiding the miss of a shuffled order's random reads.
  virtual void Prefetch(int64_t index) const {}
  // Sample `index`'s bytes of `column` where the source holds them in
  // memory as the column's spec says (static shape), so a fused pipeline
  // reads them in place; nullptr (the default, or an index out of range):
  // use Read, which also reports the error.
  virtual const uint8_t* SampleBytes(int64_t index, size_t column) const { return nullptr; }
};

struct Dataset::Node {
  enum class Kind { Source, Map, Shuffle, Shard, Batch, Repeat };

  Kind kind = Kind::Source;
  std::shared_ptr<const Node> up;   // null for a source
  Status status;                    // the first error of this node or any upstream
  std::vector<ColumnSpec> columns;  // per sample; the batch dim is added by output_columns()
  int64_t units = 0;                // per pass: samples before Batch, batches after
  int64_t batch_size = 0;           // of the nearest Batch upstream (or this one); 0 if none

  std::shared_ptr<const Source> source;     // Source
  int column = -1;                          // Map
  std::vector<Transform> transforms;        // Map
  std::vector<ColumnSpec> transform_specs;  // Map: the column's spec after each transform
  uint64_t seed = 0;                        // Shuffle
  int num_shards = 1, shard_id = 0;         // Shard
  bool drop_remainder = false;              // Batch
  int count = 1;                            // Repeat
};

// Dataset's private constructor and node, for the files of this folder.
struct DatasetAccess {
  static Dataset Make(std::shared_ptr<const Dataset::Node> node) { return Dataset(std::move(node)); }
  static const std::shared_ptr<const Dataset::Node>& node(const Dataset& d) { return d.node_; }
};

// Samples are the rows of each column tensor (all of one first dim). `name`
// is the op name errors use ("FromArrays", "MnistDataset").
Result<std::shared_ptr<const Source>> MakeArraySource(const char* name,
                                                      std::vector<std::pair<std::string, Tensor>> columns);

// A source node, or a node holding `status` if the source could not be made.
Dataset MakeSourceDataset(Result<std::shared_ptr<const Source>> source);

// Checks that a spec list is usable as a source's columns: names unique and
// non-empty, dtypes valid, dims >= -1. `who` prefixes the error.
Status ValidateColumnSpecs(const std::vector<ColumnSpec>& columns, const char* who);

// True if `shape` agrees with `spec` (same rank; -1 in spec matches any dim).
bool ShapeMatches(const Shape& spec, const Shape& shape);

}  // namespace sinkrt::host
