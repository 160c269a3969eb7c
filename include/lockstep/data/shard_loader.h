#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "lockstep/data/batch.h"
#include "lockstep/data/collate.h"
#include "lockstep/data/dataset.h"
#include "lockstep/data/epoch_part.h"
#include "lockstep/data/image_dataset.h"
#include "lockstep/data/iterable_dataset.h"
#include "lockstep/data/loader.h"
#include "lockstep/data/tensor_dataset.h"
#include "lockstep/detail/option.h"

namespace lockstep::data {

/// Which part of an epoch one rank loads: what the Trainer and the Accelerator ask of a ShardLoader.
struct ShardPlan {
  int64_t epoch = 0;
  int world = 1;  ///< ranks sharing the epoch
  int rank = 0;
  uint64_t seed = 0;  ///< the shuffle's (DistributedSampler: seed + epoch)
  /// false: keep dataset order even where the DataSource shuffles (validation).
  bool shuffle = true;
  /// Training: every rank gets the same number of batches (map-style: DistributedSampler's padding;
  /// streams: the last samples not every rank can get are dropped). false (validation): every sample
  /// exactly once, ranks may differ by a batch.
  bool even = true;
  int64_t first_batch = 0;   ///< resume: skip the epoch's first batches (counted as in this plan)
  int64_t max_batches = -1;  ///< at most this many batches from the epoch's start (-1: all)
  /// Resuming an epoch that began on other world sizes: its parts so far, in order (the first one in the
  /// sampler's order, each later one over what the one before left). This plan deals the rest (see
  /// reshard_remaining); empty: the epoch in the sampler's own order.
  std::vector<EpochPart> before;
};

namespace detail {

/// A ShardLoader with its batch type erased: what the (non-template) Trainer holds.
class AnyShardLoader {
 public:
  virtual ~AnyShardLoader() = default;
  /// This rank's batch count for `plan` (from the epoch's start; max_batches applied), or -1 when it is
  /// not known before the end (a stream of unknown length).
  virtual int64_t batches(const ShardPlan& plan) const = 0;
  /// Begins the plan's epoch at plan.first_batch, cancelling an unfinished one. Returns its batch count
  /// (batches(plan)).
  virtual int64_t start(const ShardPlan& plan) = 0;
  /// The next batch, nullptr after the last.
  virtual AnyBatch next_any() = 0;
  /// Whether the batch next_any() returned last is the epoch's last one (streams read one batch ahead).
  virtual bool at_last() const = 0;
  /// The sample count of a batch this loader returned.
  virtual int64_t samples(const void* batch) const = 0;
  /// A batch this loader returned, on `device`.
  virtual AnyBatch to_device(const AnyBatch& batch, const c10::Device& device) const = 0;
  /// Copies batch `from` into batch `into` (both this loader's, on one device) when their tensors have the
  /// same shapes and dtypes (data::batch_copy_into); false when not, or when the batch type has no
  /// BatchTraits::tensors.
  virtual bool copy_into(const AnyBatch& into, const AnyBatch& from) const = 0;
  /// Gives a batch this loader returned memory of its own (data::batch_own_memory).
  virtual void own_memory(const AnyBatch& batch) const = 0;
  /// Whether the batch type lists its tensors (BatchTraits::tensors): what copy_into needs.
  virtual bool lists_tensors() const = 0;
  /// From the next epoch on, batches are built in pinned host memory (LoaderCore::pin_with): for a GPU.
  virtual void pin_memory() = 0;
  virtual const LoaderOptions& options() const = 0;
  virtual std::string description() const = 0;
};

/// Map-style: this rank's indices for `plan` (DistributedSampler, its unpadded shard, or the re-sharded
/// rest of an epoch), cut to max_batches.
std::vector<int64_t> plan_indices(int64_t dataset_size, const LoaderOptions& options, bool shuffle,
                                  const ShardPlan& plan);
/// Streams: the batch count of `plan` over a stream of `stream_size` samples (-1: unknown, returns -1).
int64_t stream_batches(int64_t stream_size, const LoaderOptions& options, const ShardPlan& plan);

/// Streams: where this rank's batches lie in the stream. Batch k of the plan reads the window of
/// world x batch_size samples starting at first_position() + k x window() and keeps those at offsets
/// rank, rank + world, ...
struct StreamWindows {
  StreamWindows(const LoaderOptions& options, const ShardPlan& plan);
  int64_t window() const { return batch_size * world; }
  int64_t start(int64_t batch) const { return base + batch * window(); }
  /// The offsets of this rank's samples among the `read` samples of a window (read < window(): the
  /// stream ended there); empty when this rank has no batch there.
  std::vector<int64_t> own_offsets(int64_t read) const;

