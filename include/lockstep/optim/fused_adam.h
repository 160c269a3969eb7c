#pragma once

#include <memory>
#include <string>

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>

#include "lockstep/optim/graph_capturable.h"

namespace lockstep::optim {
namespace detail {
class DeviceSteps;
}

/// torch::optim::Adam whose step updates each parameter in one pass over its memory (two, around ATen's
/// own sqrt, where LibTorch takes sqrt from MKL, as PyPI's builds do).
///
/// LibTorch's Adam::step runs eight tensor operations per parameter (two of them allocating a
/// temporary the size of the parameter): for the seed MLP that is ~19% of a training step on one
/// core, mostly passes over memory and per-operation dispatch. FusedAdam reads the parameter, its
/// gradient and both moments once and writes them once, with the same arithmetic in the same order
/// as torch's vectorised kernels (the same roundings and fused multiply-adds), so its results equal
/// torch::optim::Adam's bit for bit (how ATen rounds differs between LibTorch builds: FusedAdam finds out on
/// its first step and follows; see docs/architecture.md, "Fused optimizers").
///
/// On a GPU the step is ATen's multi-tensor kernel instead (`_fused_adam_`, what torch.optim.Adam(fused=True)
/// runs): one launch per device and dtype for all parameters, equal to torch's step to float rounding.
///
/// It is a torch::optim::Adam: same options, same parameter state (step, exp_avg, exp_avg_sq), so
/// its state saves and loads like Adam's and the two can replace each other in a checkpoint. A
/// parameter group that neither fused path covers (amsgrad, sparse gradients; on the CPU non-float32 or
/// non-contiguous tensors, or a CPU without AVX2 and FMA; parameters on several kinds of device) runs
/// torch's own step instead.
///
/// On a GPU its step can be captured in a CUDA graph (GraphCapturable; LibTorch 2.4 and later).
///
/// Example:
///   lockstep::optim::FusedAdam optimizer(model->parameters(), torch::optim::AdamOptions(1e-3));
///   loss.backward();
///   optimizer.step();
class FusedAdam : public torch::optim::Adam, public GraphCapturable {
 public:
  using torch::optim::Adam::Adam;
  torch::Tensor step(LossClosure closure = nullptr) override;
  std::string capture_refusal() const override;
  void before_replay() override;
  void after_replay() override;

 private:
  at::Tensor sqrt_scratch_;  // ATen's sqrt of exp_avg_sq, where it is not the exact one (MKL's)
  std::shared_ptr<detail::DeviceSteps> device_steps_;  // the GPU kernel's step counts (aten_fused_adam.h)
};

/// torch::optim::AdamW (decoupled weight decay) with FusedAdam's one-pass update.
class FusedAdamW : public torch::optim::AdamW, public GraphCapturable {
 public:
  using torch::optim::AdamW::AdamW;
  torch::Tensor step(LossClosure closure = nullptr) override;
  std::string capture_refusal() const override;
  void before_replay() override;
  void after_replay() override;

 private:
  at::Tensor sqrt_scratch_;  // as FusedAdam's
  std::shared_ptr<detail::DeviceSteps> device_steps_;
};

/// Whether this CPU runs the fused update (AVX2 and FMA); without them the classes above fall back to
/// torch's step.
bool fused_adam_supported();

}  // namespace lockstep::optim
