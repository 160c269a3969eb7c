#pragma once

#include "lockstep/data/tensor_dataset.h"

#include <string>

namespace lockstep::data {

/// CIFAR-10 in its binary format (https://www.cs.toronto.edu/~kriz/cifar.html, "CIFAR-10 binary
/// version"): each record is 1 label byte (0..9) followed by 3072 pixel bytes, 3 x 32 x 32 channel-major
/// (all red, then green, then blue). Images are stored as uint8 [N, 3, 32, 32].
///
/// Example:
///   auto train = Cifar10Dataset::from_dir("data/cifar-10-batches-bin", Split::kTrain);  // 50000 images
class Cifar10Dataset : public TensorDataset {
 public:
  /// Loads data_batch_1.bin .. data_batch_5.bin (Split::kTrain) or test_batch.bin (Split::kTest) from
  /// `dir`, or from `dir`/cifar-10-batches-bin when they are not directly in `dir`. Throws DataError
  /// naming the file when one is missing or unreadable, when its size is not a multiple of 3073 bytes,
  /// or when a label is >= 10 (the record is named).
  static Cifar10Dataset from_dir(const std::string& dir, Split split);

 private:
  explicit Cifar10Dataset(TensorDataset loaded) : TensorDataset(std::move(loaded)) {}
};

}  // namespace lockstep::data
