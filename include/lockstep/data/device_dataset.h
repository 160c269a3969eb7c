#pragma once

#include <memory>
#include <string>

#include <c10/core/Device.h>

#include "lockstep/data/batch.h"
#include "lockstep/data/dataset.h"
#include "lockstep/data/tensor_dataset.h"
#include "lockstep/data/transforms.h"

namespace lockstep::data {

/// An image dataset kept where the model trains (a GPU: Fashion-MNIST's 60,000 training images are
/// 188 MB as float32). Every image is normalised once, by the Transform the loader uses (ImageDataset,
/// so a batch holds exactly the bytes ImageDataset would build), then images and labels move to `device`,
/// and a batch is two index_selects there: no host work per batch but the copy of its indices. Use it with
/// num_workers 0 (the gathers are asynchronous kernels already). It does not augment: a random crop or
/// flip per batch is ImageDataset's work on the host.
///
/// Example:
///   auto train = std::make_shared<DeviceImageDataset>(fashion,
///   TransformOptions().mean({0.286}).std({0.353}),
///                                                     c10::Device(c10::kCUDA, 0));
class DeviceImageDataset : public Dataset<Batch> {
 public:
  /// Throws std::invalid_argument when `images` is null or empty, or `transform` asks for augmentation
  /// (random_crop_padding, horizontal_flip), naming the option and what to do instead.
  DeviceImageDataset(std::shared_ptr<const TensorDataset> images, TransformOptions transform,
                     c10::Device device);

  int64_t size() const override { return labels_.size(0); }
  /// Indices must lie in [0, size()) (the loader checks them once per epoch).
  Batch get_batch(c10::ArrayRef<int64_t> indices, const BatchKey& key) const override;
  std::string description() const override { return description_; }
  const c10::Device& device() const { return device_; }

 private:
  at::Tensor images_;  // float32 [N, C, H, W], normalised, on device_
  at::Tensor labels_;  // int64 [N], on device_
  c10::Device device_;
  std::string description_;
};

}  // namespace lockstep::data
