// Precision: the spellings (Lightning's and Accelerate's), CPU autocast scopes, bf16-mixed training, and
// the GradScaler's algorithm (torch.cuda.amp.GradScaler's, run here on CPU float32).
#include <gtest/gtest.h>

#include <limits>
#include <stdexcept>
#include <string>
#include <thread>

#include <ATen/autocast_mode.h>
#include <torch/nn.h>
#include <torch/optim.h>
#include <torch/version.h>

#include "../comm/thread_group.h"
#include "lockstep/train/precision.h"

namespace lockstep::train {
namespace {

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no std::invalid_argument thrown)";
}

TEST(Precision, ToStringRoundTrips) {
  for (Precision p : {Precision::k32, Precision::kBf16Mixed, Precision::k16Mixed}) {
    EXPECT_EQ(parse_precision(to_string(p)), p) << to_string(p);
  }
  EXPECT_STREQ(to_string(Precision::k32), "32");
  EXPECT_STREQ(to_string(Precision::kBf16Mixed), "bf16-mixed");
  EXPECT_STREQ(to_string(Precision::k16Mixed), "16-mixed");
}

TEST(Precision, AcceptsAccelerateSpellings) {
  EXPECT_EQ(parse_precision("no"), Precision::k32);
  EXPECT_EQ(parse_precision("32-true"), Precision::k32);
  EXPECT_EQ(parse_precision("bf16"), Precision::kBf16Mixed);
  EXPECT_EQ(parse_precision("fp16"), Precision::k16Mixed);
}

TEST(Precision, RejectsUnknownValuesNamingThem) {
  for (const char* bad : {"fp8", "", "BF16", "64", "mixed"}) {
    const std::string message = error_of([&] { parse_precision(bad); });
    EXPECT_NE(message.find(std::string("'") + bad + "'"), std::string::npos) << message;
    EXPECT_NE(message.find("bf16-mixed"), std::string::npos) << message;
  }
}

// LibTorch < 2.5: its CPU autocast has no float16, so 16-mixed on the CPU is an error that says so. From
// 2.5 on, 16-mixed runs on the CPU: the autocast scope lowers a Linear to float16 and restores the state.
TEST(Precision, Fp16OnCpuRunsWhereCpuAutocastHasFloat16ElseIsAClearError) {
  torch::nn::Linear linear(4, 3);
  const auto x = torch::randn({2, 4});
  if constexpr (cpu_autocast_has_float16()) {
    EXPECT_NO_THROW(check_precision_supported(Precision::k16Mixed, c10::DeviceType::CPU));
    {
      AutocastScope scope(Precision::k16Mixed, c10::DeviceType::CPU);
      EXPECT_EQ(linear(x).scalar_type(), at::kHalf);
      EXPECT_EQ(linear->weight.scalar_type(), at::kFloat);
    }
    EXPECT_EQ(linear(x).scalar_type(), at::kFloat);
  } else {
    const std::string message =
        error_of([] { check_precision_supported(Precision::k16Mixed, c10::DeviceType::CPU); });
    EXPECT_NE(
        message.find("precision \"16-mixed\" (fp16) cannot run on device \"cpu\" with LibTorch " TORCH_VERSION
                     ": its CPU autocast lowers to bfloat16 only (float16 came with LibTorch 2.5); use "
                     "bf16-mixed (Accelerate: bf16) or 32, or build lockstep against LibTorch >= 2.5"),
        std::string::npos)
        << message;
    // The scope checks too, before touching the autocast state.
    EXPECT_THROW(AutocastScope(Precision::k16Mixed, c10::DeviceType::CPU), std::invalid_argument);
  }
  EXPECT_FALSE(at::autocast::is_cpu_enabled());
  EXPECT_NO_THROW(check_precision_supported(Precision::kBf16Mixed, c10::DeviceType::CPU));
  EXPECT_NO_THROW(check_precision_supported(Precision::k32, c10::DeviceType::CPU));
  EXPECT_NO_THROW(check_precision_supported(Precision::k16Mixed, c10::DeviceType::CUDA));
}

