#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "lockstep/detail/option.h"
#include "lockstep/models/classifier.h"
#include "lockstep/models/staged.h"

namespace lockstep::models {

/// Options of ResNet18.
///
/// Example:
///   ResNet18 model(ResNet18Options().in_channels(1));   // Fashion-MNIST
class ResNet18Options {
 public:
  LOCKSTEP_OPTION(ResNet18Options, int64_t, in_channels)
  LOCKSTEP_OPTION(ResNet18Options, int64_t, num_classes)

 private:
  int64_t in_channels_ = 3;
  int64_t num_classes_ = 10;
};

/// ResNet's basic block: conv 3×3 (stride) → BN → ReLU → conv 3×3 → BN, plus the shortcut (identity,
/// or 1×1 conv (stride) → BN when the shape changes), then ReLU. Parameter names: conv1, bn1, conv2,
/// bn2, shortcut.0 (conv), shortcut.1 (BN).
class BasicBlockImpl : public torch::nn::Module {
 public:
  BasicBlockImpl(int64_t in_planes, int64_t planes, int64_t stride);
  at::Tensor forward(at::Tensor x);

 private:
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr}, bn2_{nullptr};
  torch::nn::Sequential shortcut_{nullptr};
};
TORCH_MODULE(BasicBlock);

/// ResNet18 in its CIFAR form (He et al. 2016, as in the usual CIFAR-10 recipes): a 3×3 stride-1 stem
/// (64 channels, BN, ReLU, no max-pool), four stages of two BasicBlocks (64, 128, 256, 512 channels,
/// strides 1, 2, 2, 2), adaptive average pool to 1×1 and a Linear classifier. 11,173,962 parameters for
/// 3 input channels and 10 classes (11,172,810 for 1 channel). Works on 28×28 and 32×32 images (any
/// size ≥ 8×8 keeps every stage non-empty). Parameter names follow torchvision's scheme: conv1, bn1,
/// layer1.0.conv1, …, layer4.1.bn2, layer2.0.shortcut.0, fc. Staged (models/staged.h) in six stages: the
/// stem (conv1, bn1), layer1 … layer4, and the head (pool, fc), so that FSDP's units can be smaller than
/// the whole model (its size policy at 1M parameters: stem to layer3, layer4, the head).
///
/// Example:
///   ResNet18 model;
///   auto logits = model->forward(torch::rand({8, 3, 32, 32}));   // [8, 10]
class ResNet18Impl : public ClassifierImpl, public Staged {
 public:
  /// Throws c10::Error naming the field for a non-positive in_channels or num_classes.
  explicit ResNet18Impl(ResNet18Options options = {});

  /// `x`: [B, in_channels, H, W].
  at::Tensor forward(at::Tensor x) override;
  /// stem (a module holding conv1 and bn1, made on each call: not part of the module tree), layer1-4, fc.
  std::vector<std::shared_ptr<torch::nn::Module>> stage_modules() override;

  const ResNet18Options& options() const { return options_; }

 private:
  ResNet18Options options_;
  torch::nn::Conv2d conv1_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr};
  torch::nn::Sequential layer1_{nullptr}, layer2_{nullptr}, layer3_{nullptr}, layer4_{nullptr};
  torch::nn::Linear fc_{nullptr};
};
TORCH_MODULE(ResNet18);

}  // namespace lockstep::models
