#include "lockstep/models/gpt.h"

#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/linear.h>
#include <torch/nn/init.h>

#include "attention.h"

namespace lockstep::models {

namespace F = torch::nn::functional;

namespace {

void check_options(const GptOptions& o) {
  TORCH_CHECK(o.vocab_size() > 0, "GptOptions::vocab_size must be > 0, got ", o.vocab_size());
  TORCH_CHECK(o.context() > 0, "GptOptions::context must be > 0, got ", o.context());
  TORCH_CHECK(o.layers() > 0, "GptOptions::layers must be > 0, got ", o.layers());
  TORCH_CHECK(o.heads() > 0, "GptOptions::heads must be > 0, got ", o.heads());
  TORCH_CHECK(o.embedding() > 0, "GptOptions::embedding must be > 0, got ", o.embedding());
  TORCH_CHECK(o.embedding() % o.heads() == 0, "GptOptions::embedding (", o.embedding(),
              ") must be divisible by GptOptions::heads (", o.heads(), ")");
  TORCH_CHECK(o.dropout() >= 0.0 && o.dropout() < 1.0, "GptOptions::dropout must be in [0, 1), got ",
              o.dropout());
}

torch::nn::Dropout make_dropout(const GptOptions& o) {
  return torch::nn::Dropout(torch::nn::DropoutOptions(o.dropout()));
}

}  // namespace

namespace detail {

at::Tensor causal_attention(const at::Tensor& qkv, int64_t heads,
                            const std::function<at::Tensor(const at::Tensor&)>& dropout) {
  const int64_t batch = qkv.size(0), length = qkv.size(1), width = qkv.size(2) / 3;
  const int64_t head_width = width / heads;
  const auto split_heads = [&](const at::Tensor& t) {  // [B, T, W] → [B, heads, T, W / heads]
    return t.reshape({batch, length, heads, head_width}).transpose(1, 2);
  };
  const auto parts = qkv.split(width, /*dim=*/2);
  const at::Tensor q = split_heads(parts[0]), k = split_heads(parts[1]), v = split_heads(parts[2]);
  at::Tensor scores =
      torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(head_width)));
  // Position i attends to j <= i: the entries above the diagonal are the future. Built per call (T² bools,
  // small beside the scores) rather than kept as a buffer, which LibTorch would save and FSDP broadcast.
  const at::Tensor future =
      torch::ones({length, length}, qkv.options().dtype(torch::kBool)).triu(/*diagonal=*/1);
  scores = scores.masked_fill(future, -std::numeric_limits<double>::infinity());
  at::Tensor weights = torch::softmax(scores, /*dim=*/-1);
  if (dropout) weights = dropout(weights);
  return torch::matmul(weights, v).transpose(1, 2).contiguous().view({batch, length, width});
}

torch::nn::LayerNorm gpt_layer_norm(const GptOptions& options) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({options.embedding()}));  // eps 1e-5, as GPT-2
}

}  // namespace detail

CausalSelfAttentionImpl::CausalSelfAttentionImpl(const GptOptions& options) : heads_(options.heads()) {
  check_options(options);
  const int64_t width = options.embedding();
  c_attn_ = register_module("c_attn", torch::nn::Linear(width, 3 * width));
  c_proj_ = register_module("c_proj", torch::nn::Linear(width, width));
  attn_dropout_ = register_module("attn_dropout", make_dropout(options));
  resid_dropout_ = register_module("resid_dropout", make_dropout(options));
}

at::Tensor CausalSelfAttentionImpl::forward(const at::Tensor& x) {
  const at::Tensor y = detail::causal_attention(c_attn_->forward(x), heads_, [&](const at::Tensor& weights) {
    return attn_dropout_->forward(weights);
  });
  return resid_dropout_->forward(c_proj_->forward(y));
}

GptMlpImpl::GptMlpImpl(const GptOptions& options) {
  const int64_t width = options.embedding();
  c_fc_ = register_module("c_fc", torch::nn::Linear(width, 4 * width));
  c_proj_ = register_module("c_proj", torch::nn::Linear(4 * width, width));
  dropout_ = register_module("dropout", make_dropout(options));
}

at::Tensor GptMlpImpl::forward(const at::Tensor& x) {
  const at::Tensor h = F::gelu(c_fc_->forward(x), F::GELUFuncOptions().approximate("tanh"));
  return dropout_->forward(c_proj_->forward(h));
}

