// FusedAdam / FusedAdamW against LibTorch's Adam / AdamW on the same parameters and gradients.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "lockstep/optim/fused_adam.h"

#include "../../src/optim/aten_fused_adam.h"

namespace {

// Parameter shapes with every kind of length: a lone element, shorter than one vector, not a multiple
// of 8 or 32, and the seed MLP's layers.
std::vector<std::vector<int64_t>> shapes() {
  return {{1}, {10}, {17}, {33, 3}, {256}, {128, 256}, {784 * 256}};
}

std::vector<at::Tensor> make_params(uint64_t seed) {
  torch::manual_seed(seed);
  std::vector<at::Tensor> params;
  for (const auto& shape : shapes()) params.push_back(torch::randn(shape).requires_grad_(true));
  return params;
}

std::vector<at::Tensor> clones(const std::vector<at::Tensor>& params) {
  std::vector<at::Tensor> out;
  for (const auto& p : params) out.push_back(p.detach().clone().requires_grad_(true));
  return out;
}

// Runs `steps` steps of both optimizers on the same gradients (fresh random ones each step, with a
// spread of magnitudes so that v spans many exponents) and returns the largest |difference| and the
// number of elements that differ at all.
template <typename Reference, typename Fused, typename Options>
std::pair<double, int64_t> compare(const Options& options, int steps) {
  auto a = make_params(7);
  auto b = clones(a);
  Reference reference(a, options);
  Fused fused(b, options);
  torch::manual_seed(11);
  for (int step = 0; step < steps; ++step) {
    for (size_t i = 0; i < a.size(); ++i) {
      at::Tensor g = torch::randn(a[i].sizes()) * torch::exp(torch::randn(a[i].sizes()) * 3);
      a[i].mutable_grad() = g.clone();
      b[i].mutable_grad() = g.clone();
    }
    reference.step();
    fused.step();
  }
  double worst = 0;
  int64_t differing = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>());
    differing += a[i].ne(b[i]).sum().item<int64_t>();
  }
  return {worst, differing};
}

// On a CPU without AVX2/FMA FusedAdam is torch's Adam (fused_adam_supported() is false): the comparison
// still runs, and then proves the fallback, rather than skipping.
TEST(FusedAdamTest, MatchesTorchAdam) {
  SCOPED_TRACE(lockstep::optim::fused_adam_supported() ? "fused (AVX2/FMA)"
                                                       : "no AVX2/FMA: torch's own step");
  for (double wd : {0.0, 1e-2}) {
    const auto [worst, differing] = compare<torch::optim::Adam, lockstep::optim::FusedAdam>(
        torch::optim::AdamOptions(1e-3).weight_decay(wd), 50);
    // The same operations in the same order as ATen's kernels: bit for bit, tails included.
    EXPECT_EQ(differing, 0) << "weight_decay " << wd << ": max |diff| " << worst;
  }
}

TEST(FusedAdamTest, MatchesTorchAdamW) {
  SCOPED_TRACE(lockstep::optim::fused_adam_supported() ? "fused (AVX2/FMA)"
                                                       : "no AVX2/FMA: torch's own step");
  for (double wd : {0.0, 1e-2}) {
    const auto [worst, differing] = compare<torch::optim::AdamW, lockstep::optim::FusedAdamW>(
        torch::optim::AdamWOptions(1e-3).weight_decay(wd), 50);
    EXPECT_EQ(differing, 0) << "weight_decay " << wd << ": max |diff| " << worst;
  }
}

// Parameters the fused path does not take (amsgrad, a non-contiguous parameter) run torch's own step.
TEST(FusedAdamTest, FallsBackToTorchWhereNotFused) {
  {
    const auto [worst, differing] = compare<torch::optim::Adam, lockstep::optim::FusedAdam>(
        torch::optim::AdamOptions(1e-3).amsgrad(true), 5);
    EXPECT_EQ(differing, 0) << "amsgrad: max |diff| " << worst;
  }
  torch::manual_seed(3);
  at::Tensor a = torch::randn({5, 7}).t().requires_grad_(true);  // a transposed (non-contiguous) leaf
  at::Tensor b = a.detach().clone().t().contiguous().t().requires_grad_(true);
  ASSERT_FALSE(b.is_contiguous());
  torch::optim::Adam reference({a}, torch::optim::AdamOptions(1e-2));
  lockstep::optim::FusedAdam fused({b}, torch::optim::AdamOptions(1e-2));
  for (int step = 0; step < 3; ++step) {
    at::Tensor g = torch::randn({7, 5});
    a.mutable_grad() = g.clone();
    b.mutable_grad() = g.clone();
    reference.step();
    fused.step();
  }
  EXPECT_TRUE(torch::equal(a, b));
}

