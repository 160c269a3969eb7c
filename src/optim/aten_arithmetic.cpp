// The probe of include src/optim/aten_arithmetic.h. Compiled with -ffp-contract=off
// (src/optim/CMakeLists.txt): the unfused candidates below must round after every operation.
#include "aten_arithmetic.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include <ATen/ATen.h>

namespace lockstep::optim::detail {
namespace {

constexpr int64_t kProbeSize = 4099;  // whole vectors of 8 and 16 lanes, then a tail of 3

// Deterministic probe values (the global generator is left alone: drawing from it would change training).
std::vector<float> probe_values(uint64_t seed, bool positive) {
  std::vector<float> values(kProbeSize);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& v : values) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    const double unit = static_cast<double>(x >> 11) / 9007199254740992.0;  // [0, 1)
    const int exponent = static_cast<int>((x >> 3) % 61) - 40;              // 2^-40 .. 2^20
    const double magnitude = std::ldexp(0.5 + unit, exponent);
    v = static_cast<float>(positive || (x & 1) ? magnitude : -magnitude);
  }
  return values;
}

at::Tensor as_tensor(std::vector<float>& values) {
  return at::from_blob(values.data(), {kProbeSize}, at::kFloat);
}

// Whether `got` equals `element(i)` for every i, bit for bit.
bool same(const at::Tensor& got, const std::function<float(int64_t)>& element) {
  const at::Tensor result = got.contiguous();
  const float* data = result.data_ptr<float>();
  for (int64_t i = 0; i < kProbeSize; ++i) {
    const float want = element(i);
    if (std::memcmp(&data[i], &want, sizeof(float)) != 0) return false;
  }
  return true;
}

AtenArithmetic probe() {
  auto a = probe_values(1, false), b = probe_values(2, false), c = probe_values(3, false);
  auto pos = probe_values(4, true);
  const at::Tensor ta = as_tensor(a), tb = as_tensor(b), tc = as_tensor(c), tpos = as_tensor(pos);
  const float alpha = 0.1f, value = 0.001f, divisor = 0.0316f, addend = 1e-8f;
  AtenArithmetic r;

  const at::Tensor added = ta.add(tb, alpha);
  r.add_fma = same(added, [&](int64_t i) { return std::fma(b[i], alpha, a[i]); });
  const bool add_plain = same(added, [&](int64_t i) { return a[i] + b[i] * alpha; });

  const at::Tensor addcmul = ta.addcmul(tb, tc, value);
  r.addcmul_fma = same(addcmul, [&](int64_t i) { return std::fma(value * b[i], c[i], a[i]); });
  const bool addcmul_plain = same(addcmul, [&](int64_t i) { return a[i] + (value * b[i]) * c[i]; });

  r.exact_sqrt = same(tpos.sqrt(), [&](int64_t i) { return std::sqrt(pos[i]); });

  const bool plain =
      same(ta.mul(alpha), [&](int64_t i) { return a[i] * alpha; }) &&
      same(ta.div(static_cast<double>(divisor)), [&](int64_t i) { return a[i] / divisor; }) &&
      same(ta.add(addend), [&](int64_t i) { return a[i] + addend; }) &&
      same(ta.addcdiv(tb, tpos, -value), [&](int64_t i) { return a[i] + (-value * b[i]) / pos[i]; });
  r.reproducible = plain && (r.add_fma || add_plain) && (r.addcmul_fma || addcmul_plain);
  return r;
}

}  // namespace

const AtenArithmetic& aten_arithmetic() {
  static const AtenArithmetic result = probe();
  return result;
}

}  // namespace lockstep::optim::detail
