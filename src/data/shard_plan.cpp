// Where a rank's batches of an epoch come from: see include/lockstep/data/shard_loader.h.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "lockstep/data/distributed_sampler.h"
#include "lockstep/data/shard_loader.h"

namespace lockstep::data::detail {
namespace {

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

void check_plan(const ShardPlan& plan) {
  if (plan.world < 1 || plan.rank < 0 || plan.rank >= plan.world) {
    throw std::invalid_argument("ShardPlan: rank " + std::to_string(plan.rank) + " is outside [0, world " +
                                std::to_string(plan.world) + ")");
  }
  for (const EpochPart& part : plan.before) {
    if (part.world < 1 || part.batches < 0) {
      throw std::invalid_argument("ShardPlan: an earlier part of the epoch has world " +
                                  std::to_string(part.world) + " and " + std::to_string(part.batches) +
                                  " batches (need world >= 1, batches >= 0)");
    }
  }
}

// Rank r's k-th index sits at position r + k * R of the padded list; positions >= size are padding.
std::vector<int64_t> unpadded(const DistributedSampler& sampler) {
  std::vector<int64_t> indices = sampler.indices();
  const int64_t rank = sampler.options().rank();
  const int64_t replicas = sampler.options().num_replicas();
  int64_t keep = 0;
  while (keep < static_cast<int64_t>(indices.size()) && rank + keep * replicas < sampler.dataset_size())
    ++keep;
  indices.resize(static_cast<std::size_t>(keep));
  return indices;
}

}  // namespace

std::vector<int64_t> plan_indices(int64_t dataset_size, const LoaderOptions& options, bool shuffle,
                                  const ShardPlan& plan) {
  check_plan(plan);
  const int64_t b = options.batch_size();
  std::vector<int64_t> indices;
  if (!plan.before.empty()) {
    const auto options0 =
        DistributedSamplerOptions(plan.before.front().world, 0).shuffle(shuffle).seed(plan.seed);
    const int64_t shard0 = DistributedSampler(dataset_size, options0).num_samples();
    std::vector<ConsumedPart> parts;
    for (std::size_t p = 0; p < plan.before.size(); ++p) {
      const EpochPart& part = plan.before[p];
      ConsumedPart consumed{part.world, part.batches * b, part.planned < 0 ? -1 : part.planned * b};
      if (p == 0) {
        consumed.planned = consumed.planned < 0 ? shard0 : std::min(shard0, consumed.planned);
        consumed.consumed = std::min(consumed.consumed, consumed.planned);
      }
      parts.push_back(consumed);
    }
    indices = reshard_remaining(dataset_size, options0, plan.epoch, parts, plan.world, plan.rank);
  } else {
    DistributedSampler sampler(
        dataset_size, DistributedSamplerOptions(plan.world, plan.rank).shuffle(shuffle).seed(plan.seed));
    sampler.set_epoch(plan.epoch);
    indices = plan.even ? sampler.indices() : unpadded(sampler);
  }
  if (plan.max_batches >= 0)
    indices.resize(std::min<std::size_t>(indices.size(), static_cast<std::size_t>(plan.max_batches * b)));
  return indices;
}

StreamWindows::StreamWindows(const LoaderOptions& options, const ShardPlan& plan)
    : batch_size(options.batch_size()),
      world(plan.world),
      rank(plan.rank),
      even(plan.even),
      drop_last(options.drop_last()),
      base(0),
      end(-1) {
  check_plan(plan);
  // A stream is read in windows of batch_size x world samples, none padded: each earlier part took its
  // windows in turn, and the first one's limit ends the epoch.
  for (const EpochPart& part : plan.before) base += part.batches * batch_size * part.world;
  if (!plan.before.empty() && plan.before.front().planned >= 0) {
    end = plan.before.front().planned * batch_size * plan.before.front().world;
  }
}

std::vector<int64_t> StreamWindows::own_offsets(int64_t read) const {
  // Training keeps read / world samples per rank (the same on every rank); validation every sample.
  const int64_t count = read >= window()
                            ? batch_size
                            : (even ? read / world : (read > rank ? ceil_div(read - rank, world) : 0));
  if (count == 0 || (drop_last && count < batch_size)) return {};
  std::vector<int64_t> offsets(static_cast<std::size_t>(count));
  for (int64_t i = 0; i < count; ++i) offsets[static_cast<std::size_t>(i)] = rank + i * world;
  return offsets;
}

int64_t stream_batches(int64_t stream_size, const LoaderOptions& options, const ShardPlan& plan) {
  if (stream_size < 0) return -1;
  const StreamWindows windows(options, plan);
  const int64_t last = windows.end >= 0 ? std::min(stream_size, windows.end) : stream_size;
  const int64_t rest = std::max<int64_t>(0, last - windows.base);
  const int64_t per_rank =
      windows.even ? rest / plan.world : (rest > plan.rank ? ceil_div(rest - plan.rank, plan.world) : 0);
  const int64_t b = options.batch_size();
  int64_t batches = options.drop_last() ? per_rank / b : ceil_div(per_rank, b);
  if (plan.max_batches >= 0) batches = std::min(batches, plan.max_batches);
  return batches;
}

}  // namespace lockstep::data::detail
