// Where a pipeline cuts a model (balanced_cut, user_cut): every cut checked against all cuts by brute force.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <vector>

#include "../support/error_of.h"
#include "lockstep/pipeline/partition.h"

namespace lockstep::pipeline {
namespace {

// The costliest group of the cut `bounds`.
int64_t worst_group(const std::vector<int64_t>& cost, const std::vector<size_t>& bounds) {
  int64_t worst = 0;
  for (size_t s = 0; s + 1 < bounds.size(); ++s) {
    int64_t sum = 0;
    for (size_t k = bounds[s]; k < bounds[s + 1]; ++k) sum += cost[k];
    worst = std::max(worst, sum);
  }
  return worst;
}

// The least worst_group over every cut of `cost` into `stages` non-empty groups, by enumeration.
int64_t best_by_enumeration(const std::vector<int64_t>& cost, int stages) {
  int64_t best = INT64_MAX;
  std::vector<size_t> bounds{0};
  std::function<void()> extend = [&] {
    if (bounds.size() == static_cast<size_t>(stages)) {
      bounds.push_back(cost.size());
      best = std::min(best, worst_group(cost, bounds));
      bounds.pop_back();
      return;
    }
    for (size_t next = bounds.back() + 1; next < cost.size(); ++next) {
      bounds.push_back(next);
      extend();
      bounds.pop_back();
    }
  };
  extend();
  return best;
}

TEST(BalancedCut, IsAsGoodAsTheBestOfAllCutsAndEveryStageGetsACall) {
  const std::vector<std::vector<int64_t>> costs = {
      {5}, {1, 1, 1, 1}, {9, 1, 1, 1, 1, 9}, {3, 7, 2, 8, 1, 1, 4}, {100, 1, 1, 1, 1, 1, 1, 100}, {0, 0, 0}};
  for (const auto& cost : costs) {
    for (int stages = 1; stages <= static_cast<int>(cost.size()); ++stages) {
      const std::vector<size_t> bounds = balanced_cut(cost, stages);
      ASSERT_EQ(bounds.size(), static_cast<size_t>(stages) + 1);
      EXPECT_EQ(bounds.front(), 0u);
      EXPECT_EQ(bounds.back(), cost.size());
      for (size_t s = 0; s + 1 < bounds.size(); ++s) EXPECT_LT(bounds[s], bounds[s + 1]);
      EXPECT_EQ(worst_group(cost, bounds), best_by_enumeration(cost, stages))
          << "stages " << stages << ", " << cost.size() << " calls";
    }
  }
}

// Gpt's calls as lockstep cuts them by parameters: embeddings, 4 blocks, ln_f, the tied head.
TEST(BalancedCut, AmongEqualCutsTheLaterStagesTakeFewerCalls) {
  EXPECT_EQ(balanced_cut({1, 1, 1}, 2), (std::vector<size_t>{0, 2, 3}));
  EXPECT_EQ(balanced_cut({10, 4, 4, 4, 4, 1, 10}, 2), (std::vector<size_t>{0, 3, 7}));
}

TEST(BalancedCut, RefusesMoreStagesThanCalls) {
  const std::string error = testing::invalid_argument_of([] { balanced_cut({1, 2}, 3); });
  EXPECT_NE(error.find("3 stages"), std::string::npos) << error;
  EXPECT_NE(error.find("makes 2"), std::string::npos) << error;
  EXPECT_NE(testing::invalid_argument_of([] { balanced_cut({1}, 0); }).find("got 0"), std::string::npos);
}

TEST(UserCut, GivesTheBoundsOrNamesTheBadValue) {
  EXPECT_EQ(user_cut({2, 3}, 5, 3), (std::vector<size_t>{0, 2, 3, 5}));
  EXPECT_EQ(user_cut({}, 4, 1), (std::vector<size_t>{0, 4}));
  EXPECT_NE(testing::invalid_argument_of([] { user_cut({2}, 5, 3); }).find("got 1"), std::string::npos);
  EXPECT_NE(testing::invalid_argument_of([] {
              user_cut({3, 3}, 5, 3);
            }).find("cut value 3 after 3"),
            std::string::npos);
  EXPECT_NE(testing::invalid_argument_of([] { user_cut({0}, 5, 2); }).find("cut value 0"), std::string::npos);
  EXPECT_NE(testing::invalid_argument_of([] { user_cut({5}, 5, 2); }).find("cut value 5"), std::string::npos);
}

}  // namespace
}  // namespace lockstep::pipeline
