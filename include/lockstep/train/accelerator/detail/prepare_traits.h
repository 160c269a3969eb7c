// The type traits by which Accelerator::prepare tells models, optimizers and data sources apart
// (internal).
#pragma once

#include <memory>
#include <type_traits>

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/optim/optimizer.h>

#include "lockstep/data/shard_loader.h"

namespace lockstep::train::detail {

template <typename T>
struct IsDataSource : std::false_type {};
template <typename B>
struct IsDataSource<data::DataSource<B>> : std::true_type {};

template <typename T>
struct IsSharedPtr : std::false_type {};
template <typename T>
struct IsSharedPtr<std::shared_ptr<T>> : std::true_type {};

/// A module holder (`Net` from TORCH_MODULE) or a std::shared_ptr to a torch::nn::Module subclass.
template <typename M>
constexpr bool is_module() {
  if constexpr (torch::detail::is_module_holder<M>::value) {
    return true;
  } else if constexpr (IsSharedPtr<M>::value) {
    return std::is_base_of_v<torch::nn::Module, typename M::element_type>;
  } else {
    return false;
  }
}

template <typename M>
std::shared_ptr<torch::nn::Module> module_ptr(const M& model) {
  if constexpr (IsSharedPtr<M>::value) {
    return model;
  } else {
    return model.ptr();
  }
}

/// A std::shared_ptr or std::unique_ptr to a torch::optim::Optimizer subclass.
template <typename P>
struct IsOptimizerPointer : std::false_type {};
template <typename O>
struct IsOptimizerPointer<std::shared_ptr<O>> : std::is_base_of<torch::optim::Optimizer, O> {};
template <typename O>
struct IsOptimizerPointer<std::unique_ptr<O>> : std::is_base_of<torch::optim::Optimizer, O> {};

}  // namespace lockstep::train::detail
