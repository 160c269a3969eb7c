#include "lockstep/models/vocab_parallel.h"

#include <ATen/ATen.h>
#include <torch/nn/functional/embedding.h>
#include <torch/nn/init.h>

#include "lockstep/comm/process_group.h"
#include "lockstep/models/parallel_linear.h"

namespace lockstep::models {

VocabParallelEmbeddingImpl::VocabParallelEmbeddingImpl(int64_t vocab_size, int64_t width,
                                                       comm::ProcessGroup& group)
    : group_(group), vocab_size_(vocab_size), first_row_(0) {
  TORCH_CHECK(vocab_size > 0 && width > 0, "VocabParallelEmbedding: vocab_size (", vocab_size,
              ") and width (", width, ") must be > 0");
  TORCH_CHECK(vocab_size % group.size() == 0, "VocabParallelEmbedding: vocab_size ", vocab_size,
              " is not divisible by the tensor-parallel group's size ", group.size(),
              ": pad the vocabulary to a multiple of it (GPT-2's 50257 to 50304)");
  const int64_t rows = vocab_size / group.size();
  first_row_ = group.rank() * rows;
  at::Tensor full = at::empty({vocab_size, width});
  torch::nn::init::normal_(full);
  weight = register_parameter("weight", full.narrow(0, first_row_, rows).clone());
}

at::Tensor VocabParallelEmbeddingImpl::forward(const at::Tensor& ids) {
  const int64_t rows = weight.size(0);
  at::Tensor local = ids - first_row_;
  const at::Tensor elsewhere = local.lt(0).logical_or(local.ge(rows));
  local = local.masked_fill(elsewhere, 0);
  const at::Tensor mine =
      torch::nn::functional::embedding(local, weight).masked_fill(elsewhere.unsqueeze(-1), 0);
  return reduce_from_tensor_parallel_region(mine, group_);
}

void VocabParallelEmbeddingImpl::load_full(const at::Tensor& full) {
  TORCH_CHECK(full.dim() == 2 && full.size(0) == vocab_size_ && full.size(1) == weight.size(1),
              "VocabParallelEmbedding::load_full: expected a [", vocab_size_, ", ", weight.size(1),
              "] table, got ", full.sizes());
  at::NoGradGuard no_grad;
  weight.copy_(full.narrow(0, first_row_, weight.size(0)));
}

at::Tensor vocab_parallel_cross_entropy(const at::Tensor& logits, const at::Tensor& targets,
                                        comm::ProcessGroup& group) {
  TORCH_CHECK(logits.dim() == 2 && targets.dim() == 1 && targets.size(0) == logits.size(0),
              "vocab_parallel_cross_entropy: expected logits [N, V/T] and targets [N], got ", logits.sizes(),
              " and ", targets.sizes());
  const int64_t columns = logits.size(1);
  const int64_t first = group.rank() * columns;
  // Checked before any collective: the targets are the same on every rank, so every rank throws alike.
  if (targets.numel() > 0) {
    const int64_t low = targets.min().item<int64_t>(), high = targets.max().item<int64_t>();
    TORCH_CHECK(low >= 0 && high < columns * group.size(), "vocab_parallel_cross_entropy: a target (",
                low < 0 ? low : high, ") is outside the vocabulary [0, ", columns * group.size(),
                "): every position must have a target (there is no ignore_index)");
  }
  // Shifted by the row maxima over all ranks (a constant for autograd), so that exp cannot overflow.
  at::Tensor maxima = std::get<0>(logits.detach().max(/*dim=*/1, /*keepdim=*/true)).contiguous();
  group.all_reduce(maxima, comm::ReduceOp::kMax).wait();
  const at::Tensor shifted = logits - maxima;
  const at::Tensor sum_exp = reduce_from_tensor_parallel_region(shifted.exp().sum(/*dim=*/1), group);
  at::Tensor local = targets - first;
  const at::Tensor elsewhere = local.lt(0).logical_or(local.ge(columns));
  local = local.masked_fill(elsewhere, 0);
  const at::Tensor picked = shifted.gather(1, local.unsqueeze(1)).squeeze(1).masked_fill(elsewhere, 0);
  return sum_exp.log() - reduce_from_tensor_parallel_region(picked, group);
}

at::Tensor vocab_parallel_argmax(const at::Tensor& logits, comm::ProcessGroup& group) {
  TORCH_CHECK(logits.dim() == 2, "vocab_parallel_argmax: logits must be [N, V/T], got ", logits.sizes());
  at::NoGradGuard no_grad;
  const auto [values, ids] = logits.max(-1);  // the first of equal maxima: the lowest id of this slice
  const at::Tensor all_values = group.all_gather_stacked(values.contiguous());  // [T, N]
  const at::Tensor all_ids = group.all_gather_stacked((ids + group.rank() * logits.size(-1)).contiguous());
  // Across slices too the first of equal maxima wins, and lower ranks hold lower ids.
  return all_ids.gather(0, all_values.argmax(0).unsqueeze(0)).squeeze(0);
}

}  // namespace lockstep::models
