#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "lockstep/detail/option.h"
#include "lockstep/models/classifier.h"
#include "lockstep/models/staged.h"

namespace lockstep::models {

/// Options of Mlp. The defaults are the seeds' model: 784-256-128-10, ReLU, dropout 0.2.
///
/// Example:
///   Mlp model(MlpOptions().in_features(3 * 32 * 32).hidden({512, 256}).dropout(0.1));
class MlpOptions {
 public:
  /// Inputs are flattened to [B, in_features]; must equal C·H·W of the images.
  LOCKSTEP_OPTION(MlpOptions, int64_t, in_features)
  /// Widths of the hidden layers, in order; may be empty (then the model is one Linear layer).
  LOCKSTEP_OPTION(MlpOptions, std::vector<int64_t>, hidden)
  LOCKSTEP_OPTION(MlpOptions, int64_t, num_classes)
  /// Dropout probability after each hidden ReLU, in [0, 1); active in train() only.
  LOCKSTEP_OPTION(MlpOptions, double, dropout)

 private:
  int64_t in_features_ = 784;
  std::vector<int64_t> hidden_ = {256, 128};
  int64_t num_classes_ = 10;
  double dropout_ = 0.2;
};

/// The seeds' multilayer perceptron: flatten, then for each hidden width Linear → ReLU → Dropout, then
/// a Linear to the logits. Parameters are named "fc1.weight", "fc1.bias", …, "fc<n>.weight" (the last
/// one is the classifier), so the default model has fc1 (784→256), fc2 (256→128), fc3 (128→10):
/// 235,146 parameters. Staged: stage i is fc<i+1> (with its ReLU and dropout).
///
/// Example:
///   torch::manual_seed(0);
///   Mlp model;                                        // MlpOptions() defaults
///   auto logits = model->forward(torch::rand({64, 1, 28, 28}));   // [64, 10]
class MlpImpl : public ClassifierImpl, public Staged {
 public:
  /// Throws c10::Error naming the field for a non-positive size or a dropout outside [0, 1).
  explicit MlpImpl(MlpOptions options = {});

  /// `x`: [B, ...] with in_features values per sample (e.g. [B, 1, 28, 28] or [B, 784]).
  at::Tensor forward(at::Tensor x) override;
  std::vector<std::shared_ptr<torch::nn::Module>> stage_modules() override;

  const MlpOptions& options() const { return options_; }

 private:
  MlpOptions options_;
  std::vector<torch::nn::Linear> layers_;
  std::vector<torch::nn::Dropout> dropouts_;
};
TORCH_MODULE(Mlp);

}  // namespace lockstep::models
