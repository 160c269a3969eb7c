#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace lockstep::train {

/// The parts of a training step that the Trainer times on sampled batches.
enum class StepPhase {
  kData,       ///< the loader's next batch, moved to the device
  kForward,    ///< training_step: forward and loss (its value read back)
  kBackward,   ///< backward, less the exposed all-reduce
  kAllreduce,  ///< communication the computation did not hide: the gradient synchronisation's (launching
               ///< or running collectives in backward's thread, the wait after the last gradient) and,
               ///< under fsdp, the parameter gathers' waits
  kOptimizer,  ///< clipping, the optimizer step (with ZeRO's gathers), zero_grad
};
constexpr size_t kStepPhases = 5;
/// "data", "forward", "backward", "allreduce", "optimizer".
const char* to_string(StepPhase phase);

/// One rank's seconds per phase over the sampled batches of an epoch.
struct PhaseTimes {
  std::array<double, kStepPhases> seconds{};
  int64_t batches = 0;
};

/// A rank is a straggler when its busy time per step exceeds the others' median by more than this (%).
constexpr double kStragglerPct = 20.0;

/*
 * An epoch's step breakdown across ranks: each rank's mean milliseconds per sampled batch and phase.
 *
 * Finding the slow rank: in synchronous training every rank's step takes the same wall time, because the
 * fast ranks wait in the all-reduce for the slow one. So ranks are compared by their busy time (the step
 * less that wait: data, forward, backward and optimizer), and the slowest one's excess is measured against
 * the median busy time of the other ranks (with 2 ranks, the other one), in %.
 */
struct EpochBreakdown {
  std::vector<std::array<double, kStepPhases>> rank_ms;  ///< [rank][phase], per sampled batch
  std::vector<double> step_ms;                           ///< [rank]: all phases
  std::vector<double> busy_ms;                           ///< [rank]: all but the all-reduce wait
  int64_t batches = 0;                                   ///< batches sampled per rank
  int slowest_rank = 0;
  double slowest_excess_pct = 0.0;

  bool has_straggler() const { return rank_ms.size() > 1 && slowest_excess_pct > kStragglerPct; }
  /// The printed line, e.g. "epoch 2: rank 1 is a straggler: 31.4 ms busy a step, 52% over the other
  /// ranks' median (forward 20.1, backward 9.8 ms)".
  std::string straggler_line(int64_t epoch) const;
  /// The logged scalars: breakdown/rank_R/{data,forward,backward,allreduce,optimizer,step}_ms,
  /// breakdown/slowest_rank, breakdown/slowest_excess_pct.
  std::vector<std::pair<std::string, double>> scalars() const;
  /// One JSON object (no newline): {"batches", "slowest_rank", "slowest_excess_pct", "ranks": [{phase_ms
  /// ..., "step_ms"}, ...]}.
  std::string to_json() const;
};

/// The breakdown of per-rank times (index = rank). Ranks that sampled no batch count as zeros.
EpochBreakdown make_breakdown(const std::vector<PhaseTimes>& ranks);

/// Times the phases of every n-th training batch. A sampled batch reads the clock at each phase boundary;
/// with `synchronize` (a GPU) it first waits for the device, so that queued kernels count in their phase —
/// which costs the overlap of that one batch, so sample sparsely there. Others cost nothing.
class StepTimer {
 public:
  using Synchronize = void (*)(const void* context);
  /// `every_n_batches` 0: off.
  explicit StepTimer(int64_t every_n_batches = 0, Synchronize synchronize = nullptr,
                     const void* context = nullptr);

  /// Starts batch `batch` of the epoch (0-based): sampled when batch % n == 0.
  void start_batch(int64_t batch);
  bool sampling() const { return sampling_; }
  /// The time since the previous boundary goes to `phase` (on a sampled batch).
  void end(StepPhase phase);
  /// Moves `seconds` from `from` to `to` (the exposed all-reduce measured inside backward).
  void move(StepPhase from, StepPhase to, double seconds);
  /// The epoch's times, and a fresh start for the next epoch.
  PhaseTimes take();

 private:
  using Clock = std::chrono::steady_clock;
  int64_t every_;
  Synchronize synchronize_;
  const void* context_;
  bool sampling_ = false;
  Clock::time_point mark_;
  PhaseTimes times_;
};

namespace detail {

/// Test and fault-injection seam: a lag added to every clock reading of the StepTimers on the calling
/// thread (thread-local, zero unless a test or LOCKSTEP_FAULT=R:S:lagMS sets it; never shrink it while a
/// timer of the thread is timing a batch). Growing
/// it by D inside a phase makes that phase, and so that rank, measure exactly D slower, with no sleep and
/// no real delay: tests make a straggler with it, so that naming it compares no sleep with a clock.
/// Example: `detail::step_clock_lag() += std::chrono::seconds(1);` in rank 1's training_step.
std::chrono::nanoseconds& step_clock_lag();

}  // namespace detail

}  // namespace lockstep::train
