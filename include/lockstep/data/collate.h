#pragma once

#include <ATen/ops/stack.h>
#include <torch/data/example.h>

#include <cstddef>
#include <stdexcept>
#include <tuple>
#include <utility>
#include <vector>

namespace lockstep::data {

/// Turns samples into one batch by stacking them along a new dim 0 (torch.utils.data's default_collate,
/// LibTorch's Stack<>): a tensor sample gives a tensor batch, a torch::data::Example<> gives an Example of
/// stacked data and targets, a std::tuple of tensors a tuple of stacked tensors. Samples of another type
/// need a collate function of the user's (SampleDataset, IterableDataset take one).
///
/// Example:
///   at::Tensor batch = collate(std::vector<at::Tensor>{at::zeros({3}), at::ones({3})});  // [2, 3]
inline at::Tensor collate(std::vector<at::Tensor>&& samples) {
  if (samples.empty()) throw std::invalid_argument("collate: no samples to stack");
  return at::stack(samples);
}

inline torch::data::Example<at::Tensor, at::Tensor> collate(
    std::vector<torch::data::Example<at::Tensor, at::Tensor>>&& samples) {
  if (samples.empty()) throw std::invalid_argument("collate: no samples to stack");
  std::vector<at::Tensor> data, target;
  data.reserve(samples.size());
  target.reserve(samples.size());
  for (auto& sample : samples) {
    data.push_back(std::move(sample.data));
    target.push_back(std::move(sample.target));
  }
  return {at::stack(data), at::stack(target)};
}

namespace detail {
template <typename Tuple, std::size_t I>
at::Tensor stack_field(std::vector<Tuple>& samples) {
  std::vector<at::Tensor> parts;
  parts.reserve(samples.size());
  for (auto& sample : samples) parts.push_back(std::move(std::get<I>(sample)));
  return at::stack(parts);
}
template <typename Tuple, std::size_t... I>
Tuple stack_fields(std::vector<Tuple>& samples, std::index_sequence<I...>) {
  return Tuple(stack_field<Tuple, I>(samples)...);
}
}  // namespace detail

template <typename... Ts>
std::tuple<Ts...> collate(std::vector<std::tuple<Ts...>>&& samples) {
  if (samples.empty()) throw std::invalid_argument("collate: no samples to stack");
  return detail::stack_fields(samples, std::index_sequence_for<Ts...>{});
}

/// The batch type collate() makes of samples of type S.
template <typename S>
using CollateResult = decltype(collate(std::declval<std::vector<S>&&>()));

}  // namespace lockstep::data
