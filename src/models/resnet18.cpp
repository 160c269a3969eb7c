#include "lockstep/models/resnet18.h"

#include <string>

#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/pooling.h>

namespace lockstep::models {

namespace {

torch::nn::Conv2d conv3x3(int64_t in_planes, int64_t planes, int64_t stride) {
  return torch::nn::Conv2d(
      torch::nn::Conv2dOptions(in_planes, planes, /*kernel_size=*/3).stride(stride).padding(1).bias(false));
}

// A stage: `blocks` BasicBlocks, the first with `stride` (and a projection shortcut when needed).
torch::nn::Sequential make_stage(int64_t& in_planes, int64_t planes, int64_t blocks, int64_t stride) {
  torch::nn::Sequential stage;
  for (int64_t i = 0; i < blocks; ++i) {
    stage->push_back(BasicBlock(in_planes, planes, i == 0 ? stride : 1));
    in_planes = planes;
  }
  return stage;
}

}  // namespace

BasicBlockImpl::BasicBlockImpl(int64_t in_planes, int64_t planes, int64_t stride) {
  TORCH_CHECK(in_planes > 0 && planes > 0 && stride > 0,
              "BasicBlock: in_planes, planes and stride must be > 0, got ", in_planes, ", ", planes, ", ",
              stride);
  conv1_ = register_module("conv1", conv3x3(in_planes, planes, stride));
  bn1_ = register_module("bn1", torch::nn::BatchNorm2d(planes));
  conv2_ = register_module("conv2", conv3x3(planes, planes, 1));
  bn2_ = register_module("bn2", torch::nn::BatchNorm2d(planes));
  if (stride != 1 || in_planes != planes) {
    shortcut_ = register_module(
        "shortcut",
        torch::nn::Sequential(
            torch::nn::Conv2d(
                torch::nn::Conv2dOptions(in_planes, planes, /*kernel_size=*/1).stride(stride).bias(false)),
            torch::nn::BatchNorm2d(planes)));
  }
}

at::Tensor BasicBlockImpl::forward(at::Tensor x) {
  auto out = torch::relu(bn1_->forward(conv1_->forward(x)));
  out = bn2_->forward(conv2_->forward(out));
  out += shortcut_ ? shortcut_->forward(x) : x;
  return torch::relu(out);
}

ResNet18Impl::ResNet18Impl(ResNet18Options options) : options_(options) {
  TORCH_CHECK(options_.in_channels() > 0, "ResNet18Options::in_channels must be > 0, got ",
              options_.in_channels());
  TORCH_CHECK(options_.num_classes() > 0, "ResNet18Options::num_classes must be > 0, got ",
              options_.num_classes());
  conv1_ = register_module("conv1", conv3x3(options_.in_channels(), 64, 1));
  bn1_ = register_module("bn1", torch::nn::BatchNorm2d(64));
  int64_t in_planes = 64;
  layer1_ = register_module("layer1", make_stage(in_planes, 64, /*blocks=*/2, /*stride=*/1));
  layer2_ = register_module("layer2", make_stage(in_planes, 128, /*blocks=*/2, /*stride=*/2));
  layer3_ = register_module("layer3", make_stage(in_planes, 256, /*blocks=*/2, /*stride=*/2));
  layer4_ = register_module("layer4", make_stage(in_planes, 512, /*blocks=*/2, /*stride=*/2));
  fc_ = register_module("fc", torch::nn::Linear(512, options_.num_classes()));
}

at::Tensor ResNet18Impl::forward(at::Tensor x) {
  TORCH_CHECK(x.dim() == 4 && x.size(1) == options_.in_channels(), "ResNet18::forward: expected [B, ",
              options_.in_channels(), ", H, W] input (ResNet18Options::in_channels), got ", x.sizes());
  namespace F = torch::nn::functional;
  x = run_stage(0, std::move(x),
                [this](at::Tensor in) { return torch::relu(bn1_->forward(conv1_->forward(in))); });
  torch::nn::Sequential layers[] = {layer1_, layer2_, layer3_, layer4_};
  for (size_t i = 0; i < 4; ++i)
    x = run_stage(i + 1, std::move(x), [&layers, i](at::Tensor in) { return layers[i]->forward(in); });
  return run_stage(5, std::move(x), [this](at::Tensor in) {
    return fc_->forward(F::adaptive_avg_pool2d(in, F::AdaptiveAvgPool2dFuncOptions({1, 1})).flatten(1));
  });
}

std::vector<std::shared_ptr<torch::nn::Module>> ResNet18Impl::stage_modules() {
  auto stem = std::make_shared<torch::nn::Module>("stem");
  stem->register_module("conv1", conv1_);
  stem->register_module("bn1", bn1_);
  return {stem, layer1_.ptr(), layer2_.ptr(), layer3_.ptr(), layer4_.ptr(), fc_.ptr()};
}

}  // namespace lockstep::models
