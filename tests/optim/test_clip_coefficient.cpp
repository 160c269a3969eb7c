// Gradient clipping's scale against torch::nn::utils::clip_grad_norm_ itself: the same factor for norms
// below, at and above max_norm, and torch's answers for an infinite and a NaN norm.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/nn/utils/clip_grad.h>

#include <cmath>
#include <limits>

#include "lockstep/optim/clip_coefficient.h"

namespace lockstep::optim {
namespace {

// The factor torch's clip_grad_norm_ applies to a single gradient of norm `norm` (a one-element tensor).
double torch_factor(double max_norm, double norm) {
  at::Tensor p = at::zeros({1}, at::kDouble).requires_grad_();
  p.mutable_grad() = at::full({1}, norm, at::kDouble);
  torch::nn::utils::clip_grad_norm_({p}, max_norm);
  const double after = p.grad().item<double>();
  return after / norm;
}

TEST(ClipCoefficient, IsTorchsFactor) {
  for (double norm : {1e-3, 0.5, 1.0, 1.0 + 1e-7, 2.0, 1e6}) {
    EXPECT_DOUBLE_EQ(clip_coefficient(1.0, norm), torch_factor(1.0, norm)) << "norm " << norm;
  }
  EXPECT_EQ(clip_coefficient(1.0, 0.5), 1.0);
  // An infinite norm: torch scales by 0 (an infinite gradient becomes NaN); lockstep's factor is 0 too.
  EXPECT_EQ(clip_coefficient(1.0, std::numeric_limits<double>::infinity()), 0.0);
  EXPECT_TRUE(std::isnan(clip_coefficient(1.0, std::nan(""))));
  EXPECT_TRUE(std::isnan(torch_factor(1.0, std::nan(""))));
}

}  // namespace
}  // namespace lockstep::optim
