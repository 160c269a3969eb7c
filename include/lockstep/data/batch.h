#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/data/example.h>

#include <cstdint>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace lockstep::data {

/// One mini-batch of the image datasets (ImageDataset, and the Loader built from a TensorDataset).
struct Batch {
  /// Images: float32 [B, C, H, W], transformed (normalised, and augmented when asked). Text
  /// (TextWindows): int64 token ids [B, T].
  at::Tensor data;
  /// Images: int64 [B], the class labels. Text: int64 [B, T], each position's next token.
  at::Tensor target;
};

/// What the Trainer and the Accelerator need to know of a batch type `B`, whatever it holds: how many
/// samples it has (the weight of what training_step logs, the samples/s of an epoch) and how to move it
/// to a device. Defined here for Batch, at::Tensor, std::vector<at::Tensor>, std::tuple / std::pair of
/// tensors and torch::data::Example<at::Tensor, T> (the sample count is dim 0 of the first tensor).
///
/// Optionally a third, `static B pin(const B&)`: the batch in pinned (page-locked) host memory, which the
/// loader's workers call when LoaderOptions::pin_memory is on (training on a GPU), so that the copy to the
/// device is asynchronous. The built-in types have it; a type without it is copied from pageable memory.
/// And a fourth, `static std::vector<at::Tensor> tensors(const B&)`: the batch's tensors (handles to them,
/// not copies), which a CUDA graph step needs to copy each batch into its static input (cuda_graphs: the
/// batch captured becomes that input, after batch_own_memory).
///
/// A batch type of your own specialises it (two static functions), for example:
///   struct TokenBatch { at::Tensor tokens, next; };
///   template <> struct lockstep::data::BatchTraits<TokenBatch> {
///     static int64_t size(const TokenBatch& b) { return b.tokens.size(0); }
///     static TokenBatch to(const TokenBatch& b, const c10::Device& d) { return {b.tokens.to(d),
///     b.next.to(d)}; }
///   };
template <typename B, typename Enable = void>
struct BatchTraits {
  static_assert(sizeof(B) == 0,
                "lockstep::data::BatchTraits<B> is not defined for this batch type: specialise it with "
                "static int64_t size(const B&) and static B to(const B&, const c10::Device&) (see batch.h)");
};

namespace detail {
inline int64_t leading_size(const at::Tensor& tensor) {
  if (!tensor.defined() || tensor.dim() == 0) {
    throw std::invalid_argument("a batch's first tensor must have a batch dimension (dim 0 = samples); got " +
                                std::string(tensor.defined() ? "a 0-d tensor" : "an undefined tensor"));
  }
  return tensor.size(0);
}
/// `tensor` on `device`; from pinned host memory to a CUDA device without blocking the host (the copy is
/// ordered on the current stream, before the kernels that use it).
inline at::Tensor moved(const at::Tensor& tensor, const c10::Device& device) {
  if (!tensor.defined()) return tensor;
  const bool async = device.is_cuda() && tensor.is_cpu() && tensor.is_pinned();
  return tensor.to(device, /*non_blocking=*/async);
}
inline at::Tensor pinned(const at::Tensor& tensor) {
  return tensor.defined() && tensor.is_cpu() ? tensor.pin_memory() : tensor;
}
}  // namespace detail

template <>
struct BatchTraits<Batch> {
  static int64_t size(const Batch& batch) { return detail::leading_size(batch.target); }
  static Batch to(const Batch& batch, const c10::Device& device) {
    return {detail::moved(batch.data, device), detail::moved(batch.target, device)};
  }
  static Batch pin(const Batch& batch) { return {detail::pinned(batch.data), detail::pinned(batch.target)}; }
  static std::vector<at::Tensor> tensors(const Batch& batch) { return {batch.data, batch.target}; }
};

template <>
struct BatchTraits<at::Tensor> {
  static int64_t size(const at::Tensor& batch) { return detail::leading_size(batch); }
  static at::Tensor to(const at::Tensor& batch, const c10::Device& device) {
    return detail::moved(batch, device);
  }
  static at::Tensor pin(const at::Tensor& batch) { return detail::pinned(batch); }
  static std::vector<at::Tensor> tensors(const at::Tensor& batch) { return {batch}; }
};

template <>
struct BatchTraits<std::vector<at::Tensor>> {
  static int64_t size(const std::vector<at::Tensor>& batch) {
    if (batch.empty()) throw std::invalid_argument("an empty std::vector<at::Tensor> batch has no samples");
    return detail::leading_size(batch.front());
  }
  static std::vector<at::Tensor> to(const std::vector<at::Tensor>& batch, const c10::Device& device) {
    std::vector<at::Tensor> out;
    out.reserve(batch.size());
    for (const at::Tensor& t : batch) out.push_back(detail::moved(t, device));
    return out;
  }
  static std::vector<at::Tensor> pin(const std::vector<at::Tensor>& batch) {
    std::vector<at::Tensor> out;
    out.reserve(batch.size());
    for (const at::Tensor& t : batch) out.push_back(detail::pinned(t));
    return out;
  }
  static std::vector<at::Tensor> tensors(const std::vector<at::Tensor>& batch) { return batch; }
};

