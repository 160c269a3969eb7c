#include "lockstep/models/tensor_parallel_gpt.h"

#include <utility>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/linear.h>

#include "attention.h"
#include "lockstep/comm/process_group.h"

namespace lockstep::models {

namespace F = torch::nn::functional;

namespace {

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A [a·b·n, ...] tensor viewed as [a, b, n, ...] with the first two dimensions swapped, back to its shape.
// regroup(fused, 3, T) turns a fused [q | k | v] (each T blocks of C/T rows, one per rank) rank-major,
// [q_0 k_0 v_0 | q_1 k_1 v_1 | ...], so that rank r's c_attn rows are one block (whole_tensor undoes it).
at::Tensor regroup(const at::Tensor& t, int64_t a, int64_t b) {
  std::vector<int64_t> shape{a, b, t.size(0) / (a * b)};
  for (int64_t d = 1; d < t.dim(); ++d) shape.push_back(t.size(d));
  return t.reshape(shape).transpose(0, 1).reshape(t.sizes());
}

// How the full model's parameter `name` is split over the group: along `dim` (-1: replicated), its rows
// first made rank-major when they are c_attn's q | k | v.
}  // namespace

ParameterSplit TensorParallelGptImpl::split_of(const std::string& name) const {
  if (ends_with(name, ".attn.c_attn.weight") || ends_with(name, ".attn.c_attn.bias")) return {0, 3};
  if (name == "wte.weight" || ends_with(name, ".mlp.c_fc.weight") || ends_with(name, ".mlp.c_fc.bias"))
    return {0, 1};                                       // the vocabulary; the MLP's hidden units
  if (ends_with(name, ".c_proj.weight")) return {1, 1};  // row-parallel: by input columns
  return {};                                             // wpe, the LayerNorms, the row-parallel biases
}

TensorParallelDropout::TensorParallelDropout(double p, uint64_t seed, int64_t tp_rank)
    : p_(p),
      replicated_(at::make_generator<at::CPUGeneratorImpl>(seed)),
      split_(at::make_generator<at::CPUGeneratorImpl>(seed + 2718 + static_cast<uint64_t>(tp_rank))) {
  TORCH_CHECK(p >= 0.0 && p < 1.0, "TensorParallelDropout: p must be in [0, 1), got ", p);
}

at::Tensor TensorParallelDropout::mask(const at::Tensor& like, at::Generator& stream) const {
  at::Tensor keep = at::empty(like.sizes(), at::TensorOptions().dtype(like.scalar_type()));
  keep.bernoulli_(1.0 - p_, stream);
  return keep.div_(1.0 - p_).to(like.device());
}

at::Tensor TensorParallelDropout::replicated_mask(const at::Tensor& like) {
  return mask(like, replicated_);
}

at::Tensor TensorParallelDropout::split_mask(const at::Tensor& like) {
  return mask(like, split_);
}

at::Tensor TensorParallelDropout::replicated(const at::Tensor& x, bool training) {
  return training && p_ > 0.0 ? x * replicated_mask(x) : x;
}

at::Tensor TensorParallelDropout::split(const at::Tensor& x, bool training) {
  return training && p_ > 0.0 ? x * split_mask(x) : x;
}

ParallelCausalSelfAttentionImpl::ParallelCausalSelfAttentionImpl(
    const GptOptions& options, comm::ProcessGroup& group, std::shared_ptr<TensorParallelDropout> dropout)
    : dropout_(std::move(dropout)) {
  TORCH_CHECK(options.heads() % group.size() == 0, "ParallelCausalSelfAttention: GptOptions::heads ",
              options.heads(), " is not divisible by the tensor-parallel group's size ", group.size(),
              ": choose T dividing the number of heads");
  local_heads_ = options.heads() / group.size();
  const int64_t width = options.embedding();
  c_attn_ = register_module(
      "c_attn",
      ColumnParallelLinear(ColumnParallelLinearOptions(width, 3 * width).gather_output(false), group));
  c_proj_ = register_module(
      "c_proj", RowParallelLinear(RowParallelLinearOptions(width, width).input_is_parallel(true), group));
}

at::Tensor ParallelCausalSelfAttentionImpl::forward(const at::Tensor& x) {
  // c_attn's local rows are this rank's heads' queries, keys and values (regroup).
  const auto drop = [&](const at::Tensor& weights) {
    return dropout_ ? dropout_->split(weights, is_training()) : weights;
  };
  return c_proj_->forward(detail::causal_attention(c_attn_->forward(x), local_heads_, drop));
}

ParallelGptMlpImpl::ParallelGptMlpImpl(const GptOptions& options, comm::ProcessGroup& group) {
  const int64_t width = options.embedding();
  c_fc_ = register_module(
      "c_fc",
      ColumnParallelLinear(ColumnParallelLinearOptions(width, 4 * width).gather_output(false), group));
  c_proj_ = register_module(
      "c_proj", RowParallelLinear(RowParallelLinearOptions(4 * width, width).input_is_parallel(true), group));
}

at::Tensor ParallelGptMlpImpl::forward(const at::Tensor& x) {
  return c_proj_->forward(F::gelu(c_fc_->forward(x), F::GELUFuncOptions().approximate("tanh")));
}

ParallelGptBlockImpl::ParallelGptBlockImpl(const GptOptions& options, comm::ProcessGroup& group,
                                           std::shared_ptr<TensorParallelDropout> dropout)
    : dropout_(dropout) {
  ln_1_ = register_module("ln_1", detail::gpt_layer_norm(options));
  attn_ = register_module("attn", ParallelCausalSelfAttention(options, group, dropout));
  ln_2_ = register_module("ln_2", detail::gpt_layer_norm(options));
  mlp_ = register_module("mlp", ParallelGptMlp(options, group));
}

at::Tensor ParallelGptBlockImpl::forward(at::Tensor x) {
  // The residual branches' dropout: on whole activations, the same mask on every rank of the group.
  const auto drop = [&](const at::Tensor& branch) {
    return dropout_ ? dropout_->replicated(branch, is_training()) : branch;
  };
  x = x + drop(attn_->forward(ln_1_->forward(x)));
  return x + drop(mlp_->forward(ln_2_->forward(x)));
}

TensorParallelGptImpl::TensorParallelGptImpl(GptImpl& full, comm::ProcessGroup& group, uint64_t dropout_seed)
    : options_(full.options()), group_(group) {
  if (options_.dropout() > 0.0)
    dropout_ = std::make_shared<TensorParallelDropout>(options_.dropout(), dropout_seed, group.rank());
  wte_ = register_module("wte", VocabParallelEmbedding(options_.vocab_size(), options_.embedding(), group));
  wpe_ = register_module("wpe", torch::nn::Embedding(options_.context(), options_.embedding()));
  blocks_ = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < options_.layers(); ++i) {
    block_list_.emplace_back(options_, group, dropout_);
    blocks_->push_back(block_list_.back());
  }
  ln_f_ = register_module("ln_f", detail::gpt_layer_norm(options_));
  const at::Tensor like = full.parameters().front();  // the full model's dtype and device
  to(like.device(), like.scalar_type());
  load_full(full);
}

