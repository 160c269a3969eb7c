#pragma once

#include <memory>

#include "lockstep/data/tensor_dataset.h"
#include "lockstep/data/transforms.h"
#include "lockstep/train/fit_config.h"

namespace lockstep::train::detail {

/// The train and test splits `--data` names, in memory, with their normalisation.
struct FitData {
  std::shared_ptr<const data::TensorDataset> train;
  std::shared_ptr<const data::TensorDataset> test;
  data::TransformOptions transform;  ///< mean/std (and, when augmenting, crop + flip)
  std::string name;                  ///< for messages: "Fashion-MNIST", "synthetic 3x32x32"
};

/// Loads `config.data` from `config.resolved_data_dir()` (throws lockstep::data::DataError naming the
/// path and the fix when files are missing or bad); --data synthetic is generated in the shape
/// `config.resolved_synthetic_shape()`. Images are uint8 [N, C, H, W]; models take C, H, W from them.
FitData load_fit_data(const FitConfig& config);

}  // namespace lockstep::train::detail
