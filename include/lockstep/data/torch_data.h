#pragma once

// Interop with LibTorch's own data API (torch::data): its datasets feed lockstep's Trainer and
// Accelerator, and lockstep's DistributedSampler drives torch::data::make_data_loader.

#include <torch/csrc/utils/variadic.h>  // before map.h, which uses its disable_if_t (LibTorch 1.13)
#include <torch/data/datasets/base.h>
#include <torch/data/datasets/map.h>
#include <torch/data/example.h>
#include <torch/data/samplers/base.h>
#include <torch/serialize/archive.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "lockstep/data/collate.h"
#include "lockstep/data/dataset.h"
#include "lockstep/data/distributed_sampler.h"

namespace lockstep::data {
namespace detail {

template <typename T>
struct IsVector : std::false_type {};
template <typename T>
struct IsVector<std::vector<T>> : std::true_type {};

/// The batch a torch::data dataset gives lockstep: its own batch type, except that a std::vector of
/// examples (a dataset without Stack<>) is stacked (collate.h) as Stack<> would.
template <typename D, bool = IsVector<typename D::BatchType>::value>
struct TorchBatch {
  using Type = typename D::BatchType;
  static Type convert(Type&& batch) { return std::move(batch); }
};
template <typename D>
struct TorchBatch<D, true> {
  using Type = CollateResult<typename D::BatchType::value_type>;
  static Type convert(typename D::BatchType&& batch) { return collate(std::move(batch)); }
};

}  // namespace detail

/// A torch::data map-style dataset (a torch::data::datasets::Dataset<Self, Example>, or one after
/// `.map(...)` transforms such as Normalize<> and Stack<>) as a lockstep Dataset. Each thread that builds
/// batches uses its own copy of the dataset, as torch::data's workers do, so the dataset must be
/// copyable and its copies independent. Stateful (chunk) datasets have no random access: wrap them as
/// an IterableDataset.
template <typename D>
class TorchDataset : public Dataset<typename detail::TorchBatch<D>::Type> {
 public:
  using BatchType = typename detail::TorchBatch<D>::Type;

  /// Throws std::invalid_argument when the dataset has no size (size() returns nullopt).
  explicit TorchDataset(D dataset, std::string description = "a torch::data dataset")
      : prototype_(std::move(dataset)), description_(std::move(description)) {
    const auto size = prototype_.size();
    if (!size.has_value()) {
      throw std::invalid_argument("TorchDataset: '" + description_ +
                                  "' has no size(): a map-style dataset needs one (wrap a stream as an "
                                  "IterableDataset instead)");
    }
    size_ = static_cast<int64_t>(*size);
  }

  int64_t size() const override { return size_; }
  BatchType get_batch(c10::ArrayRef<int64_t> indices, const BatchKey& /*key*/) const override {
    std::vector<size_t> request(indices.begin(), indices.end());
    Borrowed copy(*this);
    return detail::TorchBatch<D>::convert(copy.dataset->get_batch(request));
  }
  std::string description() const override { return description_; }

 private:
  // A copy of the dataset for one get_batch, taken from (and given back to) a pool: at most as many
  // copies as threads building batches at once.
  struct Borrowed {
    explicit Borrowed(const TorchDataset& owner) : owner(owner) {
      std::lock_guard<std::mutex> lock(owner.mutex_);
      if (owner.pool_.empty()) {
        dataset = std::make_unique<D>(owner.prototype_);
      } else {
        dataset = std::move(owner.pool_.back());
        owner.pool_.pop_back();
      }
    }
    ~Borrowed() {
      std::lock_guard<std::mutex> lock(owner.mutex_);
      owner.pool_.push_back(std::move(dataset));
    }
    const TorchDataset& owner;
    std::unique_ptr<D> dataset;
  };

