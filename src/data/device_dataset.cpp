// An image dataset kept on the training device: see include/lockstep/data/device_dataset.h.
#include "lockstep/data/device_dataset.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "lockstep/data/image_dataset.h"

namespace lockstep::data {
namespace {

const std::shared_ptr<const TensorDataset>& checked(const std::shared_ptr<const TensorDataset>& images,
                                                    const TransformOptions& transform) {
  if (!images || !images->images().defined() || images->size() == 0) {
    throw std::invalid_argument("DeviceImageDataset: the dataset is null or empty: load one first");
  }
  if (transform.random_crop_padding() > 0 || transform.horizontal_flip()) {
    throw std::invalid_argument(
        "DeviceImageDataset: '" + images->description() + "' asks for augmentation (random_crop_padding " +
        std::to_string(transform.random_crop_padding()) + ", horizontal_flip " +
        (transform.horizontal_flip() ? "on" : "off") +
        "), which data kept on the device does not do (it is normalised once): turn augmentation off, or "
        "load the data from the host (ImageDataset)");
  }
  return images;
}

}  // namespace

DeviceImageDataset::DeviceImageDataset(std::shared_ptr<const TensorDataset> images,
                                       TransformOptions transform, c10::Device device)
    : device_(device) {
  const ImageDataset host(checked(images, transform), std::move(transform), /*augment=*/false);
  std::vector<int64_t> all(static_cast<size_t>(host.size()));
  std::iota(all.begin(), all.end(), int64_t{0});
  const Batch whole = host.get_batch(all, BatchKey{});  // the loader's own normalisation, once
  images_ = whole.data.to(device_);
  labels_ = whole.target.to(device_);
  description_ = host.description() + " (on " + device_.str() + ")";
}

// The indices go to the device from pinned memory: from pageable memory CUDA copies synchronously, and the
// host would wait for the GPU to drain at every batch (seen on the H100: slower than the host loader).
Batch DeviceImageDataset::get_batch(c10::ArrayRef<int64_t> indices, const BatchKey& /*key*/) const {
  at::Tensor rows = at::empty({static_cast<int64_t>(indices.size())},
                              at::TensorOptions().dtype(at::kLong).pinned_memory(device_.is_cuda()));
  std::copy(indices.begin(), indices.end(), rows.data_ptr<int64_t>());
  rows = rows.to(device_, /*non_blocking=*/true);
  return {images_.index_select(0, rows), labels_.index_select(0, rows)};
}

}  // namespace lockstep::data
