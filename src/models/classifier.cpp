#include "lockstep/models/classifier.h"

#include <stdexcept>

#include <c10/util/Exception.h>

#include "lockstep/detail/join.h"
#include "lockstep/models/mlp.h"
#include "lockstep/models/resnet18.h"
#include "lockstep/models/small_cnn.h"

namespace lockstep::models {

std::vector<std::string> model_names() {
  return {"mlp", "cnn", "resnet18"};
}

std::shared_ptr<ClassifierImpl> make_model(const std::string& name, const InputShape& shape,
                                           std::optional<double> dropout,
                                           std::optional<std::vector<int64_t>> mlp_hidden) {
  if (mlp_hidden && name != "mlp")
    throw std::invalid_argument("hidden widths apply to the mlp only, not to '" + name + "'");
  TORCH_CHECK(shape.channels > 0 && shape.height > 0 && shape.width > 0 && shape.num_classes > 0,
              "make_model: InputShape fields must be > 0, got channels=", shape.channels,
              " height=", shape.height, " width=", shape.width, " num_classes=", shape.num_classes);
  if (name == "mlp") {
    MlpOptions options =
        MlpOptions().in_features(shape.channels * shape.height * shape.width).num_classes(shape.num_classes);
    if (dropout) options.dropout(*dropout);
    if (mlp_hidden) options.hidden(*mlp_hidden);
    return std::make_shared<MlpImpl>(options);
  }
  if (name == "cnn") {
    SmallCnnOptions options = SmallCnnOptions().in_channels(shape.channels).num_classes(shape.num_classes);
    if (dropout) options.dropout(*dropout);
    return std::make_shared<SmallCnnImpl>(options);
  }
  if (name == "resnet18") {
    if (dropout) throw std::invalid_argument("resnet18 has no dropout layer: drop the dropout setting");
    return std::make_shared<ResNet18Impl>(
        ResNet18Options().in_channels(shape.channels).num_classes(shape.num_classes));
  }
  throw std::invalid_argument("unknown model '" + name +
                              "' (expected one of: " + lockstep::detail::join(model_names(), ", ") + ")");
}

int64_t count_parameters(const torch::nn::Module& module) {
  int64_t total = 0;
  for (const auto& parameter : module.parameters(/*recurse=*/true)) total += parameter.numel();
  return total;
}

}  // namespace lockstep::models
