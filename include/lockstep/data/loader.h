#pragma once

#include "lockstep/data/batch.h"
#include "lockstep/data/dataset.h"
#include "lockstep/data/tensor_dataset.h"
#include "lockstep/data/transforms.h"
#include "lockstep/detail/option.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

namespace lockstep::data {

/// Options of a Loader; the names and defaults of torch.utils.data.DataLoader where they exist.
///
/// Example:
///   LoaderOptions(/*batch_size=*/64).num_workers(2).drop_last(true).transform(TransformOptions().mean({0.5}))
class LoaderOptions {
 public:
  explicit LoaderOptions(int64_t batch_size) : batch_size_(batch_size) {}

  /// Samples per batch, >= 1.
  LOCKSTEP_OPTION(LoaderOptions, int64_t, batch_size)
  /// Worker threads that build batches ahead, >= 0; 0 builds each batch in the thread calling next().
  LOCKSTEP_OPTION(LoaderOptions, int64_t, num_workers)
  /// Batches queued ahead per worker, >= 1: at most num_workers * prefetch_factor batches are built or
  /// being built ahead of the one next() returns.
  LOCKSTEP_OPTION(LoaderOptions, int64_t, prefetch_factor)
  /// Keep the worker threads between epochs (true), or start them in start_epoch() and join them when the
  /// epoch ends (false).
  LOCKSTEP_OPTION(LoaderOptions, bool, persistent_workers)
  /// Drop the last batch when it is shorter than batch_size.
  LOCKSTEP_OPTION(LoaderOptions, bool, drop_last)
  /// Image datasets only (a Loader or DataSource made from a TensorDataset): normalisation, and the
  /// augmentation applied when augment() is true. Other datasets transform their own samples.
  LOCKSTEP_OPTION(LoaderOptions, TransformOptions, transform)
  /// Image datasets only: apply the random crop/flip of transform() (training); otherwise only normalise.
  LOCKSTEP_OPTION(LoaderOptions, bool, augment)
  /// Seeds each batch's randomness: batch k of epoch e gets BatchKey::seed mixed from (seed, e, k), so
  /// the bytes do not depend on num_workers or on thread scheduling.
  LOCKSTEP_OPTION(LoaderOptions, uint64_t, seed)

 private:
  int64_t batch_size_;
  int64_t num_workers_ = 0;
  int64_t prefetch_factor_ = 2;
  bool persistent_workers_ = true;
  bool drop_last_ = false;
  TransformOptions transform_;
  bool augment_ = false;
  uint64_t seed_ = 0;
};

namespace detail {
struct LoaderState;
struct LoaderTesting;

/// A batch of any type, as the loader's threads pass it around (BasicLoader<B> knows the type).
using AnyBatch = std::shared_ptr<void>;
/// Builds the batch `key.index` of an epoch from its `rows` (empty for streams, which have no indices).
/// Returns nullptr when the epoch has no such batch (a stream that ended).
using BuildBatchFn = std::function<AnyBatch(c10::ArrayRef<int64_t> rows, const BatchKey& key)>;
/// The same batch in pinned host memory (BasicLoader<B>: batch_pin).
using PinBatchFn = std::function<AnyBatch(const AnyBatch& batch)>;
/// batch_pin for batches of type B.
template <typename B>
PinBatchFn pin_batches() {
  return [](const AnyBatch& b) -> AnyBatch {
    return std::make_shared<B>(batch_pin(*static_cast<const B*>(b.get())));
  };
}

/// The type-free part of every loader: the epoch's batch plan, the worker threads and the prefetch window.
///
/// Batch k of an epoch holds indices [k * B, (k + 1) * B) of the list given to start_epoch(), in that
/// order (the last batch is shorter unless drop_last). A stream epoch (start_stream) has no list: batch
/// k is whatever build() makes of key k, until it returns nullptr.
///
/// With workers: each worker claims the lowest batch index not yet claimed, as long as fewer than
/// num_workers * prefetch_factor batches are claimed and not yet returned (the bound on memory), builds it
/// and puts it in that batch's slot; next() waits for the slot of the batch it owes and returns batches
/// strictly in order. An exception thrown while building batch k is rethrown by the next() that owes
/// batch k, after which that epoch is over (next() returns nullptr). start_epoch() during an unfinished
/// epoch cancels it: batches of the old epoch still being built are discarded.
///
/// Not thread-safe: one thread calls start_epoch()/next(). The destructor stops and joins the workers,
/// also while they wait on a full queue.
class LoaderCore {
 public:
  /// `dataset_size` bounds the indices of start_epoch (-1: streams only). Throws std::invalid_argument
  /// naming the option when batch_size < 1, num_workers < 0 or prefetch_factor < 1.
  LoaderCore(LoaderOptions options, BuildBatchFn build, int64_t dataset_size, std::string description);
  ~LoaderCore();
  LoaderCore(const LoaderCore&) = delete;
  LoaderCore& operator=(const LoaderCore&) = delete;

  void start_epoch(std::vector<int64_t> indices, int64_t epoch, int64_t first_batch);
  /// An epoch of at most `max_batches` batches (-1: until build() returns nullptr), from `first_batch` on.
  void start_stream(int64_t epoch, int64_t first_batch, int64_t max_batches);
  AnyBatch next();
  int64_t num_batches() const;
  const LoaderOptions& options() const { return options_; }
  /// From the next epoch on, each batch is passed through `pin` by the thread that built it (pinned host
  /// memory, so that its copy to a GPU does not block: PyTorch's pin_memory=True). Call between epochs.
  void pin_with(PinBatchFn pin);

