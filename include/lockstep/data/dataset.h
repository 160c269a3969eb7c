#pragma once

#include <c10/util/ArrayRef.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "lockstep/data/collate.h"

namespace lockstep::data {

/// Which batch a loader is building: handed to Dataset::get_batch so that a dataset's randomness
/// (augmentation, masking, noise) can depend on the batch alone, not on which worker thread builds it or
/// when: resuming mid-epoch then rebuilds the same bytes.
struct BatchKey {
  int64_t epoch = 0;  ///< the epoch the batch belongs to
  int64_t index = 0;  ///< its position in this rank's epoch (0, 1, ...)
  /// A seed mixed from (LoaderOptions::seed, epoch, index): seed a generator with it for per-batch
  /// randomness (at::detail::createCPUGenerator(key.seed)).
  uint64_t seed = 0;
};

/// A map-style dataset (torch.utils.data.Dataset, LibTorch's torch::data::datasets::Dataset): a size and
/// the batch of any list of sample indices. `B` is whatever the user's training_step takes (see
/// BatchTraits in batch.h for the types lockstep knows and how to add one).
///
/// get_batch is called from the loader's worker threads, several at once: it must be safe to call
/// concurrently (it is const; keep mutable state out, or guard it).
///
/// Lockstep's own: ImageDataset (the image datasets with their transforms); make_dataset (a size and a
/// per-sample function); from_torch (any torch::data dataset, torch_data.h). Or derive from it:
///   struct Rows : Dataset<std::tuple<at::Tensor, at::Tensor>> {
///     int64_t size() const override { return x.size(0); }
///     std::tuple<at::Tensor, at::Tensor> get_batch(c10::ArrayRef<int64_t> i, const BatchKey&) const override
///     {
///       const at::Tensor rows = at::tensor(i, at::kLong);
///       return {x.index_select(0, rows), y.index_select(0, rows)};
///     }
///     at::Tensor x, y;
///   };
template <typename B>
class Dataset {
 public:
  using BatchType = B;
  virtual ~Dataset() = default;
  /// The number of samples; indices handed to get_batch lie in [0, size()).
  virtual int64_t size() const = 0;
  /// The batch of the samples at `indices`, in that order (1 to batch_size of them).
  virtual B get_batch(c10::ArrayRef<int64_t> indices, const BatchKey& key) const = 0;
  /// Where the data came from, for logs and error messages.
  virtual std::string description() const { return "a dataset of " + std::to_string(size()) + " samples"; }
};

/// A Dataset from a size and a function returning one sample, batched by `collate` (stacking, collate.h,
/// by default).
template <typename S, typename B = CollateResult<S>>
class SampleDataset : public Dataset<B> {
 public:
  using GetFn = std::function<S(int64_t index)>;
  using CollateFn = std::function<B(std::vector<S>&&)>;

  SampleDataset(int64_t size, GetFn get, CollateFn collate_fn, std::string description)
      : size_(size),
        get_(std::move(get)),
        collate_(std::move(collate_fn)),
        description_(std::move(description)) {
    if (size_ < 0)
      throw std::invalid_argument("SampleDataset: size must be >= 0, got " + std::to_string(size_));
    if (!get_) throw std::invalid_argument("SampleDataset: the sample function is empty");
    if (!collate_) throw std::invalid_argument("SampleDataset: the collate function is empty");
  }

  int64_t size() const override { return size_; }
  B get_batch(c10::ArrayRef<int64_t> indices, const BatchKey& /*key*/) const override {
    std::vector<S> samples;
    samples.reserve(indices.size());
    for (int64_t i : indices) samples.push_back(get_(i));
    return collate_(std::move(samples));
  }
  std::string description() const override { return description_; }

 private:
  int64_t size_;
  GetFn get_;
  CollateFn collate_;
  std::string description_;
};

/// A dataset of `size` samples, sample i being get(i) (a tensor, a torch::data::Example<> or a tuple of
/// tensors), stacked into batches. `get` must be safe to call from several threads at once.
///
/// Example (a regression on rows of two tensors):
///   auto ds = make_dataset(x.size(0), [x, y](int64_t i) { return std::make_tuple(x[i], y[i]); });
template <typename F>
auto make_dataset(int64_t size, F get, std::string description = "") {
  using S = std::invoke_result_t<F, int64_t>;
  if (description.empty()) description = "a dataset of " + std::to_string(size) + " samples";
  return std::make_shared<SampleDataset<S>>(
      size, std::move(get), [](std::vector<S>&& samples) { return collate(std::move(samples)); },
      std::move(description));
}

/// As make_dataset, with a collate function of the user's: collate_fn(std::vector<S>&&) -> the batch.
template <typename F, typename C,
          std::enable_if_t<std::is_invocable_v<C, std::vector<std::invoke_result_t<F, int64_t>>&&>, int> = 0>
auto make_dataset(int64_t size, F get, C collate_fn, std::string description = "") {
  using S = std::invoke_result_t<F, int64_t>;
  using B = std::invoke_result_t<C, std::vector<S>&&>;
  if (description.empty()) description = "a dataset of " + std::to_string(size) + " samples";
  return std::make_shared<SampleDataset<S, B>>(size, std::move(get), std::move(collate_fn),
                                               std::move(description));
}

}  // namespace lockstep::data
