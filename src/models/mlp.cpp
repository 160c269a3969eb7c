#include "lockstep/models/mlp.h"

#include <string>

#include <torch/nn/functional/activation.h>

namespace lockstep::models {

MlpImpl::MlpImpl(MlpOptions options) : options_(std::move(options)) {
  TORCH_CHECK(options_.in_features() > 0, "MlpOptions::in_features must be > 0, got ",
              options_.in_features());
  TORCH_CHECK(options_.num_classes() > 0, "MlpOptions::num_classes must be > 0, got ",
              options_.num_classes());
  TORCH_CHECK(options_.dropout() >= 0.0 && options_.dropout() < 1.0,
              "MlpOptions::dropout must be in [0, 1), got ", options_.dropout());
  int64_t width = options_.in_features();
  size_t index = 0;
  for (const int64_t hidden : options_.hidden()) {
    TORCH_CHECK(hidden > 0, "MlpOptions::hidden[", index, "] must be > 0, got ", hidden);
    ++index;
    layers_.push_back(register_module("fc" + std::to_string(index), torch::nn::Linear(width, hidden)));
    dropouts_.push_back(register_module("dropout" + std::to_string(index),
                                        torch::nn::Dropout(torch::nn::DropoutOptions(options_.dropout()))));
    width = hidden;
  }
  layers_.push_back(
      register_module("fc" + std::to_string(index + 1), torch::nn::Linear(width, options_.num_classes())));
}

at::Tensor MlpImpl::forward(at::Tensor x) {
  TORCH_CHECK(x.dim() >= 1, "Mlp::forward: expected [B, ...] input, got a 0-d tensor");
  x = x.reshape({x.size(0), -1});
  TORCH_CHECK(x.size(1) == options_.in_features(), "Mlp::forward: expected ", options_.in_features(),
              " features per sample (MlpOptions::in_features), got ", x.size(1));
  for (size_t i = 0; i + 1 < layers_.size(); ++i) {
    x = run_stage(i, std::move(x),
                  [&](at::Tensor h) { return dropouts_[i]->forward(torch::relu(layers_[i]->forward(h))); });
  }
  return run_stage(layers_.size() - 1, std::move(x),
                   [&](at::Tensor h) { return layers_.back()->forward(h); });
}

std::vector<std::shared_ptr<torch::nn::Module>> MlpImpl::stage_modules() {
  std::vector<std::shared_ptr<torch::nn::Module>> stages;
  for (const auto& layer : layers_) stages.push_back(layer.ptr());
  return stages;
}

}  // namespace lockstep::models
