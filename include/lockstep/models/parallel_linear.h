#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "lockstep/detail/option.h"

namespace lockstep::comm {
class ProcessGroup;
}

namespace lockstep::models {

// Megatron-LM's tensor parallelism (Shoeybi et al. 2019, section 3), for T ranks of a tensor-parallel group.
//
// An MLP Linear(in, h) → GELU → Linear(h, out) is split without any collective between the two layers:
//
//   x (replicated) ─ copy_to ─ X·A_rᵀ + a_r ─ GELU ─ ·B_rᵀ ─ reduce_from ─ + b ─ y (replicated)
//                    (f)       A split by rows      B split      (g)        b replicated
//                              (ColumnParallel)     by columns
//                                                   (RowParallel)
//
// Rank r holds rows [r·h/T, (r+1)·h/T) of A (and that slice of a), so its GELU runs on its own slice of
// the hidden features; it holds the matching columns of B, so its product is a partial sum of y, and
// one all-reduce (g) finishes it. Backward mirrors it: g's gradient is the identity (y's gradient is
// already replicated), and f's all-reduces the partial gradients of x that each rank's slice produced.
// So a forward and a backward cost one all-reduce each of a [.., out] and an [.., in] activation.
//
// The region functions are autograd functions usable on their own (attention heads are split the same
// way). Each one is a collective in forward or backward: every rank of the group must call it, in the
// same order, with the same shapes; a group of one rank makes each an identity.

/// Forward the identity; backward an all-reduce (sum) of the gradient over `group` (Megatron's f). The
/// input of a column-parallel layer: each rank's slice contributes a partial gradient of `x`.
///
/// Example:
///   auto h = copy_to_tensor_parallel_region(x, tp_group);   // h == x; x.grad summed over the ranks
at::Tensor copy_to_tensor_parallel_region(const at::Tensor& x, comm::ProcessGroup& group);

/// Forward an all-reduce (sum) over `group`; backward the identity (Megatron's g). The output of a
/// row-parallel layer: the ranks' partial products add up to the full one.
at::Tensor reduce_from_tensor_parallel_region(const at::Tensor& x, comm::ProcessGroup& group);

/// Forward an all-gather along the last dimension ([..., n] on each rank → [..., T·n], rank r's at
/// [r·n, (r+1)·n)); backward keeps this rank's slice of the gradient. Column-parallel with gather_output.
at::Tensor gather_from_tensor_parallel_region(const at::Tensor& x, comm::ProcessGroup& group);

/// Forward keeps this rank's slice of the last dimension ([..., T·n] → [..., n]; no communication);
/// backward all-gathers the gradient. Row-parallel without input_is_parallel. Throws c10::Error naming
/// both numbers when the last dimension is not divisible by the group's size.
at::Tensor scatter_to_tensor_parallel_region(const at::Tensor& x, comm::ProcessGroup& group);

/// Options of ColumnParallelLinear: the full layer's sizes (as torch::nn::LinearOptions) and whether to
/// gather the output. Megatron's default gathers, so that the layer alone equals a Linear.
///
/// Example:
///   ColumnParallelLinearOptions(/*in_features=*/768, /*out_features=*/3072).gather_output(false)
class ColumnParallelLinearOptions {
 public:
  ColumnParallelLinearOptions(int64_t in_features, int64_t out_features)
      : in_features_(in_features), out_features_(out_features) {}

  LOCKSTEP_OPTION(ColumnParallelLinearOptions, int64_t, in_features)
  /// The full layer's outputs; must be divisible by the group's size T (each rank computes out/T).
  LOCKSTEP_OPTION(ColumnParallelLinearOptions, int64_t, out_features)
  /// An additive bias, split like the outputs.
  LOCKSTEP_OPTION(ColumnParallelLinearOptions, bool, bias)
  /// true: forward returns the full [..., out_features] on every rank (an all-gather); false: this
  /// rank's [..., out_features/T] slice, for a following RowParallelLinear with input_is_parallel.
  LOCKSTEP_OPTION(ColumnParallelLinearOptions, bool, gather_output)

 private:
  int64_t in_features_;
  int64_t out_features_;
  bool bias_ = true;
  bool gather_output_ = true;
};

/// Options of RowParallelLinear: the full layer's sizes and whether the input is already split. Megatron's
/// default takes the full input, so that the layer alone equals a Linear.
///
/// Example:
///   RowParallelLinearOptions(/*in_features=*/3072, /*out_features=*/768).input_is_parallel(true)
class RowParallelLinearOptions {
 public:
  RowParallelLinearOptions(int64_t in_features, int64_t out_features)
      : in_features_(in_features), out_features_(out_features) {}

