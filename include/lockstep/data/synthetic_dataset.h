#pragma once

#include "lockstep/data/tensor_dataset.h"
#include "lockstep/detail/option.h"

#include <cstdint>

namespace lockstep::data {

/// Options of a SyntheticDataset.
///
/// Example:
///   SyntheticOptions().size(1024).channels(3).height(32).width(32).seed(7)
class SyntheticOptions {
 public:
  /// Number of samples, >= 0.
  LOCKSTEP_OPTION(SyntheticOptions, int64_t, size)
  /// Image shape C x H x W, each >= 1.
  LOCKSTEP_OPTION(SyntheticOptions, int64_t, channels)
  LOCKSTEP_OPTION(SyntheticOptions, int64_t, height)
  LOCKSTEP_OPTION(SyntheticOptions, int64_t, width)
  /// Number of classes, >= 1; labels are 0 .. num_classes - 1.
  LOCKSTEP_OPTION(SyntheticOptions, int64_t, num_classes)
  /// Seeds the class prototypes (the same for both splits) and, mixed with the split, the noise and the
  /// label order.
  LOCKSTEP_OPTION(SyntheticOptions, uint64_t, seed)

 private:
  int64_t size_ = 4096;
  int64_t channels_ = 1;
  int64_t height_ = 28;
  int64_t width_ = 28;
  int64_t num_classes_ = 10;
  uint64_t seed_ = 0;
};

/// A learnable stand-in for a real image dataset, for tests and benchmarks without data files: each
/// class has a fixed random prototype image (drawn from `seed` only, so train and test share them) and
/// each sample is its class prototype plus Gaussian noise (std 48 grey levels, drawn from seed and
/// split), clamped to 0..255. Labels are balanced (each class size/num_classes times, +-1) in a random
/// order. Fully deterministic in (options, split); a nearest-class-mean classifier is ~100% accurate, so
/// any model should train well above chance.
///
/// Example:
///   SyntheticDataset train(SyntheticOptions().size(60000), Split::kTrain);
class SyntheticDataset : public TensorDataset {
 public:
  /// Throws std::invalid_argument naming the option when a size, shape or class count is out of range.
  SyntheticDataset(SyntheticOptions options, Split split);
};

}  // namespace lockstep::data
