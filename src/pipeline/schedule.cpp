// Pipeline schedules: see include/lockstep/pipeline/schedule.h.
#include "lockstep/pipeline/schedule.h"

#include <algorithm>
#include <stdexcept>

namespace lockstep::pipeline {
namespace {

void check_shape(int stages, int micro_batches) {
  if (stages < 1) throw std::invalid_argument("pipeline stages must be >= 1, got " + std::to_string(stages));
  if (micro_batches < 1) {
    throw std::invalid_argument("micro_batches must be >= 1, got " + std::to_string(micro_batches) +
                                ": a pipeline splits each batch into at least one micro-batch");
  }
}

Action forward(int m) {
  return {Action::Pass::kForward, m};
}
Action backward(int m) {
  return {Action::Pass::kBackward, m};
}

}  // namespace

const char* to_string(Schedule schedule) {
  return schedule == Schedule::kGPipe ? "gpipe" : "1f1b";
}

Schedule schedule_from_string(const std::string& text) {
  if (text == "gpipe") return Schedule::kGPipe;
  if (text == "1f1b") return Schedule::k1F1B;
  throw std::invalid_argument("unknown pipeline schedule '" + text + "': use gpipe or 1f1b");
}

std::vector<Action> stage_actions(Schedule schedule, int stages, int micro_batches, int stage) {
  check_shape(stages, micro_batches);
  if (stage < 0 || stage >= stages) {
    throw std::invalid_argument("stage " + std::to_string(stage) + " is not one of the " +
                                std::to_string(stages) + " stages (0 to " + std::to_string(stages - 1) + ")");
  }
  std::vector<Action> actions;
  if (schedule == Schedule::kGPipe) {
    for (int m = 0; m < micro_batches; ++m) actions.push_back(forward(m));
    for (int m = 0; m < micro_batches; ++m) actions.push_back(backward(m));
    return actions;
  }
  const int warmup = std::min(micro_batches, stages - stage);
  int forwards = 0;
  int backwards = 0;
  while (forwards < warmup) actions.push_back(forward(forwards++));
  while (forwards < micro_batches) {
    actions.push_back(backward(backwards++));
    actions.push_back(forward(forwards++));
  }
  while (backwards < micro_batches) actions.push_back(backward(backwards++));
  return actions;
}

Timeline simulate(Schedule schedule, int stages, int micro_batches, int backward_ticks) {
  check_shape(stages, micro_batches);
  if (backward_ticks < 1)
    throw std::invalid_argument("backward_ticks must be >= 1, got " + std::to_string(backward_ticks));
  const auto p = static_cast<size_t>(stages);
  const auto m = static_cast<size_t>(micro_batches);
  std::vector<std::vector<Action>> plans(p);
  for (int s = 0; s < stages; ++s)
    plans[static_cast<size_t>(s)] = stage_actions(schedule, stages, micro_batches, s);
  constexpr int64_t kNotYet = -1;
  // When each pass ends, by stage and micro-batch (kNotYet: not started).
  std::vector<std::vector<int64_t>> forward_end(p, std::vector<int64_t>(m, kNotYet));
  std::vector<std::vector<int64_t>> backward_end(p, std::vector<int64_t>(m, kNotYet));
  std::vector<size_t> next(p, 0);
  std::vector<int64_t> free_at(p, 0);
  std::vector<int> held(p, 0);
  Timeline timeline;
  timeline.peak_activations.assign(p, 0);
  int64_t busy = 0;
  const auto ended = [](int64_t end, int64_t now) { return end != kNotYet && end <= now; };
  for (int64_t now = 0;; ++now) {
    // A backward that ends now frees its micro-batch's activations before anything starts now.
    for (size_t s = 0; s < p; ++s)
      for (size_t mb = 0; mb < m; ++mb)
        if (backward_end[s][mb] == now) --held[s];
    bool all_done = true;
    bool running = false;
    for (size_t s = 0; s < p; ++s) {
      if (free_at[s] > now) {
        running = true;
        all_done = false;
        continue;
      }
      if (next[s] == plans[s].size()) continue;
      all_done = false;
      const Action action = plans[s][next[s]];
      const auto mb = static_cast<size_t>(action.micro_batch);
      const bool forward_pass = action.pass == Action::Pass::kForward;
      const bool ready = forward_pass ? (s == 0 || ended(forward_end[s - 1][mb], now))
                                      : (ended(forward_end[s][mb], now) &&
                                         (s + 1 == p || ended(backward_end[s + 1][mb], now)));
      if (!ready) continue;
      const int64_t duration = forward_pass ? 1 : backward_ticks;
      (forward_pass ? forward_end : backward_end)[s][mb] = now + duration;
      free_at[s] = now + duration;
      busy += duration;
      running = true;
      ++next[s];
      if (forward_pass) timeline.peak_activations[s] = std::max(timeline.peak_activations[s], ++held[s]);
    }
    if (all_done) {
      timeline.ticks = now;
      break;
    }
    if (!running) {
      std::string waiting;
      for (size_t s = 0; s < p; ++s)
        if (next[s] < plans[s].size()) waiting += (waiting.empty() ? "" : ", ") + std::to_string(s);
      throw std::logic_error(std::string("pipeline schedule ") + to_string(schedule) + " deadlocks at tick " +
                             std::to_string(now) + ": stages " + waiting + " wait on each other");
    }
  }
  timeline.bubble_fraction =
      1.0 - static_cast<double>(busy) / (static_cast<double>(stages) * static_cast<double>(timeline.ticks));
  return timeline;
}

}  // namespace lockstep::pipeline
