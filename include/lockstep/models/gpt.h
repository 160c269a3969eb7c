#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include "lockstep/detail/option.h"
#include "lockstep/models/staged.h"

namespace lockstep::models {

/// Options of Gpt. The defaults are tiny() (a byte-level model for tests); gpt2_small() is GPT-2's 124M.
///
/// Example:
///   Gpt model(GptOptions::tiny().layers(4).dropout(0.1));
class GptOptions {
 public:
  /// Tokens are ids in [0, vocab_size); the logits have vocab_size values per position.
  LOCKSTEP_OPTION(GptOptions, int64_t, vocab_size)
  /// The longest sequence forward accepts (the rows of the position embedding).
  LOCKSTEP_OPTION(GptOptions, int64_t, context)
  /// Transformer blocks.
  LOCKSTEP_OPTION(GptOptions, int64_t, layers)
  /// Attention heads per block; must divide embedding.
  LOCKSTEP_OPTION(GptOptions, int64_t, heads)
  /// Width of the residual stream (GPT-2's n_embd).
  LOCKSTEP_OPTION(GptOptions, int64_t, embedding)
  /// Dropout probability in [0, 1) after the embeddings, on the attention weights and on each residual
  /// branch (as GPT-2); active in train() only.
  LOCKSTEP_OPTION(GptOptions, double, dropout)

  /// 256 byte values, context 64, 2 layers of 2 heads, width 64, dropout 0: 120,576 parameters.
  static GptOptions tiny() { return GptOptions(); }
  /// GPT-2 small: vocabulary 50257, context 1024, 12 layers of 12 heads, width 768, dropout 0.1:
  /// 124,439,808 parameters (the head tied to the token embedding).
  static GptOptions gpt2_small() {
    return GptOptions().vocab_size(50257).context(1024).layers(12).heads(12).embedding(768).dropout(0.1);
  }

 private:
  int64_t vocab_size_ = 256;
  int64_t context_ = 64;
  int64_t layers_ = 2;
  int64_t heads_ = 2;
  int64_t embedding_ = 64;
  double dropout_ = 0.0;
};

/// Causal multi-head self-attention: one Linear `c_attn` (width → 3·width) gives queries, keys and
/// values; each head attends to the positions up to its own (softmax(q·kᵀ/√d) with the future masked
/// to −∞, then attention dropout), the heads are concatenated and projected by `c_proj`, then residual
/// dropout. Written with matmul and softmax (no scaled_dot_product_attention: LibTorch 1.13 has none).
class CausalSelfAttentionImpl : public torch::nn::Module {
 public:
  explicit CausalSelfAttentionImpl(const GptOptions& options);
  /// `x`: [B, T, width] → [B, T, width].
  at::Tensor forward(const at::Tensor& x);

 private:
  int64_t heads_;
  torch::nn::Linear c_attn_{nullptr}, c_proj_{nullptr};
  torch::nn::Dropout attn_dropout_{nullptr}, resid_dropout_{nullptr};
};
TORCH_MODULE(CausalSelfAttention);

/// GPT-2's feed-forward branch: Linear `c_fc` (width → 4·width), GELU (tanh approximation, as GPT-2),
/// Linear `c_proj` (4·width → width), dropout.
class GptMlpImpl : public torch::nn::Module {
 public:
  explicit GptMlpImpl(const GptOptions& options);
  /// `x`: [B, T, width] → [B, T, width].
  at::Tensor forward(const at::Tensor& x);

 private:
  torch::nn::Linear c_fc_{nullptr}, c_proj_{nullptr};
  torch::nn::Dropout dropout_{nullptr};
};
TORCH_MODULE(GptMlp);

/// A pre-LayerNorm transformer block: x + attn(ln_1(x)), then x + mlp(ln_2(x)).
class GptBlockImpl : public torch::nn::Module {
 public:
  explicit GptBlockImpl(const GptOptions& options);
  /// `x`: [B, T, width] → [B, T, width].
  at::Tensor forward(at::Tensor x);

 private:
  torch::nn::LayerNorm ln_1_{nullptr}, ln_2_{nullptr};
  CausalSelfAttention attn_{nullptr};
  GptMlp mlp_{nullptr};
};
TORCH_MODULE(GptBlock);

/*
 * A decoder-only transformer language model, as GPT-2 (and nanoGPT): token embedding `wte` plus position
 * embedding `wpe`, dropout, `layers` GptBlocks, a final LayerNorm `ln_f`, and the head tied to the token
 * embedding (logits = ln_f(x)·wteᵀ: no head parameter of its own). Initialised as GPT-2: Linear and
 * Embedding weights normal(0, 0.02), biases 0, LayerNorms 1 and 0, and the residual projections
 * (attn.c_proj, mlp.c_proj) normal(0, 0.02/√(2·layers)). Parameter names: wte.weight, wpe.weight,
 * blocks.<i>.{ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj}.{weight, bias}, ln_f.weight,
 * ln_f.bias; V·C + P·C + L·(12·C² + 13·C) + 2·C parameters for vocabulary V, context P, L layers, width C.
 *
 * Staged (models/staged.h), in layers + 2 stages: 0 the embeddings (wte, wpe), 1 … layers the blocks,
 * layers + 1 ln_f. The tied head is a second run of stage 0, after ln_f: forward runs the stages
 * 0, 1, …, layers + 1, 0, each reading only its own stage's parameters. A runner must allow a stage to run
 * twice. FSDP's does: the second run of stage 0 repeats its start-of-forward work (buffer sync, hook
 * refresh, every unit released: the last unit is gathered again when backward starts), and the ranks end
 * where one process does with at most two units whole at once (Fsdp.GptWithItsTiedHeadMatchesOneProcess). A
 * pipeline would keep the head with the embedding, or a copy of wte on its last stage with the gradients
 * summed (as Megatron does).
 *
 * Example:
 *   torch::manual_seed(0);
 *   Gpt model(GptOptions::tiny());
 *   at::Tensor tokens = torch::randint(256, {8, 64});           // int64 [B, T], T <= context
 *   at::Tensor logits = model->forward(tokens);                 // [8, 64, 256]
 *   at::Tensor loss = torch::nn::functional::cross_entropy(
 *       logits.slice(1, 0, 63).reshape({-1, 256}), tokens.slice(1, 1).reshape({-1}));
 */
class GptImpl : public torch::nn::Module, public Staged {
 public:
  /// Throws c10::Error naming the field for a non-positive size, embedding not divisible by heads, or a
  /// dropout outside [0, 1).
  explicit GptImpl(GptOptions options = {});

  /// `tokens`: int64 (or int32) ids [B, T] with 1 <= T <= context → logits [B, T, vocab_size]; position
  /// t sees tokens 0 … t only. Throws c10::Error for another dtype or rank, or T over context.
  at::Tensor forward(const at::Tensor& tokens);
  /// The embeddings (a module holding wte and wpe, made on each call: not part of the module tree), the
  /// blocks, ln_f.
  std::vector<std::shared_ptr<torch::nn::Module>> stage_modules() override;
  /// 0 .. layers + 1, then 0 again: the head is tied to the token embedding.
  std::vector<size_t> forward_stages() override;

  const GptOptions& options() const { return options_; }

 private:
  GptOptions options_;
  torch::nn::Embedding wte_{nullptr}, wpe_{nullptr};
  torch::nn::Dropout drop_{nullptr};
  torch::nn::ModuleList blocks_{nullptr};
  std::vector<GptBlock> block_list_;
  torch::nn::LayerNorm ln_f_{nullptr};
};
TORCH_MODULE(Gpt);

}  // namespace lockstep::models
