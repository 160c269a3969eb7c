#pragma once

// The key of a parameter's entry in torch::optim::Optimizer::state(). LibTorch before 2.2 keys the map by
// the text of the parameter's TensorImpl address (c10::guts::to_string, gone in 2.x); 2.2 and later by the
// address itself (void*). The choice follows the map's own key type, so it holds on every version.

#include <sstream>
#include <string>
#include <type_traits>
#include <utility>

#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>

namespace lockstep::optim::detail {

using ParamStateMap = std::decay_t<decltype(std::declval<torch::optim::Optimizer&>().state())>;
using ParamStateKey = ParamStateMap::key_type;

// (A template so that `if constexpr` discards the branch of the other version.)
template <typename Key = ParamStateKey>
Key param_state_key(const at::Tensor& param) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream text;  // what c10::guts::to_string(impl) printed: the address
    text << static_cast<const void*>(param.unsafeGetTensorImpl());
    return text.str();
  } else {
    return param.unsafeGetTensorImpl();
  }
}

}  // namespace lockstep::optim::detail
