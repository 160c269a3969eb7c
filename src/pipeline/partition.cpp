// Where a pipeline cuts a model: see include/lockstep/pipeline/partition.h.
#include "lockstep/pipeline/partition.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

namespace lockstep::pipeline {

namespace {

void check_counts(size_t calls, int stages) {
  if (stages < 1) throw std::invalid_argument("pipeline: stages must be >= 1, got " + std::to_string(stages));
  if (calls < static_cast<size_t>(stages)) {
    throw std::invalid_argument("pipeline: " + std::to_string(stages) +
                                " stages need at least as many stage " +
                                "calls in the model's forward, but it makes " + std::to_string(calls) +
                                ": choose pipeline_parallel <= " + std::to_string(calls));
  }
}

}  // namespace

std::vector<size_t> balanced_cut(const std::vector<int64_t>& cost, int stages) {
  const size_t n = cost.size();
  check_counts(n, stages);
  const auto groups = static_cast<size_t>(stages);
  std::vector<int64_t> prefix(n + 1, 0);
  for (size_t k = 0; k < n; ++k) prefix[k + 1] = prefix[k] + cost[k];
  // best[p][k]: the least possible cost of the costliest of p groups covering calls [0, k); from[p][k]: where
  // the last of them starts in such a cut (the latest start that achieves it, so earlier stages end early).
  constexpr int64_t kNone = std::numeric_limits<int64_t>::max();
  std::vector<std::vector<int64_t>> best(groups + 1, std::vector<int64_t>(n + 1, kNone));
  std::vector<std::vector<size_t>> from(groups + 1, std::vector<size_t>(n + 1, 0));
  best[0][0] = 0;
  for (size_t p = 1; p <= groups; ++p) {
    for (size_t k = p; k <= n; ++k) {
      for (size_t j = p - 1; j < k; ++j) {
        if (best[p - 1][j] == kNone) continue;
        const int64_t worst = std::max(best[p - 1][j], prefix[k] - prefix[j]);
        if (worst <= best[p][k]) {
          best[p][k] = worst;
          from[p][k] = j;
        }
      }
    }
  }
  std::vector<size_t> bounds(groups + 1, n);
  for (size_t p = groups; p > 0; --p) bounds[p - 1] = from[p][bounds[p]];
  return bounds;
}

std::vector<size_t> user_cut(const std::vector<size_t>& first_calls, size_t calls, int stages) {
  check_counts(calls, stages);
  if (first_calls.size() + 1 != static_cast<size_t>(stages)) {
    throw std::invalid_argument("pipeline: a cut of " + std::to_string(stages) +
                                " stages names the first call of " + "stages 1 .. " +
                                std::to_string(stages - 1) + " (" + std::to_string(stages - 1) +
                                " values), got " + std::to_string(first_calls.size()));
  }
  std::vector<size_t> bounds{0};
  for (size_t first : first_calls) {
    if (first <= bounds.back() || first >= calls) {
      throw std::invalid_argument(
          "pipeline: cut value " + std::to_string(first) + " after " + std::to_string(bounds.back()) +
          ": each stage's first call must be above the " + "previous one's and below the forward's " +
          std::to_string(calls) + " calls");
    }
    bounds.push_back(first);
  }
  bounds.push_back(calls);
  return bounds;
}

}  // namespace lockstep::pipeline
