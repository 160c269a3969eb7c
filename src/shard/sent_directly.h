#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>

namespace lockstep::shard::detail {

/// A parameter at least this large whose size divides by the world is sent as it is (ZeRO-1's gathers into
/// its memory, ZeRO-2's reduce-scatter from its .grad, FSDP's gathers into its memory): below it, packing
/// many small parameters into one collective costs less than one collective each (docs/benchmarks.md).
constexpr int64_t kDirectBytes = int64_t{64} << 10;

/// Whether `param` is sent as it is in a world of `world` ranks (kDirectBytes).
inline bool sent_directly(const at::Tensor& param, int world) {
  return param.numel() % world == 0 && static_cast<int64_t>(param.nbytes()) >= kDirectBytes;
}

}  // namespace lockstep::shard::detail
