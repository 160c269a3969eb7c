#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include "lockstep/models/gpt.h"
#include "lockstep/models/parallel_linear.h"
#include "lockstep/models/tensor_parallel_layout.h"
#include "lockstep/models/vocab_parallel.h"

namespace lockstep::comm {
class ProcessGroup;
}

namespace lockstep::models {

/// Dropout under tensor parallelism, as Megatron-LM draws it, from two CPU generators:
/// - activations every rank of the group holds whole (after the embeddings, on each residual branch) are
///   dropped with one stream seeded `seed` on every rank, so the group's copies stay equal;
/// - the attention weights of a rank's own heads with a stream of its own, seeded seed + 2718 + its rank
///   in the group (other heads, other masks: one process would draw independent masks for them too).
/// Both streams are the same on every data-parallel rank, as one seed for every rank makes them in
/// Lightning (seed_everything) and Megatron. A mask is Bernoulli(1 − p) / (1 − p), drawn on the CPU in the
/// activations' dtype and moved to their device.
class TensorParallelDropout {
 public:
  /// Throws c10::Error naming p when it is outside [0, 1).
  TensorParallelDropout(double p, uint64_t seed, int64_t tp_rank);

  /// The next mask of the replicated stream, or of this rank's split stream, shaped and typed as `like`.
  at::Tensor replicated_mask(const at::Tensor& like);
  at::Tensor split_mask(const at::Tensor& like);
  /// `x` times the next mask of that stream when `training` and p > 0; `x` otherwise (no draw).
  at::Tensor replicated(const at::Tensor& x, bool training);
  at::Tensor split(const at::Tensor& x, bool training);
  double p() const { return p_; }

 private:
  at::Tensor mask(const at::Tensor& like, at::Generator& stream) const;

  double p_;
  at::Generator replicated_;
  at::Generator split_;
};

/// CausalSelfAttention split by heads over a tensor-parallel group of T ranks (Megatron's split): rank r
/// computes heads [r·H/T, (r+1)·H/T). `c_attn` is a ColumnParallelLinear whose local rows are this rank's
/// queries, keys and values, in that order; `c_proj` a RowParallelLinear over the concatenated local
/// heads. One all-reduce in forward (c_proj's) and one in backward (c_attn's input).
class ParallelCausalSelfAttentionImpl : public torch::nn::Module {
 public:
  /// `dropout` may be null (none).
  ParallelCausalSelfAttentionImpl(const GptOptions& options, comm::ProcessGroup& group,
                                  std::shared_ptr<TensorParallelDropout> dropout = nullptr);
  /// `x`: [B, T, width], the same on every rank → [B, T, width], the same on every rank.
  at::Tensor forward(const at::Tensor& x);

 private:
  int64_t local_heads_;
  std::shared_ptr<TensorParallelDropout> dropout_;
  ColumnParallelLinear c_attn_{nullptr};
  RowParallelLinear c_proj_{nullptr};
};
TORCH_MODULE(ParallelCausalSelfAttention);

/// GptMlp split as Megatron splits an MLP: `c_fc` column-parallel (each rank 4·width/T hidden units),
/// GELU, `c_proj` row-parallel. One all-reduce in forward, one in backward.
class ParallelGptMlpImpl : public torch::nn::Module {
 public:
  ParallelGptMlpImpl(const GptOptions& options, comm::ProcessGroup& group);
  at::Tensor forward(const at::Tensor& x);

 private:
  ColumnParallelLinear c_fc_{nullptr};
  RowParallelLinear c_proj_{nullptr};
};
TORCH_MODULE(ParallelGptMlp);

/// A GptBlock of ParallelCausalSelfAttention and ParallelGptMlp; the LayerNorms replicated (their inputs
/// and gradients are the same on every rank, so they stay equal).
class ParallelGptBlockImpl : public torch::nn::Module {
 public:
  /// `dropout` may be null (none); the model's blocks share one.
  ParallelGptBlockImpl(const GptOptions& options, comm::ProcessGroup& group,
                       std::shared_ptr<TensorParallelDropout> dropout = nullptr);
  at::Tensor forward(at::Tensor x);

