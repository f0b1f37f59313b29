/// \file
/// Dataset: MindSpore's dataset pipeline, in C++.
///
/// ~~~
///   Dataset::Mnist(dir, "train")           // or FromArrays / FromGenerator / SyntheticImages
///       .Map("image", {Rescale(1/255.), Reshape({784})})
///       .Map("label", {TypeCast(DType::I32)})
///       .Shuffle(seed).Shard(num_shards, shard_id)
///       .Batch(64, /*drop_remainder=*/true)
///       .Repeat(1);
/// ~~~
///
/// A Dataset is an immutable description (cheap to copy); builder calls never
/// throw, the first error sticks in status() as in Graph. Iterating it yields
/// batches in a deterministic order that depends only on the pipeline and its
/// seeds: pass p of a shuffled pipeline uses the permutation of (seed, p), so
/// every rank sees the same order before sharding, and a resumed job can start
/// at any global batch index and see exactly the batches an uninterrupted job
/// would have seen there.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "sinkrt/host/tensor.h"
#include "sinkrt/runtime/status.h"

namespace sinkrt::host {

/// A per-sample transform on one column (MindSpore's vision/transforms ops).
///
/// `apply` rewrites the column of one sample in place; it runs on iterator
/// worker threads, so it must be thread-safe, and it may reuse the tensor's
/// storage (the iterator hands every worker the same tensors sample after
/// sample, so steady state allocates nothing). `output_spec` maps the column's
/// spec (dtype, per-sample shape; a -1 dim is one that varies per sample) to
/// the spec `apply` produces, so that a pipeline's output columns are known
/// without reading data; an invalid argument or input spec surfaces there and
/// becomes the Dataset's status at Map(). Empty `output_spec`: spec unchanged.
struct Transform {
  std::string name;                                                     ///< for errors: "Rescale"
  std::function<Status(Tensor& column)> apply;                          ///< must be thread-safe
  std::function<Result<ColumnSpec>(const ColumnSpec& in)> output_spec;  ///< empty: the spec is unchanged

  /// What the pipeline may assume to fuse a column's transforms into one
  /// pass from the source's bytes to the batch's (host/src/dataset/
  /// fused_column.h). kNone, the default, runs `apply` on every sample as
  /// written; the built-ins declare what they are:
  /// ~~~
  ///   kPerValue        each output element depends only on its input
  ///                    element's value and on its index modulo `channels`
  ///                    (Rescale, Normalize, TypeCast);
  ///   kBytesUnchanged  only the shape changes (Reshape).
  /// ~~~
  /// A custom transform that claims either and is not so gets wrong batches.
  enum class Fusion : uint8_t { kNone, kPerValue, kBytesUnchanged };
  Fusion fusion = Fusion::kNone;  ///< what this transform declares (see Fusion)
  int64_t channels = 1;           ///< kPerValue

  /// x*scale + shift, to f32, from u8 / i32 / f32.
  static Transform Rescale(double scale, double shift = 0.0);
  /// (x - mean[c]) / std[c] to f32 over the last dim (the channel of an HWC
  /// image), from u8 / i32 / f32; one value applies to every channel.
  static Transform Normalize(std::vector<float> mean, std::vector<float> std);
  /// Between u8, i32, i64, f32 and f64. Integer to integer wraps (numpy's
  /// astype); float to integer truncates toward zero and saturates at the
  /// type's range, NaN becoming 0.
  static Transform TypeCast(DType to);
  /// Integer label (u8 / i32 / i64) of shape S -> f32 one-hot of S + [C]; a
  /// label outside [0, num_classes) is an error.
  static Transform OneHot(int num_classes);
  /// Same element count; one dim may be -1 (inferred).
  static Transform Reshape(Shape shape);
  /// [H, W, C] -> [C, H, W]; a 2-D [H, W] image stays as it is (MindSpore).
  static Transform HWC2CHW();
};

/// How a Dataset iterator runs: where it starts, its workers, how far it reads ahead.
struct IteratorOptions {
  int64_t start_batch = 0;  ///< global batch index to start at (resume), >= 0
  int num_workers = 0;      ///< batch workers; 0: hardware_concurrency() capped at 4
  int prefetch = 16;        ///< batches prepared ahead (MindSpore's prefetch_size), >= 1
};

/// Pulls batches in order, forever (pass after pass), from worker threads.
/// One consumer thread calls Next().
///
/// Batch g (global, counting from 0 at the first batch of pass 0) is batch
/// g % get_dataset_size() of pass g / get_dataset_size(), whatever
/// start_batch, num_workers and prefetch are: a job resumed at start_batch =
/// g sees exactly what an uninterrupted one sees from g on. Workers each build
/// whole batches, at most `prefetch` ahead of the consumer. Destroying the
/// iterator stops and joins them promptly, whether or not the consumer read
/// what they prepared.
class BatchIterator {
 public:
  virtual ~BatchIterator() = default;
  /// The next batch: one tensor per output column. Never returns end-of-data:
  /// passes continue as with MindSpore's sink_size > 0; callers count
  /// batches. The tensors previously in *batch are recycled as storage for
  /// later batches, so a caller that passes the same Row every time makes the
  /// steady state allocation-free. An error from a source or transform (it
  /// names the column, the sample index and the transform) is returned when
  /// its batch is reached, and then by every later call; position() stays at
  /// that batch.
  virtual Status Next(Row* batch) = 0;
  /// Global index of the batch the next call returns.
  virtual int64_t position() const = 0;
};

/// Semantics of the operations, per pass (a pass is what get_dataset_size()
/// counts; the iterator runs pass 0, 1, 2, ...). Every node computes the
/// sample order of its pass p from its upstream's; nothing is streamed.
///
/// ~~~
///   Map       applies the transforms in order to one column of every sample,
///             on the worker threads; the column's spec follows each
///             Transform's output_spec. Map after Batch is not supported.
///   Shuffle   a full Fisher-Yates permutation of the upstream pass p, drawn
///             from a generator seeded by (seed, p): the same on every rank,
///             run and platform, and different for every pass.
///   Shard     every num_shards-th element of the upstream pass from shard_id
///             on, the pass rounded up to ceil(n / num_shards) per shard by
///             wrapping to its start (MindSpore's DistributedSampler), so
///             every shard has the same length. Shuffle then Shard: shards of
///             one global permutation, disjoint up to the padding.
///   Batch     stacks consecutive samples into [batch_size, ...]; the samples
///             of a column in one batch must have one shape. The last batch of
///             a pass is short, or dropped with drop_remainder.
///   Repeat    pass p is the upstream passes p*count .. p*count + count-1 back
///             to back (so a Shuffle below reshuffles every repeat).
/// ~~~
///
/// Shuffle, Shard and Repeat after Batch move whole batches. A pipeline
/// without Batch yields single samples (no batch dim).
class Dataset {
 public:
  /// An empty Dataset: status() says so; assign a real one.
  Dataset() = default;

