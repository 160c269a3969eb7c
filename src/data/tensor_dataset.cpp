#include "lockstep/data/tensor_dataset.h"

#include <ATen/ATen.h>

#include <sstream>
#include <stdexcept>
#include <utility>

namespace lockstep::data {

const char* to_string(Split split) {
  return split == Split::kTrain ? "train" : "test";
}

TensorDataset::TensorDataset(at::Tensor images, at::Tensor labels, std::string description)
    : description_(std::move(description)) {
  auto fail = [&](const std::string& what) {
    throw std::invalid_argument("TensorDataset '" + description_ + "': " + what);
  };
  if (!images.defined() || !labels.defined()) fail("images and labels must be defined tensors");
  if (images.scalar_type() != at::kByte || images.dim() != 4 || !images.device().is_cpu()) {
    std::ostringstream os;
    os << "images must be a CPU uint8 tensor [N, C, H, W], got " << images.scalar_type() << " "
       << images.sizes() << " on " << images.device();
    fail(os.str());
  }
  if (images.size(1) < 1 || images.size(2) < 1 || images.size(3) < 1) {
    std::ostringstream os;
    os << "images must have C, H, W >= 1, got shape " << images.sizes();
    fail(os.str());
  }
  if (labels.scalar_type() != at::kLong || labels.dim() != 1 || !labels.device().is_cpu() ||
      labels.size(0) != images.size(0)) {
    std::ostringstream os;
    os << "labels must be a CPU int64 tensor [N] with N = " << images.size(0) << " (the image count), got "
       << labels.scalar_type() << " " << labels.sizes() << " on " << labels.device();
    fail(os.str());
  }
  labels = labels.contiguous();
  if (labels.numel() > 0) {
    const int64_t* l = labels.data_ptr<int64_t>();
    for (int64_t i = 0; i < labels.numel(); ++i) {
      if (l[i] < 0)
        fail("labels must be >= 0, got " + std::to_string(l[i]) + " at index " + std::to_string(i));
    }
  }
  images_ = images.contiguous();
  labels_ = std::move(labels);
}

}  // namespace lockstep::data
