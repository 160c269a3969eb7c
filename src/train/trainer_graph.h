#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "lockstep/comm/process_group.h"
#include "lockstep/data/shard_loader.h"
#include "lockstep/train/checkpoint.h"
#include "lockstep/train/cuda_graph.h"
#include "lockstep/train/precision.h"
#include "lockstep/train/train_module.h"
#include "lockstep/train/trainer_options.h"

namespace torch::optim {
class Optimizer;
}

namespace lockstep::train {

/// The Trainer's step captured in a CUDA graph and replayed (TrainerOptions::cuda_graphs; the algorithm is
/// described at the top of trainer_graph.cpp): the graph, its warm-up, its static input and loss, and what
/// training_step logged while captured. Trainer::Run holds one and decides around it what a step of the
/// run is (the step state, the learning rate, the position); this class runs the step on the device and
/// reads it back.
///
/// In the order the Run calls it: prepare() before set-up, turn_on() once the group, the optimizer and the
/// data exist, then per batch takes() and run() and loss(); wait_for_replays() at an epoch's end,
/// flush_logs() before the logged table is read, release() at the fit's end. Without cuda_graphs (or
/// refused) only prepare() and turn_on() do anything.
class TrainerGraph {
 public:
  /// Eager steps before the capture: they create the optimizer's state and let cuBLAS and NCCL set
  /// themselves up.
  static constexpr int64_t kWarmupSteps = 3;

  /// What the graph's step runs on: the Run's, all living as long as it.
  struct Parts {
    comm::ProcessGroup* group = nullptr;
    torch::optim::Optimizer* optimizer = nullptr;  // an optim::GraphCapturable (turn_on checks)
    data::detail::AnyShardLoader* loader = nullptr;
    TrainModuleBase* module = nullptr;
    const TrainPosition* position = nullptr;  // its step: named in errors
    detail::StepState* state = nullptr;       // log()'s place while capturing; its epoch: named in errors
  };

  /// What one captured step runs from the static input (`batch`, of the loader's type): DDP's
  /// before_forward, training_step, backward and the optimizer's step; returns the loss.
  using Step = std::function<at::Tensor(const void* batch)>;

  /// Before set-up, with cuda_graphs: when the options and `device` allow a capture, a StepGraph makes
  /// its stream current from here on (before DDP holds the parameters' gradient accumulators: autograd
  /// runs each on the stream current when it was made; the default stream inside a capture is an error).
  /// Nothing without cuda_graphs.
  void prepare(const TrainerOptions& options, Precision precision, const c10::Device& device);
  /// With cuda_graphs, once set up: why the step is not captured ("" when it is, from the warm-up's end
  /// on): prepare()'s reasons, then the resolved backend, the optimizer and the batch type. The same on
  /// every rank.
  std::string turn_on(const Parts& parts);
  /// Whether the step is captured (turn_on found no reason against it).
  bool on() const { return on_; }

  /// Whether `batch` runs as the graph's step (captured now, or replayed); false: eagerly (no graph, the
  /// warm-up, or a batch of other shapes, for which the gradients a replay left are released first).
  bool takes(const data::detail::AnyBatch& batch);
  /// Batch `b`, taken: captures `step` (the first time) and replays it, or copies into the static input
  /// and replays; then adds what training_step logged, on the device.
  void run(const data::detail::AnyBatch& batch, int64_t b, const Step& step);
  /// The last loss read on the host (NaN before the first); read now when `read` (at the step records,
  /// on every rank alike), waiting for the replays. Throws, as flush_logs does, when the replays' loss is
  /// not finite.
  double loss(bool read);

  /// Waits for the replays queued so far, at most the collective timeout; throws naming this rank and
  /// the step when they have not finished (a peer stopped: see trainer_graph.cpp). Nothing when off.
  void wait_for_replays() const;
  /// What the replays logged since the last call, added to the module's logged table (a read of the
  /// device: at epoch ends and checkpoints). Throws, as train_batch does, when the loss summed there is
  /// not finite. Nothing without replays.
  void flush_logs();
  /// The graph and its stream go (after they finish): the default stream is current again.
  void release() { graph_.reset(); }

 private:
  /// A value training_step logged while captured: summed over the replays since the last flush.
  struct Log {
    detail::CapturedLog log;
    at::Tensor sum;         // float64 on the device: log(name, tensor)'s weighted values
    double host_sum = 0.0;  // log(name, double)'s
    double weight = 0.0;
  };

  void capture(const data::detail::AnyBatch& batch, int64_t b, const Step& step);
  /// After each replay: what training_step logged while captured, added on the device.
  void accumulate_logs();

  std::string option_refusal_;  // prepare()'s reason ("" when a StepGraph was made)
  c10::Device device_{c10::kCPU};
  std::unique_ptr<StepGraph> graph_;  // with cuda_graphs on a GPU: its stream is current
  Parts parts_;                       // set by turn_on when on
  bool on_ = false;
  int64_t warmup_left_ = 0;
  data::detail::AnyBatch static_batch_;
  at::Tensor static_loss_;
  at::Tensor loss_sum_;  // the replays' losses since the last flush, summed by the graph itself
  std::vector<Log> logs_;
  int64_t loss_batches_ = 0;                                     // replays since the last flush
  double last_loss_ = std::numeric_limits<double>::quiet_NaN();  // the last read (step records)
};

}  // namespace lockstep::train
