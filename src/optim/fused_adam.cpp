// FusedAdam / FusedAdamW: see include/lockstep/optim/fused_adam.h.
//
// The update of one element, in torch's order (torch/csrc/api/src/optim/adam.cpp and adamw.cpp with
// ATen's vectorised CPU kernels; every scalar is rounded to float first, as ATen does):
//   AdamW only:  p = p * (1 - lr * wd)                           p.mul_(1 - lr * wd)
//   Adam only:   g = g + p * wd                                  grad.add(p, wd)      (when wd != 0)
//                m = m * beta1 + g * (1 - beta1)                 exp_avg.mul_(beta1).add_(grad, 1 - beta1)
//                v = v * beta2 + ((1 - beta2) * g) * g           exp_avg_sq.mul_(beta2).addcmul_(grad, grad,
//                1 - beta2) d = sqrt(v) / sqrt(bias_correction2) + eps      (exp_avg_sq.sqrt() /
//                sqrt(bc2)).add_(eps) p = p + ((-lr / bias_correction1) * m) / d      p.addcdiv_(exp_avg,
//                denom, -step_size)
// How ATen rounds `add` and `addcmul` (fused multiply-add or not) and `sqrt` (exact, or MKL's) depends on
// the LibTorch build: aten_arithmetic.h finds out once, and the kernel below follows. Where ATen's sqrt is
// not the exact one, the update runs block by block: moments, ATen's sqrt of the block (at::sqrt_out),
// update.
#include "lockstep/optim/fused_adam.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "aten_arithmetic.h"
#include "aten_fused_adam.h"
#include "param_state_key.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace lockstep::optim {
namespace {

struct AdamScalars {
  float decay = 1.0f;  // AdamW: 1 - lr * wd (applied when decoupled)
  bool decoupled = false;
  float l2 = 0.0f;  // Adam: weight decay added to the gradient (applied when l2_on)
  bool l2_on = false;
  float beta1 = 0.0f;
  float one_minus_beta1 = 0.0f;
  float beta2 = 0.0f;
  float one_minus_beta2 = 0.0f;
  float sqrt_bias_correction2 = 1.0f;
  float eps = 0.0f;
  float neg_step_size = 0.0f;
  bool add_fma = true;  // detail::AtenArithmetic
  bool addcmul_fma = false;
};

#if defined(__x86_64__)
// a + b * c, rounded as ATen's kernel is (fused, or a multiply then an add).
__attribute__((target("avx2,fma"))) inline __m256 multiply_add(__m256 b, __m256 c, __m256 a, bool fused) {
  return fused ? _mm256_fmadd_ps(b, c, a) : _mm256_add_ps(a, _mm256_mul_ps(b, c));
}

// Eight elements, first half: weight decay and both moments (p is written back only for AdamW's decay).
__attribute__((target("avx2,fma"))) inline void moments8(float* p, const float* g, float* m, float* v,
                                                         const AdamScalars& s) {
  __m256 P = _mm256_loadu_ps(p);
  __m256 G = _mm256_loadu_ps(g);
  if (s.decoupled) {
    P = _mm256_mul_ps(P, _mm256_set1_ps(s.decay));
    _mm256_storeu_ps(p, P);
  }
  if (s.l2_on) G = multiply_add(P, _mm256_set1_ps(s.l2), G, s.add_fma);
  const __m256 M = multiply_add(G, _mm256_set1_ps(s.one_minus_beta1),
                                _mm256_mul_ps(_mm256_loadu_ps(m), _mm256_set1_ps(s.beta1)), s.add_fma);
  const __m256 V = multiply_add(_mm256_mul_ps(_mm256_set1_ps(s.one_minus_beta2), G), G,
                                _mm256_mul_ps(_mm256_loadu_ps(v), _mm256_set1_ps(s.beta2)), s.addcmul_fma);
  _mm256_storeu_ps(m, M);
  _mm256_storeu_ps(v, V);
}

// Eight elements, second half: the step from m and sqrt(v).
__attribute__((target("avx2,fma"))) inline void apply8(float* p, const float* m, __m256 sqrt_v,
                                                       const AdamScalars& s) {
  const __m256 D =
      _mm256_add_ps(_mm256_div_ps(sqrt_v, _mm256_set1_ps(s.sqrt_bias_correction2)), _mm256_set1_ps(s.eps));
  const __m256 P = _mm256_loadu_ps(p);
  _mm256_storeu_ps(
      p,
      _mm256_add_ps(P, _mm256_div_ps(_mm256_mul_ps(_mm256_set1_ps(s.neg_step_size), _mm256_loadu_ps(m)), D)));
}

// The passes over a parameter: the whole update (with the exact sqrt), or its two halves around ATen's sqrt.
enum class Pass { kWhole, kMoments, kApply };

template <Pass kPass>
__attribute__((target("avx2,fma"))) inline void run8(float* p, const float* g, float* m, float* v,
                                                     const float* sqrt_v, const AdamScalars& s) {
  if (kPass != Pass::kApply) moments8(p, g, m, v, s);
  if (kPass == Pass::kWhole) apply8(p, m, _mm256_sqrt_ps(_mm256_loadu_ps(v)), s);
  if (kPass == Pass::kApply) apply8(p, m, _mm256_loadu_ps(sqrt_v), s);
}

// One pass over n elements, 8 at a time; the tail goes through the same vector code on a padded copy, so
// every element sees the same instructions whatever the tensor's length. Padding lanes hold v = sqrt_v = 1
// so that no lane divides by zero (their results are discarded).
template <Pass kPass>
__attribute__((target("avx2,fma"))) void pass_avx2(float* p, const float* g, float* m, float* v,
                                                   const float* sqrt_v, int64_t n, const AdamScalars& s) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    run8<kPass>(p + i, kPass == Pass::kApply ? nullptr : g + i, m + i, v + i,
                kPass == Pass::kApply ? sqrt_v + i : nullptr, s);
  }
  if (i == n) return;
  const auto rest = static_cast<std::size_t>(n - i);
  float tp[8] = {0}, tg[8] = {0}, tm[8] = {0}, tv[8] = {1, 1, 1, 1, 1, 1, 1, 1},
        ts[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  std::memcpy(tp, p + i, rest * sizeof(float));
  std::memcpy(tm, m + i, rest * sizeof(float));
  std::memcpy(tv, v + i, rest * sizeof(float));
  if (kPass != Pass::kApply) std::memcpy(tg, g + i, rest * sizeof(float));
  if (kPass == Pass::kApply) std::memcpy(ts, sqrt_v + i, rest * sizeof(float));
  run8<kPass>(tp, tg, tm, tv, ts, s);
  std::memcpy(p + i, tp, rest * sizeof(float));
  std::memcpy(m + i, tm, rest * sizeof(float));
  std::memcpy(v + i, tv, rest * sizeof(float));
}

