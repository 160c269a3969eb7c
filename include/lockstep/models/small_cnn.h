#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "lockstep/detail/option.h"
#include "lockstep/models/classifier.h"

namespace lockstep::models {

/// Options of SmallCnn.
///
/// Example:
///   SmallCnn model(SmallCnnOptions().in_channels(3));   // CIFAR-10
class SmallCnnOptions {
 public:
  LOCKSTEP_OPTION(SmallCnnOptions, int64_t, in_channels)
  LOCKSTEP_OPTION(SmallCnnOptions, int64_t, num_classes)
  /// Dropout probability before fc2, in [0, 1).
  LOCKSTEP_OPTION(SmallCnnOptions, double, dropout)

 private:
  int64_t in_channels_ = 1;
  int64_t num_classes_ = 10;
  double dropout_ = 0.2;
};

/// A small three-convolution network (93,482 parameters for 1×28×28, 10 classes; 94,058 for 3×32×32):
///   conv1 3×3, 32 → BN → ReLU → max-pool 2   (28×28 → 14×14)
///   conv2 3×3, 64 → BN → ReLU → max-pool 2   (14×14 → 7×7)
///   conv3 3×3, 64 → BN → ReLU                (7×7)
///   adaptive max pool to 3×3 → flatten (576) → fc1 (64) → ReLU → dropout (0.2) → fc2
/// The adaptive pool makes the head independent of the image size (28×28, 32×32, anything ≥ 4×4); on
/// 7×7 its windows are 3 wide with stride 2, so no row or column is dropped.
/// Parameter names: conv1.weight, bn1.{weight,bias}, conv2.weight, bn2.*, conv3.weight, bn3.*, fc1.*, fc2.*.
///
/// Example:
///   SmallCnn model;
///   auto logits = model->forward(torch::rand({64, 1, 28, 28}));   // [64, 10]
class SmallCnnImpl : public ClassifierImpl {
 public:
  /// Throws c10::Error naming the field for a non-positive in_channels or num_classes.
  explicit SmallCnnImpl(SmallCnnOptions options = {});

  /// `x`: [B, in_channels, H, W] with H, W ≥ 4.
  at::Tensor forward(at::Tensor x) override;

  const SmallCnnOptions& options() const { return options_; }

 private:
  SmallCnnOptions options_;
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr}, conv3_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr}, bn2_{nullptr}, bn3_{nullptr};
  torch::nn::Dropout dropout_{nullptr};
  torch::nn::Linear fc1_{nullptr}, fc2_{nullptr};
};
TORCH_MODULE(SmallCnn);

}  // namespace lockstep::models
