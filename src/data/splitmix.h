// SplitMix64's finaliser, shared by the data layer's seeding (loader batches, synthetic images).
#pragma once

#include <cstdint>

namespace lockstep::data::detail {

/// Decorrelates nearby seeds: mix(s) and mix(s + 1) share no visible pattern.
inline uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace lockstep::data::detail