// Elements per block of the update around ATen's sqrt: 128 KiB per array, so that the block's five arrays
// stay in the caches from the moments to ATen's sqrt to the update (one pass over the whole parameter for
// each cost ~15% of a W1 step), and few enough blocks that ATen's per-call cost stays small. A multiple of
// 16 from an aligned start: every block starts aligned as a tensor of its own would.
constexpr int64_t kSqrtBlock = 32768;

// One parameter's update. With the exact sqrt: one pass. Otherwise block by block: the moments, ATen's own
// sqrt of that block of exp_avg_sq (at::sqrt_out, as torch's step computes it), then the update.
void update_avx2(const at::Tensor& param, const at::Tensor& grad, const at::Tensor& exp_avg,
                 const at::Tensor& exp_avg_sq, bool exact_sqrt, at::Tensor& scratch, const AdamScalars& s) {
  float* p = param.data_ptr<float>();
  const float* g = grad.data_ptr<float>();
  float* m = exp_avg.data_ptr<float>();
  float* v = exp_avg_sq.data_ptr<float>();
  const int64_t n = param.numel();
  if (exact_sqrt) {
    pass_avx2<Pass::kWhole>(p, g, m, v, nullptr, n, s);
    return;
  }
  if (scratch.numel() < kSqrtBlock) scratch = at::empty({kSqrtBlock}, exp_avg_sq.options());
  const at::Tensor flat_v = exp_avg_sq.view({n});
  for (int64_t start = 0; start < n; start += kSqrtBlock) {
    const int64_t len = std::min(kSqrtBlock, n - start);
    pass_avx2<Pass::kMoments>(p + start, g + start, m + start, v + start, nullptr, len, s);
    at::Tensor sqrt_v = scratch.narrow(0, 0, len);
    at::sqrt_out(sqrt_v, flat_v.narrow(0, start, len));
    pass_avx2<Pass::kApply>(p + start, nullptr, m + start, v + start, sqrt_v.data_ptr<float>(), len, s);
  }
}
#endif

