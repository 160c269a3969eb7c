#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>

#include "lockstep/shard/zero_optimizer.h"

namespace torch::serialize {
class InputArchive;
class OutputArchive;
}  // namespace torch::serialize

namespace lockstep::shard {

/*
 * Sharded checkpoints: each rank writes its own shard, nobody gathers the model.
 *
 * Shard r of a checkpoint written by N ranks holds, for every parameter i in the optimizer's order (its
 * param_groups, group by group), chunk r of N of its values ("chunk.<i>", ChunkLayout::chunk's ranges)
 * and the optimizer's own save() of its state over those chunks ("optimizer": Adam's moments as chunks,
 * its step counts, the groups' options). So a shard is what that rank holds anyway under zero1, zero2 and
 * fsdp, written without a collective.
 *
 * Reading re-shards: a reader that wants elements [b, e) of a parameter (this rank's chunk of another world
 * size, or the whole parameter for a ddp run) reads the shards one at a time and copies from each chunk
 * the part that falls in [b, e). Each shard is read once, so a rank holds one old shard at a time besides
 * its own part. The optimizer's state objects (their type, their scalars such as Adam's step) come from
 * the optimizer's own load() of a shard, their tensors from the chunks so gathered.
 */

/// What a reader fills for one parameter (in the optimizer's order).
struct ShardTarget {
  int64_t numel = 0;  ///< elements of the whole parameter
  at::Tensor values;  ///< receives elements values_range of the parameter (a flat view)
  ChunkRange values_range;
  at::Tensor state_key;    ///< the tensor the optimizer keys this parameter's state by
  ChunkRange state_range;  ///< the elements that state covers
  /// Optional: also receives elements master_range (ZeroOptimizer's master chunk under mixed precision,
  /// where `values` is the parameter in a narrower dtype).
  at::Tensor master;
  ChunkRange master_range;
};

/// Writes one shard: `chunks[i]` (this rank's chunk of parameter i, flat) and `optimizer`'s save() (an
/// optimizer over exactly those chunks).
void save_shard(torch::serialize::OutputArchive& archive, const std::vector<at::Tensor>& chunks,
                const torch::optim::Optimizer& optimizer);

/// Fills every target's values and `optimizer`'s state (over the targets' state_keys, in its param_groups'
/// order) from the `shards` shards that `read` gives; the options of `optimizer`'s groups become the
/// checkpoint's. No collective. Throws std::runtime_error naming the shard and parameter when a shard holds
/// another number of parameters or a chunk of the wrong size (another model), or an optimizer state that
/// is not elementwise.
void load_from_shards(torch::optim::Optimizer& optimizer, const std::vector<ShardTarget>& targets, int shards,
                      const ShardReader& read);

/// The parameters `optimizer` steps, in order (group by group).
std::vector<at::Tensor> optimizer_parameters(const torch::optim::Optimizer& optimizer);

/// For an optimizer over whole parameters (a ddp run resuming a sharded checkpoint): load_from_shards with
/// every target the whole parameter.
void load_whole_from_shards(torch::optim::Optimizer& optimizer, int shards, const ShardReader& read);

}  // namespace lockstep::shard
