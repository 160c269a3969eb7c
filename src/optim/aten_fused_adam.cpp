// Adam and AdamW through ATen's multi-tensor kernels: see aten_fused_adam.h.
#include "aten_fused_adam.h"

#include <map>
#include <stdexcept>
#include <tuple>
#include <utility>

#include <ATen/ops/_foreach_add.h>
#include <ATen/ops/_fused_adam.h>
#include <c10/util/Optional.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#if TORCH_VERSION_MAJOR >= 2
#include <ATen/ops/_fused_adamw.h>
#endif

#include "lockstep/detail/torch_version.h"

namespace lockstep::optim::detail {
namespace {

// The tensors of one kernel launch: parameters of one device and dtype.
struct Launch {
  std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs, steps;
};

struct Hyper {
  double lr, beta1, beta2, weight_decay, eps;
};

// AdamOptions and AdamWOptions share no base with amsgrad(): ask each.
bool amsgrad(const torch::optim::OptimizerOptions& options) {
  if (const auto* adam = dynamic_cast<const torch::optim::AdamOptions*>(&options)) return adam->amsgrad();
  if (const auto* adamw = dynamic_cast<const torch::optim::AdamWOptions*>(&options)) return adamw->amsgrad();
  return true;  // not Adam's options: not this kernel's
}

template <typename Options>
Hyper hyper(const torch::optim::OptimizerOptions& options) {
  const auto& o = static_cast<const Options&>(options);
  return {o.lr(), std::get<0>(o.betas()), std::get<1>(o.betas()), o.weight_decay(), o.eps()};
}

// `lr`: the rate on the device (DeviceSteps::use_device_lr), or null for h.lr as a constant.
void launch(Launch& l, const Hyper& h, bool decoupled, const at::Tensor* lr) {
  at::_foreach_add_(l.steps, 1);
#if LOCKSTEP_TORCH_AT_LEAST(2, 4)
  if (lr != nullptr) {
    if (decoupled) {
      at::_fused_adamw_(l.params, l.grads, l.exp_avgs, l.exp_avg_sqs, {}, l.steps, *lr, h.beta1, h.beta2,
                        h.weight_decay, h.eps, /*amsgrad=*/false, /*maximize=*/false);
    } else {
      at::_fused_adam_(l.params, l.grads, l.exp_avgs, l.exp_avg_sqs, {}, l.steps, *lr, h.beta1, h.beta2,
                       h.weight_decay, h.eps, /*amsgrad=*/false, /*maximize=*/false);
    }
    return;
  }
#else
  TORCH_CHECK(lr == nullptr, "_fused_adam_ with a device learning rate needs LibTorch 2.4 or later");
#endif
  if (decoupled) {
#if TORCH_VERSION_MAJOR >= 2
    at::_fused_adamw_(l.params, l.grads, l.exp_avgs, l.exp_avg_sqs, {}, l.steps, h.lr, h.beta1, h.beta2,
                      h.weight_decay, h.eps, /*amsgrad=*/false, /*maximize=*/false);
#else
    throw std::logic_error("aten_fused_adam_step: LibTorch 1.13 has no _fused_adamw_");
#endif
  } else {
    at::_fused_adam_(l.params, l.grads, l.exp_avgs, l.exp_avg_sqs, {}, l.steps, h.lr, h.beta1, h.beta2,
                     h.weight_decay, h.eps, /*amsgrad=*/false, /*maximize=*/false);
  }
}

// One parameter's step on the host: its state's count, and its device count recorded as advanced.
template <typename State>
void count_step(State& s, DeviceSteps& steps, const at::Tensor& param) {
  s.step(s.step() + 1);
  steps.advanced(param, s.step());
}

template <typename Options, typename State>
void step_all(std::vector<torch::optim::OptimizerParamGroup>& groups, ParamStateMap& state,
              DeviceSteps& steps, bool decoupled) {
  for (size_t g = 0; g < groups.size(); ++g) {
    auto& group = groups[g];
    std::map<std::pair<std::string, at::ScalarType>, Launch> launches;  // ordered: the same launch order
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      State& s = adam_state<State>(state, p);
      Launch& l = launches[{p.device().str(), p.scalar_type()}];
      l.params.push_back(p.detach());
      l.grads.push_back(p.grad());
      l.exp_avgs.push_back(s.exp_avg());
      l.exp_avg_sqs.push_back(s.exp_avg_sq());
      l.steps.push_back(steps.at(p, s.step()));
      count_step(s, steps, p);
      steps.stepping(p);
    }
    const Hyper h = hyper<Options>(group.options());
    for (auto& [where, l] : launches) launch(l, h, decoupled, steps.lr(g, l.params.front().device(), h.lr));
  }
  steps.stepped();
}

template <typename State>
void count_all(ParamStateMap& state, DeviceSteps& steps) {
  for (const at::Tensor& p : steps.captured_params()) count_step(adam_state<State>(state, p), steps, p);
}

}  // namespace

