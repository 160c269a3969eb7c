#pragma once

// Pieces models::Gpt and models::TensorParallelGpt share (private to models/).

#include <cstdint>
#include <functional>

#include <ATen/core/Tensor.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/normalization.h>

#include "lockstep/models/gpt.h"

namespace lockstep::models::detail {

/// Causal attention of `heads` heads over `qkv` = [queries | keys | values] along the last dimension
/// ([B, T, 3·W], each head W/heads wide): softmax(q·kᵀ/√d) with the future masked to −∞, then
/// `dropout` on the weights ([B, heads, T, T]) when given, times v; the heads concatenated again →
/// [B, T, W]. Written with matmul and softmax (LibTorch 1.13 has no scaled_dot_product_attention).
at::Tensor causal_attention(const at::Tensor& qkv, int64_t heads,
                            const std::function<at::Tensor(const at::Tensor&)>& dropout = {});

/// GPT-2's LayerNorm over the residual stream (eps 1e-5).
torch::nn::LayerNorm gpt_layer_norm(const GptOptions& options);

}  // namespace lockstep::models::detail
