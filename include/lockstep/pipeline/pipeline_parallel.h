#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include "lockstep/comm/chain_links.h"
#include "lockstep/comm/process_group.h"
#include "lockstep/models/staged.h"
#include "lockstep/pipeline/schedule.h"

namespace lockstep::pipeline {

/// How a PipelineParallel runs.
struct PipelineOptions {
  Schedule schedule = Schedule::k1F1B;
  /// Micro-batches a batch is cut into (along dim 0, as torch.tensor_split: sizes differ by at most one; a
  /// smaller batch into one per sample).
  int micro_batches = 1;
  /// The first forward call (Staged::forward_stages) of each stage after the first: P - 1 increasing
  /// indices. Empty: balanced_cut by the parameters each call uses (a tied module counts at each call).
  std::vector<size_t> cut;
};

/*
 * Pipeline parallelism (GPipe, 1F1B) of a Staged model over a group of P ranks, rank s being stage s.
 *
 * Every rank builds the whole model (its parameters and buffers are broadcast from stage 0, so replicas
 * agree; then the parameters of the stages it does not run are freed until gather_whole()), and runs the
 * calls [bounds[s], bounds[s + 1]) of the forward's stage calls (the partition): the model's forward runs on
 * every rank with this object as its StageRunner, which passes the other stages' calls through untouched and
 * puts the activation received from stage s - 1 in at its first call. A module used by calls of several
 * stages (Gpt's tied embedding: stage 0 and the head) is stepped on each of them with its gradients summed
 * over them, which keeps the copies equal, as Megatron does for its embeddings.
 *
 * forward_backward() cuts a batch into M micro-batches and runs stage_actions(schedule, P, M, s): a forward
 * receives its input from s - 1 and posts its output to s + 1 (comm::ChainLinks), a backward receives the
 * output's gradient from s + 1 and posts the input's gradient to s - 1; the last stage computes each
 * micro-batch's loss, weighted by its share of the batch, so the gradients accumulated are those of the
 * batch's mean loss: what one process computes on the whole batch. The loss is returned on every stage.
 * Data parallelism composes from outside: average parameters()' gradients over the data-parallel group.
 *
 * Example (a pipeline group of P ranks):
 *   models::Mlp net(models::MlpOptions().hidden({256, 256, 256}));
 *   pipeline::PipelineParallel pipe(net.ptr(), *net, group, {pipeline::Schedule::k1F1B, 4, {}});
 *   torch::optim::SGD sgd(pipe.parameters(), 0.1);
 *   double loss = pipe.forward_backward(x, y, [&](const at::Tensor& in) { return net->forward(in); },
 *                                       [](const at::Tensor& out, const at::Tensor& t) {
 *                                         return torch::nn::functional::cross_entropy(out, t); });
 *   sgd.step();  sgd.zero_grad();
 */
class PipelineParallel : private models::StageRunner {
 public:
  using Forward = std::function<at::Tensor(const at::Tensor& input)>;
  /// A micro-batch's loss: the mean over its samples (the weighting above relies on it).
  using Loss = std::function<at::Tensor(const at::Tensor& output, const at::Tensor& target)>;

  /// A collective of `group` (which, like the model, must outlive this object); `module` and `staged` are
  /// the same model. The pipeline is `staged`'s stage runner only inside forward_backward(): outside, the
  /// model's forward runs this rank's copy of the whole model, whose other stages' parameters are freed
  /// (release_others) until gather_whole(). Throws
  /// std::invalid_argument naming the value for micro_batches < 1, a bad cut, or fewer forward calls than
  /// stages.
  PipelineParallel(std::shared_ptr<torch::nn::Module> module, models::Staged& staged,
                   comm::ProcessGroup& group, PipelineOptions options);
  /// Gives the freed parameters their shapes back, filled with NaN (gather_whole() first to keep the whole
  /// model).
  ~PipelineParallel() override;
  PipelineParallel(const PipelineParallel&) = delete;
  PipelineParallel& operator=(const PipelineParallel&) = delete;

  int stage() const { return stage_; }
  int stages() const { return stages_; }
  /// Stage s runs forward calls [bounds()[s], bounds()[s + 1]).
  const std::vector<size_t>& bounds() const { return bounds_; }
  /// Whether this stage's calls use stage module `index` (Staged::stage_modules()).
  bool holds(size_t index) const;
  /// The trainable parameters of the stage modules this stage holds: what its optimizer steps.
  std::vector<at::Tensor> parameters() const;
  /// The buffers of the stage modules this stage holds (BatchNorm's statistics).
  std::vector<at::Tensor> buffers() const;
  /// Every parameter this stage keeps between gathers, frozen ones too (and those of stage modules no
  /// forward call uses, which every stage keeps).
  std::vector<at::Tensor> held_parameters() const;