  int64_t batch_size;
  int world;
  int rank;
  bool even;
  bool drop_last;
  int64_t base;  ///< stream position of the plan's first window (after what an old world consumed)
  int64_t end;   ///< stream position where the plan stops (an old world's limit), -1: none
};

}  // namespace detail

/// This rank's batches of one dataset, epoch by epoch, typed: a DataSource makes it.
template <typename B>
class ShardLoader : public detail::AnyShardLoader {
 public:
  using BatchType = B;
  /// The next batch of the epoch started by start(), std::nullopt after its last.
  std::optional<B> next() {
    detail::AnyBatch batch = next_any();
    if (!batch) return std::nullopt;
    return std::move(*static_cast<B*>(batch.get()));
  }
  int64_t samples(const void* batch) const override { return batch_size(*static_cast<const B*>(batch)); }
  detail::AnyBatch to_device(const detail::AnyBatch& batch, const c10::Device& device) const override {
    return std::make_shared<B>(batch_to(*static_cast<const B*>(batch.get()), device));
  }
  bool copy_into(const detail::AnyBatch& into, const detail::AnyBatch& from) const override {
    return batch_copy_into(*static_cast<const B*>(into.get()), *static_cast<const B*>(from.get()));
  }
  void own_memory(const detail::AnyBatch& batch) const override {
    batch_own_memory(*static_cast<const B*>(batch.get()));
  }
  bool lists_tensors() const override { return can_list_tensors<B>::value; }
};

namespace detail {

/// A map-style Dataset<B> sharded by DistributedSampler and batched by a BasicLoader<B>.
template <typename B>
class MapShardLoader : public ShardLoader<B> {
 public:
  MapShardLoader(std::shared_ptr<const Dataset<B>> dataset, LoaderOptions options, bool shuffle)
      : loader_(std::move(dataset), std::move(options)), shuffle_(shuffle) {}
  int64_t batches(const ShardPlan& plan) const override {
    return count(
        static_cast<int64_t>(plan_indices(loader_.dataset().size(), options(), shuffle_, plan).size()));
  }
  int64_t start(const ShardPlan& plan) override {
    std::vector<int64_t> indices =
        plan_indices(loader_.dataset().size(), options(), shuffle_ && plan.shuffle, plan);
    total_ = count(static_cast<int64_t>(indices.size()));
    returned_ = plan.first_batch;
    loader_.start_epoch(std::move(indices), plan.epoch, plan.first_batch);
    return total_;
  }
  void pin_memory() override { loader_.pin_memory(); }
  AnyBatch next_any() override {
    std::optional<B> batch = loader_.next();
    if (!batch) return nullptr;
    ++returned_;
    return std::make_shared<B>(std::move(*batch));
  }
  bool at_last() const override { return returned_ >= total_; }
  const LoaderOptions& options() const override { return loader_.options(); }
  std::string description() const override { return loader_.dataset().description(); }

 private:
  int64_t count(int64_t samples) const {
    const int64_t b = options().batch_size();
    return options().drop_last() ? samples / b : (samples + b - 1) / b;
  }
  BasicLoader<B> loader_;
  bool shuffle_;
  int64_t total_ = 0;
  int64_t returned_ = 0;
};

/// An IterableDataset<S> read by every rank, each keeping its positions (StreamWindows), its samples
/// collated into B. One thread reads the stream (it is sequential): num_workers > 0 reads ahead in one
/// worker thread, prefetch_factor batches deep; the loader reads one batch ahead to know the last.
template <typename S, typename B>
class StreamShardLoader : public ShardLoader<B> {
 public:
  using CollateFn = std::function<B(std::vector<S>&&)>;

