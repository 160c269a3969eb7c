#pragma once

// Runs N ranks as threads (STYLE.md: gloo's habit) and collects each rank's failure, so a test can
// assert on every rank's outcome. Every rank runs to completion; nothing here waits without a bound
// (the process groups under test carry their own timeouts).

#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace lockstep::testing {

struct RankOutcome {
  bool ok = true;
  std::string error;  // what() of the exception a failed rank threw
};

inline std::vector<RankOutcome> run_ranks(int world_size, const std::function<void(int rank)>& body) {
  std::vector<RankOutcome> outcomes(world_size);
  std::vector<std::thread> threads;
  threads.reserve(world_size);
  for (int rank = 0; rank < world_size; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        body(rank);
      } catch (const std::exception& e) {
        outcomes[rank] = {false, e.what()};
      }
    });
  }
  for (auto& t : threads) t.join();
  return outcomes;
}

}  // namespace lockstep::testing
