#pragma once

#include <cstdint>
#include <string>

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>

#include "lockstep/detail/torch_version.h"
#include "lockstep/train/precision_mode.h"

namespace torch::optim {
class Optimizer;
}
namespace lockstep::comm {
class ProcessGroup;
}

namespace lockstep::train {

/// Whether LibTorch's CPU autocast can lower to float16: LibTorch >= 2.5 (1.13's lowers to bfloat16
/// only). Where it can, 16-mixed runs on the CPU as on CUDA: float16 autocast and the GradScaler.
constexpr bool cpu_autocast_has_float16() {
  return LOCKSTEP_TORCH_AT_LEAST(2, 5);
}

/// Throws std::invalid_argument when `precision` cannot run on `device`, naming both, the LibTorch version
/// where that is the reason, and the precision to use instead (16-mixed on the CPU of LibTorch < 2.5:
/// "use bf16-mixed (Accelerate: bf16) or 32").
void check_precision_supported(Precision precision, c10::DeviceType device);

/// RAII: autocast for `device` with the precision's dtype for the scope (the forward pass and the loss);
/// nothing for Precision::k32. Restores the previous autocast state (enabled flag and dtype) on exit and
/// clears the autocast cast cache when the outermost scope ends. Autocast state is thread-local.
class AutocastScope {
 public:
  AutocastScope(Precision precision, c10::DeviceType device);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool active_ = false;
  c10::DeviceType device_;
  bool previous_enabled_ = false;
  at::ScalarType previous_dtype_ = at::kFloat;
};

/// torch.cuda.amp.GradScaler's options and defaults.
struct GradScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool enabled = true;
};

/// Dynamic loss scaling for float16 training (torch.cuda.amp.GradScaler's algorithm, device-agnostic: plain
/// tensor ops). Per step: `scale(loss).backward()`, then `unscale(optimizer)` (before clipping; divides
/// every gradient by the scale and records whether any is inf/NaN), then `step(optimizer)` (skipped when a
/// gradient was not finite), then `update()` (halves the scale after a skipped step; doubles it after
/// growth_interval finite steps in a row). Under DDP the gradients are already all-reduced when unscale()
/// looks at them, so every rank finds the same inf and skips the same steps; under tensor parallelism the
/// ranks hold different slices, and agree_over() makes them agree. Disabled: every call is a pass-through
/// (scale 1, step always taken).
class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  /// `loss` times the current scale (the loss itself when disabled).
  at::Tensor scale(const at::Tensor& loss) const;
  /// Divides the gradients of `optimizer`'s parameters by the scale, once per step (a second call before
  /// step() does nothing). Returns true when every gradient is finite.
  bool unscale(torch::optim::Optimizer& optimizer);
  /// optimizer.step() unless the gradients were not finite (unscaling them first if unscale() was not
  /// called). Returns true when the step was taken.
  bool step(torch::optim::Optimizer& optimizer);
  /// Adjusts the scale after step() (see the class comment) and readies the next step.
  void update();

  /// The ranks that hold other parts of the same gradients (a tensor-parallel group): unscale() then takes
  /// the maximum of their found-inf flags (one all-reduce), so that all skip the same steps, as Megatron's
  /// scaler does. nullptr (the default): this rank's gradients alone. The group must outlive the scaler's
  /// use of it.
  void agree_over(comm::ProcessGroup* group) { agree_over_ = group; }

  double scale_value() const { return scale_; }
  bool enabled() const { return options_.enabled; }
  /// The state a checkpoint keeps: [scale, growth_tracker] as float64; and restoring it.
  at::Tensor state() const;
  void load_state(const at::Tensor& state);

 private:
  GradScalerOptions options_;
  double scale_;
  int64_t growth_tracker_ = 0;
  bool unscaled_ = false;
  bool found_inf_ = false;
  comm::ProcessGroup* agree_over_ = nullptr;
};

}  // namespace lockstep::train