at::Tensor TensorParallelGptImpl::full_slice(const std::string& name, const at::Tensor& full) const {
  const ParameterSplit split = split_of(name);
  if (split.replicated()) return full;
  const at::Tensor ordered = split.chunks > 1 ? regroup(full, split.chunks, group_.size()) : full;
  const int64_t n = ordered.size(split.dim) / group_.size();
  return ordered.narrow(split.dim, group_.rank() * n, n);
}

void TensorParallelGptImpl::load_full(GptImpl& full) {
  const auto sources = full.named_parameters();
  at::NoGradGuard no_grad;
  for (auto& parameter : named_parameters()) {
    const at::Tensor* source = sources.find(parameter.key());
    TORCH_CHECK(source != nullptr, "TensorParallelGpt::load_full: the full model has no parameter ",
                parameter.key());
    const at::Tensor slice = full_slice(parameter.key(), *source);
    TORCH_CHECK(slice.sizes() == parameter.value().sizes(), "TensorParallelGpt::load_full: ", parameter.key(),
                " is ", parameter.value().sizes(), " here but its slice of the full model is ",
                slice.sizes());
    parameter.value().copy_(slice);
  }
}

std::vector<std::pair<std::string, at::Tensor>> TensorParallelGptImpl::full_parameters() {
  std::vector<std::pair<std::string, at::Tensor>> out;
  at::NoGradGuard no_grad;
  for (const auto& parameter : named_parameters()) {
    const ParameterSplit split = split_of(parameter.key());
    const at::Tensor& local = parameter.value();
    out.emplace_back(parameter.key(),
                     split.replicated() ? local.clone() : gather_whole(split, local, group_));
  }
  return out;
}

at::Tensor TensorParallelGptImpl::forward(const at::Tensor& tokens) {
  TORCH_CHECK(tokens.dim() == 2 && tokens.size(1) >= 1 && tokens.size(1) <= options_.context(),
              "TensorParallelGpt::forward: expected token ids [B, T] with 1 <= T <= ", options_.context(),
              ", got ", tokens.sizes());
  const at::Tensor ids = tokens.to(at::kLong);
  const at::Tensor positions = at::arange(ids.size(1), ids.options());
  at::Tensor x = wte_->forward(ids) + wpe_->forward(positions);
  if (dropout_) x = dropout_->replicated(x, is_training());
  for (auto& block : block_list_) x = block->forward(x);
  x = ln_f_->forward(x);
  // The tied head: this rank's vocabulary columns of x·wteᵀ; x's gradient summed over the ranks.
  return F::linear(copy_to_tensor_parallel_region(x, group_), wte_->weight);
}

at::Tensor TensorParallelGptImpl::loss(const at::Tensor& tokens, const at::Tensor& targets) {
  const at::Tensor logits = forward(tokens);
  return vocab_parallel_cross_entropy(logits.reshape({-1, logits.size(-1)}),
                                      targets.reshape({-1}).to(at::kLong), group_)
      .mean();
}

}  // namespace lockstep::models
