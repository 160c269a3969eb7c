// Shards of the Trainer's epochs: see trainer_shards.h.
#include "trainer_shards.h"

#include <algorithm>

namespace lockstep::train::detail {

std::vector<int64_t> unpadded_shard(const data::DistributedSampler& sampler) {
  std::vector<int64_t> indices = sampler.indices();
  const int64_t rank = sampler.options().rank();
  const int64_t replicas = sampler.options().num_replicas();
  int64_t keep = 0;
  while (keep < static_cast<int64_t>(indices.size()) && rank + keep * replicas < sampler.dataset_size())
    ++keep;
  indices.resize(static_cast<std::size_t>(keep));
  return indices;
}

std::vector<int64_t> reshard_rest(int64_t dataset_size, uint64_t seed, int64_t epoch, int old_world,
                                  int64_t old_batches, int64_t batch_size, const BatchLimit& limit, int world,
                                  int rank) {
  const auto old_options = data::DistributedSamplerOptions(old_world, 0).shuffle(true).seed(seed);
  const int64_t shard = data::DistributedSampler(dataset_size, old_options).num_samples();
  const int64_t planned = std::min(shard, limit.apply(ceil_div(shard, batch_size)) * batch_size);
  return data::reshard_remaining(dataset_size, old_options, epoch,
                                 std::min(old_batches * batch_size, planned), planned, world, rank);
}

}  // namespace lockstep::train::detail
