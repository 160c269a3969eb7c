#pragma once

// Adam and AdamW on a GPU through ATen's multi-tensor kernels (`_fused_adam_`, `_fused_adamw_`: what
// torch.optim.Adam(fused=True) runs): one launch per device and dtype for all of a group's parameters,
// where LibTorch's Adam::step launches eight kernels per parameter. At batch 64 the seed MLP is
// launch-bound on an H100, so the optimizer's launches are most of a step's.
//
// The kernel reads each parameter's step count from a float32 scalar on the parameter's device, counted
// up by one `_foreach_add_` per device before it runs (PyTorch's order). The optimizer state keeps its
// integer `step` as LibTorch's Adam does, so checkpoints stay interchangeable with torch::optim::Adam; the
// device counts follow it, and one that disagrees (a loaded checkpoint, a fresh state) is refilled.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/ops/zeros_like.h>
#include <torch/optim/optimizer.h>
#include <torch/version.h>

#include "lockstep/detail/torch_version.h"
#include "param_state_key.h"

namespace lockstep::optim::detail {

// _fused_adamw_ arrived with LibTorch 2.0 (1.13 has _fused_adam_ only); CPU kernels of both with 2.4.
inline constexpr bool kAtenHasFusedAdamW = TORCH_VERSION_MAJOR >= 2;
inline constexpr bool kAtenFusedAdamRunsOnCpu = LOCKSTEP_TORCH_AT_LEAST(2, 4);

/// `param`'s Adam state in `state`, created as LibTorch's Adam creates it (step 0, zero moments) when it
/// has none. State: torch::optim::AdamParamState or AdamWParamState.
template <typename State>
State& adam_state(ParamStateMap& state, const at::Tensor& param) {
  const auto key = param_state_key(param);
  auto it = state.find(key);
  if (it == state.end()) {
    auto fresh = std::make_unique<State>();
    fresh->step(0);
    fresh->exp_avg(at::zeros_like(param, at::MemoryFormat::Preserve));
    fresh->exp_avg_sq(at::zeros_like(param, at::MemoryFormat::Preserve));
    it = state.emplace(key, std::move(fresh)).first;
  }
  return static_cast<State&>(*it->second);
}

// `_fused_adam_` with the learning rate as a device tensor (what a CUDA graph replays with a new rate).
inline constexpr bool kAtenHasTensorLr = LOCKSTEP_TORCH_AT_LEAST(2, 4);

/// The device-side state of one optimizer's kernels: the step count of each parameter and, once
/// use_device_lr() was called (GraphCapturable), each group's learning rate on each device.
class DeviceSteps {
 public:
  /// The count of `param` on its device, holding `step` (refilled when it holds another value).
  at::Tensor& at(const at::Tensor& param, int64_t step);
  /// Records that `count` (of `at`) now holds `step`.
  void advanced(const at::Tensor& param, int64_t step);
  /// From now on the kernels read each group's rate from device memory; refreshes it for every group
  /// and device of `groups` (a copy only where the rate changed).
  void use_device_lr(const std::vector<torch::optim::OptimizerParamGroup>& groups);
  /// Group `group`'s rate on `device` (float32, one element) holding `value` (refilled when it holds
  /// another: an eager step after the rate changed), or nullptr before use_device_lr().
  const at::Tensor* lr(size_t group, const c10::Device& device, double value);
  /// The parameters the first step after the first use_device_lr() stepped (the captured step's), which
  /// count_replayed_step counts again: at a replay .grad may be unset on the host (an eager step in between
  /// released it) while the graph still steps them.
  const std::vector<at::Tensor>& captured_params() const { return captured_params_; }
  /// Called by the step for each parameter it steps (recorded once, see captured_params).
  void stepping(const at::Tensor& param) {
    if (recording_) captured_params_.push_back(param);
  }
  /// Called at the end of each step.
  void stepped() { recording_ = false; }

 private:
  struct Entry {
    at::Tensor count;
    int64_t holds = -1;
  };
  struct Rate {
    at::Tensor value;
    double holds = 0.0;
  };
  std::unordered_map<const void*, Entry> entries_;
  bool device_lr_ = false;
  bool recording_ = false;
  std::vector<at::Tensor> captured_params_;
  std::map<std::pair<size_t, std::string>, Rate> rates_;  // (group, device) -> rate
  Rate& rate(size_t group, const c10::Device& device, double value);
};

/// Why ATen's kernel cannot run `groups`' next step inside a CUDA graph capture ("" when it can): each
/// parameter on a GPU, strided and floating, no amsgrad, and a LibTorch with kAtenHasTensorLr (and
/// kAtenHasFusedAdamW where `decoupled`). Gradients need not exist yet.
std::string aten_capture_refusal(const std::vector<torch::optim::OptimizerParamGroup>& groups,
                                 bool decoupled);

/// After a replay of a captured step: what step_all did on the host while capturing (each parameter it
/// stepped, DeviceSteps::captured_params: its state's step + 1, its device count recorded as holding it),
/// done again.
void count_replayed_step(ParamStateMap& state, DeviceSteps& steps, bool decoupled);

/// GraphCapturable::before_replay: `steps` (made if null) with every parameter's device count holding
/// the host's step (a copy where it does not, so that the next step, if captured, fills none: a fill
/// captured in a graph would reset the count at every replay), and the rates moved to the device
/// (use_device_lr).
void prepare_replay(std::vector<torch::optim::OptimizerParamGroup>& groups, ParamStateMap& state,
                    std::shared_ptr<DeviceSteps>& steps, bool decoupled);

/// Whether ATen's kernel takes every parameter with a gradient (and there is one): all on a device other
/// than the CPU (`any_device` admits the CPU too, where kAtenFusedAdamRunsOnCpu: how tests reach this
/// path), strided, floating, the gradient dense and of the parameter's dtype; and no group asks for
/// amsgrad.
bool aten_fusable(const std::vector<torch::optim::OptimizerParamGroup>& groups, bool any_device = false);

/// One step of Adam (`decoupled` false: weight decay added to the gradient) or AdamW over every group,
/// through ATen's kernel; creates missing state (step 0, zero moments) as LibTorch's Adam does. Only where
/// aten_fusable; `decoupled` needs kAtenHasFusedAdamW.
void aten_fused_adam_step(std::vector<torch::optim::OptimizerParamGroup>& groups, ParamStateMap& state,
                          DeviceSteps& steps, bool decoupled);

}  // namespace lockstep::optim::detail
