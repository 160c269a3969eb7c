#pragma once

// Process groups for ranks that run as threads over one in-memory store (see thread_ranks.h), shared by
// the comm and ddp tests.

#include <gtest/gtest.h>

#include <torch/utils.h>

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "lockstep/comm/process_group.h"
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

/// Every rank finished without throwing (each failure reported with its rank and message).
inline void expect_all_ok(const std::vector<RankOutcome>& outcomes) {
  for (size_t r = 0; r < outcomes.size(); ++r) {
    EXPECT_TRUE(outcomes[r].ok) << "rank " << r << ": " << outcomes[r].error;
  }
}

}  // namespace lockstep::testing
