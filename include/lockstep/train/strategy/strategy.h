#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <c10/core/Device.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include "lockstep/comm/backend.h"
#include "lockstep/comm/process_group.h"
#include "lockstep/ddp/ddp_options.h"
#include "lockstep/ddp/gradient_sync.h"
#include "lockstep/models/staged.h"
#include "lockstep/shard/full_parameters.h"
#include "lockstep/shard/shard_checkpoint.h"
#include "lockstep/train/device_choice.h"
#include "lockstep/train/strategy/strategy_options.h"

namespace lockstep::shard {
class FullyShardedDataParallel;
class ShardedReducer;
class ZeroOptimizer;
}  // namespace lockstep::shard

namespace lockstep::pipeline {
class PipelineParallel;
struct PipelineOptions;
}  // namespace lockstep::pipeline

namespace lockstep::train {

/// This rank's device, for the Trainer and the Accelerator alike: choose_device (device_choice.h) over the
/// GPUs LibTorch sees, the GPUs shared when `backend` allows it (ranks_may_share_gpu), made current.
c10::Device rank_device(AcceleratorKind kind, int local_rank, int local_world_size, comm::Backend backend);

/// Whose options the advice in a strategy's errors names.
enum class StrategyApi {
  kTrainer,      ///< TrainerOptions().strategy(...), `lockstep fit --strategy`
  kAccelerator,  ///< AcceleratorOptions().strategy(...)
};

/*
 * What a strategy does at run time, for the Trainer and the Accelerator alike (Lightning's Strategy): it
 * wraps the model (DDP, or FSDP), wraps the optimizer (ZeRO's sharded one, bf16 master chunks), and then
 * owns what depends on that: which gradient sync a step waits for, clearing sharded gradients, clipping,
 * the parameters whole for a scope (evaluation, checkpoints), the optimizer's shards in checkpoints, the
 * model state's size, and what it refuses.
 *
 * The caller builds DDP itself (DistributedDataParallel is a template over the user's model type) from
 * ddp_options() and hands it back with add_model(); under fsdp it calls shard_model() instead. Then
 * wrap_optimizer() for each optimizer. Collective where noted: every rank calls in the same order.
 *
 * One subclass per strategy (src/train/strategy/): a new strategy is a new file there.
 */
class Strategy {
 public:
  /// The strategy `options` name, for `group` and `precision`. Throws what options.validate() throws.
  static std::unique_ptr<Strategy> make(const StrategyOptions& options, comm::ProcessGroup& group,
                                        Precision precision, StrategyApi api);
  virtual ~Strategy();
  Strategy(const Strategy&) = delete;
  Strategy& operator=(const Strategy&) = delete;

  const StrategyOptions& options() const { return options_; }
  StrategyKind kind() const { return options_.kind(); }

  // ---- the model ----
  /// Whether models are sharded by shard_model() rather than wrapped in DDP (fsdp).
  virtual bool shards_parameters() const { return false; }
  /// The options of the DDP the caller wraps the next model in. Throws std::invalid_argument where the
  /// strategy takes no more models (zero2: one), std::logic_error under fsdp.
  virtual ddp::DdpOptions ddp_options() const;
  /// Records a model the caller wrapped in DDP: its module, its gradient sync, and what keeps both alive.
  void add_model(std::shared_ptr<torch::nn::Module> module, ddp::GradientSync& sync,
                 std::shared_ptr<void> keep);
  /// fsdp: FSDP over `module` (run in the stages of `staged`, or of the one Staged module inside it),
  /// recorded as a model; `staged_owner` keeps `staged` alive as long as FSDP is. Collective. Throws
  /// std::invalid_argument for a second model.
  virtual std::shared_ptr<shard::FullyShardedDataParallel> shard_model(
      std::shared_ptr<torch::nn::Module> module, models::Staged* staged,
      std::shared_ptr<void> staged_owner = nullptr);
  /// Pipeline parallelism: `module` (run in the stages of `staged`) cut into stages over `pp`
  /// (pipeline::PipelineParallel, built here), recorded as the model: pipeline_step() runs a batch through
  /// it and averages this stage's gradients over the strategy's group (unless gradient_sync() is off);
  /// wrap_optimizer() narrows an optimizer to this stage's parameters; clip_grad_norm_ clips by the whole
  /// model's norm; whole_parameters() and checkpoint_parameters() make the whole model current on every
  /// stage for a scope (between them a stage keeps its own parameters only). Collective of `pp` (which must
  /// outlive the strategy) and the group. Throws std::invalid_argument naming the fix when `staged` is
  /// null, a parameter of `module` is in none of its stage modules, or the strategy's options or precision
  /// cannot run a pipeline (detail::check_pipeline_parallel: ddp or zero1 at precision 32).
  pipeline::PipelineParallel& pipeline_model(std::shared_ptr<torch::nn::Module> module,
                                             models::Staged* staged, comm::ProcessGroup& pp,
                                             const pipeline::PipelineOptions& options);
  /// The pipeline of pipeline_model(), or null.
  pipeline::PipelineParallel* pipeline() const;
  /// One batch through pipeline(): `forward` and `loss` as PipelineParallel::forward_backward takes them,
  /// the loss divided by `accumulation` (the batches of the accumulation group in progress) as backward
  /// would be given it (the held buffers broadcast from group rank 0 first, as DDP's broadcast_buffers);
  /// then, unless gradient_sync() is off, this stage's gradients averaged over the strategy's group (one
  /// flat all-reduce after the pipeline's last backward). Returns the batch's loss (undivided), on every
  /// stage. Throws std::invalid_argument from pipeline_model() when an optimizer was prepared first.
  double pipeline_step(const at::Tensor& input, const at::Tensor& target,
                       const std::function<at::Tensor(const at::Tensor&)>& forward,
                       const std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>& loss,
                       int64_t accumulation = 1);
  /// After training: the whole model left current on every rank for good where it is not (a pipeline's
  /// other stages gathered; a collective). Nothing for the other strategies.
  void leave_whole();
  /// Waits for the pipeline's last transfers and closes its links (before its group shuts down).
  /// Nothing without a pipeline. Idempotent.
  void shutdown();
  size_t model_count() const { return models_.size(); }
  /// Model `i`'s module, as given.
  torch::nn::Module& model(size_t i) const { return *models_.at(i).module; }
  /// What synchronises model `i`'s gradients (DDP's reducer, ZeRO-2's or FSDP's sharded one).
  ddp::GradientSync& gradient_sync(size_t i = 0) const;