TEST(AutocastScope, CpuBf16MakesLinearOutputBf16AndRestoresState) {
  torch::manual_seed(0);
  torch::nn::Linear linear(4, 3);
  const auto x = torch::randn({2, 4});
  ASSERT_FALSE(at::autocast::is_cpu_enabled());
  {
    AutocastScope scope(Precision::kBf16Mixed, c10::DeviceType::CPU);
    EXPECT_TRUE(at::autocast::is_cpu_enabled());
    EXPECT_EQ(at::autocast::get_autocast_cpu_dtype(), at::kBFloat16);
    EXPECT_EQ(linear(x).scalar_type(), at::kBFloat16);
    EXPECT_EQ(linear->weight.scalar_type(), at::kFloat);  // the weights themselves stay float32
  }
  EXPECT_FALSE(at::autocast::is_cpu_enabled());
  EXPECT_EQ(linear(x).scalar_type(), at::kFloat);
  // A state switched on by someone else is restored as it was, not switched off. (The CPU dtype cannot
  // be anything but bfloat16 in LibTorch 1.13, so only the flag can differ here.)
  at::autocast::set_cpu_enabled(true);
  { AutocastScope scope(Precision::kBf16Mixed, c10::DeviceType::CPU); }
  EXPECT_TRUE(at::autocast::is_cpu_enabled());
  EXPECT_EQ(at::autocast::get_autocast_cpu_dtype(), at::kBFloat16);
  at::autocast::set_cpu_enabled(false);
}

TEST(AutocastScope, NestedScopesRestoreTheirParent) {
  torch::nn::Linear linear(4, 3);
  const auto x = torch::randn({2, 4});
  {
    AutocastScope outer(Precision::kBf16Mixed, c10::DeviceType::CPU);
    {
      AutocastScope inner(Precision::kBf16Mixed, c10::DeviceType::CPU);
      EXPECT_EQ(linear(x).scalar_type(), at::kBFloat16);
    }
    // The inner exit must leave the outer scope's autocast on.
    EXPECT_TRUE(at::autocast::is_cpu_enabled());
    EXPECT_EQ(linear(x).scalar_type(), at::kBFloat16);
    {
      AutocastScope plain(Precision::k32, c10::DeviceType::CPU);  // k32 changes nothing
      EXPECT_TRUE(at::autocast::is_cpu_enabled());
    }
    EXPECT_EQ(linear(x).scalar_type(), at::kBFloat16);
  }
  EXPECT_FALSE(at::autocast::is_cpu_enabled());
  EXPECT_EQ(linear(x).scalar_type(), at::kFloat);
}

TEST(AutocastScope, IsThreadLocal) {
  AutocastScope scope(Precision::kBf16Mixed, c10::DeviceType::CPU);
  bool other_thread_enabled = true;
  std::thread([&] { other_thread_enabled = at::autocast::is_cpu_enabled(); }).join();
  EXPECT_FALSE(other_thread_enabled);
  EXPECT_TRUE(at::autocast::is_cpu_enabled());
}

TEST(AutocastScope, Bf16MixedTrainingLearnsAndKeepsFloat32Weights) {
  torch::manual_seed(3);
  const auto x = torch::randn({256, 8});
  const auto y = x.matmul(torch::randn({8, 3})).argmax(1);  // learnable labels
  torch::nn::Sequential model(torch::nn::Linear(8, 32), torch::nn::ReLU(), torch::nn::Linear(32, 3));
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.2));
  double first_loss = 0.0;
  double last_loss = 0.0;
  for (int step = 0; step < 50; ++step) {
    optimizer.zero_grad();
    at::Tensor loss;
    {
      AutocastScope scope(Precision::kBf16Mixed, c10::DeviceType::CPU);
      auto logits = model->forward(x);
      ASSERT_EQ(logits.scalar_type(), at::kBFloat16);
      loss = torch::nn::functional::cross_entropy(logits.to(at::kFloat), y);
    }
    loss.backward();
    optimizer.step();
    if (step == 0) first_loss = loss.item<double>();
    last_loss = loss.item<double>();
  }
  EXPECT_LT(last_loss, 0.7 * first_loss) << "first " << first_loss << ", last " << last_loss;
  for (const auto& parameter : model->parameters()) {
    EXPECT_EQ(parameter.scalar_type(), at::kFloat);
    EXPECT_EQ(parameter.grad().scalar_type(), at::kFloat);
  }
}

// One parameter whose gradient the tests set by hand.
struct OneParameter {
  OneParameter() : weight(torch::tensor({1.0f, 2.0f, 3.0f}).requires_grad_()), optimizer({weight}, 0.5) {}
  void set_grad(const at::Tensor& grad) { weight.mutable_grad() = grad.clone(); }
  at::Tensor weight;
  torch::optim::SGD optimizer;
};

TEST(GradScaler, ScalesTheLoss) {
  GradScaler scaler(GradScalerOptions{/*init_scale=*/1024.0});
  const auto loss = torch::tensor(0.75f);
  EXPECT_EQ(scaler.scale(loss).item<float>(), 768.0f);
  EXPECT_EQ(scaler.scale_value(), 1024.0);
}

