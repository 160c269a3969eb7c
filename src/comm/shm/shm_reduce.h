#pragma once

// Element-wise reduction kernels of the shm backend. Private to the shm backend.

#include <cstdint>

#include <c10/core/ScalarType.h>

namespace lockstep::comm::detail {

enum class ShmReduceOp { kSum, kProduct, kMin, kMax };

/// True when reduce() handles `type`: float32, float64, bfloat16, float16, int32, int64, uint8, int8.
bool shm_reducible(c10::ScalarType type);

/// out[i] = in[0][i] op in[1][i] op ... op in[n-1][i], for i < count, in rank order (so every rank
/// that reduces the same slice gets the same bits, run after run). For float32/float64/integers each
/// step rounds to the type (((r0 + r1) + r2) + ...); float16/bfloat16 accumulate in float32 and
/// round once. `out` may be the same pointer as in[0]; otherwise no overlap.
void shm_reduce(c10::ScalarType type, ShmReduceOp op, void* out, const void* const* in, int n,
                std::int64_t count);

/// Divides `count` elements by `divisor` in place (floats: true division; integers: truncation).
void shm_divide(c10::ScalarType type, void* data, std::int64_t count, int divisor);

}  // namespace lockstep::comm::detail
