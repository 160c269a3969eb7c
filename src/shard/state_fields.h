#pragma once

// An optimizer's per-parameter state rebuilt with other tensors (ZeroOptimizer's chunks and whole states,
// sharded checkpoints). OptimizerParamState has no generic accessor: its fields travel through its own
// serialize() (state_tensors in zero_optimizer.h reads them that way).

#include <map>
#include <memory>
#include <string>

#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>

namespace lockstep::shard::detail {

/// A copy of `like` (its type, its scalars such as Adam's step) whose tensors named in `tensors` are those.
std::unique_ptr<torch::optim::OptimizerParamState> with_tensors(
    const torch::optim::OptimizerParamState& like, const std::map<std::string, at::Tensor>& tensors);

}  // namespace lockstep::shard::detail
