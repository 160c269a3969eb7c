#pragma once

#include "lockstep/detail/option.h"

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>

#include <cstdint>
#include <vector>

namespace lockstep::data {

/// What a Transform does to a batch: torchvision's RandomCrop(size, padding) and RandomHorizontalFlip()
/// (only when asked to augment), then ToTensor() and Normalize(mean, std).
///
/// Example (CIFAR-10's usual pipeline):
///   TransformOptions().mean({0.4914, 0.4822, 0.4465}).std({0.2470, 0.2435, 0.2616})
///                     .random_crop_padding(4).horizontal_flip(true)
class TransformOptions {
 public:
  /// Per-channel mean subtracted after scaling to [0, 1]: empty (0), one value for all channels, or one
  /// per channel.
  LOCKSTEP_OPTION(TransformOptions, std::vector<double>, mean)
  /// Per-channel standard deviation divided by: empty (1), one value, or one per channel; each != 0.
  LOCKSTEP_OPTION(TransformOptions, std::vector<double>, std)
  /// Augmentation: pad each side with this many zero pixels, then crop back to H x W at a random offset
  /// (torchvision RandomCrop(size, padding)); 0 turns it off.
  LOCKSTEP_OPTION(TransformOptions, int64_t, random_crop_padding)
  /// Augmentation: mirror each image left-right with probability 0.5.
  LOCKSTEP_OPTION(TransformOptions, bool, horizontal_flip)

 private:
  std::vector<double> mean_;
  std::vector<double> std_;
  int64_t random_crop_padding_ = 0;
  bool horizontal_flip_ = false;
};

/// TransformOptions resolved for images with a given number of channels: turns a uint8 [B, C, H, W]
/// batch into a new float32 [B, C, H, W] one, (x / 255 - mean[c]) / std[c] computed in float32 as
/// torchvision does (bit-identical values, through a 256-entry table per channel), optionally after
/// the random crop and flip. One pass over the batch, no per-sample tensors. Immutable, so one instance
/// may be used by several threads at once.
///
/// Example:
///   Transform t(TransformOptions().mean({0.5}).std({0.5}), /*channels=*/1);
///   at::Tensor x = t(batch_u8);                 // normalise only
///   at::Tensor y = t.augment(batch_u8, /*seed=*/42);  // crop/flip drawn from 42, then normalise
class Transform {
 public:
  /// Throws std::invalid_argument naming the option when mean or std has a size other than 0, 1 or
  /// `channels`, a std is 0, random_crop_padding < 0, or channels < 1.
  Transform(TransformOptions options, int64_t channels);

  /// Normalises `images` (uint8 [B, C, H, W] with C == channels(); throws std::invalid_argument
  /// otherwise). No augmentation.
  at::Tensor operator()(const at::Tensor& images) const;

  /// Applies the crop/flip selected in the options (each sample's offsets and flip drawn from `seed`
  /// alone, so the result is reproducible), then normalises.
  at::Tensor augment(const at::Tensor& images, uint64_t seed) const;

  /// As augment(images, seed), with the seed drawn from `generator` (a CPU generator; advances it).
  at::Tensor augment(const at::Tensor& images, at::Generator& generator) const;

  /// Fused gather + transform: the result equals (*this)(images.index_select(0, rows)) (or augment(...,
  /// *seed) when `seed` is given) for a whole dataset's uint8 [N, C, H, W] `images`, without the
  /// intermediate uint8 batch. Rows must be in [0, N) (not checked here: the Loader checks them once per
  /// epoch).
  at::Tensor gather(const at::Tensor& images, c10::ArrayRef<int64_t> rows,
                    const uint64_t* seed = nullptr) const;

  int64_t channels() const { return channels_; }
  const TransformOptions& options() const { return options_; }

 private:
  // images as a contiguous tensor, after checking dtype, rank, channels and device.
  at::Tensor checked(const at::Tensor& images) const;
  // Writes the transformed samples rows[0..count) (0..count-1 when rows is null) into a new tensor.
  at::Tensor run(const uint8_t* base, const int64_t* rows, int64_t count, int64_t height, int64_t width,
                 const uint64_t* seed) const;

  TransformOptions options_;
  int64_t channels_;
  // table_[c * 256 + v]: the normalised value of grey level v in channel c.
  std::vector<float> table_;
};

}  // namespace lockstep::data
