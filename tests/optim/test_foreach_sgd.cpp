// ForeachSgd against LibTorch's SGD: bit for bit on the CPU, every option, state interchangeable.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <sstream>
#include <vector>

#include "lockstep/optim/foreach_sgd.h"

namespace lockstep::optim::foreach_sgd_test {
namespace {

std::vector<at::Tensor> parameters(uint64_t seed) {
  torch::manual_seed(seed);
  std::vector<at::Tensor> params;
  for (const auto& shape : std::vector<std::vector<int64_t>>{{1}, {17}, {33, 3}, {128, 256}})
    params.push_back(torch::randn(shape).requires_grad_(true));
  return params;
}

std::vector<at::Tensor> copies(const std::vector<at::Tensor>& params) {
  std::vector<at::Tensor> out;
  for (const auto& p : params) out.push_back(p.detach().clone().requires_grad_(true));
  return out;
}

// The same fresh gradients on both sets; parameter 1 has none on odd steps (SGD skips it).
void set_gradients(std::vector<at::Tensor>& a, std::vector<at::Tensor>& b, int step) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (i == 1 && step % 2 == 1) {
      a[i].mutable_grad() = at::Tensor();
      b[i].mutable_grad() = at::Tensor();
      continue;
    }
    const at::Tensor g = torch::randn(a[i].sizes());
    a[i].mutable_grad() = g.clone();
    b[i].mutable_grad() = g.clone();
  }
}

void expect_equal(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(torch::equal(a[i], b[i]))
        << "parameter " << i << ": max |diff| " << (a[i] - b[i]).abs().max();
}

TEST(ForeachSgd, EqualsTorchSgdBitForBitWithEveryOption) {
  using torch::optim::SGDOptions;
  for (const SGDOptions& options :
       {SGDOptions(0.1), SGDOptions(0.1).weight_decay(1e-2), SGDOptions(0.05).momentum(0.9),
        SGDOptions(0.05).momentum(0.9).dampening(0.1).weight_decay(1e-3),
        SGDOptions(0.05).momentum(0.9).nesterov(true).weight_decay(1e-3)}) {
    auto a = parameters(3);
    auto b = copies(a);
    torch::optim::SGD reference(a, options);
    ForeachSgd foreach_sgd(b, options);
    torch::manual_seed(5);
    for (int step = 0; step < 6; ++step) {
      set_gradients(a, b, step);
      reference.step();
      foreach_sgd.step();
    }
    SCOPED_TRACE("momentum " + std::to_string(options.momentum()) + " nesterov " +
                 std::to_string(options.nesterov()));
    expect_equal(a, b);
  }
  // The check can fail: another learning rate moves the parameters elsewhere.
  auto a = parameters(3);
  auto b = copies(a);
  torch::optim::SGD reference(a, SGDOptions(0.1));
  ForeachSgd other(b, SGDOptions(0.2));
  set_gradients(a, b, 0);
  reference.step();
  other.step();
  EXPECT_FALSE(torch::equal(a[0], b[0]));
}

// Two groups with their own options, and a momentum state saved by ForeachSgd that torch's SGD continues.
TEST(ForeachSgd, GroupsAndStateAreSgds) {
  auto a = parameters(8);
  auto b = copies(a);
  auto groups = [](const std::vector<at::Tensor>& p) {
    return std::vector<torch::optim::OptimizerParamGroup>{
        torch::optim::OptimizerParamGroup({p[0], p[1]}, std::make_unique<torch::optim::SGDOptions>(
                                                            torch::optim::SGDOptions(0.1).momentum(0.5))),
        torch::optim::OptimizerParamGroup({p[2], p[3]})};
  };
  const auto defaults = torch::optim::SGDOptions(0.01).momentum(0.9).weight_decay(1e-4);
  torch::optim::SGD reference(groups(a), defaults);
  ForeachSgd foreach_sgd(groups(b), defaults);
  torch::manual_seed(2);
  for (int step = 0; step < 3; ++step) {
    set_gradients(a, b, step);
    reference.step();
    foreach_sgd.step();
  }
  expect_equal(a, b);
  std::stringstream archive;
  torch::save(foreach_sgd, archive);
  auto c = copies(b);
  torch::optim::SGD continued(groups(c), defaults);
  torch::load(continued, archive);
  for (int step = 3; step < 6; ++step) {
    set_gradients(b, c, step);
    foreach_sgd.step();
    continued.step();
  }
  expect_equal(b, c);
}

}  // namespace
}  // namespace lockstep::optim::foreach_sgd_test