 private:
  std::shared_ptr<TensorParallelDropout> dropout_;
  torch::nn::LayerNorm ln_1_{nullptr}, ln_2_{nullptr};
  ParallelCausalSelfAttention attn_{nullptr};
  ParallelGptMlp mlp_{nullptr};
};
TORCH_MODULE(ParallelGptBlock);

/// models::Gpt split over a tensor-parallel group of T ranks: the token embedding and the head tied to it
/// by vocabulary (VocabParallelEmbedding, vocab_parallel_cross_entropy), each block by heads and MLP
/// columns (ParallelGptBlock); the position embedding, LayerNorms and the row-parallel biases replicated.
/// Each rank holds about 1/T of the blocks' weights, and of their gradients and optimizer state.
///
/// Built from a full Gpt, whose parameters it slices (in their dtype, on their device): every rank builds
/// the same Gpt (the same seed) and keeps its part, so a tensor-parallel run starts exactly where one process
/// starts, whatever T. The parameter names are the full model's (wte.weight, blocks.<i>.attn.c_attn.weight,
/// ...), each holding this rank's slice (full_slice says which).
///
/// Requires heads and vocab_size divisible by T. Dropout (GptOptions::dropout, in train() only) is drawn as
/// TensorParallelDropout describes, from `dropout_seed`: the same on every rank.
///
/// Example:
///   torch::manual_seed(0);                                   // the same on every rank
///   Gpt full(GptOptions::tiny());
///   TensorParallelGpt model(*full, mesh.tp());              // then drop `full`
///   at::Tensor loss = model->loss(tokens.slice(1, 0, -1), tokens.slice(1, 1));
///   loss.backward();                                         // collectives on mesh.tp()
class TensorParallelGptImpl : public torch::nn::Module, public TensorParallelModule {
 public:
  /// Throws c10::Error naming the values when heads or vocab_size is not divisible by the group's size.
  TensorParallelGptImpl(GptImpl& full, comm::ProcessGroup& group, uint64_t dropout_seed = 0);

  /// `tokens`: int64 ids [B, T] as Gpt::forward → this rank's logits [B, T, vocab_size/T] (vocabulary
  /// columns [rank·V/T, (rank+1)·V/T)).
  at::Tensor forward(const at::Tensor& tokens);
  /// The mean cross-entropy of predicting `targets` ([B, T] ids) from `tokens`, the same on every rank
  /// (vocab_parallel_cross_entropy: the full logits are never formed).
  at::Tensor loss(const at::Tensor& tokens, const at::Tensor& targets);

  /// This rank's part of the full model's parameter `name` (a Gpt parameter name), given the full tensor:
  /// what load_full copies into the parameter of that name.
  at::Tensor full_slice(const std::string& name, const at::Tensor& full) const;
  /// Copies this rank's slices of `full`'s parameters into this model's. Not a collective.
  void load_full(GptImpl& full);
  /// The inverse of full_slice: the whole parameters, under the full model's names and in its order (what
  /// Gpt::named_parameters gives), on every rank. A collective of the group (an all-gather per split
  /// parameter): for a checkpoint of one file (save_safetensors) or a comparison with one process.
  std::vector<std::pair<std::string, at::Tensor>> full_parameters();

  const GptOptions& options() const { return options_; }
  /// TensorParallelModule: c_attn by rows in q, k, v blocks; wte and c_fc by rows; the c_proj weights by
  /// columns; the rest replicated.
  ParameterSplit split_of(const std::string& name) const override;
  comm::ProcessGroup& tensor_parallel_group() const override { return group_; }

 private:
  GptOptions options_;
  comm::ProcessGroup& group_;
  std::shared_ptr<TensorParallelDropout> dropout_;  // null when GptOptions::dropout is 0
  VocabParallelEmbedding wte_{nullptr};
  torch::nn::Embedding wpe_{nullptr};
  torch::nn::ModuleList blocks_{nullptr};
  std::vector<ParallelGptBlock> block_list_;
  torch::nn::LayerNorm ln_f_{nullptr};
};
TORCH_MODULE(TensorParallelGpt);

}  // namespace lockstep::models