  // ---- the optimizer ----
  /// `optimizer` (over prepared models' parameters, no state yet) as the strategy steps it: itself (ddp),
  /// or re-targeted to this rank's chunks (shard::ZeroOptimizer). Step the result. Collective. Throws
  /// std::invalid_argument where it needs a model first (zero2, fsdp).
  std::shared_ptr<torch::optim::Optimizer> wrap_optimizer(std::shared_ptr<torch::optim::Optimizer> optimizer);
  size_t optimizer_count() const { return optimizers_.size(); }
  /// Optimizer `i` as wrapped.
  torch::optim::Optimizer& optimizer(size_t i) const { return *optimizers_.at(i); }
  /// Optimizer `i` when the strategy sharded its state (zero1, zero2, fsdp), else null: saved as shards.
  shard::ZeroOptimizer* sharded_optimizer(size_t i) const;
  /// The optimizer stepping float32 master chunks of bfloat16 parameters (bf16-mixed zero1/zero2), or null.
  shard::ZeroOptimizer* master_optimizer() const;

  // ---- a step ----
  /// After each optimizer step's zero_grad: the sharded gradients cleared (zero2, fsdp).
  void clear_gradients();
  /// clip_grad_norm_ over every model's gradients as the optimizers step from them (the chunks under zero2
  /// and fsdp: a collective; the float32 masters under bf16 zero1/zero2). Returns the total norm. Throws
  /// std::invalid_argument for a norm_type other than 2 where the gradients are sharded or mastered.
  /// After split_over(), the norm is the whole model's: see there.
  double clip_grad_norm_(double max_norm, double norm_type = 2.0);
  /// Tensor parallelism: the models' parameters lie over `tp` as their models::TensorParallelModule
  /// submodules say (models::parameter_splits). clip_grad_norm_ then sums the squares of the split
  /// parameters' gradients over `tp` and counts the replicated ones once (their gradients are equal on
  /// every rank of the group), so every rank clips by the norm one process would compute; a collective of
  /// `tp`. The 2-norm, with float32 gradients on the models (ddp, zero1 at precision 32); otherwise
  /// clip_grad_norm_ throws std::invalid_argument naming what to change. `tp` must outlive the strategy.
  void split_over(comm::ProcessGroup& tp) { tensor_parallel_ = &tp; }
  /// Every parameter whole while the result lives: fsdp's, the float32 masters under bf16 zero1/zero2, the
  /// other stages' under pipeline_model() (a collective). Nothing for ddp.
  shard::FullParameters whole_parameters() const;
  /// What a checkpoint part needs whole while it is written (a collective): under pipeline_model() every
  /// stage's parameters (each part holds the whole model); nothing otherwise (sharded strategies write
  /// their shards).
  shard::FullParameters checkpoint_parameters() const;
  /// This rank's parameters, gradient buckets and optimizer state, bytes.
  int64_t model_state_bytes() const;

  // ---- checkpoints ----
  /// Optimizer `i`'s state from `count` shards that `read` opens (written by another world size, or the
  /// whole state when this strategy does not shard it).
  void load_optimizer_shards(size_t i, int count, const shard::ShardReader& read);

 protected:
  struct Model {
    std::shared_ptr<torch::nn::Module> module;
    ddp::GradientSync* sync = nullptr;
    std::shared_ptr<void> staged_owner;                  // fsdp: what runs the stages, destroyed after FSDP
    std::shared_ptr<void> keep;                          // the DDP or FSDP wrapper
    shard::FullyShardedDataParallel* fsdp = nullptr;     // fsdp
    pipeline::PipelineParallel* pipeline = nullptr;      // pipeline_model()
    shard::ShardedParameters* pipeline_whole = nullptr;  // pipeline_model(): its whole model for a scope
  };

  Strategy(const StrategyOptions& options, comm::ProcessGroup& group, Precision precision, StrategyApi api);
  /// The optimizer re-targeted as this strategy steps it (wrap_optimizer's work; optimizers_ holds the
  /// ones before it).
  virtual std::shared_ptr<torch::optim::Optimizer> wrap(
      std::shared_ptr<torch::optim::Optimizer> optimizer) = 0;
  /// The ShardedReducer holding the first model's chunk gradients (zero2, fsdp), else null.
  shard::ShardedReducer* sharded_gradients() const;

  /// Under pipeline_model(): `optimizer`'s parameter groups keep this stage's parameters only.
  void narrow_to_stage(torch::optim::Optimizer& optimizer) const;

  /// clip_grad_norm_ after split_over().
  double clip_split_grad_norm_(double max_norm, double norm_type);

  StrategyOptions options_;
  comm::ProcessGroup& group_;
  comm::ProcessGroup* tensor_parallel_ = nullptr;  // split_over()
  Precision precision_;
  StrategyApi api_;
  std::vector<Model> models_;
  std::vector<std::shared_ptr<torch::optim::Optimizer>> optimizers_;
};

}  // namespace lockstep::train