TEST(GradScaler, UnscaleDividesGradientsExactlyOnce) {
  GradScaler scaler;  // 65536
  OneParameter p;
  const auto grad = torch::tensor({0.1f, -3.7f, 1e-3f});
  p.set_grad(grad * 65536.0);
  EXPECT_TRUE(scaler.unscale(p.optimizer));
  EXPECT_TRUE(torch::equal(p.weight.grad(), grad));
  // A second unscale before step() must not divide again.
  EXPECT_TRUE(scaler.unscale(p.optimizer));
  EXPECT_TRUE(torch::equal(p.weight.grad(), grad));
  EXPECT_TRUE(scaler.step(p.optimizer));
  EXPECT_TRUE(torch::allclose(p.weight, torch::tensor({1.0f, 2.0f, 3.0f}) - 0.5 * grad));
  scaler.update();
}

// Under tensor parallelism each rank holds other slices of the gradients: with agree_over(group), an inf in
// one rank's slice skips the step on every rank and halves every rank's scale (Megatron's scaler); the
// next finite step is taken everywhere. Without it the ranks would step apart. Worlds 1, 2, 3.
TEST(GradScaler, AgreeOverSkipsTheStepOnEveryRankWhenOneSliceIsNotFinite) {
  for (int world : {1, 2, 3}) {
    testing::run_group_ranks(
        world, "scaler-agree-" + std::to_string(world), [&](int rank, comm::ProcessGroup& group) {
          GradScaler scaler;  // 65536
          scaler.agree_over(&group);
          OneParameter p;
          const auto grad = torch::tensor({0.5f, -1.0f, 2.0f});
          p.set_grad(rank == world - 1 ? torch::tensor({0.5f, std::numeric_limits<float>::infinity(), 2.0f})
                                       : grad * 65536.0);
          EXPECT_FALSE(scaler.unscale(p.optimizer)) << "rank " << rank;
          EXPECT_FALSE(scaler.step(p.optimizer)) << "rank " << rank;
          scaler.update();
          EXPECT_EQ(scaler.scale_value(), 32768.0) << "rank " << rank;
          EXPECT_TRUE(torch::equal(p.weight, torch::tensor({1.0f, 2.0f, 3.0f}))) << "rank " << rank;
          p.set_grad(grad * 32768.0);
          EXPECT_TRUE(scaler.step(p.optimizer)) << "rank " << rank;
          scaler.update();
          EXPECT_TRUE(torch::allclose(p.weight, torch::tensor({1.0f, 2.0f, 3.0f}) - 0.5 * grad))
              << "rank " << rank;
        });
  }
}

// An in-place recovery drops a step after unscale() (a clip before the commit vote): load_state(state())
// forgets that step, so the next one is unscaled again, at the same scale (Accelerator::recover, the
// Trainer's recover_in_epoch).
TEST(GradScaler, ReloadingItsStateForgetsADroppedStepsUnscale) {
  GradScaler scaler;  // 65536
  OneParameter p;
  const auto grad = torch::tensor({0.1f, -3.7f, 1e-3f});
  p.set_grad(grad * 65536.0);
  EXPECT_TRUE(scaler.unscale(p.optimizer));  // the dropped step
  scaler.load_state(scaler.state());
  EXPECT_EQ(scaler.scale_value(), 65536.0);
  p.set_grad(grad * 65536.0);  // the next step's scaled gradients
  EXPECT_TRUE(scaler.unscale(p.optimizer));
  EXPECT_TRUE(torch::equal(p.weight.grad(), grad));
}

TEST(GradScaler, ScaledBackwardThenUnscaleEqualsThePlainGradient) {
  torch::manual_seed(1);
  torch::nn::Linear linear(5, 2);
  torch::optim::SGD optimizer(linear->parameters(), 0.1);
  const auto x = torch::randn({4, 5});
  linear(x).pow(2).mean().backward();
  const auto plain = linear->weight.grad().clone();
  optimizer.zero_grad();
  GradScaler scaler;
  scaler.scale(linear(x).pow(2).mean()).backward();
  EXPECT_FALSE(torch::equal(linear->weight.grad(), plain));
  scaler.unscale(optimizer);
  EXPECT_TRUE(torch::equal(linear->weight.grad(), plain));  // powers of two: exact
}

TEST(GradScaler, NonFiniteGradientSkipsTheStepAndHalvesTheScale) {
  for (float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    GradScaler scaler(GradScalerOptions{/*init_scale=*/256.0, /*growth_factor=*/2.0, /*backoff_factor=*/0.5,
                                        /*growth_interval=*/2});
    OneParameter p;
    // One finite step first: the growth tracker must be reset by the skipped one.
    p.set_grad(torch::ones({3}));
    EXPECT_TRUE(scaler.step(p.optimizer));
    scaler.update();
    const auto before = p.weight.detach().clone();
    p.set_grad(torch::tensor({1.0f, bad, 1.0f}));
    EXPECT_FALSE(scaler.step(p.optimizer));
    EXPECT_TRUE(torch::equal(p.weight, before)) << "the optimizer stepped over a non-finite gradient";
    scaler.update();
    EXPECT_EQ(scaler.scale_value(), 128.0);
    EXPECT_EQ(scaler.state()[1].item<double>(), 0.0);
    // The next finite step is taken again, at the lower scale.
    p.set_grad(torch::ones({3}) * 128.0);
    EXPECT_TRUE(scaler.step(p.optimizer));
    scaler.update();
    EXPECT_EQ(scaler.scale_value(), 128.0);  // one finite step: no growth yet (interval 2)
  }
}