  /// The full layer's inputs; must be divisible by the group's size T (each rank multiplies in/T).
  LOCKSTEP_OPTION(RowParallelLinearOptions, int64_t, in_features)
  LOCKSTEP_OPTION(RowParallelLinearOptions, int64_t, out_features)
  /// An additive bias, replicated on every rank and added once, after the all-reduce.
  LOCKSTEP_OPTION(RowParallelLinearOptions, bool, bias)
  /// true: forward takes this rank's [..., in_features/T] slice (a ColumnParallelLinear's output without
  /// gather_output); false: the full [..., in_features], of which each rank keeps its slice.
  LOCKSTEP_OPTION(RowParallelLinearOptions, bool, input_is_parallel)

 private:
  int64_t in_features_;
  int64_t out_features_;
  bool bias_ = true;
  bool input_is_parallel_ = false;
};

/// A Linear(in, out) whose weight is split by output rows over the tensor-parallel group: rank r holds
/// rows [r·out/T, (r+1)·out/T) as `weight` ([out/T, in]) and that slice of the bias as `bias`. Forward:
/// copy_to_tensor_parallel_region(x), then the local linear, then (gather_output) the all-gather.
///
/// Initialisation does not depend on T: the full weight and bias are drawn from the default generator
/// exactly as torch::nn::Linear(in, out) draws them, and this rank keeps its slice; so after the same
/// torch::manual_seed, the T ranks' slices put together equal one process's Linear. `group` must outlive
/// the layer; forward and backward are collectives on it.
///
/// Example:
///   torch::manual_seed(0);   // the same seed on every rank of the group
///   ColumnParallelLinear fc1(ColumnParallelLinearOptions(768, 3072).gather_output(false), tp_group);
///   RowParallelLinear fc2(RowParallelLinearOptions(3072, 768).input_is_parallel(true), tp_group);
///   auto y = fc2(torch::gelu(fc1(x)));   // x, y: [B, 768] on every rank, equal to one process's MLP
class ColumnParallelLinearImpl : public torch::nn::Module {
 public:
  /// Throws c10::Error naming the field for a non-positive size, and naming out_features and the group's
  /// size when the one is not divisible by the other.
  ColumnParallelLinearImpl(ColumnParallelLinearOptions options, comm::ProcessGroup& group);

  /// `x`: [..., in_features], the same on every rank. Returns [..., out_features] (gather_output) or this
  /// rank's [..., out_features/T].
  at::Tensor forward(const at::Tensor& x);

  /// Copies this rank's slice of a full Linear's `weight` ([out, in]) and `bias` ([out]; undefined when
  /// the layer has none) into the parameters (their dtype and device stay). Not a collective.
  void load_full(const at::Tensor& weight, const at::Tensor& bias = {});

  const ColumnParallelLinearOptions& options() const { return options_; }
  /// This rank's rows of the full weight: [rank·out/T, (rank+1)·out/T).
  int64_t first_row() const { return rank_ * (options_.out_features() / world_); }

  at::Tensor weight;  ///< [out/T, in]
  at::Tensor bias;    ///< [out/T], undefined without bias

 private:
  ColumnParallelLinearOptions options_;
  comm::ProcessGroup& group_;
  int64_t rank_;
  int64_t world_;
};
TORCH_MODULE(ColumnParallelLinear);

/// A Linear(in, out) whose weight is split by input columns over the tensor-parallel group: rank r holds
/// columns [r·in/T, (r+1)·in/T) as `weight` ([out, in/T]) and the full bias, replicated. Forward:
/// (without input_is_parallel) keep this rank's slice of x, the local product, reduce_from_tensor_parallel_
/// region, then the bias, added once. Initialisation as ColumnParallelLinear's: independent of T. `group`
/// must outlive the layer; forward and backward are collectives on it.
///
/// Example: see ColumnParallelLinear.
class RowParallelLinearImpl : public torch::nn::Module {
 public:
  /// Throws c10::Error naming the field for a non-positive size, and naming in_features and the group's
  /// size when the one is not divisible by the other.
  RowParallelLinearImpl(RowParallelLinearOptions options, comm::ProcessGroup& group);

  /// `x`: this rank's [..., in_features/T] (input_is_parallel) or the full [..., in_features], the same on
  /// every rank. Returns [..., out_features], the same on every rank.
  at::Tensor forward(const at::Tensor& x);

  /// Copies this rank's columns of a full Linear's `weight` ([out, in]) and its `bias` ([out]; undefined
  /// when the layer has none) into the parameters (their dtype and device stay). Not a collective.
  void load_full(const at::Tensor& weight, const at::Tensor& bias = {});

  const RowParallelLinearOptions& options() const { return options_; }
  /// This rank's columns of the full weight: [rank·in/T, (rank+1)·in/T).
  int64_t first_column() const { return rank_ * (options_.in_features() / world_); }

  at::Tensor weight;  ///< [out, in/T]
  at::Tensor bias;    ///< [out], replicated; undefined without bias

 private:
  RowParallelLinearOptions options_;
  comm::ProcessGroup& group_;
  int64_t rank_;
  int64_t world_;
};
TORCH_MODULE(RowParallelLinear);

}  // namespace lockstep::models