// The state is Adam's: saved by FusedAdam, loaded by torch's Adam, the runs continue identically.
TEST(FusedAdamTest, StateLoadsIntoTorchAdam) {
  auto a = make_params(5);
  auto b = clones(a);
  lockstep::optim::FusedAdam fused(a, torch::optim::AdamOptions(1e-3).weight_decay(1e-4));
  torch::manual_seed(9);
  auto grads = [](const std::vector<at::Tensor>& like) {
    std::vector<at::Tensor> g;
    for (const auto& p : like) g.push_back(torch::randn(p.sizes()));
    return g;
  };
  for (int step = 0; step < 4; ++step) {
    auto g = grads(a);
    for (size_t i = 0; i < a.size(); ++i) {
      a[i].mutable_grad() = g[i];
    }
    fused.step();
  }
  for (size_t i = 0; i < a.size(); ++i) b[i].detach().copy_(a[i].detach());
  std::stringstream archive;
  torch::save(fused, archive);
  torch::optim::Adam reference(b, torch::optim::AdamOptions(1e-3).weight_decay(1e-4));
  torch::load(reference, archive);
  for (int step = 0; step < 3; ++step) {
    auto g = grads(a);
    for (size_t i = 0; i < a.size(); ++i) {
      a[i].mutable_grad() = g[i].clone();
      b[i].mutable_grad() = g[i].clone();
    }
    fused.step();
    reference.step();
  }
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << "parameter " << i;
}

}  // namespace

