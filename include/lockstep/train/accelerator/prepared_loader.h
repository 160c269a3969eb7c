// What Accelerator::prepare makes of a dataset: DataLoaderSpec (the dataset and how to batch it) and
// BasicPreparedLoader (this rank's shard of it, iterated with a range-for).
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <utility>

#include "lockstep/data/batch.h"
#include "lockstep/data/shard_loader.h"

namespace lockstep::train {

/// A dataset and how to batch it: what Accelerator::prepare turns into this rank's shard (the C++ form of
/// handing Accelerate a `DataLoader(dataset, batch_size=64, shuffle=True)`): a data::DataSource<B> of any
/// dataset (map-style, iterable, torch::data, or the image datasets). batch_size is per rank.
///
/// Example:
///   auto spec = DataLoaderSpec(dataset,
///   data::LoaderOptions(/*batch_size=*/64).num_workers(2)).shuffle(true);
template <typename B>
using BasicDataLoaderSpec = data::DataSource<B>;
/// The image datasets' (batches of data::Batch).
using DataLoaderSpec = data::DataSource<data::Batch>;

class Accelerator;

namespace detail {
struct PreparedLoaderState;

/// The type-free part of a prepared loader (src/train/accelerator/prepared_loader.cpp): its shard loader,
/// epoch and position.
class PreparedLoaderCore {
 public:
  explicit PreparedLoaderCore(std::shared_ptr<PreparedLoaderState> state) : state_(std::move(state)) {}
  /// Starts a pass; false when it has no batch.
  bool begin_pass();
  /// The next batch of the pass; false (and the epoch advanced) after the last one.
  bool advance();
  /// The current batch (on the accelerator's device).
  void* current() const;
  void set_epoch(int64_t epoch);
  int64_t epoch() const;
  int64_t size() const;
  data::detail::AnyShardLoader& loader();

 private:
  std::shared_ptr<PreparedLoaderState> state_;
};
}  // namespace detail

/// This rank's shard of a dataset, batched, iterated with a range-for: a data::ShardLoader (the
/// DistributedSampler's indices of a map-style dataset, or this rank's positions of a stream). Each full
/// pass advances the epoch by one (so every epoch shuffles differently even without set_epoch, as in
/// Accelerate); set_epoch(e) picks the epoch of the next pass. Batches are moved to the accelerator's
/// device (data::BatchTraits). Not thread-safe; one pass at a time.
///
/// Example:
///   for (int64_t epoch = 0; epoch < 10; ++epoch) {
///     loader.set_epoch(epoch);
///     for (auto& batch : loader) train_step(batch.data, batch.target);
///   }
template <typename B>
class BasicPreparedLoader {
 public:
  /// An input iterator over one pass; dereferences to the current batch.
  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = B;
    using difference_type = std::ptrdiff_t;
    using pointer = B*;
    using reference = B&;

    Iterator() = default;
    B& operator*() const { return *static_cast<B*>(core_->current()); }
    B* operator->() const { return &**this; }
    Iterator& operator++() {
      if (core_ != nullptr && !core_->advance()) core_ = nullptr;
      return *this;
    }
    bool operator==(const Iterator& other) const { return core_ == other.core_; }
    bool operator!=(const Iterator& other) const { return core_ != other.core_; }

   private:
    friend class BasicPreparedLoader;
    explicit Iterator(detail::PreparedLoaderCore* core) : core_(core) {}
    detail::PreparedLoaderCore* core_ = nullptr;  // null: the end
  };

  /// Starts a pass over the current epoch's shard (cancelling an unfinished one).
  Iterator begin() { return core_->begin_pass() ? Iterator(core_.get()) : Iterator(); }
  Iterator end() { return Iterator(); }
  /// The epoch of the next pass (its shuffle).
  void set_epoch(int64_t epoch) { core_->set_epoch(epoch); }
  int64_t epoch() const { return core_->epoch(); }
  /// Batches per pass on this rank (the same on every rank); -1 for a stream of unknown length.
  int64_t size() const { return core_->size(); }
  /// The shard loader underneath.
  data::detail::AnyShardLoader& loader() { return core_->loader(); }

 private:
  friend class Accelerator;
  explicit BasicPreparedLoader(std::shared_ptr<detail::PreparedLoaderState> state)
      : core_(std::make_unique<detail::PreparedLoaderCore>(std::move(state))) {}
  std::unique_ptr<detail::PreparedLoaderCore> core_;
};

/// The image datasets' prepared loader (batches of data::Batch).
using PreparedLoader = BasicPreparedLoader<data::Batch>;

}  // namespace lockstep::train
