#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lockstep/comm/process_group.h"
#include "lockstep/train/step_breakdown.h"
#include "lockstep/train/train_module.h"

namespace lockstep::train::detail {

/*
 * An epoch's metrics across ranks.
 *
 * Each rank brings what it logged (LoggedMetrics: a weighted sum and a weight per name) and its own
 * counts and times. The sync_dist names must be the same on every rank (checked first, by gathering
 * them: a mismatch is an error on every rank instead of an all-reduce of different lengths). Then one
 * all-reduce adds the sample counts and the sync_dist sums, and one takes the slowest rank's times. Each
 * rank turns the sums into means (a value logged without sync_dist is the rank's own mean), and rank 0's
 * table is broadcast — names once as text, values as a float64 tensor, bit for bit — so that every
 * rank's callbacks decide from the same numbers.
 */

/// One rank's part of an epoch.
struct RankEpoch {
  int64_t train_samples = 0;
  int64_t val_samples = 0;
  double train_s = 0.0;
  double val_s = 0.0;
  double peak_rss_mb = 0.0;
  double model_state_mb = 0.0;
  double peak_cuda_mb = 0.0;  // 0 on the CPU
};

/// One logged value as every rank sees it.
struct MetricValue {
  std::string name;
  double value = 0.0;
  bool prog_bar = false;
};

/// The epoch over all ranks: counts added, times of the slowest rank, rank 0's table in the order logged.
struct ReducedEpoch {
  int64_t train_samples = 0;
  int64_t val_samples = 0;
  double train_s = 0.0;  // the slowest rank's, as val_s
  double val_s = 0.0;
  double peak_rss_mb = 0.0;  // the largest over the ranks, as model_state_mb and peak_cuda_mb
  double model_state_mb = 0.0;
  double peak_cuda_mb = 0.0;
  std::vector<MetricValue> metrics;
};

/// Collective. Throws std::runtime_error on every rank, naming `epoch` and both sets of names, when ranks
/// logged different sync_dist names.
ReducedEpoch reduce_epoch(comm::ProcessGroup& group, const LoggedMetrics& logged, const RankEpoch& mine,
                          int64_t epoch);

/// Rank 0's `table` on every rank (the others' argument is ignored). Collective.
std::vector<MetricValue> broadcast_table(comm::ProcessGroup& group, const std::vector<MetricValue>& table);

/// Every rank's PhaseTimes, by rank (one all-gather of 6 float64). Collective.
std::vector<PhaseTimes> gather_phase_times(comm::ProcessGroup& group, const PhaseTimes& mine);

/// Whether `mine` is true on any rank (one 8-byte all-reduce). Collective.
bool any_rank(comm::ProcessGroup& group, bool mine);
/// The largest `mine` over the ranks. Collective.
int64_t max_over_ranks(comm::ProcessGroup& group, int64_t mine);

}  // namespace lockstep::train::detail
