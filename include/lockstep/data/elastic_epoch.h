#pragma once

#include <cstdint>
#include <vector>

#include "lockstep/data/distributed_sampler.h"

namespace lockstep::data {

/// One epoch of DistributedSampler indices whose world may change while it runs (an elastic job that lost
/// ranks in place): this rank's indices for the current part of the epoch, and after each change the rest
/// of the epoch dealt over the new world (reshard_remaining over every part so far), so that each sample of
/// the epoch is trained once (but the sampler's padding) whatever the changes.
///
/// Example (3 ranks did 5 batches of 32, then one was lost):
///   ElasticEpoch part(60000, DistributedSamplerOptions(3, rank).seed(42), epoch);
///   ... train on part.indices() ...
///   part.reshard(/*consumed=*/5 * 32, /*num_replicas=*/2, new_rank);  // part.indices(): the rest, for 2
class ElasticEpoch {
 public:
  /// The epoch as DistributedSampler(dataset_size, options) with set_epoch(epoch) deals it.
  ElasticEpoch(int64_t dataset_size, DistributedSamplerOptions options, int64_t epoch);

  /// This rank's indices in the current part.
  const std::vector<int64_t>& indices() const { return indices_; }
  /// The current part ended after every rank of it consumed the first `consumed` of its indices; the rest
  /// of the epoch goes to `num_replicas` ranks, this one being `rank`. Throws std::invalid_argument when
  /// consumed is outside [0, indices().size()] or rank outside [0, num_replicas).
  void reshard(int64_t consumed, int64_t num_replicas, int64_t rank);
  /// The world size of the current part.
  int64_t num_replicas() const { return parts_.back().replicas; }

 private:
  int64_t dataset_size_;
  DistributedSamplerOptions options_;
  int64_t epoch_;
  std::vector<ConsumedPart> parts_;  // the last one is the current part (its consumed still 0)
  std::vector<int64_t> indices_;
};

}  // namespace lockstep::data
