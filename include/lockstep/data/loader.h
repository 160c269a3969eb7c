#pragma once

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

/// One mini-batch, as the Loader returns it.
struct Batch {
  /// float32 [B, C, H, W], transformed (normalised, and augmented when asked).
  at::Tensor data;
  /// int64 [B], the class labels.
  at::Tensor target;
};

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
  /// Normalisation, and the augmentation applied when augment() is true.
  LOCKSTEP_OPTION(LoaderOptions, TransformOptions, transform)
  /// Apply the random crop/flip of transform() (training); otherwise only normalise (validation).
  LOCKSTEP_OPTION(LoaderOptions, bool, augment)
  /// Seeds the augmentation: batch k of epoch e is augmented from a seed mixed from (seed, e, k), so the
  /// bytes do not depend on num_workers or on thread scheduling.
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
}  // namespace detail

/// Turns one rank's sample indices for an epoch into transformed mini-batches, optionally built ahead by
/// worker threads.
///
/// Batch k of an epoch holds indices [k * B, (k + 1) * B) of the list given to start_epoch(), in that
/// order (the last batch is shorter unless drop_last). A batch is gathered straight from the dataset's
/// contiguous uint8 images into one float32 tensor (Transform::gather): no per-sample tensors.
///
/// With workers: each worker claims the lowest batch index not yet claimed, as long as fewer than
/// num_workers * prefetch_factor batches are claimed and not yet returned (the bound on memory), builds it
/// and puts it in that batch's slot; next() waits for the slot of the batch it owes and returns batches
/// strictly in order. An exception thrown while building batch k is rethrown by the next() that owes
/// batch k, after which that epoch is over (next() returns std::nullopt). start_epoch() during an
/// unfinished epoch cancels it: batches of the old epoch still being built are discarded.
///
/// Not thread-safe: one thread calls start_epoch()/next(). The destructor stops and joins the workers,
/// also while they wait on a full queue.
///
/// Example:
///   auto ds = std::make_shared<IdxDataset>(IdxDataset::from_dir(dir, Split::kTrain));
///   DistributedSampler sampler(ds->size(), DistributedSamplerOptions(world, rank));
///   Loader loader(ds, LoaderOptions(64).num_workers(2));
///   for (int64_t epoch = 0; epoch < 10; ++epoch) {
///     sampler.set_epoch(epoch);
///     loader.start_epoch(sampler.indices(), epoch);
///     while (auto batch = loader.next()) train_step(batch->data, batch->target);
///   }
class Loader {
 public:
  /// Throws std::invalid_argument naming the option when dataset is null or empty, batch_size < 1,
  /// num_workers < 0, prefetch_factor < 1, or the transform options do not fit the dataset's channels.
  Loader(std::shared_ptr<const TensorDataset> dataset, LoaderOptions options);
  /// Stops and joins the worker threads (the batches being built are finished first, then discarded).
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  /// Begins an epoch over `indices` (dataset rows, in the order to batch them; repeats allowed), with
  /// `epoch` selecting the augmentation randomness. Cancels an unfinished epoch. Throws std::out_of_range
  /// naming the position, the bad index and the dataset size when an index is outside [0, size).
  /// `first_batch` > 0 skips the epoch's first batches (resuming mid-epoch): next() returns batch
  /// first_batch first, built exactly as it would have been; std::out_of_range unless
  /// 0 <= first_batch <= the epoch's batch count.
  void start_epoch(std::vector<int64_t> indices, int64_t epoch, int64_t first_batch = 0);

  /// The next batch of the epoch, in order; std::nullopt after the last one. Blocks until a worker has
  /// built it. Rethrows an exception thrown while building it. Throws std::logic_error before the first
  /// start_epoch().
  std::optional<Batch> next();

  /// Batches in the current epoch (0 before the first start_epoch()).
  int64_t num_batches() const;

  const LoaderOptions& options() const { return options_; }

  /// The dataset batches are drawn from.
  const TensorDataset& dataset() const { return *dataset_; }

 private:
  friend struct detail::LoaderTesting;

  Batch build(const std::vector<int64_t>& indices, int64_t batch, int64_t epoch) const;
  void finish_epoch();
  void start_workers();
  void stop_workers();
  void worker_loop();

  std::shared_ptr<const TensorDataset> dataset_;
  LoaderOptions options_;
  Transform transform_;
  std::unique_ptr<detail::LoaderState> state_;
};

namespace detail {
/// For tests only: a hook that the thread building batch `batch` calls first (it may sleep, or throw to
/// simulate a failing batch). Set it before start_epoch(); not synchronised with running workers.
struct LoaderTesting {
  static void set_build_hook(Loader& loader, std::function<void(int64_t batch)> hook);
};
}  // namespace detail

}  // namespace lockstep::data
