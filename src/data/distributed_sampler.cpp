#include "lockstep/data/distributed_sampler.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <stdexcept>
#include <string>

namespace lockstep::data {
namespace {

// Python's math.ceil(a / b) for b > 0 and any sign of a.
int64_t ceil_div(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && a > 0) ? q + 1 : q;
}

}  // namespace

DistributedSampler::DistributedSampler(int64_t dataset_size, DistributedSamplerOptions options)
    : dataset_size_(dataset_size), options_(options) {
  const int64_t replicas = options_.num_replicas();
  if (replicas < 1) {
    throw std::invalid_argument("DistributedSampler: num_replicas must be >= 1, got " +
                                std::to_string(replicas));
  }
  if (options_.rank() < 0 || options_.rank() >= replicas) {
    throw std::invalid_argument("DistributedSampler: rank must be in [0, " + std::to_string(replicas - 1) +
                                "] for num_replicas " + std::to_string(replicas) + ", got " +
                                std::to_string(options_.rank()));
  }
  if (dataset_size < 0) {
    throw std::invalid_argument("DistributedSampler: dataset size must be >= 0, got " +
                                std::to_string(dataset_size));
  }
  // PyTorch: with drop_last and a size not divisible by the replicas, ceil((n - R) / R), else ceil(n / R).
  if (options_.drop_last() && dataset_size % replicas != 0) {
    num_samples_ = ceil_div(dataset_size - replicas, replicas);
  } else {
    num_samples_ = ceil_div(dataset_size, replicas);
  }
  if (num_samples_ < 0) num_samples_ = 0;
}

std::vector<int64_t> DistributedSampler::indices() const {
  const int64_t n = dataset_size_;
  const int64_t total = total_size();
  std::vector<int64_t> all;
  all.reserve(static_cast<size_t>(std::max(total, n)));
  if (options_.shuffle()) {
    auto generator = at::detail::createCPUGenerator(options_.seed() + static_cast<uint64_t>(epoch_));
    const at::Tensor perm = at::randperm(n, generator, at::kLong);
    const int64_t* p = perm.data_ptr<int64_t>();
    all.assign(p, p + n);
  } else {
    for (int64_t i = 0; i < n; ++i) all.push_back(i);
  }
  if (!options_.drop_last()) {
    // Pad by repeating the list from its start (several times over when the padding is longer).
    const int64_t padding = total - n;
    for (int64_t i = 0; i < padding && n > 0; ++i) all.push_back(all[static_cast<size_t>(i % n)]);
  } else {
    all.resize(static_cast<size_t>(total));
  }
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples_));
  for (int64_t i = options_.rank(); i < total; i += options_.num_replicas()) {
    mine.push_back(all[static_cast<size_t>(i)]);
  }
  return mine;
}

namespace {

// `list` padded by repeating from its start to a multiple of `replicas`.
void pad_for(std::vector<int64_t>& list, int64_t replicas) {
  const auto n = static_cast<int64_t>(list.size());
  const int64_t total = (n + replicas - 1) / replicas * replicas;
  for (std::size_t i = 0; static_cast<int64_t>(list.size()) < total; ++i) list.push_back(list[i]);
}

}  // namespace

std::vector<int64_t> reshard_remaining(int64_t dataset_size, const DistributedSamplerOptions& old_options,
                                       int64_t epoch, int64_t consumed, int64_t planned, int64_t num_replicas,
                                       int64_t rank) {
  return reshard_remaining(dataset_size, old_options, epoch,
                           {ConsumedPart{old_options.num_replicas(), consumed, planned}}, num_replicas, rank);
}

std::vector<int64_t> reshard_remaining(int64_t dataset_size, const DistributedSamplerOptions& old_options,
                                       int64_t epoch, const std::vector<ConsumedPart>& parts,
                                       int64_t num_replicas, int64_t rank) {
  if (num_replicas < 1 || rank < 0 || rank >= num_replicas) {
    throw std::invalid_argument("reshard_remaining: rank " + std::to_string(rank) + " is not in [0, " +
                                std::to_string(num_replicas) + ")");
  }
  if (parts.empty()) throw std::invalid_argument("reshard_remaining: no part of the epoch given");
  // The list each part dealt round-robin (rank r's k-th sample at position r + k x replicas): for the
  // first, the sampler's padded order of the epoch; for each later one, the rest of the list before.
  std::vector<int64_t> list;
  for (std::size_t p = 0; p < parts.size(); ++p) {
    const ConsumedPart& part = parts[p];
    if (part.replicas < 1) {
      throw std::invalid_argument("reshard_remaining: part " + std::to_string(p) + " has " +
                                  std::to_string(part.replicas) + " replicas");
    }
    if (p == 0) {
      std::vector<std::vector<int64_t>> shards;
      for (int64_t r = 0; r < part.replicas; ++r) {
        DistributedSampler shard(dataset_size,
                                 DistributedSamplerOptions(old_options).num_replicas(part.replicas).rank(r));
        shard.set_epoch(epoch);
        shards.push_back(shard.indices());
      }
      list.clear();
      for (std::size_t k = 0; k < shards.front().size(); ++k) {
        for (const auto& shard : shards) list.push_back(shard[k]);
      }
    } else {
      pad_for(list, part.replicas);
    }
    const int64_t shard = static_cast<int64_t>(list.size()) / part.replicas;
    const int64_t planned = part.planned < 0 ? shard : part.planned;
    if (part.consumed < 0 || part.consumed > planned || planned > shard) {
      throw std::invalid_argument("reshard_remaining: consumed " + std::to_string(part.consumed) +
                                  " and planned " + std::to_string(planned) +
                                  " must satisfy 0 <= consumed <= planned <= " + std::to_string(shard) +
                                  " (the shard size of part " + std::to_string(p) + ")");
    }
    list = std::vector<int64_t>(list.begin() + part.consumed * part.replicas,
                                list.begin() + planned * part.replicas);
  }
  if (list.empty()) return {};
  pad_for(list, num_replicas);
  std::vector<int64_t> mine;
  for (auto i = static_cast<std::size_t>(rank); i < list.size();
       i += static_cast<std::size_t>(num_replicas)) {
    mine.push_back(list[i]);
  }
  return mine;
}

}  // namespace lockstep::data
