#pragma once

#include "lockstep/detail/option.h"

#include <cstdint>
#include <vector>

namespace lockstep::data {

/// Options of a DistributedSampler; the same names and defaults as torch.utils.data.DistributedSampler.
///
/// Example:
///   DistributedSampler sampler(60000, DistributedSamplerOptions(/*num_replicas=*/2, /*rank=*/1).seed(42));
class DistributedSamplerOptions {
 public:
  DistributedSamplerOptions(int64_t num_replicas, int64_t rank) : num_replicas_(num_replicas), rank_(rank) {}

  LOCKSTEP_OPTION(DistributedSamplerOptions, int64_t, num_replicas)
  LOCKSTEP_OPTION(DistributedSamplerOptions, int64_t, rank)
  /// Shuffle with torch.randperm on a CPU generator seeded `seed + epoch` (as PyTorch does).
  LOCKSTEP_OPTION(DistributedSamplerOptions, bool, shuffle)
  LOCKSTEP_OPTION(DistributedSamplerOptions, uint64_t, seed)
  /// Drop the tail so every rank gets the same count; otherwise pad by repeating indices.
  LOCKSTEP_OPTION(DistributedSamplerOptions, bool, drop_last)

 private:
  int64_t num_replicas_;
  int64_t rank_;
  bool shuffle_ = true;
  uint64_t seed_ = 0;
  bool drop_last_ = false;
};

/// This rank's share of a dataset's indices, epoch by epoch: exactly the indices that PyTorch's
/// torch.utils.data.DistributedSampler yields for the same (size, num_replicas, rank, shuffle, seed,
/// epoch, drop_last) — so a job can move between Python and lockstep and see the same samples.
///
/// Algorithm (PyTorch's): indices = randperm(size) with a generator seeded seed + epoch (or 0..size-1
/// without shuffle); without drop_last, pad to num_samples * num_replicas by repeating indices from
/// the start; with it, cut to that length; then rank r takes positions r, r + R, r + 2R, ...
/// Every rank gets num_samples() indices, so every rank runs the same number of steps.
class DistributedSampler {
 public:
  /// Throws std::invalid_argument naming the value when num_replicas < 1, rank is outside
  /// [0, num_replicas) or dataset_size < 0.
  DistributedSampler(int64_t dataset_size, DistributedSamplerOptions options);

  /// Selects the epoch whose shuffle indices() returns (call it at the start of every epoch).
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }

  /// This rank's indices for the current epoch (num_samples() of them).
  std::vector<int64_t> indices() const;

  /// Indices per rank (the same on every rank).
  int64_t num_samples() const { return num_samples_; }
  /// num_samples() * num_replicas: the dataset size after padding or dropping.
  int64_t total_size() const { return num_samples_ * options_.num_replicas(); }
  int64_t dataset_size() const { return dataset_size_; }
  const DistributedSamplerOptions& options() const { return options_; }

 private:
  int64_t dataset_size_;
  DistributedSamplerOptions options_;
  int64_t epoch_ = 0;
  int64_t num_samples_ = 0;
};

/// Resuming an epoch mid-way on another world size. `old_options` ranks (its num_replicas) each took the
/// first `consumed` indices of their shard for `epoch`, out of the first `planned` they would have taken
/// (the epoch's whole shard, or less under a batch limit). Together they consumed the first consumed x
/// old_replicas positions of the padded shuffle (rank r's k-th index is position r + k x old_replicas).
/// Returns `rank`'s share of the rest, up to planned x old_replicas, dealt round-robin to `num_replicas`
/// ranks and padded by repeating from its start as DistributedSampler pads, so that every rank gets the
/// same count (the same batch count: no rank waits alone on a collective). Empty when nothing is left.
///
/// Throws std::invalid_argument when consumed > planned, planned exceeds the shard, or rank is not in
/// [0, num_replicas).
///
/// Example (2 ranks had done 3 batches of 32 of an epoch; go on with 1):
///   auto rest = reshard_remaining(512, DistributedSamplerOptions(2, 0).shuffle(true).seed(0), /*epoch=*/0,
///                                 /*consumed=*/96, /*planned=*/256, /*num_replicas=*/1, /*rank=*/0);  // 320
std::vector<int64_t> reshard_remaining(int64_t dataset_size, const DistributedSamplerOptions& old_options,
                                       int64_t epoch, int64_t consumed, int64_t planned, int64_t num_replicas,
                                       int64_t rank);

/// One part of an epoch in samples: `replicas` ranks each took `consumed` of the first `planned` (-1: all)
/// samples the part dealt them.
struct ConsumedPart {
  int64_t replicas = 1;
  int64_t consumed = 0;
  int64_t planned = -1;
};

/// The same after several world sizes in one epoch: `parts[0]` ran in the sampler's order (with
/// `old_options`' shuffle and seed; its num_replicas is ignored), each later part over the rest the one
/// before left, dealt as above (round-robin, padded by repeating from its start). Returns `rank`'s share of
/// what the last part left, for `num_replicas` ranks. One part is the function above.
std::vector<int64_t> reshard_remaining(int64_t dataset_size, const DistributedSamplerOptions& old_options,
                                       int64_t epoch, const std::vector<ConsumedPart>& parts,
                                       int64_t num_replicas, int64_t rank);

}  // namespace lockstep::data