 private:
  friend struct LoaderTesting;
  void begin(std::shared_ptr<const std::vector<int64_t>> indices, int64_t epoch, int64_t first_batch,
             int64_t batches);
  AnyBatch build(const std::vector<int64_t>* indices, int64_t batch, int64_t epoch) const;
  AnyBatch build_unpinned(const std::vector<int64_t>* indices, int64_t batch, int64_t epoch) const;
  void finish_epoch();
  void start_workers();
  void stop_workers();
  void worker_loop();

  LoaderOptions options_;
  BuildBatchFn build_;
  PinBatchFn pin_;  // empty: batches stay where build_ made them
  int64_t dataset_size_;
  std::string description_;
  std::unique_ptr<LoaderState> state_;
};
}  // namespace detail

/// Turns one rank's sample indices for an epoch into batches of a Dataset<B>, optionally built ahead by
/// worker threads (detail::LoaderCore says how: in order, at most num_workers * prefetch_factor ahead,
/// an exception rethrown by the next() that owes its batch).
///
/// Example:
///   auto ds = std::make_shared<ImageDataset>(std::make_shared<IdxDataset>(IdxDataset::from_dir(dir,
///   Split::kTrain))); DistributedSampler sampler(ds->size(), DistributedSamplerOptions(world, rank));
///   BasicLoader<Batch> loader(ds, LoaderOptions(64).num_workers(2));
///   for (int64_t epoch = 0; epoch < 10; ++epoch) {
///     sampler.set_epoch(epoch);
///     loader.start_epoch(sampler.indices(), epoch);
///     while (auto batch = loader.next()) train_step(batch->data, batch->target);
///   }
template <typename B>
class BasicLoader {
 public:
  /// Throws std::invalid_argument naming the option when dataset is null, batch_size < 1,
  /// num_workers < 0 or prefetch_factor < 1.
  BasicLoader(std::shared_ptr<const Dataset<B>> dataset, LoaderOptions options)
      : dataset_(checked(std::move(dataset))),
        core_(
            std::move(options),
            [d = dataset_.get()](c10::ArrayRef<int64_t> rows, const BatchKey& key) -> AnyBatch {
              return std::make_shared<B>(d->get_batch(rows, key));
            },
            dataset_->size(), dataset_->description()) {}

  /// Begins an epoch over `indices` (dataset rows, in the order to batch them; repeats allowed), with
  /// `epoch` selecting the batches' randomness (BatchKey). Cancels an unfinished epoch. Throws
  /// std::out_of_range naming the position, the bad index and the dataset size when an index is outside
  /// [0, size). `first_batch` > 0 skips the epoch's first batches (resuming mid-epoch): next() returns
  /// batch first_batch first, built exactly as it would have been; std::out_of_range unless
  /// 0 <= first_batch <= the epoch's batch count.
  void start_epoch(std::vector<int64_t> indices, int64_t epoch, int64_t first_batch = 0) {
    core_.start_epoch(std::move(indices), epoch, first_batch);
  }

  /// The next batch of the epoch, in order; std::nullopt after the last one. Blocks until a worker has
  /// built it. Rethrows an exception thrown while building it. Throws std::logic_error before the first
  /// start_epoch().
  std::optional<B> next() {
    AnyBatch batch = core_.next();
    if (!batch) return std::nullopt;
    return std::move(*static_cast<B*>(batch.get()));
  }

  /// Batches in the current epoch (0 before the first start_epoch()).
  int64_t num_batches() const { return core_.num_batches(); }
  /// From the next epoch on, the workers put each batch in pinned host memory (batch_pin), so that its
  /// copy to a GPU is asynchronous. Needs a CUDA LibTorch and a GPU. Call between epochs.
  void pin_memory() { core_.pin_with(detail::pin_batches<B>()); }
  const LoaderOptions& options() const { return core_.options(); }
  const Dataset<B>& dataset() const { return *dataset_; }

 private:
  using AnyBatch = detail::AnyBatch;
  friend struct detail::LoaderTesting;
  static std::shared_ptr<const Dataset<B>> checked(std::shared_ptr<const Dataset<B>> dataset) {
    if (!dataset) throw std::invalid_argument("Loader: dataset must not be null");
    return dataset;
  }

  std::shared_ptr<const Dataset<B>> dataset_;
  detail::LoaderCore core_;
};

/// The loader of the image datasets: a BasicLoader<Batch> over ImageDataset(dataset, options.transform(),
/// options.augment()); batch k of epoch e is augmented from BatchKey::seed.
class Loader : public BasicLoader<Batch> {
 public:
  /// Throws std::invalid_argument naming the option when dataset is null or empty, the loader options are
  /// bad, or the transform options do not fit the dataset's channels.
  Loader(std::shared_ptr<const TensorDataset> dataset, LoaderOptions options);
};

namespace detail {
/// For tests only: a hook that the thread building batch `batch` calls first (it may sleep, or throw to
/// simulate a failing batch). May be set at any time: each build calls its own copy, so a worker still
/// inside a replaced hook (a persistent worker finishing an ended epoch's batch) keeps it alive.
struct LoaderTesting {
  static void set_build_hook(LoaderCore& core, std::function<void(int64_t batch)> hook);
  template <typename B>
  static void set_build_hook(BasicLoader<B>& loader, std::function<void(int64_t batch)> hook) {
    set_build_hook(loader.core_, std::move(hook));
  }
};
}  // namespace detail

}  // namespace lockstep::data
