#include "lockstep/models/small_cnn.h"

#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/pooling.h>

namespace lockstep::models {

namespace {
constexpr int64_t kConv1Channels = 32;
constexpr int64_t kConv2Channels = 64;
constexpr int64_t kConv3Channels = 64;
constexpr int64_t kPooledSize = 3;  // adaptive max pool to 3x3 before the head
constexpr int64_t kHidden = 64;
}  // namespace

SmallCnnImpl::SmallCnnImpl(SmallCnnOptions options) : options_(options) {
  TORCH_CHECK(options_.dropout() >= 0.0 && options_.dropout() < 1.0,
              "SmallCnnOptions::dropout must be in [0, 1), got ", options_.dropout());
  TORCH_CHECK(options_.in_channels() > 0, "SmallCnnOptions::in_channels must be > 0, got ",
              options_.in_channels());
  TORCH_CHECK(options_.num_classes() > 0, "SmallCnnOptions::num_classes must be > 0, got ",
              options_.num_classes());
  // Convolutions feed BatchNorm, so they carry no bias of their own.
  conv1_ = register_module(
      "conv1",
      torch::nn::Conv2d(torch::nn::Conv2dOptions(options_.in_channels(), kConv1Channels, /*kernel_size=*/3)
                            .padding(1)
                            .bias(false)));
  bn1_ = register_module("bn1", torch::nn::BatchNorm2d(kConv1Channels));
  conv2_ = register_module(
      "conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(kConv1Channels, kConv2Channels, /*kernel_size=*/3)
                                     .padding(1)
                                     .bias(false)));
  bn2_ = register_module("bn2", torch::nn::BatchNorm2d(kConv2Channels));
  conv3_ = register_module(
      "conv3", torch::nn::Conv2d(torch::nn::Conv2dOptions(kConv2Channels, kConv3Channels, /*kernel_size=*/3)
                                     .padding(1)
                                     .bias(false)));
  bn3_ = register_module("bn3", torch::nn::BatchNorm2d(kConv3Channels));
  dropout_ = register_module("dropout", torch::nn::Dropout(torch::nn::DropoutOptions(options_.dropout())));
  fc1_ = register_module("fc1", torch::nn::Linear(kConv3Channels * kPooledSize * kPooledSize, kHidden));
  fc2_ = register_module("fc2", torch::nn::Linear(kHidden, options_.num_classes()));
}

at::Tensor SmallCnnImpl::forward(at::Tensor x) {
  TORCH_CHECK(x.dim() == 4 && x.size(1) == options_.in_channels(), "SmallCnn::forward: expected [B, ",
              options_.in_channels(), ", H, W] input (SmallCnnOptions::in_channels), got ", x.sizes());
  TORCH_CHECK(x.size(2) >= kPooledSize && x.size(3) >= kPooledSize,
              "SmallCnn::forward: images must be at least 4x4, got ", x.size(2), "x", x.size(3));
  namespace F = torch::nn::functional;
  x = torch::relu(bn1_->forward(conv1_->forward(x)));
  x = F::max_pool2d(x, F::MaxPool2dFuncOptions(2));
  x = torch::relu(bn2_->forward(conv2_->forward(x)));
  x = F::max_pool2d(x, F::MaxPool2dFuncOptions(2));
  x = torch::relu(bn3_->forward(conv3_->forward(x)));
  // 7x7 -> 3x3 through overlapping 3x3 windows (rows/columns 0-2, 2-4, 4-6), so no edge is dropped.
  x = F::adaptive_max_pool2d(x, F::AdaptiveMaxPool2dFuncOptions({kPooledSize, kPooledSize}));
  x = x.flatten(1);
  x = dropout_->forward(torch::relu(fc1_->forward(x)));
  return fc2_->forward(x);
}

}  // namespace lockstep::models