bool cpu_has_avx2_fma() {
#if defined(__x86_64__)
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
#else
  return false;
#endif
}

bool fusable(const at::Tensor& t) {
  return t.defined() && t.device().is_cpu() && t.layout() == at::kStrided && t.scalar_type() == at::kFloat &&
         t.is_contiguous();
}

// Whether every parameter with a gradient (and its state, if any) can take the fused path.
template <typename Options, typename State>
bool all_fusable(const std::vector<torch::optim::OptimizerParamGroup>& groups,
                 const detail::ParamStateMap& state) {
  if (!cpu_has_avx2_fma() || !detail::aten_arithmetic().reproducible) return false;
  for (const auto& group : groups) {
    if (static_cast<const Options&>(group.options()).amsgrad()) return false;
    for (const auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      if (!fusable(p) || !fusable(p.grad()) || p.grad().numel() != p.numel()) return false;
      auto it = state.find(detail::param_state_key(p));
      if (it != state.end()) {
        const auto& s = static_cast<const State&>(*it->second);
        if (!fusable(s.exp_avg()) || !fusable(s.exp_avg_sq()) || s.exp_avg().numel() != p.numel() ||
            s.exp_avg_sq().numel() != p.numel()) {
          return false;
        }
      }
    }
  }
  return true;
}

// One optimizer step over every group, fused. `decoupled` selects AdamW's weight decay.
template <typename Options, typename State>
void fused_step(std::vector<torch::optim::OptimizerParamGroup>& groups, detail::ParamStateMap& state,
                at::Tensor& scratch, bool decoupled) {
  torch::NoGradGuard no_grad;
  for (auto& group : groups) {
    const auto& options = static_cast<const Options&>(group.options());
    const double beta1 = std::get<0>(options.betas());
    const double beta2 = std::get<1>(options.betas());
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      auto& s = detail::adam_state<State>(state, p);
      s.step(s.step() + 1);
      const double bias_correction1 = 1 - std::pow(beta1, s.step());
      const double bias_correction2 = 1 - std::pow(beta2, s.step());

      AdamScalars k;
      if (decoupled) {
        k.decoupled = options.weight_decay() != 0;
        k.decay = static_cast<float>(1 - options.lr() * options.weight_decay());
      } else {
        k.l2_on = options.weight_decay() != 0;
        k.l2 = static_cast<float>(options.weight_decay());
      }
      k.beta1 = static_cast<float>(beta1);
      k.one_minus_beta1 = static_cast<float>(1 - beta1);
      k.beta2 = static_cast<float>(beta2);
      k.one_minus_beta2 = static_cast<float>(1 - beta2);
      k.sqrt_bias_correction2 = static_cast<float>(std::sqrt(bias_correction2));
      k.eps = static_cast<float>(options.eps());
      k.neg_step_size = static_cast<float>(-(options.lr() / bias_correction1));
      const detail::AtenArithmetic& aten = detail::aten_arithmetic();
      k.add_fma = aten.add_fma;
      k.addcmul_fma = aten.addcmul_fma;
#if defined(__x86_64__)
      update_avx2(p, p.grad(), s.exp_avg(), s.exp_avg_sq(), aten.exact_sqrt, scratch, k);
#endif
    }
  }
}

