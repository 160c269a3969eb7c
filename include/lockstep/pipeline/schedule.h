// Pipeline schedules: the order in which each stage of a pipeline runs its micro-batches' passes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lockstep::pipeline {

/// torch.distributed.pipelining's ScheduleGPipe and Schedule1F1B.
enum class Schedule { kGPipe, k1F1B };

/// "gpipe" or "1f1b".
const char* to_string(Schedule schedule);
/// The schedule named `text` ("gpipe", "1f1b"); throws std::invalid_argument naming it and the choices.
Schedule schedule_from_string(const std::string& text);

/// One pass of one micro-batch on one stage.
struct Action {
  enum class Pass { kForward, kBackward };
  Pass pass = Pass::kForward;
  int micro_batch = 0;
  bool operator==(const Action& other) const {
    return pass == other.pass && micro_batch == other.micro_batch;
  }
};

/// The order in which stage `stage` (0 .. stages-1) runs the forward and backward passes of `micro_batches`
/// micro-batches:
/// - GPipe: every forward (0 .. M-1), then every backward (0 .. M-1); a stage holds the activations of all
///   M micro-batches at once.
/// - 1F1B (PipeDream-flush, as Megatron-LM and PyTorch's Schedule1F1B run it): min(M, P - s) forwards to
///   fill the pipeline, then one backward and one forward in turn while forwards remain, then the
///   remaining backwards; stage s holds at most P - s micro-batches' activations, whatever M.
/// Both take (M + P - 1) forward and backward times (simulate): the bubble is (P - 1) / (M + P - 1).
/// Throws std::invalid_argument naming the bad value when stages < 1, micro_batches < 1 or `stage` is not
/// one of the stages.
std::vector<Action> stage_actions(Schedule schedule, int stages, int micro_batches, int stage);

/// What running a schedule takes, simulated: a forward lasts one tick and a backward `backward_ticks`; each
/// stage runs its stage_actions in order, one at a time; a forward waits for the previous stage's forward
/// of its micro-batch, a backward for its own forward and the next stage's backward of its micro-batch.
struct Timeline {
  int64_t ticks = 0;             ///< until the last pass of every stage has ended
  double bubble_fraction = 0.0;  ///< the stages' idle ticks over stages × ticks
  /// By stage: the most micro-batches whose forward had started and whose backward had not ended, at once.
  std::vector<int> peak_activations;
};

/// Throws std::logic_error naming the waiting stages if they would wait on each other forever, and
/// std::invalid_argument as stage_actions (or naming backward_ticks when it is < 1).
Timeline simulate(Schedule schedule, int stages, int micro_batches, int backward_ticks = 1);

}  // namespace lockstep::pipeline
