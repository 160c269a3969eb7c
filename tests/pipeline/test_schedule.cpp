// Pipeline schedules: each stage's order of passes (GPipe, 1F1B as PyTorch's Schedule1F1B writes it), the
// activations each holds, and the bubble (P - 1) / (M + P - 1), by simulation.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "../support/error_of.h"
#include "lockstep/pipeline/schedule.h"

namespace lockstep::pipeline {
namespace {

// "F0 F1 B0 ..." for a stage's actions.
std::string text(const std::vector<Action>& actions) {
  std::string out;
  for (const Action& action : actions) {
    if (!out.empty()) out += ' ';
    out += (action.pass == Action::Pass::kForward ? "F" : "B") + std::to_string(action.micro_batch);
  }
  return out;
}

using testing::invalid_argument_of;

TEST(PipelineSchedule, OneFOneBFillsThenAlternatesAsPyTorchsSchedule1F1B) {
  // P = 4, M = 8: stage s runs P - s forwards first (torch: warmup_chunks = min(M, P - s)).
  EXPECT_EQ(text(stage_actions(Schedule::k1F1B, 4, 8, 0)), "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");
  EXPECT_EQ(text(stage_actions(Schedule::k1F1B, 4, 8, 2)), "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7");
  EXPECT_EQ(text(stage_actions(Schedule::k1F1B, 4, 8, 3)), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7");
  EXPECT_EQ(text(stage_actions(Schedule::k1F1B, 4, 2, 0)), "F0 F1 B0 B1");  // fewer micro-batches than stages
  EXPECT_EQ(text(stage_actions(Schedule::kGPipe, 2, 3, 1)), "F0 F1 F2 B0 B1 B2");
}

TEST(PipelineSchedule, EveryStageRunsEachPassOnceForwardFirst) {
  for (const Schedule schedule : {Schedule::kGPipe, Schedule::k1F1B}) {
    for (int stages = 1; stages <= 8; ++stages) {
      for (int micro = 1; micro <= 12; ++micro) {
        for (int s = 0; s < stages; ++s) {
          const std::vector<Action> actions = stage_actions(schedule, stages, micro, s);
          ASSERT_EQ(actions.size(), static_cast<size_t>(2 * micro));
          std::vector<int> forward_at(static_cast<size_t>(micro), -1);
          std::vector<int> backward_at(static_cast<size_t>(micro), -1);
          for (int i = 0; i < static_cast<int>(actions.size()); ++i) {
            const Action& a = actions[static_cast<size_t>(i)];
            auto& at = a.pass == Action::Pass::kForward ? forward_at : backward_at;
            EXPECT_EQ(at.at(static_cast<size_t>(a.micro_batch)), -1) << "a pass twice";
            at[static_cast<size_t>(a.micro_batch)] = i;
          }
          for (int m = 0; m < micro; ++m)
            EXPECT_LT(forward_at[static_cast<size_t>(m)], backward_at[static_cast<size_t>(m)]);
        }
      }
    }
  }
}

// Both schedules take (M + P - 1) forward and backward times, so the bubble is (P - 1) / (M + P - 1), with a
// backward as long as a forward and twice as long; GPipe holds M micro-batches' activations on every stage,
// 1F1B at most P - s on stage s.
TEST(PipelineSchedule, BubbleIsTheFormulasAndOneFOneBHoldsAtMostPMicroBatches) {
  for (const int backward_ticks : {1, 2}) {
    for (int stages = 1; stages <= 8; ++stages) {
      for (int micro = 1; micro <= 16; ++micro) {
        const double formula = static_cast<double>(stages - 1) / (micro + stages - 1);
        for (const Schedule schedule : {Schedule::kGPipe, Schedule::k1F1B}) {
          const Timeline t = simulate(schedule, stages, micro, backward_ticks);
          const std::string where = std::string(to_string(schedule)) + " P=" + std::to_string(stages) +
                                    " M=" + std::to_string(micro) + " b=" + std::to_string(backward_ticks);
          EXPECT_EQ(t.ticks, static_cast<int64_t>(micro + stages - 1) * (1 + backward_ticks)) << where;
          EXPECT_NEAR(t.bubble_fraction, formula, 1e-12) << where;
          for (int s = 0; s < stages; ++s) {
            const int expected = schedule == Schedule::kGPipe ? micro : std::min(micro, stages - s);
            EXPECT_EQ(t.peak_activations.at(static_cast<size_t>(s)), expected) << where << " stage " << s;
          }
        }
      }
    }
  }
}

TEST(PipelineSchedule, BadShapesAndNamesAreRefusedNamingThem) {
  EXPECT_EQ(invalid_argument_of([] { stage_actions(Schedule::kGPipe, 0, 4, 0); }),
            "pipeline stages must be >= 1, got 0");
  EXPECT_NE(invalid_argument_of([] {
              stage_actions(Schedule::k1F1B, 2, 0, 0);
            }).find("micro_batches must be >= 1, got 0"),
            std::string::npos);
  EXPECT_EQ(invalid_argument_of([] { stage_actions(Schedule::k1F1B, 2, 4, 2); }),
            "stage 2 is not one of the 2 stages (0 to 1)");
  EXPECT_EQ(invalid_argument_of([] { simulate(Schedule::k1F1B, 2, 4, 0); }),
            "backward_ticks must be >= 1, got 0");
  EXPECT_EQ(invalid_argument_of([] { schedule_from_string("interleaved"); }),
            "unknown pipeline schedule 'interleaved': use gpipe or 1f1b");
  EXPECT_EQ(schedule_from_string(to_string(Schedule::k1F1B)), Schedule::k1F1B);
  EXPECT_EQ(schedule_from_string(to_string(Schedule::kGPipe)), Schedule::kGPipe);
}

}  // namespace
}  // namespace lockstep::pipeline
