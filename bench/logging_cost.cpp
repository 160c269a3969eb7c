// What watching a run costs, piece by piece (issue 26's "logging overhead <= 1% of W1's epoch"): the step
// timer on every batch (sampled or not), one step record and one epoch record (with a 2-rank breakdown)
// written by all three loggers. End-to-end epoch times on this 2-core machine vary by several % from run
// to run (bench/logging_overhead.sh), more than the whole effect; these costs, times how often W1 pays
// them, give the overhead without that noise.
//
//   build/bench/logging_cost [W1_EPOCH_S=0.70] [BATCHES_PER_EPOCH=469] [EVERY=10] [LOG_EVERY=50]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "lockstep/log/make_loggers.h"
#include "lockstep/train/epoch_metrics.h"
#include "lockstep/train/step_breakdown.h"

namespace {

using Clock = std::chrono::steady_clock;
using lockstep::train::StepPhase;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// One training batch's timer calls, as the Trainer makes them.
double timer_seconds_per_batch(int64_t every, int64_t batches) {
  lockstep::train::StepTimer timer(every);
  const auto start = Clock::now();
  for (int64_t b = 0; b < batches; ++b) {
    timer.start_batch(b);
    timer.end(StepPhase::kData);
    timer.end(StepPhase::kForward);
    timer.end(StepPhase::kBackward);
    timer.move(StepPhase::kBackward, StepPhase::kAllreduce, 1e-6);
    timer.end(StepPhase::kOptimizer);
  }
  const double seconds = seconds_since(start) / static_cast<double>(batches);
  if (timer.take().batches != (batches + every - 1) / every) std::abort();
  return seconds;
}

lockstep::train::EpochMetrics epoch_record(int64_t epoch) {
  lockstep::train::EpochMetrics m;
  m.epoch = epoch;
  m.step = 469 * (epoch + 1);
  m.logged = {{"train_loss", 0.5}, {"val_loss", 0.4}, {"val_acc", 0.85}};
  lockstep::train::PhaseTimes rank;
  rank.batches = 47;
  rank.seconds = {0.003, 0.03, 0.03, 0.001, 0.01};
  m.breakdown = lockstep::train::make_breakdown({rank, rank});
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  const double w1_epoch_s = argc > 1 ? std::atof(argv[1]) : 0.70;
  const int64_t batches = argc > 2 ? std::atoll(argv[2]) : 469;
  const int64_t every = argc > 3 ? std::atoll(argv[3]) : 10;
  const int64_t log_every = argc > 4 ? std::atoll(argv[4]) : 50;
  const std::string dir = (std::filesystem::temp_directory_path() / "lockstep_logging_cost").string();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);

  const double per_batch = timer_seconds_per_batch(every, 1000000);
  auto loggers = lockstep::log::make_loggers("tensorboard,csv,jsonl", dir);
  const int steps = 2000, epochs = 200;
  auto start = Clock::now();
  for (int s = 1; s <= steps; ++s) {
    const lockstep::train::StepMetrics step{s, 0, s, 0.5, 1e-3};
    for (const auto& logger : loggers) logger->log_metrics(step.scalars(), s);
  }
  const double per_step_record = seconds_since(start) / steps;
  start = Clock::now();
  for (int e = 0; e < epochs; ++e) {
    const lockstep::train::EpochMetrics m = epoch_record(e);
    for (const auto& logger : loggers) logger->log_metrics(m.scalars(), m.step);
  }
  const double per_epoch_record = seconds_since(start) / epochs;
  std::filesystem::remove_all(dir);

  const double per_epoch = per_batch * static_cast<double>(batches) +
                           per_step_record * static_cast<double>(batches / log_every) + per_epoch_record;
  std::printf("step timer, every %lld-th batch sampled: %.1f ns a batch (mean over sampled and not)\n",
              static_cast<long long>(every), per_batch * 1e9);
  std::printf("one step record, tensorboard+csv+jsonl: %.1f us; one epoch record (%zu scalars): %.1f us\n",
              per_step_record * 1e6, epoch_record(0).scalars().size(), per_epoch_record * 1e6);
  std::printf("W1 epoch (%lld batches, a step record every %lld): %.3f ms of logging = %.4f%% of %.3f s\n",
              static_cast<long long>(batches), static_cast<long long>(log_every), per_epoch * 1e3,
              100.0 * per_epoch / w1_epoch_s, w1_epoch_s);
  return 0;
}
