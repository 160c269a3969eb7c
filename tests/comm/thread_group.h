#pragma once

// Process groups for ranks that run as threads over one in-memory store (see thread_ranks.h), shared by
// the comm and ddp tests.

#include <gtest/gtest.h>

#include <torch/utils.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "lockstep/comm/process_group.h"
#include "lockstep/env/environment.h"
#include "thread_ranks.h"

namespace lockstep::testing {

/// The process-wide default generator seeded to `seed` and held for the caller until the returned lock goes:
/// ranks that run as threads build their models from it one at a time, each from the seed it asked for.
[[nodiscard]] inline std::unique_lock<std::mutex> lock_default_generator(uint64_t seed) {
  static std::mutex mutex;
  std::unique_lock<std::mutex> lock(mutex);
  torch::manual_seed(seed);
  return lock;
}

/// Options for rank `rank` of `world` over `store`: 20 s timeouts, one Gloo thread.
inline comm::ProcessGroupOptions thread_group_options(int rank, int world,
                                                      const c10::intrusive_ptr<c10d::Store>& store,
                                                      const std::string& run_id) {
  using namespace std::chrono_literals;
  return comm::ProcessGroupOptions(rank, world)
      .store(store)
      .run_id(run_id)
      .rendezvous_timeout(20s)
      .collective_timeout(20s)
      .gloo_threads(1);
}

/// Rank `rank` of `world` thread ranks as a one-node launcher describes it (rank = local rank).
inline env::Environment thread_environment(int rank, int world) {
  env::Environment environment;
  environment.rank = rank;
  environment.local_rank = rank;
  environment.world_size = world;
  environment.local_world_size = world;
  return environment;
}

/// Every rank finished without throwing (each failure reported with its rank and message).
inline void expect_all_ok(const std::vector<RankOutcome>& outcomes) {
  for (size_t r = 0; r < outcomes.size(); ++r) {
    EXPECT_TRUE(outcomes[r].ok) << "rank " << r << ": " << outcomes[r].error;
  }
}

/// Runs `body(rank, group)` on `world` ranks as threads, each with its own group (thread_group_options,
/// the default backend) over one in-memory store, shut down after `body`; expects every rank to finish.
inline void run_group_ranks(int world, const std::string& run_id,
                            const std::function<void(int, comm::ProcessGroup&)>& body) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  expect_all_ok(run_ranks(world, [&](int rank) {
    auto group = comm::init_process_group(thread_group_options(rank, world, store, run_id));
    body(rank, group);
    group.shutdown();
  }));
}

}  // namespace lockstep::testing