  StreamShardLoader(std::shared_ptr<const IterableDataset<S>> dataset, LoaderOptions options,
                    CollateFn collate_fn)
      : dataset_(std::move(dataset)),
        collate_(std::move(collate_fn)),
        core_(
            options.num_workers(std::min<int64_t>(options.num_workers(), 1)),
            [this](c10::ArrayRef<int64_t>, const BatchKey& key) { return build(key); }, -1,
            dataset_->description()),
        options_(core_.options()) {}
  ~StreamShardLoader() override = default;

  int64_t batches(const ShardPlan& plan) const override {
    const std::optional<int64_t> size = dataset_->size();
    return stream_batches(size ? *size : -1, options_, plan);
  }
  int64_t start(const ShardPlan& plan) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      windows_.emplace(options_, plan);
      epoch_ = plan.epoch;
      stream_.reset();
      position_ = 0;
      ended_ = false;
    }
    total_ = batches(plan);
    core_.start_stream(plan.epoch, plan.first_batch, total_ >= 0 ? total_ : plan.max_batches);
    pending_ = core_.next();
    return total_;
  }
  void pin_memory() override { core_.pin_with(pin_batches<B>()); }
  AnyBatch next_any() override {
    AnyBatch batch = std::move(pending_);
    if (batch) pending_ = core_.next();
    return batch;
  }
  bool at_last() const override { return !pending_; }
  const LoaderOptions& options() const override { return options_; }
  std::string description() const override { return dataset_->description(); }

 private:
  // Batch key.index of the epoch, built by one thread at a time, in increasing order of index (one worker).
  AnyBatch build(const BatchKey& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!windows_ || key.epoch != epoch_) return nullptr;
    const int64_t start = windows_->start(key.index);
    // Behind the window (a cancelled pass's batch was read in between): open the stream again.
    if (!stream_ || position_ > start) {
      stream_ = dataset_->open(epoch_);
      if (!stream_) throw std::runtime_error("IterableDataset::open returned no stream: " + description());
      position_ = 0;
      ended_ = false;
    }
    if (ended_) return nullptr;  // the stream ended at position_ <= start
    if (position_ < start) {
      const int64_t skipped = stream_->skip(start - position_);
      position_ += skipped;
      if (position_ < start) return end_of_stream();
    }
    int64_t want = windows_->window();
    if (windows_->end >= 0) want = std::max<int64_t>(0, std::min(want, windows_->end - start));
    std::vector<std::optional<S>> read;
    read.reserve(static_cast<size_t>(want));
    int64_t got = 0;
    for (; got < want; ++got) {
      std::optional<S> sample = stream_->next();
      if (!sample) break;
      read.push_back(std::move(sample));
    }
    position_ += got;
    if (got < windows_->window()) ended_ = true;
    const std::vector<int64_t> own = windows_->own_offsets(got);
    if (own.empty()) return nullptr;
    std::vector<S> samples;
    samples.reserve(own.size());
    for (int64_t offset : own) samples.push_back(std::move(*read[static_cast<size_t>(offset)]));
    return std::make_shared<B>(collate_(std::move(samples)));
  }
  AnyBatch end_of_stream() {
    ended_ = true;
    return nullptr;
  }

  std::shared_ptr<const IterableDataset<S>> dataset_;
  CollateFn collate_;
  std::mutex mutex_;  // the stream state below, between the reading thread and start()
  std::optional<StreamWindows> windows_;
  int64_t epoch_ = 0;
  std::unique_ptr<SampleStream<S>> stream_;
  int64_t position_ = 0;
  bool ended_ = false;
  LoaderCore core_;
  const LoaderOptions& options_;
  AnyBatch pending_;
  int64_t total_ = -1;
};

}  // namespace detail

