#include "lockstep/train/strategy/strategy_options.h"

#include <cmath>
#include <stdexcept>
#include <utility>
#include <vector>

#include "../option_checks.h"
#include "lockstep/detail/enum_names.h"
#include "lockstep/detail/join.h"

namespace lockstep::train {
namespace {

constexpr lockstep::detail::EnumNames<StrategyKind, 4> kKindNames{{{StrategyKind::kDdp, "ddp"},
                                                                   {StrategyKind::kZero1, "zero1"},
                                                                   {StrategyKind::kZero2, "zero2"},
                                                                   {StrategyKind::kFsdp, "fsdp"}}};

// Lightning's strategy strings lockstep refuses, and what to use instead.
struct Refused {
  const char* name;
  const char* instead;
};
constexpr Refused kRefused[] = {
    {"ddp_spawn", "ranks are processes started by the launcher: use ddp"},
    {"ddp_fork", "ranks are processes started by the launcher: use ddp"},
    {"ddp_notebook", "ranks are processes started by the launcher: use ddp"},
    {"ddp_spawn_find_unused_parameters_true", "use ddp_find_unused_parameters_true"},
    {"ddp_fork_find_unused_parameters_true", "use ddp_find_unused_parameters_true"},
    {"dp", "DataParallel (one process, several GPUs) is not supported: use ddp"},
    {"single_device", "one process on one device is ddp with devices 1"},
    {"deepspeed", "name the stage: deepspeed_stage_1 (zero1) or deepspeed_stage_2 (zero2), or use fsdp"},
    {"deepspeed_stage_3", "parameters sharded too is fsdp here"},
    {"deepspeed_stage_2_offload", "lockstep does not offload to the CPU: use deepspeed_stage_2 (zero2)"},
    {"deepspeed_stage_3_offload", "lockstep does not offload to the CPU: use fsdp"},
    {"deepspeed_stage_3_offload_nvme", "lockstep does not offload: use fsdp"},
    {"fsdp_cpu_offload", "lockstep does not offload to the CPU: use fsdp"},
    {"xla", "lockstep trains on CPUs and CUDA GPUs"},
};

// Lightning's strings for what lockstep has (beside the kinds' own names).
struct Alias {
  const char* name;
  StrategyKind kind;
  bool find_unused_parameters;
};
constexpr Alias kAliases[] = {{"auto", StrategyKind::kDdp, false},
                              {"ddp_find_unused_parameters_true", StrategyKind::kDdp, true},
                              {"ddp_find_unused_parameters_false", StrategyKind::kDdp, false},
                              {"deepspeed_stage_1", StrategyKind::kZero1, false},
                              {"deepspeed_stage_2", StrategyKind::kZero2, false}};

const char* to_string(ParamDtype dtype) {
  return dtype == ParamDtype::kFloat16 ? "float16" : "bfloat16";
}

}  // namespace

const char* to_string(StrategyKind kind) {
  return lockstep::detail::enum_to_string(kKindNames, kind);
}

std::string StrategyOptions::name() const {
  if (kind_ == StrategyKind::kDdp && find_unused_parameters_) return "ddp_find_unused_parameters_true";
  return to_string(kind_);
}

StrategyOptions parse_strategy(const std::string& text) {
  if (const auto kind = lockstep::detail::find_enum(kKindNames, text)) return StrategyOptions(*kind);
  for (const Alias& alias : kAliases) {
    if (text == alias.name)
      return StrategyOptions(alias.kind).find_unused_parameters(alias.find_unused_parameters);
  }
  for (const Refused& refused : kRefused) {
    if (text == refused.name)
      throw std::invalid_argument("strategy '" + text + "' is not supported by lockstep: " + refused.instead);
  }
  std::vector<std::string> accepted;
  for (const Alias& alias : kAliases) accepted.emplace_back(alias.name);
  throw std::invalid_argument("strategy '" + text + "' is not known (expected one of: " +
                              lockstep::detail::enum_names_text(kKindNames) + ", " +
                              lockstep::detail::join(accepted, ", ") + ")");
}

void StrategyOptions::validate(Precision precision, const std::string& precision_option) const {
  const std::string kind = std::string("strategy '") + to_string(kind_) + "'";
  const auto refuse = [&](const std::string& option, const std::string& applies_to) {
    throw std::invalid_argument(kind + " has no option " + option + " (it applies to " + applies_to +
                                "): leave it unset, or choose that strategy");
  };
  const bool ddp_like = kind_ == StrategyKind::kDdp || kind_ == StrategyKind::kZero1;
  if (find_unused_parameters_ && !ddp_like) {
    throw std::invalid_argument(
        kind +
        " needs every trainable parameter used in every step, and "
        "find_unused_parameters is set: use strategy 'ddp' or 'zero1' with it, or make "
        "every parameter take part in the loss");
  }
  if (comm_hook_ && !ddp_like) refuse("comm_hook", "ddp and zero1");
  if (!gradient_as_bucket_view_ && !ddp_like) refuse("gradient_as_bucket_view", "ddp and zero1");
  if (kind_ == StrategyKind::kFsdp) {
    if (bucket_cap_mb_) refuse("bucket_cap_mb", "ddp, zero1 and zero2");
    if (!broadcast_buffers_) refuse("broadcast_buffers", "ddp, zero1 and zero2");
  } else {
    const StrategyOptions defaults(kind_);
    if (min_unit_params_ != defaults.min_unit_params_) refuse("min_unit_params", "fsdp");
    if (!unit_starts_.empty()) refuse("unit_starts", "fsdp");
    if (prefetch_ != defaults.prefetch_) refuse("prefetch", "fsdp");
    if (param_dtype_) refuse("param_dtype", "fsdp");
  }
  if (bucket_cap_mb_ && (!(*bucket_cap_mb_ > 0) || !std::isfinite(*bucket_cap_mb_))) {
    throw std::invalid_argument("bucket_cap_mb must be a number of MiB > 0, or unset (DDP's default), got " +
                                detail::text(*bucket_cap_mb_));
  }
  detail::check_at_least<int64_t>("min_unit_params", min_unit_params_, 1);
  if (param_dtype_ && precision != Precision::kBf16Mixed) {
    throw std::invalid_argument("fsdp's param_dtype " + std::string(to_string(*param_dtype_)) +
                                " needs autocast to cast what its layers are given: set " + precision_option +
                                " 'bf16-mixed', or leave param_dtype unset (" + precision_option + " is '" +
                                to_string(precision) + "')");
  }
  if ((kind_ == StrategyKind::kZero2 || kind_ == StrategyKind::kFsdp) && precision == Precision::k16Mixed) {
    throw std::invalid_argument(
        kind + " does not support " + precision_option +
        " '16-mixed' yet (the gradient scaler would need the sharded gradients): use " + precision_option +
        " 'bf16-mixed' or '32', or strategy 'zero1'");
  }
}

}  // namespace lockstep::train