template <typename... Ts>
struct BatchTraits<std::tuple<Ts...>, std::enable_if_t<(std::is_same_v<Ts, at::Tensor> && ...)>> {
  static_assert(sizeof...(Ts) > 0, "a tuple batch needs at least one tensor");
  static int64_t size(const std::tuple<Ts...>& batch) { return detail::leading_size(std::get<0>(batch)); }
  static std::tuple<Ts...> to(const std::tuple<Ts...>& batch, const c10::Device& device) {
    return std::apply([&](const auto&... t) { return std::tuple<Ts...>(detail::moved(t, device)...); },
                      batch);
  }
  static std::tuple<Ts...> pin(const std::tuple<Ts...>& batch) {
    return std::apply([](const auto&... t) { return std::tuple<Ts...>(detail::pinned(t)...); }, batch);
  }
  static std::vector<at::Tensor> tensors(const std::tuple<Ts...>& batch) {
    return std::apply([](const auto&... t) { return std::vector<at::Tensor>{t...}; }, batch);
  }
};

template <>
struct BatchTraits<std::pair<at::Tensor, at::Tensor>> {
  static int64_t size(const std::pair<at::Tensor, at::Tensor>& batch) {
    return detail::leading_size(batch.first);
  }
  static std::pair<at::Tensor, at::Tensor> to(const std::pair<at::Tensor, at::Tensor>& batch,
                                              const c10::Device& device) {
    return {detail::moved(batch.first, device), detail::moved(batch.second, device)};
  }
  static std::pair<at::Tensor, at::Tensor> pin(const std::pair<at::Tensor, at::Tensor>& batch) {
    return {detail::pinned(batch.first), detail::pinned(batch.second)};
  }
  static std::vector<at::Tensor> tensors(const std::pair<at::Tensor, at::Tensor>& batch) {
    return {batch.first, batch.second};
  }
};

/// LibTorch's torch::data::Example<> (data and target), as its Stack<> transform makes it.
template <>
struct BatchTraits<torch::data::Example<at::Tensor, at::Tensor>> {
  using Example = torch::data::Example<at::Tensor, at::Tensor>;
  static int64_t size(const Example& batch) { return detail::leading_size(batch.data); }
  static Example to(const Example& batch, const c10::Device& device) {
    return {detail::moved(batch.data, device), detail::moved(batch.target, device)};
  }
  static Example pin(const Example& batch) {
    return {detail::pinned(batch.data), detail::pinned(batch.target)};
  }
  static std::vector<at::Tensor> tensors(const Example& batch) { return {batch.data, batch.target}; }
};

/// torch::data::Example<at::Tensor, NoTarget> (TensorExample).
template <>
struct BatchTraits<torch::data::Example<at::Tensor, torch::data::example::NoTarget>> {
  using Example = torch::data::Example<at::Tensor, torch::data::example::NoTarget>;
  static int64_t size(const Example& batch) { return detail::leading_size(batch.data); }
  static Example to(const Example& batch, const c10::Device& device) {
    return Example(detail::moved(batch.data, device));
  }
  static Example pin(const Example& batch) { return Example(detail::pinned(batch.data)); }
  static std::vector<at::Tensor> tensors(const Example& batch) { return {batch.data}; }
};

/// The number of samples in `batch` (BatchTraits<B>::size).
template <typename B>
int64_t batch_size(const B& batch) {
  return BatchTraits<B>::size(batch);
}

/// `batch` on `device` (BatchTraits<B>::to).
template <typename B>
B batch_to(const B& batch, const c10::Device& device) {
  return BatchTraits<B>::to(batch, device);
}

/// Whether BatchTraits<B> has pin().
template <typename B, typename = void>
struct can_pin : std::false_type {};
template <typename B>
struct can_pin<B, std::void_t<decltype(BatchTraits<B>::pin(std::declval<const B&>()))>> : std::true_type {};

/// `batch` in pinned host memory (BatchTraits<B>::pin), or `batch` itself when B's traits have no pin().
template <typename B>
B batch_pin(const B& batch) {
  if constexpr (can_pin<B>::value) {
    return BatchTraits<B>::pin(batch);
  } else {
    return batch;
  }
}

/// Whether BatchTraits<B> has tensors().
template <typename B, typename = void>
struct can_list_tensors : std::false_type {};
template <typename B>
struct can_list_tensors<B, std::void_t<decltype(BatchTraits<B>::tensors(std::declval<const B&>()))>>
    : std::true_type {};

/// Gives every tensor of `batch` memory of its own (a copy), in place (at::Tensor::set_): handles to the
/// same tensors see the copy, and what they were views of (a dataset's rows kept on the device) no longer
/// changes with them. What a CUDA graph's static input needs before batches are copied into it. Nothing
/// for a B without BatchTraits<B>::tensors.
template <typename B>
void batch_own_memory(const B& batch) {
  if constexpr (can_list_tensors<B>::value) {
    for (at::Tensor t : BatchTraits<B>::tensors(batch)) {
      if (t.defined()) t.set_(t.clone());
    }
  }
}

/// Copies `from` into the tensors of `into` (BatchTraits<B>::tensors), on into's device and without
/// blocking the host, when every tensor has the same shape and dtype; returns whether it did (false:
/// nothing copied, e.g. an epoch's shorter last batch, or a B without tensors()).
template <typename B>
bool batch_copy_into(const B& into, const B& from) {
  if constexpr (can_list_tensors<B>::value) {
    const std::vector<at::Tensor> to = BatchTraits<B>::tensors(into);
    const std::vector<at::Tensor> in = BatchTraits<B>::tensors(from);
    if (to.size() != in.size()) return false;
    for (size_t i = 0; i < to.size(); ++i) {
      if (to[i].defined() != in[i].defined()) return false;
      if (to[i].defined() && (to[i].sizes() != in[i].sizes() || to[i].scalar_type() != in[i].scalar_type()))
        return false;
    }
    for (size_t i = 0; i < to.size(); ++i) {
      if (to[i].defined()) to[i].copy_(in[i], /*non_blocking=*/true);
    }
    return true;
  } else {
    return false;
  }
}

}  // namespace lockstep::data
