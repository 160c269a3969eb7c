#include "lockstep/data/elastic_epoch.h"

#include <stdexcept>
#include <string>

namespace lockstep::data {

ElasticEpoch::ElasticEpoch(int64_t dataset_size, DistributedSamplerOptions options, int64_t epoch)
    : dataset_size_(dataset_size), options_(options), epoch_(epoch) {
  DistributedSampler sampler(dataset_size, options);
  sampler.set_epoch(epoch);
  indices_ = sampler.indices();
  parts_.push_back(ConsumedPart{options.num_replicas(), 0, -1});
}

void ElasticEpoch::reshard(int64_t consumed, int64_t num_replicas, int64_t rank) {
  if (consumed < 0 || consumed > static_cast<int64_t>(indices_.size())) {
    throw std::invalid_argument("ElasticEpoch::reshard: consumed=" + std::to_string(consumed) +
                                " is outside [0, " + std::to_string(indices_.size()) +
                                "], this rank's indices in the part that ended");
  }
  if (num_replicas < 1 || rank < 0 || rank >= num_replicas) {
    throw std::invalid_argument("ElasticEpoch::reshard: rank=" + std::to_string(rank) + " of num_replicas=" +
                                std::to_string(num_replicas) + " is not a rank of that world");
  }
  parts_.back().consumed = consumed;
  indices_ = reshard_remaining(dataset_size_, options_, epoch_, parts_, num_replicas, rank);
  parts_.push_back(ConsumedPart{num_replicas, 0, -1});
}

}  // namespace lockstep::data
