#pragma once

#include <torch/optim/sgd.h>

namespace lockstep::optim {

/// torch::optim::SGD whose step updates all parameters of a group with ATen's multi-tensor operations
/// (`_foreach_add_`, `_foreach_mul_`: what torch.optim.SGD runs by default on a GPU), a few launches per
/// group where LibTorch's SGD::step launches one to four kernels per parameter. ResNet18 has 62
/// parameters: on a GPU at batch 32 those launches are a visible part of the step.
///
/// The same operations in the same order as SGD::step (weight decay added to the gradient, momentum
/// buffer started as a copy of the first gradient, then `buf * momentum + d_p * (1 - dampening)`, Nesterov's
/// `d_p + momentum * buf`, then `p - lr * d_p`), so on the CPU its results equal torch::optim::SGD's bit for
/// bit; the state (SGDParamState's momentum_buffer) saves and loads like SGD's.
///
/// Example:
///   lockstep::optim::ForeachSgd optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
class ForeachSgd : public torch::optim::SGD {
 public:
  using torch::optim::SGD::SGD;
  torch::Tensor step(LossClosure closure = nullptr) override;
};

}  // namespace lockstep::optim
