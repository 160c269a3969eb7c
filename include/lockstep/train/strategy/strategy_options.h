#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/detail/option.h"
#include "lockstep/train/precision_mode.h"

namespace lockstep::ddp {
class CommHook;
}

namespace lockstep::train {

/// How the model's training state is spread over the ranks (Lightning's `strategy`).
enum class StrategyKind {
  kDdp,    ///< every rank holds parameters, gradients and optimizer state; gradients all-reduced (DDP)
  kZero1,  ///< DDP, with the optimizer's state sharded over the ranks (shard/zero_optimizer.h): exact
  kZero2,  ///< zero1, and gradients reduce-scattered during backward (shard/sharded_reducer.h): exact
  kFsdp,   ///< zero2, and parameters sharded: gathered per unit when used (fully_sharded_data_parallel.h)
};
/// "ddp" | "zero1" | "zero2" | "fsdp".
const char* to_string(StrategyKind kind);

/// The dtype FSDP gathers and computes the parameters in (PyTorch's MixedPrecision.param_dtype).
enum class ParamDtype { kBFloat16, kFloat16 };

/*
 * A strategy and its options, as the user chooses them: from C++ through the typed makers below
 * (TrainerOptions().strategy(DdpStrategy().find_unused_parameters(true)), the same for AcceleratorOptions),
 * from `lockstep fit --strategy` and YAML through parse_strategy (Lightning's strategy strings).
 *
 * One value type for the four strategies, so that TrainerOptions and AcceleratorOptions hold the same thing
 * and stay free of LibTorch (the comm hook is held by pointer). An option that does not apply to the kind
 * (a bucket size for fsdp, FSDP's units for ddp) is refused by validate(), naming both. What each strategy
 * does at run time is train::Strategy (strategy.h).
 */
class StrategyOptions {
 public:
  /// The kind, its options at their defaults (implicit: TrainerOptions().strategy(StrategyKind::kZero1)).
  StrategyOptions(StrategyKind kind = StrategyKind::kDdp)
      : kind_(kind) {}  // NOLINT(google-explicit-constructor)

  StrategyKind kind() const { return kind_; }

  // ---- DDP's (ddp, zero1; bucket_cap_mb also zero2): Lightning's DDPStrategy arguments ----
  /// Let parameters go without a gradient in a step (ddp, zero1): one used on some rank is averaged, one
  /// used on none keeps its .grad (ddp/reducer.h). Costs one small all-reduce per step.
  LOCKSTEP_OPTION(StrategyOptions, bool, find_unused_parameters)
  /// Size cap of the gradient buckets, MiB (> 0). Unset: a 16th of the model's gradients within [1, 25].
  LOCKSTEP_OPTION(StrategyOptions, std::optional<double>, bucket_cap_mb)
  /// Each .grad a view into its bucket (ddp, zero1): no second copy of the gradients. Default on.
  LOCKSTEP_OPTION(StrategyOptions, bool, gradient_as_bucket_view)
  /// Re-broadcast buffers (BatchNorm's statistics) from rank 0 before each forward (ddp, zero1, zero2).
  LOCKSTEP_OPTION(StrategyOptions, bool, broadcast_buffers)
  /// How a full bucket is communicated (ddp, zero1; ddp/comm_hook.h). Null: the mean all-reduce.
  LOCKSTEP_OPTION(StrategyOptions, std::shared_ptr<ddp::CommHook>, comm_hook)

  // ---- FSDP's (fsdp): shard::FsdpOptions ----
  /// Auto-wrap: consecutive stages join one unit until it holds this many parameters (>= 1).
  LOCKSTEP_OPTION(StrategyOptions, int64_t, min_unit_params)
  /// The first stage of each unit, ascending from 0; empty: auto-wrap by min_unit_params.
  LOCKSTEP_OPTION(StrategyOptions, std::vector<size_t>, unit_starts)
  /// Gather the next unit while this one computes.
  LOCKSTEP_OPTION(StrategyOptions, bool, prefetch)
  /// The dtype units are gathered and computed in, the shards staying float32. Unset: bfloat16 under
  /// precision bf16-mixed, else the model's own. Set, it needs bf16-mixed (autocast casts the inputs).
  LOCKSTEP_OPTION(StrategyOptions, std::optional<ParamDtype>, param_dtype)

  /// "ddp", "ddp_find_unused_parameters_true", "fsdp", ...: the Lightning string naming these options.
  std::string name() const;
  /// Throws std::invalid_argument naming the option, its value and the fix: an option of another
  /// strategy's, a value out of range, or one `precision` cannot run (16-mixed with zero2 or fsdp).
  /// `precision_option` is the precision's name in the user's API ("precision", "mixed_precision").
  void validate(Precision precision, const std::string& precision_option) const;

 private:
  StrategyKind kind_;
  bool find_unused_parameters_ = false;
  std::optional<double> bucket_cap_mb_;
  bool gradient_as_bucket_view_ = true;
  bool broadcast_buffers_ = true;
  std::shared_ptr<ddp::CommHook> comm_hook_;
  int64_t min_unit_params_ = int64_t{1} << 20;
  std::vector<size_t> unit_starts_;
  bool prefetch_ = true;
  std::optional<ParamDtype> param_dtype_;
};

/// Lightning's DDPStrategy: StrategyOptions of kind ddp, to chain options on
/// (`DdpStrategy().find_unused_parameters(true)`). The four kinds are classes only for their names.
struct DdpStrategy : StrategyOptions {
  DdpStrategy() : StrategyOptions(StrategyKind::kDdp) {}
};
/// DeepSpeed's ZeRO stage 1 (lockstep's own: shard/zero_optimizer.h).
struct Zero1Strategy : StrategyOptions {
  Zero1Strategy() : StrategyOptions(StrategyKind::kZero1) {}
};
/// DeepSpeed's ZeRO stage 2 (shard/sharded_reducer.h).
struct Zero2Strategy : StrategyOptions {
  Zero2Strategy() : StrategyOptions(StrategyKind::kZero2) {}
};
/// Lightning's FSDPStrategy (shard/fully_sharded_data_parallel.h).
struct FsdpStrategy : StrategyOptions {
  FsdpStrategy() : StrategyOptions(StrategyKind::kFsdp) {}
};

/// A strategy string: lockstep's names (ddp, zero1, zero2, fsdp) and Lightning's where the semantics match:
/// auto (ddp), ddp_find_unused_parameters_true/false, deepspeed_stage_1 (zero1), deepspeed_stage_2 (zero2),
/// fsdp. Lightning's others (ddp_spawn, ddp_fork, ddp_notebook, deepspeed_stage_3, deepspeed_*_offload,
/// single_device, dp, ...) are refused, each with what to use instead; an unknown string lists the accepted.
StrategyOptions parse_strategy(const std::string& text);

}  // namespace lockstep::train
