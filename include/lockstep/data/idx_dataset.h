#pragma once

#include "lockstep/data/tensor_dataset.h"

#include <string>

namespace lockstep::data {

/// MNIST / Fashion-MNIST in the IDX format (http://yann.lecun.com/exdb/mnist/): an images file (magic
/// 0x00000803, uint8 N x H x W) and a labels file (magic 0x00000801, uint8 N), each plain or gzipped
/// (detected by the gzip magic bytes 1f 8b, not by the file name). Images are stored as [N, 1, H, W].
/// Each file is read whole into memory and decoded in one pass (the 60000-image Fashion-MNIST .gz
/// training set loads in about 0.2 s).
///
/// Example:
///   auto train = IdxDataset::from_dir("/usr/share/datasets/fashion-mnist", Split::kTrain);
///   auto test = IdxDataset("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz");
class IdxDataset : public TensorDataset {
 public:
  /// Loads a pair of IDX files. Throws DataError naming the file when it is missing or unreadable, when
  /// a magic number is wrong (expected vs got, in hex), when a dimension is zero or implausible, when the
  /// payload length differs from the header's (expected vs got bytes: truncated file), when the gzip
  /// stream is corrupt, or when the two files hold different counts (both files and both counts named).
  IdxDataset(const std::string& images_file, const std::string& labels_file);

  /// Loads train-{images-idx3,labels-idx1}-ubyte[.gz] (Split::kTrain) or t10k-... (Split::kTest) from
  /// `dir`, preferring the uncompressed file when both exist. Throws DataError naming the path when the
  /// directory or a file is missing, and saying how to get the data (install dataset-fashion-mnist or
  /// pass --data-dir).
  static IdxDataset from_dir(const std::string& dir, Split split);

 private:
  explicit IdxDataset(TensorDataset loaded) : TensorDataset(std::move(loaded)) {}
};

}  // namespace lockstep::data
