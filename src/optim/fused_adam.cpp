// FusedAdam / FusedAdamW: see include/lockstep/optim/fused_adam.h.
//
// The update of one element, in torch's order (torch/csrc/api/src/optim/adam.cpp and adamw.cpp with
// ATen's vectorised CPU kernels; every scalar is rounded to float first, as ATen does):
//   AdamW only:  p = p * (1 - lr * wd)                           p.mul_(1 - lr * wd)
//   Adam only:   g = fma(p, wd, g)                               grad.add(p, wd)      (when wd != 0)
//                m = fma(g, 1 - beta1, m * beta1)                exp_avg.mul_(beta1).add_(grad, 1 - beta1)
//                v = v * beta2 + ((1 - beta2) * g) * g           exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2)
//                d = sqrt(v) / sqrt(bias_correction2) + eps      (exp_avg_sq.sqrt() / sqrt(bc2)).add_(eps)
//                p = p + ((-lr / bias_correction1) * m) / d      p.addcdiv_(exp_avg, denom, -step_size)
#include "lockstep/optim/fused_adam.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace lockstep::optim {
namespace {

struct AdamScalars {
  float decay = 1.0f;     // AdamW: 1 - lr * wd (applied when decoupled)
  bool decoupled = false;
  float l2 = 0.0f;        // Adam: weight decay added to the gradient (applied when l2_on)
  bool l2_on = false;
  float beta1 = 0.0f;
  float one_minus_beta1 = 0.0f;
  float beta2 = 0.0f;
  float one_minus_beta2 = 0.0f;
  float sqrt_bias_correction2 = 1.0f;
  float eps = 0.0f;
  float neg_step_size = 0.0f;
};

#if defined(__x86_64__)
// Eight elements: the update above with ATen's vector instructions.
__attribute__((target("avx2,fma"))) inline void update8(float* p, const float* g, float* m, float* v,
                                                        const AdamScalars& s) {
  __m256 P = _mm256_loadu_ps(p);
  __m256 G = _mm256_loadu_ps(g);
  if (s.decoupled) P = _mm256_mul_ps(P, _mm256_set1_ps(s.decay));
  if (s.l2_on) G = _mm256_fmadd_ps(P, _mm256_set1_ps(s.l2), G);
  const __m256 M = _mm256_fmadd_ps(G, _mm256_set1_ps(s.one_minus_beta1),
                                   _mm256_mul_ps(_mm256_loadu_ps(m), _mm256_set1_ps(s.beta1)));
  const __m256 V = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(v), _mm256_set1_ps(s.beta2)),
                                 _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(s.one_minus_beta2), G), G));
  const __m256 D = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(V), _mm256_set1_ps(s.sqrt_bias_correction2)),
                                 _mm256_set1_ps(s.eps));
  P = _mm256_add_ps(P, _mm256_div_ps(_mm256_mul_ps(_mm256_set1_ps(s.neg_step_size), M), D));
  _mm256_storeu_ps(m, M);
  _mm256_storeu_ps(v, V);
  _mm256_storeu_ps(p, P);
}

// The tail goes through the same vector code on a padded copy, so every element sees the same
// instructions whatever the tensor's length.
__attribute__((target("avx2,fma"))) void update_avx2(float* p, const float* g, float* m, float* v, int64_t n,
                                                     const AdamScalars& s) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) update8(p + i, g + i, m + i, v + i, s);
  if (i < n) {
    const auto rest = static_cast<std::size_t>(n - i);
    // Padding lanes hold v = 1 so that no lane divides by zero (their results are discarded).
    float tp[8] = {0}, tg[8] = {0}, tm[8] = {0}, tv[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    std::memcpy(tp, p + i, rest * sizeof(float));
    std::memcpy(tg, g + i, rest * sizeof(float));
    std::memcpy(tm, m + i, rest * sizeof(float));
    std::memcpy(tv, v + i, rest * sizeof(float));
    update8(tp, tg, tm, tv, s);
    std::memcpy(p + i, tp, rest * sizeof(float));
    std::memcpy(m + i, tm, rest * sizeof(float));
    std::memcpy(v + i, tv, rest * sizeof(float));
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
                 const ska::flat_hash_map<std::string, std::unique_ptr<torch::optim::OptimizerParamState>>& state) {
  if (!cpu_has_avx2_fma()) return false;
  for (const auto& group : groups) {
    if (static_cast<const Options&>(group.options()).amsgrad()) return false;
    for (const auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      if (!fusable(p) || !fusable(p.grad()) || p.grad().numel() != p.numel()) return false;
      auto it = state.find(c10::guts::to_string(p.unsafeGetTensorImpl()));
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
void fused_step(std::vector<torch::optim::OptimizerParamGroup>& groups,
                ska::flat_hash_map<std::string, std::unique_ptr<torch::optim::OptimizerParamState>>& state,
                bool decoupled) {
  torch::NoGradGuard no_grad;
  for (auto& group : groups) {
    const auto& options = static_cast<const Options&>(group.options());
    const double beta1 = std::get<0>(options.betas());
    const double beta2 = std::get<1>(options.betas());
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      const std::string key = c10::guts::to_string(p.unsafeGetTensorImpl());
      auto it = state.find(key);
      if (it == state.end()) {
        auto fresh = std::make_unique<State>();
        fresh->step(0);
        fresh->exp_avg(torch::zeros_like(p, at::MemoryFormat::Preserve));
        fresh->exp_avg_sq(torch::zeros_like(p, at::MemoryFormat::Preserve));
        it = state.emplace(key, std::move(fresh)).first;
      }
      auto& s = static_cast<State&>(*it->second);
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
#if defined(__x86_64__)
      const at::Tensor& exp_avg = s.exp_avg();
      const at::Tensor& exp_avg_sq = s.exp_avg_sq();
      update_avx2(p.data_ptr<float>(), p.grad().data_ptr<float>(), exp_avg.data_ptr<float>(),
                  exp_avg_sq.data_ptr<float>(), p.numel(), k);
#endif
    }
  }
}

torch::Tensor run_closure(const torch::optim::Optimizer::LossClosure& closure) {
  if (closure == nullptr) return {};
  at::AutoGradMode enable_grad(true);
  return closure();
}

}  // namespace

bool fused_adam_supported() { return cpu_has_avx2_fma(); }

torch::Tensor FusedAdam::step(LossClosure closure) {
  if (!all_fusable<torch::optim::AdamOptions, torch::optim::AdamParamState>(param_groups_, state_)) return torch::optim::Adam::step(closure);
  torch::Tensor loss = run_closure(closure);
  fused_step<torch::optim::AdamOptions, torch::optim::AdamParamState>(param_groups_, state_, /*decoupled=*/false);
  return loss;
}

torch::Tensor FusedAdamW::step(LossClosure closure) {
  if (!all_fusable<torch::optim::AdamWOptions, torch::optim::AdamWParamState>(param_groups_, state_)) return torch::optim::AdamW::step(closure);
  torch::Tensor loss = run_closure(closure);
  fused_step<torch::optim::AdamWOptions, torch::optim::AdamWParamState>(param_groups_, state_, /*decoupled=*/true);
  return loss;
}

}  // namespace lockstep::optim
