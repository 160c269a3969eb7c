// ForeachSgd: see include/lockstep/optim/foreach_sgd.h.
#include "lockstep/optim/foreach_sgd.h"

#include <vector>

#include <ATen/ops/_foreach_add.h>
#include <ATen/ops/_foreach_mul.h>
#include <ATen/ops/clone.h>

#include "param_state_key.h"

namespace lockstep::optim {
namespace {

using TensorVector = std::vector<at::Tensor>;

// The momentum buffers of `params` (the group's own tensors: the state is keyed by their TensorImpl), in
// order; a parameter without one gets a copy of its `d_p` (SGD's first step) and is marked in `fresh`,
// which the update leaves as it is.
TensorVector momentum_buffers(detail::ParamStateMap& state, const TensorVector& params,
                              const TensorVector& d_ps, std::vector<bool>& fresh) {
  TensorVector buffers;
  for (size_t i = 0; i < params.size(); ++i) {
    const auto key = detail::param_state_key(params[i]);
    auto it = state.find(key);
    fresh.push_back(it == state.end());
    if (fresh.back()) {
      auto created = std::make_unique<torch::optim::SGDParamState>();
      created->momentum_buffer(at::clone(d_ps[i]).detach());
      it = state.emplace(key, std::move(created)).first;
    }
    buffers.push_back(static_cast<torch::optim::SGDParamState&>(*it->second).momentum_buffer());
  }
  return buffers;
}

// buf = buf * momentum + d_p * (1 - dampening) for the buffers that were there before this step.
void update_buffers(const TensorVector& buffers, const TensorVector& d_ps, const std::vector<bool>& fresh,
                    double momentum, double dampening) {
  TensorVector old_buffers, their_d_ps;
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (fresh[i]) continue;
    old_buffers.push_back(buffers[i]);
    their_d_ps.push_back(d_ps[i]);
  }
  if (old_buffers.empty()) return;
  at::_foreach_mul_(old_buffers, momentum);
  at::_foreach_add_(old_buffers, their_d_ps, 1 - dampening);
}

void step_group(torch::optim::OptimizerParamGroup& group, detail::ParamStateMap& state) {
  const auto& options = static_cast<const torch::optim::SGDOptions&>(group.options());
  TensorVector params, d_ps;  // the group's tensors themselves (updated under step's NoGradGuard)
  for (auto& p : group.params()) {
    if (!p.grad().defined()) continue;
    params.push_back(p);
    d_ps.push_back(p.grad());
  }
  if (params.empty()) return;
  if (options.weight_decay() != 0) d_ps = at::_foreach_add(d_ps, params, options.weight_decay());
  if (options.momentum() != 0) {
    std::vector<bool> fresh;
    const TensorVector buffers = momentum_buffers(state, params, d_ps, fresh);
    update_buffers(buffers, d_ps, fresh, options.momentum(), options.dampening());
    d_ps = options.nesterov() ? at::_foreach_add(d_ps, buffers, options.momentum()) : buffers;
  }
  at::_foreach_add_(params, d_ps, -1 * options.lr());
}

}  // namespace

torch::Tensor ForeachSgd::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : param_groups_) step_group(group, state_);
  return loss;
}

}  // namespace lockstep::optim