torch::Tensor run_closure(const torch::optim::Optimizer::LossClosure& closure) {
  if (closure == nullptr) return {};
  at::AutoGradMode enable_grad(true);
  return closure();
}

// ATen's kernel on a GPU (aten_fused_adam.h), when it takes every parameter; `steps` made on first use.
bool stepped_by_aten(std::vector<torch::optim::OptimizerParamGroup>& groups, detail::ParamStateMap& state,
                     std::shared_ptr<detail::DeviceSteps>& steps, bool decoupled) {
  if ((decoupled && !detail::kAtenHasFusedAdamW) || !detail::aten_fusable(groups)) return false;
  if (!steps) steps = std::make_shared<detail::DeviceSteps>();
  detail::aten_fused_adam_step(groups, state, *steps, decoupled);
  return true;
}

}  // namespace

bool fused_adam_supported() {
  return cpu_has_avx2_fma() && detail::aten_arithmetic().reproducible;
}

// The closure runs once, first; then ATen's kernel on a GPU, the AVX2 pass on the CPU, or torch's own step.
torch::Tensor FusedAdam::step(LossClosure closure) {
  torch::Tensor loss = run_closure(closure);
  if (stepped_by_aten(param_groups_, state_, device_steps_, /*decoupled=*/false)) return loss;
  if (all_fusable<torch::optim::AdamOptions, torch::optim::AdamParamState>(param_groups_, state_)) {
    fused_step<torch::optim::AdamOptions, torch::optim::AdamParamState>(param_groups_, state_, sqrt_scratch_,
                                                                        /*decoupled=*/false);
  } else {
    torch::optim::Adam::step();
  }
  return loss;
}

std::string FusedAdam::capture_refusal() const {
  return detail::aten_capture_refusal(param_groups_, /*decoupled=*/false);
}

void FusedAdam::before_replay() {
  detail::prepare_replay(param_groups_, state_, device_steps_, /*decoupled=*/false);
}

void FusedAdam::after_replay() {
  TORCH_CHECK(device_steps_, "FusedAdam::after_replay() before any before_replay()");
  detail::count_replayed_step(state_, *device_steps_, /*decoupled=*/false);
}

std::string FusedAdamW::capture_refusal() const {
  return detail::aten_capture_refusal(param_groups_, /*decoupled=*/true);
}

void FusedAdamW::before_replay() {
  detail::prepare_replay(param_groups_, state_, device_steps_, /*decoupled=*/true);
}

void FusedAdamW::after_replay() {
  TORCH_CHECK(device_steps_, "FusedAdamW::after_replay() before any before_replay()");
  detail::count_replayed_step(state_, *device_steps_, /*decoupled=*/true);
}

torch::Tensor FusedAdamW::step(LossClosure closure) {
  torch::Tensor loss = run_closure(closure);
  if (stepped_by_aten(param_groups_, state_, device_steps_, /*decoupled=*/true)) return loss;
  if (all_fusable<torch::optim::AdamWOptions, torch::optim::AdamWParamState>(param_groups_, state_)) {
    fused_step<torch::optim::AdamWOptions, torch::optim::AdamWParamState>(param_groups_, state_,
                                                                          sqrt_scratch_,
                                                                          /*decoupled=*/true);
  } else {
    torch::optim::AdamW::step();
  }
  return loss;
}

}  // namespace lockstep::optim
