#pragma once

// What the ZeRO-2 and FSDP tests train with (test_sharded_reducer.cpp, test_fully_sharded.cpp): Adam in two
// parameter groups and a deterministic regression stream, float64.

#include <torch/nn/functional/loss.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim.h>

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace lockstep::shard::testing {

/// Adam with weight decay: the first two parameters (the first layer) at lr 0.01, the rest at 0.003.
inline std::unique_ptr<torch::optim::Optimizer> two_group_adam(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> first(params.begin(), params.begin() + 2),
      rest(params.begin() + 2, params.end());
  std::vector<torch::optim::OptimizerParamGroup> groups{
      torch::optim::OptimizerParamGroup(first, std::make_unique<torch::optim::AdamOptions>(
                                                   torch::optim::AdamOptions(0.01).weight_decay(0.01))),
      torch::optim::OptimizerParamGroup(rest, std::make_unique<torch::optim::AdamOptions>(
                                                  torch::optim::AdamOptions(0.003).weight_decay(0.01)))};
  return std::make_unique<torch::optim::Adam>(groups, torch::optim::AdamOptions(0.01));
}

/// Samples [begin, begin + count) of micro-batch `micro`: 10 features, 3 targets.
inline std::pair<torch::Tensor, torch::Tensor> regression_batch(int micro, int64_t begin, int64_t count) {
  const auto options = torch::TensorOptions().dtype(torch::kDouble);
  auto index = torch::arange(begin, begin + count, options).unsqueeze(1);
  return {torch::sin(index * torch::arange(1, 11, options) * 0.37 + micro),
          torch::cos(index * torch::arange(1, 4, options) * 0.11 - micro) * 3.0};
}

/// The reference run: one process, `steps` steps of two whole micro-batches of `micro_batch` samples
/// (gradients summed), clipped to `max_norm`, then stepped. Returns each step's gradient norm.
template <typename Model>
std::vector<double> train_one_process(Model& model, torch::optim::Optimizer& optimizer, int steps,
                                      int64_t micro_batch, double max_norm) {
  std::vector<double> norms;
  for (int step = 0; step < steps; ++step) {
    for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();
    for (int micro = 0; micro < 2; ++micro) {
      auto [x, y] = regression_batch(2 * step + micro, 0, micro_batch);
      torch::mse_loss(model->forward(x), y).backward();
    }
    norms.push_back(torch::nn::utils::clip_grad_norm_(model->parameters(), max_norm));
    optimizer.step();
  }
  return norms;
}

}  // namespace lockstep::shard::testing
