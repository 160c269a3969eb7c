#include "fit_data.h"

#include "lockstep/data/cifar10_dataset.h"
#include "lockstep/data/idx_dataset.h"
#include "lockstep/data/synthetic_dataset.h"

namespace lockstep::train::detail {

FitData load_fit_data(const FitConfig& config) {
  using data::Split;
  FitData out;
  const std::string dir = config.resolved_data_dir();
  if (config.data == "fashion-mnist" || config.data == "mnist") {
    out.train = std::make_shared<data::IdxDataset>(data::IdxDataset::from_dir(dir, Split::kTrain));
    out.test = std::make_shared<data::IdxDataset>(data::IdxDataset::from_dir(dir, Split::kTest));
    // The training sets' per-pixel mean and standard deviation (the values torchvision users type).
    const bool fashion = config.data == "fashion-mnist";
    out.transform.mean({fashion ? 0.2860 : 0.1307}).std({fashion ? 0.3530 : 0.3081});
    out.name = fashion ? "Fashion-MNIST" : "MNIST";
  } else if (config.data == "cifar10") {
    out.train = std::make_shared<data::Cifar10Dataset>(data::Cifar10Dataset::from_dir(dir, Split::kTrain));
    out.test = std::make_shared<data::Cifar10Dataset>(data::Cifar10Dataset::from_dir(dir, Split::kTest));
    out.transform.mean({0.4914, 0.4822, 0.4465}).std({0.2470, 0.2435, 0.2616});
    out.name = "CIFAR-10";
  } else {
    const ImageShape shape = config.resolved_synthetic_shape();
    const auto options = data::SyntheticOptions()
                             .size(config.synthetic_size)
                             .channels(shape.channels)
                             .height(shape.height)
                             .width(shape.width)
                             .seed(config.trainer.seed());
    out.train = std::make_shared<data::SyntheticDataset>(options, Split::kTrain);
    out.test = std::make_shared<data::SyntheticDataset>(
        data::SyntheticOptions(options).size(std::max<int64_t>(1, config.synthetic_size / 4)), Split::kTest);
    out.transform.mean({0.5}).std({0.25});
    out.name = "synthetic " + std::to_string(shape.channels) + "x" + std::to_string(shape.height) + "x" +
               std::to_string(shape.width);
  }
  if (config.resolved_augment()) {
    // torchvision's RandomCrop(size, padding=4) + RandomHorizontalFlip(), the usual CIFAR recipe.
    out.transform.random_crop_padding(4).horizontal_flip(true);
  }
  return out;
}

}  // namespace lockstep::train::detail