TEST(GradScaler, GrowsAfterGrowthIntervalFiniteSteps) {
  GradScaler scaler(GradScalerOptions{/*init_scale=*/8.0, /*growth_factor=*/2.0, /*backoff_factor=*/0.5,
                                      /*growth_interval=*/3});
  OneParameter p;
  for (int step = 1; step <= 7; ++step) {
    p.set_grad(torch::ones({3}));
    ASSERT_TRUE(scaler.step(p.optimizer));
    scaler.update();
    const double expected = step < 3 ? 8.0 : (step < 6 ? 16.0 : 32.0);
    EXPECT_EQ(scaler.scale_value(), expected) << "after finite step " << step;
  }
}

TEST(GradScaler, StateRoundTrips) {
  GradScalerOptions options{/*init_scale=*/32.0, /*growth_factor=*/2.0, /*backoff_factor=*/0.5,
                            /*growth_interval=*/3};
  GradScaler original(options);
  OneParameter p;
  for (int step = 0; step < 4; ++step) {  // scale 64, tracker 1
    p.set_grad(torch::ones({3}));
    original.step(p.optimizer);
    original.update();
  }
  const auto state = original.state();
  EXPECT_EQ(state.scalar_type(), at::kDouble);
  EXPECT_TRUE(torch::equal(state, torch::tensor({64.0, 1.0}, at::kDouble)));
  GradScaler restored(options);
  restored.load_state(state);
  EXPECT_EQ(restored.scale_value(), 64.0);
  // Both grow on the same step: the growth tracker came along.
  for (int step = 0; step < 2; ++step) {
    p.set_grad(torch::ones({3}));
    original.step(p.optimizer);
    original.update();
    restored.step(p.optimizer);
    restored.update();
  }
  EXPECT_EQ(original.scale_value(), 128.0);
  EXPECT_EQ(restored.scale_value(), 128.0);
  EXPECT_THROW(restored.load_state(torch::tensor({1.0f, 2.0f})), std::invalid_argument);  // float32
  EXPECT_THROW(restored.load_state(torch::tensor({1.0, 2.0, 3.0}, at::kDouble)), std::invalid_argument);
  EXPECT_THROW(restored.load_state(at::Tensor()), std::invalid_argument);
}

TEST(GradScaler, DisabledIsAPassThrough) {
  GradScalerOptions options;
  options.enabled = false;
  GradScaler scaler(options);
  EXPECT_FALSE(scaler.enabled());
  EXPECT_EQ(scaler.scale_value(), 1.0);
  const auto loss = torch::tensor(0.3f);
  EXPECT_TRUE(scaler.scale(loss).is_same(loss));
  OneParameter p;
  const auto grad = torch::tensor({1.0f, std::numeric_limits<float>::infinity(), 2.0f});
  p.set_grad(grad);
  EXPECT_TRUE(scaler.unscale(p.optimizer));
  EXPECT_TRUE(torch::equal(p.weight.grad(), grad));  // untouched
  EXPECT_TRUE(scaler.step(p.optimizer));             // always taken
  scaler.update();
  EXPECT_EQ(scaler.scale_value(), 1.0);
  EXPECT_TRUE(torch::equal(scaler.state(), torch::tensor({1.0, 0.0}, at::kDouble)));
}

TEST(GradScaler, RejectsBadOptionsAndMisuse) {
  auto options_with = [](auto edit) {
    GradScalerOptions options;
    edit(options);
    return options;
  };
  EXPECT_NE(error_of([&] {
              GradScaler(options_with([](auto& o) { o.growth_factor = 1.0; }));
            }).find("growth_factor"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              GradScaler(options_with([](auto& o) { o.backoff_factor = 1.5; }));
            }).find("backoff_factor"),
            std::string::npos);
  EXPECT_NE(
      error_of([&] { GradScaler(options_with([](auto& o) { o.init_scale = 0.0; })); }).find("init_scale"),
      std::string::npos);
  EXPECT_NE(error_of([&] {
              GradScaler(options_with([](auto& o) { o.growth_interval = 0; }));
            }).find("growth_interval"),
            std::string::npos);
  GradScaler scaler;
  EXPECT_THROW(scaler.update(), std::logic_error);  // update() without a step
}

}  // namespace
}  // namespace lockstep::train
