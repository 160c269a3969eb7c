// The image datasets as a Dataset<Batch>: see include/lockstep/data/image_dataset.h.
#include "lockstep/data/image_dataset.h"

#include <ATen/ATen.h>

#include <stdexcept>

namespace lockstep::data {
namespace {

const std::shared_ptr<const TensorDataset>& checked(const std::shared_ptr<const TensorDataset>& images) {
  if (!images)
    throw std::invalid_argument("ImageDataset: dataset must not be null (a TensorDataset of images)");
  if (!images->images().defined()) {
    throw std::invalid_argument("ImageDataset: dataset '" + images->description() +
                                "' is empty (default-constructed); load one first");
  }
  return images;
}

}  // namespace

ImageDataset::ImageDataset(std::shared_ptr<const TensorDataset> images, TransformOptions transform,
                           bool augment)
    : images_(checked(images)), transform_(std::move(transform), images_->channels()), augment_(augment) {}

Batch ImageDataset::get_batch(c10::ArrayRef<int64_t> indices, const BatchKey& key) const {
  Batch out;
  out.data = augment_ ? transform_.gather(images_->images(), indices, &key.seed)
                      : transform_.gather(images_->images(), indices);
  const auto count = static_cast<int64_t>(indices.size());
  out.target = at::empty({count}, at::kLong);
  int64_t* target = out.target.data_ptr<int64_t>();
  const int64_t* labels = images_->labels().data_ptr<int64_t>();
  for (int64_t i = 0; i < count; ++i) target[i] = labels[indices[static_cast<size_t>(i)]];
  return out;
}

}  // namespace lockstep::data
