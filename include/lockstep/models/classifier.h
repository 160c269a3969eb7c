#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

namespace lockstep::models {

/// An image classifier: float images [B, C, H, W] → logits [B, num_classes] (no softmax; pair it with
/// cross-entropy). Every model of this layer derives from it, so the Trainer and the CLI can hold any
/// of them as `std::shared_ptr<ClassifierImpl>`.
///
/// Example:
///   std::shared_ptr<ClassifierImpl> model = make_model("cnn", InputShape{});
///   at::Tensor logits = model->forward(torch::zeros({8, 1, 28, 28}));  // [8, 10]
class ClassifierImpl : public torch::nn::Module {
 public:
  /// `x`: float [B, C, H, W]. Returns the logits, [B, num_classes]. Not thread-safe (like any Module).
  virtual at::Tensor forward(at::Tensor x) = 0;
};

/// The shape of one input image and the number of classes, as a data set describes them
/// (defaults: Fashion-MNIST / MNIST, 1×28×28, 10 classes; CIFAR-10 is {3, 32, 32, 10}).
struct InputShape {
  int64_t channels = 1;
  int64_t height = 28;
  int64_t width = 28;
  int64_t num_classes = 10;
};

/// A model by name, built for `shape`: "mlp" (the seeds' MLP, in_features = C·H·W), "cnn" (SmallCnn),
/// "resnet18" (CIFAR-style ResNet18). Initialised from LibTorch's generator: call torch::manual_seed
/// first for reproducible weights (DDP broadcasts rank 0's weights anyway).
/// Throws std::invalid_argument "unknown model 'x' (expected one of: mlp, cnn, resnet18)" for any other
/// name, and c10::Error for a shape with a non-positive field.
///
/// Example:
///   auto model = lockstep::models::make_model("resnet18", {/*channels=*/3, /*height=*/32, /*width=*/32,
///                                                          /*num_classes=*/10});
/// `dropout`, when given, replaces the model's dropout probability (mlp, cnn: 0.2); resnet18 has no
/// dropout and rejects one (std::invalid_argument). `mlp_hidden`, when given, replaces the mlp's hidden
/// widths (256, 128): a wide model for memory work; the other models reject it.
std::shared_ptr<ClassifierImpl> make_model(const std::string& name, const InputShape& shape,
                                           std::optional<double> dropout = std::nullopt,
                                           std::optional<std::vector<int64_t>> mlp_hidden = std::nullopt);

/// The names make_model() accepts, in the order they are listed in its error message.
std::vector<std::string> model_names();

/// Number of scalar parameters of `module` and its submodules (buffers such as BatchNorm's running
/// statistics are not counted), like `sum(p.numel() for p in module.parameters())`.
int64_t count_parameters(const torch::nn::Module& module);

}  // namespace lockstep::models