// ATen's multi-tensor kernel (FusedAdam's path on a GPU), run here on the CPU where LibTorch has its CPU
// kernel (2.4 and later), against torch's Adam and AdamW: equal to float rounding, the state torch's.
namespace lockstep::optim::aten_fused_test {
namespace {

template <typename Reference, typename Options>
void expect_like_torch(const Options& options, bool decoupled) {
  auto a = make_params(4);
  auto b = clones(a);
  Reference reference(a, options);
  Reference stepped_by_aten(b, options);  // its step() is not called: the state and groups are used
  detail::DeviceSteps steps;
  torch::manual_seed(6);
  auto step_both = [&] {
    for (size_t i = 0; i < a.size(); ++i) {
      const at::Tensor g = torch::randn(a[i].sizes());
      a[i].mutable_grad() = g.clone();
      b[i].mutable_grad() = g.clone();
    }
    reference.step();
    ASSERT_TRUE(detail::aten_fusable(stepped_by_aten.param_groups(), /*any_device=*/true));
    detail::aten_fused_adam_step(stepped_by_aten.param_groups(), stepped_by_aten.state(), steps, decoupled);
  };
  for (int step = 0; step < 20; ++step) step_both();
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(torch::allclose(a[i], b[i], 1e-5, 1e-6)) << "parameter " << i;
  // A state loaded from elsewhere (a checkpoint of step 20 written by torch's Adam): the device counts
  // follow.
  std::stringstream archive;
  torch::save(reference, archive);
  torch::load(stepped_by_aten, archive);
  for (size_t i = 0; i < a.size(); ++i) b[i].detach().copy_(a[i].detach());
  for (int step = 0; step < 5; ++step) step_both();
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(torch::allclose(a[i], b[i], 1e-5, 1e-6)) << "parameter " << i;
  // The check can fail: one more step on one side only.
  detail::aten_fused_adam_step(stepped_by_aten.param_groups(), stepped_by_aten.state(), steps, decoupled);
  EXPECT_FALSE(torch::allclose(a.back(), b.back(), 1e-5, 1e-6));
}

TEST(AtenFusedAdam, EqualsTorchAdamAndAdamWToFloatRounding) {
  if (!detail::kAtenFusedAdamRunsOnCpu)
    GTEST_SKIP() << "LibTorch " << TORCH_VERSION << " has no CPU kernel of _fused_adam_ (2.4 and later)";
  expect_like_torch<torch::optim::Adam>(torch::optim::AdamOptions(1e-2).weight_decay(1e-2), false);
  expect_like_torch<torch::optim::AdamW>(torch::optim::AdamWOptions(1e-2).weight_decay(1e-2), true);
}

// What a CUDA graph of the step needs (GraphCapturable), here on the CPU kernel: with the rate on the device
// (use_device_lr) the steps equal those with the rate as a number, also when the rate changes between
// steps; and count_replayed_step counts the parameters of the step after use_device_lr (the captured one)
// even when .grad was released since, as a replay leaves it.
TEST(AtenFusedAdam, DeviceRateAndReplayedCountsFollowTheHost) {
  if (!detail::kAtenFusedAdamRunsOnCpu || !detail::kAtenHasTensorLr)
    GTEST_SKIP() << "LibTorch " << TORCH_VERSION << " has no CPU kernel of _fused_adam_ (2.4 and later)";
  auto a = make_params(3);
  auto b = clones(a);
  torch::optim::Adam number(a, torch::optim::AdamOptions(1e-2));
  torch::optim::Adam device_rate(b, torch::optim::AdamOptions(1e-2));
  detail::DeviceSteps number_steps, rate_steps;
  torch::manual_seed(8);
  auto step_both = [&](double lr) {
    for (size_t i = 0; i < a.size(); ++i) {
      const at::Tensor g = torch::randn(a[i].sizes());
      a[i].mutable_grad() = g.clone();
      b[i].mutable_grad() = g.clone();
    }
    number.param_groups()[0].options().set_lr(lr);
    device_rate.param_groups()[0].options().set_lr(lr);
    detail::aten_fused_adam_step(number.param_groups(), number.state(), number_steps, false);
    detail::aten_fused_adam_step(device_rate.param_groups(), device_rate.state(), rate_steps, false);
  };
  step_both(1e-2);
  rate_steps.use_device_lr(device_rate.param_groups());
  EXPECT_TRUE(rate_steps.captured_params().empty());
  // A captured kernel keeps the addresses it read: the rate and the counts stay where they are.
  const void* rate_memory = rate_steps.lr(0, c10::Device(c10::kCPU), 1e-2)->data_ptr();
  const void* count_memory = rate_steps.at(b[0], 1).data_ptr();
  for (double lr : {1e-2, 5e-3, 2e-3}) step_both(lr);
  EXPECT_EQ(rate_steps.lr(0, c10::Device(c10::kCPU), 2e-3)->data_ptr(), rate_memory);
  EXPECT_EQ(rate_steps.at(b[0], 4).data_ptr(), count_memory);
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(torch::allclose(a[i], b[i], 1e-6, 1e-7)) << "parameter " << i;
  const at::Tensor* rate = rate_steps.lr(0, c10::Device(c10::kCPU), 2e-3);
  ASSERT_NE(rate, nullptr);
  EXPECT_FLOAT_EQ(rate->item<float>(), 2e-3f);
  // Only the step after use_device_lr was recorded, with every parameter.
  ASSERT_EQ(rate_steps.captured_params().size(), b.size());
  for (auto& p : b) p.mutable_grad() = at::Tensor();
  detail::count_replayed_step(device_rate.state(), rate_steps, false);
  for (const auto& p : b) {
    const auto& s =
        static_cast<torch::optim::AdamParamState&>(*device_rate.state().at(detail::param_state_key(p)));
    EXPECT_EQ(s.step(), 5);  // 4 steps, 1 replay
  }
}

TEST(AtenFusedAdam, TakesOnlyWhatItsKernelTakes) {
  auto params = make_params(1);
  for (auto& p : params) p.mutable_grad() = torch::zeros_like(p);
  torch::optim::Adam cpu(params, torch::optim::AdamOptions(1e-3));
  EXPECT_FALSE(detail::aten_fusable(cpu.param_groups()));  // the CPU: FusedAdam's own AVX2 pass
  EXPECT_TRUE(detail::aten_fusable(cpu.param_groups(), /*any_device=*/true));
  torch::optim::Adam amsgrad(params, torch::optim::AdamOptions(1e-3).amsgrad(true));
  EXPECT_FALSE(detail::aten_fusable(amsgrad.param_groups(), true));
  params[0].mutable_grad() = torch::zeros(params[0].sizes(), at::kDouble);  // a gradient of another dtype
  EXPECT_FALSE(detail::aten_fusable(cpu.param_groups(), true));
  for (auto& p : params) p.mutable_grad() = at::Tensor();
  EXPECT_FALSE(detail::aten_fusable(cpu.param_groups(), true));  // nothing to step
}

}  // namespace
}  // namespace lockstep::optim::aten_fused_test
