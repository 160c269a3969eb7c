#pragma once

// Where the gradients ZeroOptimizer's chunks step from come from: one GradientSource, chosen when the
// optimizer is built (zero_optimizer.h explains the modes).

#include <cstddef>
#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

#include "lockstep/shard/chunk_layout.h"

namespace lockstep::ddp {
class Reducer;
}

namespace lockstep::shard {
class ShardedReducer;
}

namespace lockstep::shard::detail {

class GradientSource {
 public:
  virtual ~GradientSource() = default;
  /// Elements `mine` of parameter i's averaged gradient, in the chunks' dtype; undefined when the parameter
  /// has none (its chunk is then skipped, as the optimizer skips the parameter).
  virtual at::Tensor chunk_gradient(size_t i, ChunkRange mine) const = 0;
  /// The step has read the gradients.
  virtual void consumed() {}
  /// torch::nn::utils::clip_grad_norm_ over these gradients and the .grad of `others`; returns the norm.
  virtual double clip_grad_norm_(double max_norm, const std::vector<at::Tensor>& others) = 0;
};

/// ZeRO-1: DDP all-reduced the gradients into the parameters' .grad; a chunk steps from its slice of it
/// (cast to `dtype`, the chunks').
class ReplicatedGradients : public GradientSource {
 public:
  ReplicatedGradients(std::vector<at::Tensor> params, at::ScalarType dtype);
  at::Tensor chunk_gradient(size_t i, ChunkRange mine) const override;
  double clip_grad_norm_(double max_norm, const std::vector<at::Tensor>& others) override;

 protected:
  /// Parameter i's whole averaged gradient in the chunks' dtype (the parameter has a .grad).
  virtual at::Tensor whole_gradient(size_t i) const;
  /// A tensor whose .grad is parameter i's whole_gradient, for clipping.
  virtual at::Tensor holder(size_t i) const { return params_[i]; }

  std::vector<at::Tensor> params_;
  at::ScalarType dtype_;
};

/// ZeRO-1 under mixed precision: DDP's Reducer averaged the bfloat16 gradients in its float32 buckets, and
/// a chunk steps from its slice of that average (Reducer::bucket_gradient), not from the bfloat16 copy in
/// .grad; a parameter DDP leaves out (frozen) steps from its own .grad, cast. Clipping scales the averages,
/// and the copies in .grad follow.
class BucketAverages : public ReplicatedGradients {
 public:
  /// `reducer` must outlive this object.
  BucketAverages(std::vector<at::Tensor> params, at::ScalarType dtype, const ddp::Reducer& reducer);
  double clip_grad_norm_(double max_norm, const std::vector<at::Tensor>& others) override;

 private:
  at::Tensor whole_gradient(size_t i) const override;
  at::Tensor holder(size_t i) const override;

  const ddp::Reducer& reducer_;
  std::vector<int64_t> index_;  // per parameter: its index in the reducer, -1 when it is not one of its
};

/// ZeRO-2 and FSDP: the ShardedReducer reduce-scattered the chunk gradients during backward; the step
/// consumes them (ShardedReducer::clear) and clipping is its global norm over every rank's chunks.
class ShardedGradients : public GradientSource {
 public:
  /// Throws std::invalid_argument when a parameter is not one of the reducer's. `reducer` must outlive
  /// this object.
  ShardedGradients(const std::vector<at::Tensor>& params, ShardedReducer& reducer);
  at::Tensor chunk_gradient(size_t i, ChunkRange mine) const override;
  void consumed() override;
  double clip_grad_norm_(double max_norm, const std::vector<at::Tensor>& others) override;

 private:
  ShardedReducer& reducer_;
  std::vector<size_t> index_;  // per parameter: its index in the reducer
};

}  // namespace lockstep::shard::detail
