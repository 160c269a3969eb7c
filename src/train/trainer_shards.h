#pragma once

#include <cstdint>
#include <vector>

#include "lockstep/data/distributed_sampler.h"
#include "lockstep/train/batch_limit.h"

namespace lockstep::train::detail {

inline int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

/// Validation indices of this rank: the DistributedSampler's (no shuffle) without the padding it adds to
/// make the shards equal, so that every sample counts exactly once whatever the world size. Rank r's k-th
/// index sits at position r + k * R of the padded list; positions >= size are padding.
std::vector<int64_t> unpadded_shard(const data::DistributedSampler& sampler);

/// Re-sharding a resumed epoch: the rest of an epoch that `old_world` ranks had trained `old_batches`
/// batches of (of at most `limit` batches of `batch_size` each), dealt to this `rank` of `world`
/// (data::reshard_remaining says how).
std::vector<int64_t> reshard_rest(int64_t dataset_size, uint64_t seed, int64_t epoch, int old_world,
                                  int64_t old_batches, int64_t batch_size, const BatchLimit& limit, int world,
                                  int rank);

}  // namespace lockstep::train::detail
