#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

namespace lockstep::data {

/// Which part of a dataset to load: the training or the test (validation) split.
enum class Split { kTrain, kTest };

/// Returns "train" or "test".
const char* to_string(Split split);

/// A whole dataset held in memory as two CPU tensors: images uint8 [N, C, H, W] (contiguous) and labels
/// int64 [N] (values >= 0). The base of IdxDataset, Cifar10Dataset and SyntheticDataset; the Loader
/// gathers batches from it. Cheap to copy (the tensors are reference-counted, not copied) and immutable,
/// so one instance may be shared by any number of threads.
///
/// Example:
///   TensorDataset ds(at::zeros({8, 1, 4, 4}, at::kByte), at::arange(8, at::kLong) % 2, "toy");
///   ds.size();  // 8
class TensorDataset {
 public:
  /// An empty dataset (size() == 0, undefined tensors).
  TensorDataset() = default;

  /// Throws std::invalid_argument naming the bad shape or dtype unless images is a CPU uint8 tensor
  /// [N, C, H, W] with C, H, W >= 1 and labels a CPU int64 tensor [N] with values >= 0. A non-contiguous
  /// images tensor is made contiguous (one copy).
  TensorDataset(at::Tensor images, at::Tensor labels, std::string description);

  /// uint8 [N, C, H, W], contiguous.
  const at::Tensor& images() const { return images_; }
  /// int64 [N], values >= 0.
  const at::Tensor& labels() const { return labels_; }
  /// N: the number of samples (0 for a default-constructed dataset).
  int64_t size() const { return images_.defined() ? images_.size(0) : 0; }
  /// C, H, W of each image (0 for a default-constructed dataset).
  int64_t channels() const { return images_.defined() ? images_.size(1) : 0; }
  int64_t height() const { return images_.defined() ? images_.size(2) : 0; }
  int64_t width() const { return images_.defined() ? images_.size(3) : 0; }
  /// Where the data came from, for logs, e.g. "IDX train split (60000 images 1x28x28) from /data".
  const std::string& description() const { return description_; }

 private:
  at::Tensor images_;
  at::Tensor labels_;
  std::string description_;
};

}  // namespace lockstep::data
