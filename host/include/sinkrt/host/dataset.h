// Dataset: MindSpore's dataset pipeline, in C++.
//
//   Dataset::Mnist(dir, "train")           // or FromArrays / FromGenerator
//       .Map("image", {Rescale(1/255.), Reshape({784})})
//       .Map("label", {TypeCast(DType::I32)})
//       .Shuffle(seed).Shard(num_shards, shard_id)
//       .Batch(64, /*drop_remainder=*/true)
//       .Repeat(1);
//
// A Dataset is an immutable description (cheap to copy); builder calls never
// throw, the first error sticks in status() as in Graph. Iterating it yields
// batches in a deterministic order that depends only on the pipeline and its
// seeds: pass p of a shuffled pipeline uses the permutation of (seed, p), so
// every rank sees the same order before sharding, and a resumed job can start
// at any global batch index and see exactly the batches an uninterrupted job
// would have seen there.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "sinkrt/host/tensor.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host {

// A per-sample transform on one column (MindSpore's vision/transforms ops).
struct Transform {
  std::string name;                               // for errors: "Rescale"
  std::function<Status(Tensor& column)> apply;    // must be thread-safe

  static Transform Rescale(double scale, double shift);          // x*scale + shift, to f32
  static Transform Normalize(std::vector<float> mean, std::vector<float> std);  // per channel (last dim)
  static Transform TypeCast(DType to);
  static Transform OneHot(int num_classes);                      // label -> f32 [num_classes]
  static Transform Reshape(Shape shape);                         // same element count
  static Transform HWC2CHW();
};

struct IteratorOptions {
  int64_t start_batch = 0;   // global batch index to start at (resume)
  int num_workers = 0;       // map workers; 0: chosen from the cores
  int prefetch = 16;         // batches prepared ahead (MindSpore's prefetch_size)
};

// Pulls batches in order, forever (pass after pass), from worker threads.
class BatchIterator {
 public:
  virtual ~BatchIterator() = default;
  // The next batch. Never returns end-of-data: passes continue as with
  // MindSpore's sink_size > 0; callers count batches.
  virtual Status Next(Row* batch) = 0;
  // Global index of the batch the next call returns.
  virtual int64_t position() const = 0;
};

class Dataset {
 public:
  // -- sources -------------------------------------------------------------
  // Columns of equal first dimension; sample i is row i of each.
  static Dataset FromArrays(std::vector<std::pair<std::string, Tensor>> columns);
  // MNIST / Fashion-MNIST IDX files in `dir` (raw or .gz, as distributed):
  // usage "train" (train-images-idx3-ubyte, train-labels-idx1-ubyte) or
  // "test" (t10k-*). Columns "image" u8 [28,28,1] and "label" i32 [] as
  // MindSpore's MnistDataset (which yields uint32 labels). Errors name the
  // file: missing, wrong magic number, image/label count mismatch.
  static Dataset Mnist(const std::string& dir, const std::string& usage);
  // `size` samples produced by fn(index, row); fn must be thread-safe.
  static Dataset FromGenerator(std::vector<ColumnSpec> columns, int64_t size,
                               std::function<Status(int64_t index, Row* row)> fn);

  // -- operations (MindSpore names) ------------------------------------------
  Dataset Map(const std::string& column, std::vector<Transform> transforms) const;
  Dataset Shuffle(uint64_t seed) const;
  Dataset Shard(int num_shards, int shard_id) const;
  Dataset Batch(int64_t batch_size, bool drop_remainder = false) const;
  Dataset Repeat(int count) const;

  const Status& status() const;
  // Batches per pass, counting Repeat: MindSpore's get_dataset_size().
  int64_t get_dataset_size() const;
  int64_t get_batch_size() const;   // 0 before Batch()
  // Column specs of what the iterator yields (batch dim first after Batch).
  std::vector<ColumnSpec> output_columns() const;

  Result<std::unique_ptr<BatchIterator>> Iterate(IteratorOptions options = {}) const;

  struct Node;  // the pipeline, shared and immutable

 private:
  std::shared_ptr<const Node> node_;
};

}  // namespace sinkrt::host
