// Gradient-ready hooks: see the block comment in include/lockstep/ddp/grad_hooks.h.
#include "lockstep/ddp/grad_hooks.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <utility>

namespace lockstep::ddp {
namespace detail {

struct GradHookNodes {
  std::vector<at::Tensor> parameters;
  std::shared_ptr<std::function<void(size_t)>> ready;
  // The pointer type is LibTorch's: std::shared_ptr before 2.x's c10::intrusive_ptr.
  std::vector<decltype(torch::autograd::impl::grad_accumulator(std::declval<const at::Tensor&>()))> nodes;
  std::vector<uintptr_t> keys;
};

namespace {

// The post-hook on one parameter's AccumulateGrad node.
class ReadyHook : public torch::autograd::FunctionPostHook {
 public:
  ReadyHook(std::shared_ptr<std::function<void(size_t)>> ready, size_t index)
      : ready_(std::move(ready)), index_(index) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    (*ready_)(index_);
    return outputs;
  }

 private:
  std::shared_ptr<std::function<void(size_t)>> ready_;
  size_t index_;
};

}  // namespace
}  // namespace detail

GradHooks::GradHooks(const std::vector<at::Tensor>& parameters, std::function<void(size_t)> ready)
    : nodes_(std::make_unique<detail::GradHookNodes>()) {
  auto& n = *nodes_;
  n.parameters = parameters;
  n.ready = std::make_shared<std::function<void(size_t)>>(std::move(ready));
  for (size_t i = 0; i < parameters.size(); ++i) {
    auto node = torch::autograd::impl::grad_accumulator(parameters[i]);
    TORCH_INTERNAL_ASSERT(node, "no AccumulateGrad node for parameter #", i);
    n.keys.push_back(node->add_post_hook(std::make_unique<detail::ReadyHook>(n.ready, i)));
    n.nodes.push_back(std::move(node));
  }
}

GradHooks::~GradHooks() {
  auto& n = *nodes_;
  for (size_t i = 0; i < n.nodes.size(); ++i) n.nodes[i]->del_post_hook(n.keys[i]);
}

size_t GradHooks::refresh() {
  auto& n = *nodes_;
  size_t moved = 0;
  for (size_t i = 0; i < n.parameters.size(); ++i) {
    auto current = torch::autograd::impl::grad_accumulator(n.parameters[i]);
    if (!current || current == n.nodes[i]) continue;
    n.nodes[i]->del_post_hook(n.keys[i]);
    n.keys[i] = current->add_post_hook(std::make_unique<detail::ReadyHook>(n.ready, i));
    n.nodes[i] = std::move(current);
    ++moved;
  }
  return moved;
}

}  // namespace lockstep::ddp