/// A dataset and how to batch it, before it is sharded: what a DataModule gives the Trainer and what
/// Accelerator::prepare takes (the C++ form of a `DataLoader(dataset, batch_size=64, shuffle=True)`).
/// batch_size is per rank. Made from a map-style Dataset<B>, an IterableDataset<S> (with a collate
/// function, stacking by default), or, for B = Batch, an image TensorDataset (LoaderOptions' transform
/// and augment apply).
///
/// Example:
///   DataSource<Example<>> train(from_torch(mnist.map(Normalize<>(0.13, 0.31))),
///   LoaderOptions(64).num_workers(2));
template <typename B>
class DataSource {
 public:
  using BatchType = B;

  DataSource(std::shared_ptr<const Dataset<B>> dataset, LoaderOptions options)
      : options_(std::move(options)), description_(checked(dataset.get())->description()) {
    factory_ = [dataset](const LoaderOptions& o, bool shuffle) -> std::unique_ptr<ShardLoader<B>> {
      if (dataset->size() == 0) {
        throw std::invalid_argument("dataset '" + dataset->description() + "' is empty: nothing to load");
      }
      return std::make_unique<detail::MapShardLoader<B>>(dataset, o, shuffle);
    };
  }

  /// An IterableDataset<S> (any class derived from one), batched by `collate_fn(std::vector<S>&&)`.
  template <typename D, typename C,
            std::enable_if_t<std::is_base_of_v<IterableDataset<typename D::SampleType>, D>, int> = 0>
  DataSource(std::shared_ptr<D> dataset, LoaderOptions options, C collate_fn)
      : options_(std::move(options)), description_(checked(dataset.get())->description()), iterable_(true) {
    using S = typename D::SampleType;
    std::shared_ptr<const IterableDataset<S>> base = dataset;
    typename detail::StreamShardLoader<S, B>::CollateFn collate_b = std::move(collate_fn);
    factory_ = [base, collate_b](const LoaderOptions& o, bool) -> std::unique_ptr<ShardLoader<B>> {
      return std::make_unique<detail::StreamShardLoader<S, B>>(base, o, collate_b);
    };
  }

  /// An IterableDataset<S> whose samples stack (collate.h) into B.
  template <typename D,
            std::enable_if_t<std::is_base_of_v<IterableDataset<typename D::SampleType>, D>, int> = 0>
  DataSource(std::shared_ptr<D> dataset, LoaderOptions options)
      : DataSource(std::move(dataset), std::move(options), [](std::vector<typename D::SampleType>&& samples) {
          return B(collate(std::move(samples)));
        }) {}

  /// The image datasets (B = Batch): ImageDataset(images, options.transform(), options.augment()).
  template <typename T,
            std::enable_if_t<std::is_same_v<B, Batch> && std::is_base_of_v<TensorDataset, T>, bool> = true>
  DataSource(std::shared_ptr<T> images, LoaderOptions options)
      : DataSource(std::shared_ptr<const Dataset<B>>(std::make_shared<ImageDataset>(
                       std::move(images), options.transform(), options.augment())),
                   options) {}

  /// Shuffle map-style datasets every epoch (DistributedSampler with seed + epoch); false keeps dataset
  /// order. Streams are read in their own order.
  LOCKSTEP_OPTION(DataSource, bool, shuffle)

  const LoaderOptions& options() const { return options_; }
  bool iterable() const { return iterable_; }
  const std::string& description() const { return description_; }

  /// A loader of this rank's shards (ShardLoader::start picks the epoch and the rank).
  std::unique_ptr<ShardLoader<B>> make_loader() const { return factory_(options_, shuffle_); }

 private:
  template <typename T>
  static const T* checked(const T* dataset) {
    if (!dataset) throw std::invalid_argument("DataSource: the dataset must not be null");
    return dataset;
  }

  LoaderOptions options_;
  std::string description_;
  bool iterable_ = false;
  bool shuffle_ = true;
  std::function<std::unique_ptr<ShardLoader<B>>(const LoaderOptions&, bool)> factory_;
};

}  // namespace lockstep::data
