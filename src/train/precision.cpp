// Training precision: the spellings, autocast scopes and the GradScaler (include/lockstep/train/precision.h).
#include "lockstep/train/precision.h"

#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/autocast_mode.h>
#include <ATen/ops/isfinite.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>
#include <torch/optim/optimizer.h>
#include <torch/version.h>

#include "lockstep/comm/process_group.h"
#include "lockstep/detail/torch_version.h"

namespace lockstep::train {
namespace {

at::ScalarType autocast_dtype(Precision precision) {
  return precision == Precision::kBf16Mixed ? at::kBFloat16 : at::kHalf;
}

// A thread's autocast state for one device type (cpu or cuda). LibTorch 2.4 took a device type in one set
// of functions and deprecated the per-device ones, which then warn at every call (on every batch); 1.13
// has only those.
#if LOCKSTEP_TORCH_AT_LEAST(2, 4)
bool autocast_enabled(c10::DeviceType device) {
  return at::autocast::is_autocast_enabled(device);
}
at::ScalarType autocast_dtype_of(c10::DeviceType device) {
  return at::autocast::get_autocast_dtype(device);
}
void set_autocast(c10::DeviceType device, bool enabled, at::ScalarType dtype) {
  at::autocast::set_autocast_enabled(device, enabled);
  at::autocast::set_autocast_dtype(device, dtype);
}
#else
bool autocast_enabled(c10::DeviceType device) {
  return device == c10::DeviceType::CPU ? at::autocast::is_cpu_enabled() : at::autocast::is_enabled();
}
at::ScalarType autocast_dtype_of(c10::DeviceType device) {
  return device == c10::DeviceType::CPU ? at::autocast::get_autocast_cpu_dtype()
                                        : at::autocast::get_autocast_gpu_dtype();
}
void set_autocast(c10::DeviceType device, bool enabled, at::ScalarType dtype) {
  if (device == c10::DeviceType::CPU) {
    at::autocast::set_cpu_enabled(enabled);
    at::autocast::set_autocast_cpu_dtype(dtype);
  } else {
    at::autocast::set_enabled(enabled);
    at::autocast::set_autocast_gpu_dtype(dtype);
  }
}
#endif

}  // namespace

void check_precision_supported(Precision precision, c10::DeviceType device) {
  if (precision == Precision::k32) return;
  const std::string device_name = c10::DeviceTypeName(device, /*lower_case=*/true);
  if (device == c10::DeviceType::CPU && precision == Precision::k16Mixed && !cpu_autocast_has_float16()) {
    // Setting the CPU autocast dtype to float16 here would not be refused: the linear layers would cast
    // their inputs to float16 and then find no CPU kernel for them.
    throw std::invalid_argument(
        "precision \"16-mixed\" (fp16) cannot run on device \"cpu\" with LibTorch " TORCH_VERSION
        ": its CPU autocast lowers to bfloat16 only (float16 came with LibTorch 2.5); use bf16-mixed "
        "(Accelerate: bf16) or 32, or build lockstep against LibTorch >= 2.5");
  }
  if (device != c10::DeviceType::CPU && device != c10::DeviceType::CUDA) {
    throw std::invalid_argument(
        std::string("precision \"") + to_string(precision) + "\" needs autocast, which lockstep " +
        "supports on cpu and cuda only, not on device \"" + device_name + "\": use 32");
  }
}

// Mirrors torch.autocast's __enter__/__exit__: remember the thread's state, switch it, count the nesting so
// that only the outermost exit drops the cache of casted weights (a nested scope must not throw away the
// casts its parent still uses).
AutocastScope::AutocastScope(Precision precision, c10::DeviceType device) : device_(device) {
  if (precision == Precision::k32) return;
  check_precision_supported(precision, device);
  previous_enabled_ = autocast_enabled(device);
  previous_dtype_ = autocast_dtype_of(device);
  set_autocast(device, true, autocast_dtype(precision));
  at::autocast::increment_nesting();
  active_ = true;
}

AutocastScope::~AutocastScope() {
  if (!active_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  set_autocast(device_, previous_enabled_, previous_dtype_);
}

GradScaler::GradScaler(GradScalerOptions options) : options_(options), scale_(options.init_scale) {
  if (!options_.enabled) {
    scale_ = 1.0;
    return;
  }
  if (!(options_.init_scale > 0.0)) {
    throw std::invalid_argument("GradScalerOptions::init_scale must be > 0, got " +
                                std::to_string(options_.init_scale));
  }
  if (!(options_.growth_factor > 1.0)) {
    throw std::invalid_argument("GradScalerOptions::growth_factor must be > 1, got " +
                                std::to_string(options_.growth_factor));
  }
  if (!(options_.backoff_factor > 0.0 && options_.backoff_factor < 1.0)) {
    throw std::invalid_argument("GradScalerOptions::backoff_factor must be in (0, 1), got " +
                                std::to_string(options_.backoff_factor));
  }
  if (options_.growth_interval < 1) {
    throw std::invalid_argument("GradScalerOptions::growth_interval must be >= 1, got " +
                                std::to_string(options_.growth_interval));
  }
}

at::Tensor GradScaler::scale(const at::Tensor& loss) const {
  if (!options_.enabled) return loss;
  return loss * scale_;
}

// torch's _unscale_grads_: multiply by the reciprocal (exact while the scale is a power of two, which
// init_scale, growth_factor and backoff_factor keep it at with the defaults) and collect one flag for any
// non-finite value, read once at the end rather than once per parameter (one device sync, not N).
bool GradScaler::unscale(torch::optim::Optimizer& optimizer) {
  if (!options_.enabled) return true;
  if (unscaled_) return !found_inf_;
  const double inv_scale = 1.0 / scale_;
  at::Tensor any_inf;
  c10::Device device(c10::kCPU);
  for (auto& group : optimizer.param_groups()) {
    for (auto& parameter : group.params()) {
      at::Tensor grad = parameter.mutable_grad();
      if (!grad.defined()) continue;
      device = grad.device();
      at::Tensor bad = at::isfinite(grad).logical_not().any();
      any_inf = any_inf.defined() ? any_inf.logical_or(bad.to(any_inf.device())) : bad;
      grad.mul_(inv_scale);
    }
  }
  if (agree_over_ != nullptr) {  // one flag for every part of the gradients
    at::Tensor flag = any_inf.defined() ? any_inf.to(at::kFloat).reshape({1})
                                        : at::zeros({1}, at::TensorOptions(at::kFloat).device(device));
    agree_over_->all_reduce(flag, comm::ReduceOp::kMax).wait();
    any_inf = flag;
  }
  found_inf_ = any_inf.defined() && any_inf.item<double>() != 0.0;
  unscaled_ = true;
  return !found_inf_;
}

bool GradScaler::step(torch::optim::Optimizer& optimizer) {
  if (!options_.enabled) {
    optimizer.step();
    return true;
  }
  if (!unscaled_) unscale(optimizer);
  if (found_inf_) return false;
  optimizer.step();
  return true;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  if (!unscaled_) {
    throw std::logic_error(
        "GradScaler::update() called without unscale() or step() since the last update(): call "
        "scaler.step(optimizer) first");
  }
  if (found_inf_) {
    scale_ *= options_.backoff_factor;
    growth_tracker_ = 0;
  } else if (++growth_tracker_ == options_.growth_interval) {
    scale_ *= options_.growth_factor;
    growth_tracker_ = 0;
  }
  unscaled_ = false;
  found_inf_ = false;
}

at::Tensor GradScaler::state() const {
  return at::tensor(std::vector<double>{scale_, static_cast<double>(growth_tracker_)}, at::kDouble);
}

void GradScaler::load_state(const at::Tensor& state) {
  if (!state.defined() || state.scalar_type() != at::kDouble || state.dim() != 1 || state.numel() != 2) {
    throw std::invalid_argument(
        "GradScaler::load_state expects the float64 [scale, growth_tracker] of state(), got " +
        (state.defined() ? c10::str(state.scalar_type(), state.sizes()) : std::string("none")));
  }
  const at::Tensor cpu = state.cpu();
  const double scale = cpu[0].item<double>();
  if (!(scale > 0.0))
    throw std::invalid_argument("GradScaler::load_state: the saved scale must be > 0, got " +
                                std::to_string(scale));
  if (!options_.enabled) return;  // a disabled scaler stays at scale 1
  scale_ = scale;
  growth_tracker_ = static_cast<int64_t>(cpu[1].item<double>());
  unscaled_ = false;
  found_inf_ = false;
}

}  // namespace lockstep::train
