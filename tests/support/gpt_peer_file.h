#pragma once

// What the GPT workers compared with PyTorch share (tests/models/tp_gpt_worker.cpp,
// tests/pipeline/pp_gpt_worker.cpp): their batches, and the file the Python side starts from.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include "lockstep/models/gpt.h"
#include "lockstep/train/safetensors.h"

namespace lockstep::testing {

/// Learnable batches, drawn from the default generator: `steps` × `rows` sequences of context + 1 ids that
/// count up by one (mod the vocabulary) from a random start.
inline at::Tensor counting_tokens(const models::GptOptions& options, int steps, int64_t rows) {
  const at::Tensor starts = at::randint(options.vocab_size(), {steps, rows, 1}, at::kLong);
  return (starts + at::arange(options.context() + 1, at::kLong)).remainder(options.vocab_size());
}

/// `path`: the model under its parameter names, the batches as "tokens", and as metadata the shape, `lr`
/// and `extra` (tests/e2e/tp_gpt_python.py and pp_gpt_python.py read it).
inline void save_peer_file(const std::string& path, const torch::nn::Module& model, const at::Tensor& tokens,
                           const models::GptOptions& options, double lr,
                           const std::map<std::string, std::string>& extra = {}) {
  std::vector<train::NamedTensor> tensors = train::module_tensors(model);
  tensors.emplace_back("tokens", tokens);
  std::map<std::string, std::string> metadata{
      {"vocab_size", std::to_string(options.vocab_size())}, {"context", std::to_string(options.context())},
      {"layers", std::to_string(options.layers())},         {"heads", std::to_string(options.heads())},
      {"embedding", std::to_string(options.embedding())},   {"lr", std::to_string(lr)}};
  metadata.insert(extra.begin(), extra.end());
  train::save_safetensors(path, tensors, metadata);
}

}  // namespace lockstep::testing