  // -- sources -------------------------------------------------------------
  /// Columns of equal first dimension; sample i is row i of each.
  static Dataset FromArrays(std::vector<std::pair<std::string, Tensor>> columns);
  /// MNIST / Fashion-MNIST IDX files in `dir` (raw or .gz, as distributed):
  /// usage "train" (train-images-idx3-ubyte, train-labels-idx1-ubyte) or
  /// "test" (t10k-*). Columns "image" u8 [28,28,1] and "label" i32 [] as
  /// MindSpore's MnistDataset (which yields uint32 labels). The raw file wins
  /// where both it and the .gz are present. The files are read
  /// into memory here, so every problem surfaces in status() before training:
  /// missing directory or file, wrong magic number, image size other than
  /// 28x28, truncated or over-long file, image/label count mismatch, a label
  /// above 9. Errors name the file.
  static Dataset Mnist(const std::string& dir, const std::string& usage);
  /// `size` samples produced by fn(index, row); fn must be thread-safe. Row
  /// arrives holding one tensor per column (the previous sample's, whose
  /// storage fn may reuse); fn sets dtype, shape and data of each. Each must
  /// match its spec; a -1 dim in a spec may vary from sample to sample.
  static Dataset FromGenerator(std::vector<ColumnSpec> columns, int64_t size,
                               std::function<Status(int64_t index, Row* row)> fn);
  /// A generated stand-in for Fashion-MNIST with its columns ("image" u8
  /// [28, 28, 1], "label" i32 []), a FromGenerator source: each of the 10
  /// classes is a fixed random template and each sample its class's template
  /// blended 1:3 with per-pixel noise, so an MLP learns it within an epoch or
  /// two and a broken pipeline shows as chance accuracy. Sample i depends only
  /// on (split, i): the same on every run, platform and worker thread, and
  /// another split (e.g. 1 for a test set) draws other samples of the same
  /// classes. No seed: it is data, as a file would be.
  static Dataset SyntheticImages(int64_t size, uint64_t split = 0);

  // -- operations (MindSpore names) ------------------------------------------
  /// Applies `transforms`, in order, to `column` of every sample; before Batch only.
  Dataset Map(const std::string& column, std::vector<Transform> transforms) const;
  /// Permutes each pass of what comes from upstream (samples, or whole batches after Batch) by
  /// (`seed`, pass); see above.
  Dataset Shuffle(uint64_t seed) const;
  /// num_shards >= 1, 0 <= shard_id < num_shards.
  Dataset Shard(int num_shards, int shard_id) const;
  /// Groups samples into batches of `batch_size`; a short last batch is kept unless `drop_remainder`.
  Dataset Batch(int64_t batch_size, bool drop_remainder = false) const;
  /// count >= 1.
  Dataset Repeat(int count) const;
  /// The same pipeline with Shard(num_shards, shard_id) inserted just below
  /// its Batch, after any sample Shuffle: what a data-parallel Model feeds
  /// rank shard_id. Batch k of shard r holds samples k*b*n + j*n + r of the
  /// (shuffled) pass, j < b: together the n shards' batch k are the
  /// unsharded pipeline's batch k of size n*b, which is why n ranks with
  /// batch b train like one device with batch n*b. Fails on a pipeline
  /// without Batch or that already has a Shard.
  Dataset ShardBelowBatch(int num_shards, int shard_id) const;

  const Status& status() const;  ///< the first error building the pipeline, or OK
  /// Batches per pass, counting Repeat: MindSpore's get_dataset_size()
  /// (samples per pass before Batch; 0 when status() is an error).
  int64_t get_dataset_size() const;
  int64_t get_batch_size() const;  ///< 0 before Batch()
  /// Column specs of what the iterator yields (batch dim first after Batch;
  /// it is the full batch size even where a last batch is short).
  std::vector<ColumnSpec> output_columns() const;

  /// Fails if status() is an error or a pass has no batches.
  Result<std::unique_ptr<BatchIterator>> Iterate(IteratorOptions options = {}) const;

  struct Node;  ///< the pipeline, shared and immutable

 private:
  explicit Dataset(std::shared_ptr<const Node> node) : node_(std::move(node)) {}
  friend struct DatasetAccess;  ///< host/src/dataset: builds and reads nodes

  std::shared_ptr<const Node> node_;
};

}  // namespace sinkrt::host
