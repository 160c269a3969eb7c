#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

namespace lockstep::ddp {

namespace detail {
struct GradHookNodes;
}

/*
 * A call when autograd has accumulated a parameter's gradient.
 *
 * Each parameter's AccumulateGrad node gets a post-hook that calls `ready(index)` once the node has
 * written parameters[index].grad (on the thread running backward). The nodes are held here: a tensor
 * holds its node only weakly, and backward would otherwise make a fresh node without the hook.
 * LibTorch's Module::load (InputArchive::read) and set_data() give a parameter a fresh node, and a hook
 * left on the old one would never fire again; refresh() moves the hooks to the current nodes. The hooks
 * are removed when this object is destroyed.
 */
class GradHooks {
 public:
  /// Every parameter must be a leaf that requires grad.
  GradHooks(const std::vector<at::Tensor>& parameters, std::function<void(size_t index)> ready);
  ~GradHooks();
  GradHooks(const GradHooks&) = delete;
  GradHooks& operator=(const GradHooks&) = delete;

  /// Moves hooks left on replaced AccumulateGrad nodes to the current ones. Cheap: a pointer comparison
  /// per parameter. Returns how many were moved.
  size_t refresh();

 private:
  std::unique_ptr<detail::GradHookNodes> nodes_;
};

}  // namespace lockstep::ddp