at::Tensor& DeviceSteps::at(const at::Tensor& param, int64_t step) {
  Entry& entry = entries_[param.unsafeGetTensorImpl()];
  if (!entry.count.defined() || entry.count.device() != param.device()) {
    entry.count =
        at::full({}, static_cast<double>(step), at::TensorOptions().dtype(at::kFloat).device(param.device()));
    entry.holds = step;
  } else if (entry.holds != step) {
    entry.count.fill_(static_cast<double>(step));
    entry.holds = step;
  }
  return entry.count;
}

void DeviceSteps::advanced(const at::Tensor& param, int64_t step) {
  entries_.at(param.unsafeGetTensorImpl()).holds = step;
}

DeviceSteps::Rate& DeviceSteps::rate(size_t group, const c10::Device& device, double value) {
  Rate& r = rates_[{group, device.str()}];
  if (!r.value.defined()) {
    r.value = at::full({}, value, at::TensorOptions().dtype(at::kFloat).device(device));
  } else if (r.holds != value) {
    r.value.fill_(value);
  }
  r.holds = value;
  return r;
}

void DeviceSteps::use_device_lr(const std::vector<torch::optim::OptimizerParamGroup>& groups) {
  if (!device_lr_) recording_ = true;  // the next step is the one captured
  device_lr_ = true;
  for (size_t g = 0; g < groups.size(); ++g) {
    c10::optional<c10::Device> last;
    for (const auto& p : groups[g].params()) {
      if (last == p.device()) continue;  // a group's parameters share one device, as a rule
      last = p.device();
      rate(g, p.device(), groups[g].options().get_lr());
    }
  }
}

const at::Tensor* DeviceSteps::lr(size_t group, const c10::Device& device, double value) {
  return device_lr_ ? &rate(group, device, value).value : nullptr;
}

std::string aten_capture_refusal(const std::vector<torch::optim::OptimizerParamGroup>& groups,
                                 bool decoupled) {
  if (!kAtenHasTensorLr) {
    return "LibTorch " TORCH_VERSION
           " has no _fused_adam_ reading its learning rate on the device (2.4 and "
           "later have)";
  }
  if (decoupled && !kAtenHasFusedAdamW) return "LibTorch " TORCH_VERSION " has no _fused_adamw_";
  for (const auto& group : groups) {
    if (amsgrad(group.options())) return "amsgrad is on (ATen's fused kernel has none here)";
    for (const auto& p : group.params()) {
      if (!p.device().is_cuda()) return "a parameter is on " + p.device().str() + ", not on a GPU";
      if (p.layout() != at::kStrided || !at::isFloatingType(p.scalar_type()))
        return "a parameter is not a dense floating-point tensor";
    }
  }
  return "";
}

template <typename State>
void fill_all(std::vector<torch::optim::OptimizerParamGroup>& groups, ParamStateMap& state,
              DeviceSteps& steps) {
  for (auto& group : groups) {
    for (auto& p : group.params()) {
      if (state.count(param_state_key(p)) != 0) steps.at(p, adam_state<State>(state, p).step());
    }
  }
}

void prepare_replay(std::vector<torch::optim::OptimizerParamGroup>& groups, ParamStateMap& state,
                    std::shared_ptr<DeviceSteps>& steps, bool decoupled) {
  if (!steps) steps = std::make_shared<DeviceSteps>();
  if (decoupled) {
    fill_all<torch::optim::AdamWParamState>(groups, state, *steps);
  } else {
    fill_all<torch::optim::AdamParamState>(groups, state, *steps);
  }
  steps->use_device_lr(groups);
}

void count_replayed_step(ParamStateMap& state, DeviceSteps& steps, bool decoupled) {
  if (decoupled) {
    count_all<torch::optim::AdamWParamState>(state, steps);
  } else {
    count_all<torch::optim::AdamParamState>(state, steps);
  }
}

bool aten_fusable(const std::vector<torch::optim::OptimizerParamGroup>& groups, bool any_device) {
  bool any = false;
  for (const auto& group : groups) {
    if (amsgrad(group.options())) return false;
    for (const auto& p : group.params()) {
      const at::Tensor& g = p.grad();
      if (!g.defined()) continue;
      if ((!any_device && p.device().is_cpu()) || p.layout() != at::kStrided || g.layout() != at::kStrided ||
          !at::isFloatingType(p.scalar_type()) || g.scalar_type() != p.scalar_type() ||
          g.device() != p.device())
        return false;
      any = true;
    }
  }
  return any;
}

void aten_fused_adam_step(std::vector<torch::optim::OptimizerParamGroup>& groups, ParamStateMap& state,
                          DeviceSteps& steps, bool decoupled) {
  at::NoGradGuard no_grad;
  if (decoupled) {
    step_all<torch::optim::AdamWOptions, torch::optim::AdamWParamState>(groups, state, steps, true);
  } else {
    step_all<torch::optim::AdamOptions, torch::optim::AdamParamState>(groups, state, steps, false);
  }
}

}  // namespace lockstep::optim::detail