  D prototype_;
  std::string description_;
  int64_t size_ = 0;
  mutable std::mutex mutex_;
  mutable std::vector<std::unique_ptr<D>> pool_;
};

/// Wraps a torch::data dataset for the Trainer, the Accelerator or a BasicLoader.
///
/// Example:
///   auto mnist = torch::data::datasets::MNIST(dir).map(torch::data::transforms::Normalize<>(0.1307,
///   0.3081)); auto dataset = from_torch(std::move(mnist));   // Dataset<torch::data::Example<>>, stacked
template <typename D>
std::shared_ptr<TorchDataset<D>> from_torch(D dataset, std::string description = "a torch::data dataset") {
  return std::make_shared<TorchDataset<D>>(std::move(dataset), std::move(description));
}

/// lockstep's DistributedSampler as a torch::data sampler, for a torch::data::make_data_loader loop of
/// the user's: the indices of PyTorch's torch.utils.data.DistributedSampler (which LibTorch's own
/// DistributedRandomSampler does not give), set_epoch included. reset() rewinds the epoch set by
/// set_epoch (make_data_loader's iterator calls it at each begin()); save()/load() keep the epoch and
/// the position within it.
///
/// Example:
///   auto sampler = TorchDistributedSampler(dataset.size().value(), DistributedSamplerOptions(world, rank));
///   auto loader = torch::data::make_data_loader(std::move(dataset), sampler_copy, ...);  // see docs/data.md
class TorchDistributedSampler : public torch::data::samplers::Sampler<std::vector<size_t>> {
 public:
  TorchDistributedSampler(int64_t dataset_size, DistributedSamplerOptions options)
      : sampler_(dataset_size, std::move(options)) {
    reset(torch::optional<size_t>());
  }

  /// The epoch of the next reset() (and its shuffle): call it before each epoch, as in PyTorch.
  void set_epoch(int64_t epoch) {
    sampler_.set_epoch(epoch);
    reset(torch::optional<size_t>());
  }
  int64_t epoch() const { return sampler_.epoch(); }

  /// Rewinds to the start of the current epoch; a new size re-plans it for that dataset size.
  void reset(torch::optional<size_t> new_size = torch::nullopt) override {
    if (new_size.has_value() && static_cast<int64_t>(*new_size) != sampler_.dataset_size()) {
      sampler_ = DistributedSampler(static_cast<int64_t>(*new_size), sampler_.options());
    }
    indices_ = sampler_.indices();
    position_ = 0;
  }

  /// The next `batch_size` indices of this rank's shard (fewer at its end), nullopt after it.
  torch::optional<std::vector<size_t>> next(size_t batch_size) override {
    if (position_ >= indices_.size()) return torch::nullopt;
    const size_t end = std::min(indices_.size(), position_ + batch_size);
    std::vector<size_t> batch(indices_.begin() + static_cast<std::ptrdiff_t>(position_),
                              indices_.begin() + static_cast<std::ptrdiff_t>(end));
    position_ = end;
    return batch;
  }

  void save(torch::serialize::OutputArchive& archive) const override {
    archive.write("epoch", torch::tensor(sampler_.epoch(), torch::kInt64), /*is_buffer=*/true);
    archive.write("position", torch::tensor(static_cast<int64_t>(position_), torch::kInt64),
                  /*is_buffer=*/true);
  }
  void load(torch::serialize::InputArchive& archive) override {
    torch::Tensor epoch, position;
    archive.read("epoch", epoch, /*is_buffer=*/true);
    archive.read("position", position, /*is_buffer=*/true);
    sampler_.set_epoch(epoch.item<int64_t>());
    indices_ = sampler_.indices();
    position_ = static_cast<size_t>(position.item<int64_t>());
  }

  const DistributedSampler& sampler() const { return sampler_; }
  /// Indices given out so far this epoch.
  size_t position() const { return position_; }

 private:
  DistributedSampler sampler_;
  std::vector<int64_t> indices_;
  size_t position_ = 0;
};

}  // namespace lockstep::data