  /// One batch's forward and backward passes, in the schedule's order: `input` and `target` are cut into
  /// micro-batches along dim 0 (every stage passes the same batch: stage 0 reads `input`, the last stage
  /// `target`; a batch of fewer samples than micro_batches into one per sample); `forward` is the model's
  /// forward, `loss` the micro-batch loss. Gradients accumulate into parameters()' .grad as one backward
  /// of the batch's mean loss would. Returns that loss on every stage. Throws std::invalid_argument for an
  /// empty batch or one with another number of targets than inputs, std::logic_error
  /// when the forward's calls differ from Staged::forward_stages(). Called several times before a step,
  /// the gradients accumulate (a shared module's too). After a failure (here or on another stage), the
  /// links may hold that step's transfers: later calls throw std::logic_error; build a new one.
  double forward_backward(const at::Tensor& input, const at::Tensor& target, const Forward& forward,
                          const Loss& loss);

  /// Makes every stage's copy of the whole model current: the parameters release_others() freed are
  /// allocated again, and each stage module's parameters and buffers broadcast from the first stage whose
  /// calls use it. A collective of the group, outside forward_backward: to evaluate or save the whole model
  /// on any stage.
  void gather_whole();
  /// Frees the parameters of the stage modules this stage does not hold (each becomes an empty tensor; its
  /// shape is kept for gather_whole), as the constructor does: between gathers a stage keeps its own
  /// parameters only. Buffers stay. Local; nothing when they are freed already.
  void release_others();
  /// Whether release_others() has freed parameters that no gather_whole() has brought back.
  bool released() const { return !released_.empty(); }

  /// Clips the gradients of the whole model as torch.nn.utils.clip_grad_norm_ does on one process (the
  /// 2-norm over every parameter, a module held by several stages counted once; the gradients scaled by
  /// optim::clip_coefficient: max_norm / (norm + 1e-6) when below 1). A collective of the group, after
  /// forward_backward (and after any data-parallel averaging). Returns the norm before clipping, on every
  /// stage.
  double clip_grad_norm(double max_norm);

  /// The most micro-batches whose activations this stage held at once during the last forward_backward
  /// (GPipe: M; 1F1B: at most P - s).
  int peak_micro_batches() const { return peak_held_; }
  /// Wall time of the last forward_backward, and the part of it this stage spent waiting for a neighbour's
  /// activation or gradient: the stage's bubble (plus the transfers' own time), which a schedule's
  /// (P - 1)/(M + P - 1) predicts for passes of equal length (bench/pp_gpt.sh measures it).
  double step_seconds() const { return step_seconds_; }
  double waited_seconds() const { return waited_seconds_; }

  /// Waits for the last sends and shuts the links down. Idempotent.
  void shutdown();

 private:
  /// A micro-batch between its forward and its backward.
  struct InFlight {
    at::Tensor input;   // what this stage received (a leaf whose .grad goes back); undefined on stage 0
    at::Tensor output;  // the last stage's weighted loss, the others' output sent on
  };
  at::Tensor run_stage(size_t index, const std::function<at::Tensor(at::Tensor)>& stage,
                       at::Tensor x) override;
  void forward_micro_batch(int i, const at::Tensor& input, const at::Tensor& target, const Forward& forward,
                           const Loss& loss, int64_t batch);
  void backward_micro_batch(int i);
  /// `p`'s shape in the whole model (also while release_others() has freed it).
  std::vector<int64_t> whole_sizes(const at::Tensor& p) const;
  /// The freed parameters allocated again at their shapes (values unspecified, or NaN with `poison`).
  void restore_shapes(bool poison = false);
  /// The gradients of modules held by several stages, before this step (to be added back after the sum),
  /// zeroed.
  std::vector<at::Tensor> stash_shared_gradients();
  /// Sums this step's gradients of modules held by several stages over them, then adds `earlier` back.
  void reduce_shared_gradients(const std::vector<at::Tensor>& earlier);
  /// Installs the pipeline as the model's stage runner for its lifetime.
  class RunnerScope {
   public:
    RunnerScope(models::Staged& staged, models::StageRunner* runner) : staged_(staged) {
      staged_.set_stage_runner(runner);
    }
    ~RunnerScope() { staged_.set_stage_runner(nullptr); }
    RunnerScope(const RunnerScope&) = delete;
    RunnerScope& operator=(const RunnerScope&) = delete;

   private:
    models::Staged& staged_;
  };

  std::shared_ptr<torch::nn::Module> module_;
  models::Staged* staged_;
  comm::ProcessGroup* group_;
  PipelineOptions options_;
  int stage_ = 0;
  int stages_ = 1;
  std::vector<size_t> calls_;   // Staged::forward_stages()
  std::vector<size_t> bounds_;  // stage s: calls [bounds_[s], bounds_[s + 1])
  std::vector<std::shared_ptr<torch::nn::Module>> modules_;
  std::vector<std::vector<int>> users_;  // by stage module: the stages whose calls use it
  comm::ChainLinks links_;
  at::Device device_{at::kCPU};
  // The forward under way: its next call's number, the received input, the last call's output.
  size_t call_ = 0;
  at::Tensor received_;
  at::Tensor produced_;
  std::vector<InFlight> in_flight_;
  at::Tensor loss_sum_;  // the last stage's weighted micro-batch losses, summed (float64, on the device)
  // release_others(): the freed parameters and their shapes
  std::vector<std::pair<at::Tensor, std::vector<int64_t>>> released_;
  bool failed_ = false;
  int held_ = 0;
  int peak_held_ = 0;
  double step_seconds_ = 0.0;
  double waited_seconds_ = 0.0;
};

}  // namespace lockstep::pipeline
