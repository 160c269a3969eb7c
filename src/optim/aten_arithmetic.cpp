// The probe of include src/optim/aten_arithmetic.h. Compiled with -ffp-contract=off
// (src/optim/CMakeLists.txt): the unfused candidates below must round after every operation.
#include "aten_arithmetic.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Context.h>

namespace lockstep::optim::detail {
namespace {

// Deterministic probe values (the global generator is left alone: drawing from it would change training),
// in a tensor from ATen's allocator (aligned like an optimizer's state).
std::vector<float> probe_values(int64_t n, uint64_t seed, bool positive) {
  std::vector<float> values(static_cast<std::size_t>(n));
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

at::Tensor as_tensor(const std::vector<float>& values) {
  at::Tensor t = at::empty({static_cast<int64_t>(values.size())}, at::kFloat);
  std::memcpy(t.data_ptr<float>(), values.data(), values.size() * sizeof(float));
  return t;
}

// Whether `got` equals `element(i)` for every i, bit for bit.
bool same(const at::Tensor& got, const std::function<float(std::size_t)>& element) {
  const at::Tensor result = got.contiguous();
  const float* data = result.data_ptr<float>();
  for (int64_t i = 0; i < result.numel(); ++i) {
    const float want = element(static_cast<std::size_t>(i));
    if (std::memcmp(&data[i], &want, sizeof(float)) != 0) return false;
  }
  return true;
}

// The probe on n elements. ATen runs whole vectors through its vector code and the last elements of each
// chunk (up to two vectors' worth) through its scalar code; the two could round differently.
AtenArithmetic probe(int64_t n) {
  const auto a = probe_values(n, 1, false), b = probe_values(n, 2, false), c = probe_values(n, 3, false);
  const auto pos = probe_values(n, 4, true);
  const at::Tensor ta = as_tensor(a), tb = as_tensor(b), tc = as_tensor(c), tpos = as_tensor(pos);
  const float alpha = 0.1f, value = 0.001f, divisor = 0.0316f, addend = 1e-8f;
  AtenArithmetic r;

  const at::Tensor added = ta.add(tb, alpha);
  r.add_fma = same(added, [&](std::size_t i) { return std::fma(b[i], alpha, a[i]); });
  const bool add_plain = same(added, [&](std::size_t i) { return a[i] + b[i] * alpha; });

  const at::Tensor addcmul = ta.addcmul(tb, tc, value);
  r.addcmul_fma = same(addcmul, [&](std::size_t i) { return std::fma(value * b[i], c[i], a[i]); });
  const bool addcmul_plain = same(addcmul, [&](std::size_t i) { return a[i] + (value * b[i]) * c[i]; });

  r.exact_sqrt = same(tpos.sqrt(), [&](std::size_t i) { return std::sqrt(pos[i]); });

  const bool plain =
      same(ta.mul(alpha), [&](std::size_t i) { return a[i] * alpha; }) &&
      same(ta.div(static_cast<double>(divisor)), [&](std::size_t i) { return a[i] / divisor; }) &&
      same(ta.add(addend), [&](std::size_t i) { return a[i] + addend; }) &&
      same(ta.addcdiv(tb, tpos, -value), [&](std::size_t i) { return a[i] + (-value * b[i]) / pos[i]; });
  r.reproducible = plain && (r.add_fma || add_plain) && (r.addcmul_fma || addcmul_plain);
  return r;
}

AtenArithmetic probe_all() {
  const AtenArithmetic vector = probe(4099);  // 256 whole vectors of 16 lanes (512 of 8), then a tail of 3
  const AtenArithmetic scalar = probe(13);    // shorter than two vectors: ATen's scalar code only
  AtenArithmetic r = vector;
  r.reproducible = vector.reproducible && scalar.reproducible && vector.add_fma == scalar.add_fma &&
                   vector.addcmul_fma == scalar.addcmul_fma;
  // A sample cannot prove a square root exact for every input: with MKL (whose vector sqrt is not correctly
  // rounded everywhere), or if any probe differed, take ATen's own sqrt.
  r.exact_sqrt = vector.exact_sqrt && scalar.exact_sqrt && !at::hasMKL();
  return r;
}

}  // namespace

const AtenArithmetic& aten_arithmetic() {
  static const AtenArithmetic result = probe_all();
  return result;
}

}  // namespace lockstep::optim::detail
