#pragma once

#include <memory>
#include <string>

#include "lockstep/data/batch.h"
#include "lockstep/data/dataset.h"
#include "lockstep/data/tensor_dataset.h"
#include "lockstep/data/transforms.h"

namespace lockstep::data {

/// The image datasets (IdxDataset, Cifar10Dataset, SyntheticDataset: a TensorDataset of uint8 images and
/// labels) as a Dataset<Batch>: a batch is gathered straight from the contiguous uint8 images into one
/// float32 tensor, normalised, and with `augment` randomly cropped and flipped from BatchKey::seed
/// (Transform::gather): no per-sample tensors, the same bytes whichever thread builds it.
///
/// Example:
///   auto train = std::make_shared<ImageDataset>(images, TransformOptions().mean({0.5}).std({0.5}), true);
class ImageDataset : public Dataset<Batch> {
 public:
  /// Throws std::invalid_argument when `images` is null, or the transform options do not fit its channels.
  ImageDataset(std::shared_ptr<const TensorDataset> images, TransformOptions transform = {},
               bool augment = false);

  int64_t size() const override { return images_->size(); }
  /// Indices must lie in [0, size()) (the loader checks them once per epoch).
  Batch get_batch(c10::ArrayRef<int64_t> indices, const BatchKey& key) const override;
  std::string description() const override { return images_->description(); }

  const TensorDataset& images() const { return *images_; }
  const Transform& transform() const { return transform_; }
  bool augment() const { return augment_; }

 private:
  std::shared_ptr<const TensorDataset> images_;
  Transform transform_;
  bool augment_;
};

}  // namespace lockstep::data