GptBlockImpl::GptBlockImpl(const GptOptions& options) {
  ln_1_ = register_module("ln_1", detail::gpt_layer_norm(options));
  attn_ = register_module("attn", CausalSelfAttention(options));
  ln_2_ = register_module("ln_2", detail::gpt_layer_norm(options));
  mlp_ = register_module("mlp", GptMlp(options));
}

at::Tensor GptBlockImpl::forward(at::Tensor x) {
  x = x + attn_->forward(ln_1_->forward(x));
  return x + mlp_->forward(ln_2_->forward(x));
}

GptImpl::GptImpl(GptOptions options) : options_(std::move(options)) {
  check_options(options_);
  const int64_t width = options_.embedding();
  wte_ = register_module("wte", torch::nn::Embedding(options_.vocab_size(), width));
  wpe_ = register_module("wpe", torch::nn::Embedding(options_.context(), width));
  drop_ = register_module("drop", make_dropout(options_));
  blocks_ = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < options_.layers(); ++i) {
    block_list_.emplace_back(options_);
    blocks_->push_back(block_list_.back());
  }
  ln_f_ = register_module("ln_f", detail::gpt_layer_norm(options_));

  // GPT-2's initialisation (nanoGPT's _init_weights): the residual projections scaled by 1/√(2·layers),
  // as each block adds two of them to the residual stream. (Walked by hand: named_modules() needs
  // shared_from_this, which a constructor does not have yet.)
  torch::NoGradGuard no_grad;
  const double projection_std = 0.02 / std::sqrt(2.0 * static_cast<double>(options_.layers()));
  const std::function<void(const std::string&, torch::nn::Module&)> initialise =
      [&](const std::string& name, torch::nn::Module& module) {
        if (auto* linear = dynamic_cast<torch::nn::LinearImpl*>(&module)) {
          torch::nn::init::normal_(linear->weight, /*mean=*/0.0,
                                   /*std=*/name == "c_proj" ? projection_std : 0.02);
          torch::nn::init::zeros_(linear->bias);
        } else if (auto* embedding = dynamic_cast<torch::nn::EmbeddingImpl*>(&module)) {
          torch::nn::init::normal_(embedding->weight, /*mean=*/0.0, /*std=*/0.02);
        }
        for (const auto& child : module.named_children()) initialise(child.key(), *child.value());
      };
  initialise("", *this);
}

at::Tensor GptImpl::forward(const at::Tensor& tokens) {
  TORCH_CHECK(tokens.dim() == 2, "Gpt::forward: expected token ids [B, T], got a ", tokens.dim(),
              "-d tensor");
  TORCH_CHECK(tokens.scalar_type() == torch::kLong || tokens.scalar_type() == torch::kInt,
              "Gpt::forward: token ids must be int64 (or int32), got ", tokens.scalar_type());
  const int64_t length = tokens.size(1);
  TORCH_CHECK(length >= 1 && length <= options_.context(), "Gpt::forward: sequence length T = ", length,
              " must be in [1, GptOptions::context = ", options_.context(), "]");
  at::Tensor x = run_stage(0, tokens, [&](at::Tensor ids) {
    const at::Tensor positions = torch::arange(length, ids.options().dtype(torch::kLong));
    return drop_->forward(wte_->forward(ids) + wpe_->forward(positions));
  });
  for (size_t i = 0; i < block_list_.size(); ++i)
    x = run_stage(i + 1, std::move(x), [&](at::Tensor h) { return block_list_[i]->forward(h); });
  x = run_stage(block_list_.size() + 1, std::move(x), [&](at::Tensor h) { return ln_f_->forward(h); });
  // The head, tied: stage 0 again, so that a runner has wte whole for it.
  return run_stage(0, std::move(x), [&](at::Tensor h) { return F::linear(h, wte_->weight); });
}

std::vector<std::shared_ptr<torch::nn::Module>> GptImpl::stage_modules() {
  auto embeddings = std::make_shared<torch::nn::Module>("embeddings");
  embeddings->register_module("wte", wte_);
  embeddings->register_module("wpe", wpe_);
  std::vector<std::shared_ptr<torch::nn::Module>> stages{embeddings};
  for (const auto& block : block_list_) stages.push_back(block.ptr());
  stages.push_back(ln_f_.ptr());
  return stages;
}

std::vector<size_t> GptImpl::forward_stages() {
  std::vector<size_t> order = Staged::forward_stages();
  order.push_back(0);
  return order;
}

}  // namespace lockstep::models
