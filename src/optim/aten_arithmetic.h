#pragma once

// How this LibTorch's CPU kernels round the element-wise operations of Adam's step, found by running them.
//
// FusedAdam is bit-identical to torch::optim::Adam only if each of its fused instructions rounds as the
// ATen kernel it replaces. That differs between LibTorch builds, not by a version number one could test:
// Debian's 1.13 computes addcmul_ as a multiply then an add and sqrt with the CPU's exact instruction;
// PyPI's 2.x fuses addcmul_'s multiply-add and, being built with MKL, takes sqrt from MKL's vector math
// library, which is not correctly rounded in every lane (and may differ between CPUs). So the first fused
// step runs each operation once through ATen on probe values (4099 of them, through ATen's vector code,
// and 13, through its scalar code; magnitudes from 2^-40 to 2^20) and compares the results with each
// rounding FusedAdam can reproduce.

namespace lockstep::optim::detail {

struct AtenArithmetic {
  /// a.add(b, alpha) is fma(b, alpha, a) (else: a + b * alpha, rounded twice).
  bool add_fma = true;
  /// a.addcmul(b, c, value) is fma(value * b, c, a) (else: a + (value * b) * c, each rounded).
  bool addcmul_fma = false;
  /// a.sqrt() is the correctly rounded square root on every probe and LibTorch has no MKL (else FusedAdam
  /// asks ATen for it: at::sqrt_out).
  bool exact_sqrt = true;
  /// Every operation matched a rounding FusedAdam reproduces (mul/div/add by a scalar and addcdiv as plain
  /// float arithmetic, add and addcmul one of the two forms above). False: FusedAdam runs torch's step.
  bool reproducible = true;
};

/// The probe's result, computed once per process (thread-safe).
const AtenArithmetic& aten_arithmetic();

}  // namespace lockstep::optim::detail
