#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

namespace lockstep::comm {
class ProcessGroup;
}

namespace lockstep::models {

// The vocabulary split over a tensor-parallel group of T ranks (Megatron-LM's VocabParallelEmbedding and
// vocab-parallel cross-entropy): rank r holds the rows [r·V/T, (r+1)·V/T) of the token embedding, and of
// the logits of a head tied to it, so that no rank trains with the whole [V, width] table or forms the
// [N, V] logits. Built from the region functions of parallel_linear.h; every call is a collective on the
// group.

/// An Embedding(vocab_size, width) whose rows are split over `group`. Forward looks up the ids that fall
/// in this rank's rows (zeros for the others) and all-reduces (reduce_from_tensor_parallel_region), so
/// every rank gets the full [..., width] embedding; backward leaves each rank the gradient of its rows.
/// Initialisation does not depend on T: the full table is drawn N(0, 1) as torch::nn::Embedding draws it
/// (held for the constructor's duration), and this rank keeps its rows. `group` must outlive the layer.
///
/// Example:
///   VocabParallelEmbedding wte(/*vocab_size=*/50304, /*width=*/768, tp_group);
///   at::Tensor x = wte(tokens);   // [B, T, 768] on every rank
class VocabParallelEmbeddingImpl : public torch::nn::Module {
 public:
  /// Throws c10::Error naming vocab_size and the group's size when the one is not divisible by the other
  /// (pad the vocabulary: GPT-2's 50257 to 50304), or for a non-positive size.
  VocabParallelEmbeddingImpl(int64_t vocab_size, int64_t width, comm::ProcessGroup& group);

  /// `ids`: int64 token ids in [0, vocab_size), the same on every rank → [..., width].
  at::Tensor forward(const at::Tensor& ids);

  /// Copies this rank's rows of a full [vocab_size, width] table into `weight`. Not a collective.
  void load_full(const at::Tensor& full);

  /// This rank's first row of the full table.
  int64_t first_row() const { return first_row_; }
  int64_t vocab_size() const { return vocab_size_; }

  at::Tensor weight;  ///< [vocab_size/T, width]

 private:
  comm::ProcessGroup& group_;
  int64_t vocab_size_;
  int64_t first_row_;
};
TORCH_MODULE(VocabParallelEmbedding);

/// Cross-entropy of logits split by vocabulary: `logits` is this rank's [N, V/T] slice (columns
/// [rank·V/T, (rank+1)·V/T) of the full [N, V]), `targets` the [N] int64 ids in [0, V), the same on every
/// rank (all in range: there is no ignore_index; c10::Error names one outside). Returns the N losses,
/// −log softmax(full logits)[target], the same on every rank, as
/// torch::nn::functional::cross_entropy with reduction none would on the full logits. Three all-reduces
/// of N values (the row maxima, the sums of exponentials, the target logits): never the [N, V] logits.
/// The gradient reaching each rank's slice is its part of softmax − one-hot.
at::Tensor vocab_parallel_cross_entropy(const at::Tensor& logits, const at::Tensor& targets,
                                        comm::ProcessGroup& group);

/// The argmax over the full vocabulary of logits split by vocabulary (`logits`: this rank's [N, V/T] slice,
/// as vocab_parallel_cross_entropy takes): the [N] int64 ids, the same on every rank, and equal to
/// full_logits.argmax(-1), ties to the lowest id. Two all-gathers of N values; no gradient.
at::Tensor vocab_parallel_argmax(const at::Tensor& logits, comm::ProcessGroup& group);

}  // namespace lockstep::models
