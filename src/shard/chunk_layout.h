#pragma once

// The rank-major layout the sharded strategies send: a parameter of n elements cut into chunks of
// stride = ceil(n / world) (the last ones shorter, or empty), chunk r lying in row r of a [world, part]
// buffer at column `offset` (ZeroOptimizer::chunk gives the same ranges).

#include <cstdint>

#include <ATen/ATen.h>

namespace lockstep::shard::detail {

/// A parameter at least this large whose size divides by the world is sent as it is (ZeRO-1's gathers into
/// its memory, ZeRO-2's reduce-scatter from its .grad, FSDP's gathers into its memory): below it, packing
/// many small parameters into one collective costs less than one collective each (docs/benchmarks.md).
constexpr int64_t kDirectBytes = int64_t{64} << 10;

/// Whether `param` is sent as it is in a world of `world` ranks (kDirectBytes).
inline bool sent_directly(const at::Tensor& param, int world) {
  return param.numel() % world == 0 && static_cast<int64_t>(param.nbytes()) >= kDirectBytes;
}

/// Copies `flat` (a parameter's n elements) into its chunks' places in `rows` ([world, part]).
inline void pack_chunks(at::Tensor rows, int64_t offset, int64_t stride, const at::Tensor& flat) {
  if (stride == 0) return;  // an empty parameter
  at::Tensor to = rows.narrow(1, offset, stride);
  const int64_t whole = flat.numel() / stride;  // whole chunks; the last one may be short
  const int64_t rest = flat.numel() - whole * stride;
  if (whole > 0) to.narrow(0, 0, whole).copy_(flat.narrow(0, 0, whole * stride).view({whole, stride}));
  if (rest > 0) to.select(0, whole).narrow(0, 0, rest).copy_(flat.narrow(0, whole * stride, rest));
}

/// The inverse: `flat` (n elements) receives its chunks from their places in `rows`.
inline void unpack_chunks(const at::Tensor& rows, int64_t offset, int64_t stride, at::Tensor flat) {
  if (stride == 0) return;
  const at::Tensor from = rows.narrow(1, offset, stride);
  const int64_t whole = flat.numel() / stride;
  const int64_t rest = flat.numel() - whole * stride;
  if (whole > 0) flat.narrow(0, 0, whole * stride).view({whole, stride}).copy_(from.narrow(0, 0, whole));
  if (rest > 0) flat.narrow(0, whole * stride, rest).copy_(from.select(0, whole).narrow(0, 0, rest));
}

}  // namespace lockstep::shard::detail
