// Sharded checkpoints: see include/lockstep/shard/shard_checkpoint.h.
#include "lockstep/shard/shard_checkpoint.h"

#include <algorithm>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include "../optim/param_state_key.h"
#include "state_fields.h"

namespace lockstep::shard {
namespace {

std::string chunk_key(size_t i) {
  return "chunk." + std::to_string(i);
}

// Copies into `to` (elements `to_range` of a parameter, flat) the part of `from` (elements `from_range`)
// that both cover.
void copy_overlap(at::Tensor& to, ChunkRange to_range, const at::Tensor& from, ChunkRange from_range) {
  const int64_t begin = std::max(to_range.begin, from_range.begin);
  const int64_t end = std::min(to_range.begin + to_range.length, from_range.begin + from_range.length);
  if (begin >= end) return;
  to.narrow(0, begin - to_range.begin, end - begin)
      .copy_(from.narrow(0, begin - from_range.begin, end - begin));
}

std::runtime_error bad_shard(int shard, const std::string& what) {
  return std::runtime_error(
      "checkpoint shard " + std::to_string(shard) + " " + what +
      ": it was written for another model (resume with the model and optimizer that wrote "
      "it), or the shards of two checkpoints were mixed");
}

// Parameter values: each target's part of chunk `shard` of every parameter.
void read_values(torch::serialize::InputArchive& archive, const std::vector<ShardTarget>& targets, int shard,
                 int shards) {
  c10::IValue count;
  if (!archive.try_read("parameters", count) || !count.isInt() ||
      count.toInt() != static_cast<int64_t>(targets.size())) {
    throw bad_shard(shard, "holds " + (count.isInt() ? std::to_string(count.toInt()) : std::string("no")) +
                               " parameters, this optimizer " + std::to_string(targets.size()));
  }
  for (size_t i = 0; i < targets.size(); ++i) {
    const ShardTarget& t = targets[i];
    at::Tensor chunk;
    const ChunkRange old = ChunkLayout::chunk(t.numel, shard, shards);
    if (!archive.try_read(chunk_key(i), chunk, /*is_buffer=*/true) || chunk.numel() != old.length) {
      throw bad_shard(shard, "has no chunk of " + std::to_string(old.length) + " elements for parameter " +
                                 std::to_string(i) + " (" + std::to_string(t.numel) + " elements)");
    }
    at::Tensor values = t.values;
    copy_overlap(values, t.values_range, chunk.reshape({-1}), old);
    if (!t.master.defined()) continue;
    at::Tensor master = t.master;
    copy_overlap(master, t.master_range, chunk.reshape({-1}), old);
  }
}

}  // namespace

void save_shard(torch::serialize::OutputArchive& archive, const std::vector<at::Tensor>& chunks,
                const torch::optim::Optimizer& optimizer) {
  archive.write("parameters", c10::IValue(static_cast<int64_t>(chunks.size())));
  // A copy of each chunk: a chunk shares its parameter's memory, and an archive writes a tensor's whole
  // storage.
  for (size_t i = 0; i < chunks.size(); ++i)
    archive.write(chunk_key(i), chunks[i].detach().reshape({-1}).clone(), /*is_buffer=*/true);
  torch::serialize::OutputArchive state(archive.compilation_unit());
  optimizer.save(state);
  archive.write("optimizer", state);
}

std::vector<at::Tensor> optimizer_parameters(const torch::optim::Optimizer& optimizer) {
  std::vector<at::Tensor> params;
  for (const auto& group : optimizer.param_groups())
    params.insert(params.end(), group.params().begin(), group.params().end());
  return params;
}

void load_from_shards(torch::optim::Optimizer& optimizer, const std::vector<ShardTarget>& targets, int shards,
                      const ShardReader& read) {
  if (optimizer_parameters(optimizer).size() != targets.size()) {
    throw std::logic_error("load_from_shards: " + std::to_string(targets.size()) +
                           " targets for an optimizer of " +
                           std::to_string(optimizer_parameters(optimizer).size()) + " parameters");
  }
  torch::NoGradGuard no_grad;
  std::vector<std::unique_ptr<torch::optim::OptimizerParamState>> kinds(targets.size());
  std::vector<std::map<std::string, at::Tensor>> states(targets.size());
  for (int k = 0; k < shards; ++k) {
    torch::serialize::InputArchive archive;
    read(k, archive);
    read_values(archive, targets, k, shards);
    torch::serialize::InputArchive saved;
    if (!archive.try_read("optimizer", saved)) throw bad_shard(k, "has no optimizer state");
    optimizer.state().clear();
    optimizer.load(saved);  // the state over shard k's chunks, keyed by this optimizer's parameters
    for (size_t i = 0; i < targets.size(); ++i) {
      const ShardTarget& t = targets[i];
      const auto it = optimizer.state().find(optim::detail::param_state_key(t.state_key));
      if (it == optimizer.state().end()) continue;  // never stepped
      if (!kinds[i]) kinds[i] = it->second->clone();
      const ChunkRange old = ChunkLayout::chunk(t.numel, k, shards);
      for (const auto& [name, tensor] : state_tensors(*it->second)) {
        if (!tensor.defined()) continue;
        if (tensor.numel() != old.length) {
          throw std::runtime_error("checkpoint shard " + std::to_string(k) + ": the optimizer's state '" +
                                   name + "' of parameter " + std::to_string(i) + " has " +
                                   std::to_string(tensor.numel()) + " elements, its chunk " +
                                   std::to_string(old.length) + ": this optimizer is not elementwise");
        }
        at::Tensor& part = states[i][name];
        if (!part.defined())
          part = at::zeros({t.state_range.length}, tensor.options().device(t.state_key.device()));
        copy_overlap(part, t.state_range, tensor.reshape({-1}), old);
      }
    }
  }
  optimizer.state().clear();
  for (size_t i = 0; i < targets.size(); ++i) {
    if (!kinds[i]) continue;
    std::map<std::string, at::Tensor> shaped;
    for (const auto& [name, part] : states[i]) shaped[name] = part.view(targets[i].state_key.sizes());
    optimizer.state()[optim::detail::param_state_key(targets[i].state_key)] =
        detail::with_tensors(*kinds[i], shaped);
  }
}

void load_whole_from_shards(torch::optim::Optimizer& optimizer, int shards, const ShardReader& read) {
  std::vector<ShardTarget> targets;
  for (const at::Tensor& param : optimizer_parameters(optimizer)) {
    if (!param.is_contiguous())
      throw std::invalid_argument("load_whole_from_shards: a parameter of shape " + c10::str(param.sizes()) +
                                  " is not contiguous");
    const ChunkRange whole{0, param.numel()};
    targets.push_back({param.numel(), param.detach().view({-1}), whole, param, whole, {}, {}});
  }
  load_from_shards(optimizer, targets, shards, read);
}

}  // namespace lockstep::shard
