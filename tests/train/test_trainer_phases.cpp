// The Trainer's phases that talk across ranks (src/train/epoch_reduce.h), with real
// ranks: threads over an in-memory store, worlds 1, 2, 3 and 8.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "../comm/thread_group.h"
#include "epoch_reduce.h"

namespace lockstep::train::detail {
namespace {

using lockstep::testing::expect_all_ok;
using lockstep::testing::run_ranks;

class Phases : public ::testing::TestWithParam<int> {};

comm::ProcessGroup make_group(int rank, int world, const c10::intrusive_ptr<c10d::Store>& store) {
  return comm::init_process_group(lockstep::testing::thread_group_options(rank, world, store, "phases"));
}

// Rank r logs "loss" (sync_dist) = r + 1 with weight r + 1, "mine" (rank-local) = 10 r, and "acc" (sync_dist,
// prog_bar) = 0.5 with weight 2. The reduction: weighted means over every rank for sync_dist, rank 0's own
// value for the rest, the same bits on every rank, in the order logged.
TEST_P(Phases, ReduceEpochGivesEveryRankTheSameTable) {
  const int world = GetParam();
  double loss_sum = 0, weight_sum = 0;
  for (int r = 0; r < world; ++r) {
    loss_sum += (r + 1.0) * (r + 1.0);
    weight_sum += r + 1.0;
  }
  auto store = c10::make_intrusive<c10d::HashStore>();
  expect_all_ok(run_ranks(world, [&](int rank) {
    auto group = make_group(rank, world, store);
    LoggedMetrics logged;
    logged.add("loss", rank + 1.0, rank + 1.0, /*sync_dist=*/true, /*prog_bar=*/false);
    logged.add("mine", 10.0 * rank, 1.0, false, false);
    logged.add("acc", 0.5, 2.0, true, true);
    const RankEpoch mine{100 + rank, 10, 1.0 + rank, 0.5 * rank};
    const ReducedEpoch got = reduce_epoch(group, logged, mine, 3);
    if (got.train_samples != 100 * world + world * (world - 1) / 2) throw std::runtime_error("train_samples");
    if (got.val_samples != 10 * world) throw std::runtime_error("val_samples");
    if (got.train_s != world || got.val_s != 0.5 * (world - 1))
      throw std::runtime_error("times: not the slowest rank's");
    if (got.metrics.size() != 3) throw std::runtime_error("metrics: " + std::to_string(got.metrics.size()));
    const auto& [loss, local, acc] = std::tie(got.metrics[0], got.metrics[1], got.metrics[2]);
    if (loss.name != "loss" || local.name != "mine" || acc.name != "acc") throw std::runtime_error("order");
    if (loss.value != loss_sum / weight_sum) throw std::runtime_error("loss " + std::to_string(loss.value));
    if (local.value != 0.0) throw std::runtime_error("mine is not rank 0's: " + std::to_string(local.value));
    if (acc.value != 0.5 || !acc.prog_bar || loss.prog_bar) throw std::runtime_error("acc or prog_bar flags");
    group.shutdown();
  }));
}

// Every rank's phase times reach every rank, by rank, bit for bit.
TEST_P(Phases, GatherPhaseTimesGivesEveryRanksTimes) {
  const int world = GetParam();
  auto store = c10::make_intrusive<c10d::HashStore>();
  const auto times_of = [](int rank) {
    PhaseTimes t;
    for (size_t p = 0; p < kStepPhases; ++p) t.seconds[p] = 0.001 * (rank + 1) * (p + 1) + 1e-13;
    t.batches = 7 + rank;
    return t;
  };
  expect_all_ok(run_ranks(world, [&](int rank) {
    auto group = make_group(rank, world, store);
    const std::vector<PhaseTimes> all = gather_phase_times(group, times_of(rank));
    if (all.size() != static_cast<size_t>(world))
      throw std::runtime_error("size " + std::to_string(all.size()));
    for (int r = 0; r < world; ++r) {
      if (all[r].seconds != times_of(r).seconds || all[r].batches != times_of(r).batches)
        throw std::runtime_error("rank " + std::to_string(r) + "'s times differ");
    }
    group.shutdown();
  }));
}

// Worlds of 2 or more: one rank cannot disagree with itself.
TEST(PhaseErrors, DifferentSyncNamesAreAnErrorOnEveryRank) {
  for (int world : {2, 3, 8}) {
    auto store = c10::make_intrusive<c10d::HashStore>();
    const auto outcomes = run_ranks(world, [&](int rank) {
      auto group = make_group(rank, world, store);
      LoggedMetrics logged;
      logged.add(rank == world - 1 ? "val_loss" : "loss", 1.0, 1.0, true, false);
      reduce_epoch(group, logged, RankEpoch{}, 5);
    });
    for (const auto& o : outcomes) {
      ASSERT_FALSE(o.ok) << "world " << world;
      EXPECT_NE(o.error.find("epoch 5: rank 0 logged the sync_dist values {loss\n} but rank " +
                             std::to_string(world - 1) + " logged {val_loss\n}"),
                std::string::npos)
          << o.error;
    }
  }
}

TEST_P(Phases, BroadcastTableKeepsRankZerosBits) {
  const int world = GetParam();
  auto store = c10::make_intrusive<c10d::HashStore>();
  expect_all_ok(run_ranks(world, [&](int rank) {
    auto group = make_group(rank, world, store);
    std::vector<MetricValue> mine;
    if (rank == 0) {
      mine = {{"a", 0.1 + 0.2, true}, {"b", std::nextafter(1.0, 2.0), false}, {"c", -0.0, false}};
    } else {
      mine = {{"other", 7.0, false}};  // ignored
    }
    const auto got = broadcast_table(group, mine);
    if (got.size() != 3 || got[0].name != "a" || got[2].name != "c") throw std::runtime_error("names");
    if (got[0].value != 0.1 + 0.2 || !got[0].prog_bar) throw std::runtime_error("a");
    if (got[1].value != std::nextafter(1.0, 2.0) || got[1].prog_bar) throw std::runtime_error("b");
    if (!std::signbit(got[2].value)) throw std::runtime_error("c lost its sign");
    group.shutdown();
  }));
}

TEST_P(Phases, AgreementIsAnyRankAndTheMaximum) {
  const int world = GetParam();
  auto store = c10::make_intrusive<c10d::HashStore>();
  expect_all_ok(run_ranks(world, [&](int rank) {
    auto group = make_group(rank, world, store);
    if (any_rank(group, false)) throw std::runtime_error("any_rank(false everywhere)");
    if (!any_rank(group, rank == world - 1)) throw std::runtime_error("any_rank(true on the last rank)");
    if (max_over_ranks(group, rank == 0 ? 0 : 10 + rank) != (world == 1 ? 0 : 10 + world - 1)) {
      throw std::runtime_error("max_over_ranks");
    }
    group.shutdown();
  }));
}

INSTANTIATE_TEST_SUITE_P(Worlds, Phases, ::testing::Values(1, 2, 3, 8),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "world" + std::to_string(info.param);
                         });

}  // namespace
}  // namespace lockstep::train::detail
