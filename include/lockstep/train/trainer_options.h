#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/comm/backend.h"
#include "lockstep/detail/option.h"
#include "lockstep/env/environment.h"
#include "lockstep/pipeline/schedule.h"
#include "lockstep/train/batch_limit.h"
#include "lockstep/train/callback.h"
#include "lockstep/train/device_choice.h"
#include "lockstep/train/precision_mode.h"
#include "lockstep/train/strategy/strategy_options.h"

namespace lockstep::comm {
class ProcessGroup;
}

namespace lockstep::train {

/// What the Trainer does with a non-finite loss from training_step.
enum class OnNan {
  kStop,  ///< throw std::runtime_error naming the step, the rank and the value (the launcher stops the rest)
  kSkip,  ///< every rank skips that optimizer step and drops what the step logged (one 8-byte all-reduce per
          ///< step)
};
/// "stop" | "skip"; throws std::invalid_argument naming the text and the accepted values.
OnNan parse_on_nan(const std::string& text);
const char* to_string(OnNan on_nan);

/// A run's configuration as name and value text, in order (the loggers' hparams.yaml).
using Hparams = std::vector<std::pair<std::string, std::string>>;

/// How a Trainer trains (Lightning's Trainer arguments, same names and defaults where they exist).
///
/// Free of LibTorch (lockstep::fit_config), so that `lockstep fit` builds and validates one without
/// loading libtorch.
///
/// Example:
///   Trainer trainer(TrainerOptions().devices(2).max_epochs(10).precision(Precision::kBf16Mixed));
class TrainerOptions {
 public:
  /// Ranks on this node. Unset: what the launcher started (1 without one). Set to N > 1 in a program
  /// started without a launcher, fit() starts the ranks itself (see Trainer::fit).
  LOCKSTEP_OPTION(TrainerOptions, std::optional<int>, devices)
  /// Nodes; must agree with the launcher's when set.
  LOCKSTEP_OPTION(TrainerOptions, std::optional<int>, num_nodes)
  /// cpu, gpu (one CUDA device per rank: cuda:LOCAL_RANK) or auto (gpu when one is visible); see
  /// device_choice.h.
  LOCKSTEP_OPTION(TrainerOptions, AcceleratorKind, accelerator)
  /// ddp (the default), zero1, zero2 or fsdp, with its options (strategy/strategy_options.h):
  /// strategy(DdpStrategy().find_unused_parameters(true)), strategy(FsdpStrategy().min_unit_params(1 << 16)),
  /// strategy(parse_strategy("deepspeed_stage_2")). zero2 and fsdp need every trainable parameter used in
  /// every step, and precision other than 16-mixed; fsdp needs a Staged model (models/staged.h).
  LOCKSTEP_OPTION(TrainerOptions, StrategyOptions, strategy)
  /// Tensor parallelism: the world as a comm::DeviceMesh of world / T data-parallel × T tensor-parallel
  /// ranks (consecutive ranks split the model). The module builds its split layers in configure_model()
  /// over device_mesh()->tp(); the strategy (ddp or zero1), the sampler and the epoch's metrics work over
  /// device_mesh()->dp(), so the ranks of a tensor-parallel group train on the same batches. Checkpoints
  /// come in one part per tensor-parallel rank (tensor_parallel_path); final.safetensors holds the model
  /// whole and final.pt is not written. Strategy ddp or zero1; not with elastic or cuda_graphs. 1 (the
  /// default): none.
  LOCKSTEP_OPTION(TrainerOptions, int, tensor_parallel)
  /// Pipeline parallelism: the world as a comm::DeviceMesh of world / P data-parallel × P pipeline ranks
  /// (consecutive ranks are one pipeline's stages). The module's staged_model() is cut into P stages
  /// (pipeline::PipelineParallel: balanced by parameters, or pipeline_cut), and each training batch runs
  /// through the pipeline in micro_batches micro-batches by pipeline_schedule: pipeline_forward() then
  /// pipeline_loss() (train_module.h) instead of training_step, the loss logged as "train_loss". The
  /// strategy (ddp or zero1), the sampler and the epoch's metrics work over device_mesh()->dp(); a stage's
  /// optimizer steps its own parameters, and between gathers it keeps only those (the other stages' are
  /// freed); validation and the final weights gather the whole model. Checkpoints come in one part per
  /// stage (tensor_parallel_path's names), each with the whole model. Strategy ddp or zero1 without
  /// find_unused_parameters, comm_hook or bucket_cap_mb; precision 32; not with tensor_parallel, elastic or
  /// cuda_graphs. 1 (the default): none.
  LOCKSTEP_OPTION(TrainerOptions, int, pipeline_parallel)
  /// Micro-batches each rank's batch is cut into under pipeline_parallel (>= 1; 1 without a pipeline).
  LOCKSTEP_OPTION(TrainerOptions, int, micro_batches)
  /// The pipeline's schedule: 1F1B (the default; a stage holds at most P - s micro-batches' activations)
  /// or GPipe (all M).
  LOCKSTEP_OPTION(TrainerOptions, pipeline::Schedule, pipeline_schedule)
  /// The first forward call (models::Staged::forward_stages) of each stage after the first: P - 1
  /// increasing indices. Empty (the default): balanced by the parameters each call uses.
  LOCKSTEP_OPTION(TrainerOptions, std::vector<size_t>, pipeline_cut)
  /// The comm backend (comm::Backend; kAuto picks one for the machine: nccl for CUDA devices).
  LOCKSTEP_OPTION(TrainerOptions, comm::Backend, backend)
  /// Intra-op threads per rank; 0 = cores / local ranks.
  LOCKSTEP_OPTION(TrainerOptions, int, threads)
  LOCKSTEP_OPTION(TrainerOptions, int64_t, max_epochs)
  /// Stop after this many optimizer steps in all; -1 = no limit.
  LOCKSTEP_OPTION(TrainerOptions, int64_t, max_steps)
  LOCKSTEP_OPTION(TrainerOptions, BatchLimit, limit_train_batches)
  LOCKSTEP_OPTION(TrainerOptions, BatchLimit, limit_val_batches)
  /// Batches whose gradients add up before each optimizer step (through DDP's no_sync: one all-reduce
  /// per step). The loss is divided by it, so the step equals one on the larger batch.
  LOCKSTEP_OPTION(TrainerOptions, int64_t, accumulate_grad_batches)
  /// Max global L2 norm of the gradients before each step; 0 = off.
  LOCKSTEP_OPTION(TrainerOptions, double, gradient_clip_val)
  /// Precision::k32, kBf16Mixed or k16Mixed (see precision.h).
  LOCKSTEP_OPTION(TrainerOptions, Precision, precision)
  /// Seeds the sampler's shuffle and each rank's generator (dropout): seed + 1000003 x (rank + 1).
  LOCKSTEP_OPTION(TrainerOptions, uint64_t, seed)
  /// last.ckpt at every epoch end (and every ckpt_every_n_steps) and the final weights go here; also the
  /// default directory of ModelCheckpoint. "" = none.
  LOCKSTEP_OPTION(TrainerOptions, std::string, ckpt_dir)
  LOCKSTEP_OPTION(TrainerOptions, int64_t, ckpt_every_n_steps)
  /// "" | "last" (ckpt_dir/last.ckpt) | "auto" (last when ckpt_dir/last.ckpt exists, else a fresh start:
  /// for jobs that are requeued) | a checkpoint path. See resume_path().
  LOCKSTEP_OPTION(TrainerOptions, std::string, resume)
  /// JSONL: one record per epoch, per logged step and per log_metrics() call (rank 0). "" = none.
  LOCKSTEP_OPTION(TrainerOptions, std::string, metrics_file)
  LOCKSTEP_OPTION(TrainerOptions, int64_t, log_every_n_steps)
  /// Loggers, comma-separated: tensorboard, csv, jsonl (Lightning's TensorBoardLogger and CSVLogger
  /// layouts: log/make_loggers.h). They share one run directory, default_root_dir/lightning_logs/version_N
  /// (rank 0 makes it), and log the step records (log_every_n_steps), the epoch records with the step
  /// breakdown, and log_metrics(). "" (the default) = none.
  LOCKSTEP_OPTION(TrainerOptions, std::string, logger)
  /// Where the loggers' lightning_logs/ goes (Lightning's default_root_dir); default: the current directory.
  LOCKSTEP_OPTION(TrainerOptions, std::string, default_root_dir)
  /// The run's configuration, written to hparams.yaml by the loggers (fit() fills it from the FitConfig).
  LOCKSTEP_OPTION(TrainerOptions, Hparams, hparams)
  /// Time the phases of every n-th training batch on every rank (data, forward, backward, exposed
  /// all-reduce, optimizer: step_breakdown.h), gathered at each epoch end into EpochMetrics::breakdown; a
  /// rank > 20% slower than the others is named. 0 = off. On a GPU a sampled batch waits for the device at
  /// each phase boundary.
  LOCKSTEP_OPTION(TrainerOptions, int64_t, breakdown_every_n_batches)
  /// On a GPU, capture the training step (forward, backward, DDP's all-reduce, the optimizer) in a CUDA
  /// graph after a few eager steps and replay it for every batch of the same shape (cuda_graph.h); a
  /// batch of another shape (an epoch's shorter last one) runs eagerly. Where the step cannot be
  /// captured it is not, with one line saying why: not on a GPU, or LibTorch older than 2.4; strategy
  /// other than ddp; a backend other than nccl; accumulate_grad_batches > 1; gradient_clip_val;
  /// precision other than 32; on_nan skip; an optimizer that is not GraphCapturable (optim::FusedAdam
  /// and FusedAdamW are); a batch type without BatchTraits::tensors.
  ///
  /// Under a graph what training_step does on the host happens once, at capture: it is not called again,
  /// so what it decides there (from batch_idx, current_epoch(), a flag) stays as it was; what it logs is
  /// added up on the device at each replay; on_before_backward runs for eager steps only. The loss is
  /// read on the host only every step-record interval (log_every_n_steps, 50 when 0) and at the epoch's
  /// end: a non-finite loss is found there, and BatchEnd's loss is the last one read (NaN before the
  /// first). Each read waits at most the collective timeout, which is how a rank finds that a peer
  /// stopped (a replayed all-reduce is not watched otherwise). The step breakdown is off. Default off.
  LOCKSTEP_OPTION(TrainerOptions, bool, cuda_graphs)
  /// In-place recovery (docs/elastic.md, "In place"): a lost rank costs the step in progress, not a
  /// restart. The ranks must run under `lockstep run --recovery in-place` (`lockstep fit --elastic` starts
  /// them so); the world shrinks in the same processes, the failed step is dropped, and the rest of the
  /// epoch is re-sharded over the survivors. Ranks that join the running job (a second `lockstep run` on
  /// its endpoint) are admitted at a step boundary with rank 0's state. Strategy ddp on the gloo backend
  /// (auto picks it); not with cuda_graphs or a process_group of the caller's. Default off.
  LOCKSTEP_OPTION(TrainerOptions, bool, elastic)
  /// When the world changes (in place, or a resume from a checkpoint written by another world size),
  /// keep the global batch instead of the per-rank one: accumulate_grad_batches becomes the count that
  /// keeps the run's batches per optimizer step (its first world x accumulate_grad_batches, kept in its
  /// checkpoints) on the new world (accumulation_keeping()). Default off: the per-rank batch stays and the
  /// global batch follows the world, as after a torchrun restart (lr_scaling rescales the rate to it).
  LOCKSTEP_OPTION(TrainerOptions, bool, keep_global_batch)
  /// Also write final.pt and final.safetensors to ckpt_dir at the end.
  LOCKSTEP_OPTION(TrainerOptions, bool, save_final_weights)
  LOCKSTEP_OPTION(TrainerOptions, bool, progress_bar)
  /// Where rank 0 prints (epoch lines, the summary).
  LOCKSTEP_OPTION(TrainerOptions, std::FILE*, out)
  LOCKSTEP_OPTION(TrainerOptions, std::vector<std::shared_ptr<Callback>>, callbacks)
  /// Who this process is; unset: env::from_env().
  LOCKSTEP_OPTION(TrainerOptions, std::optional<env::Environment>, environment)
  /// How long one collective may take (comm::ProcessGroupOptions::collective_timeout); with ranks it
  /// starts itself, also the launcher's limit for a rank that makes no progress. Unset: LOCKSTEP_TIMEOUT,
  /// else 1800 s.
  LOCKSTEP_OPTION(TrainerOptions, std::optional<std::chrono::milliseconds>, collective_timeout)
  /// A process group to train in (tests, programs that made their own); unset: fit() makes one from the
  /// environment and shuts it down at the end. Not owned.
  LOCKSTEP_OPTION(TrainerOptions, comm::ProcessGroup*, process_group)
  /// A non-finite loss from training_step (OnNan).
  LOCKSTEP_OPTION(TrainerOptions, OnNan, on_nan)
  /// Written into checkpoints, for people reading them later.
  LOCKSTEP_OPTION(TrainerOptions, std::string, description)
  /// The "producer" of final.safetensors' metadata.
  LOCKSTEP_OPTION(TrainerOptions, std::string, producer)

  /// Adds one callback.
  TrainerOptions& callback(std::shared_ptr<Callback> callback) {
    callbacks_.push_back(std::move(callback));
    return *this;
  }
  /// Throws std::invalid_argument naming the option, the bad value and what is accepted; a resume path
  /// that cannot be opened is an error here, before any rank waits on another.
  void validate() const;
  /// Throws std::invalid_argument as validate() does for accelerator 'cpu' (backend nccl, precision
  /// 16-mixed), saying `why` the run is on the CPU ("accelerator 'auto' and no GPU is visible"). The CLI
  /// calls it when auto finds no GPU, so that the mistake is named before any rank starts.
  void check_cpu_training(const std::string& why) const;
  /// The checkpoint resume() names: "" when not resuming, ckpt_dir/last.ckpt for "last", and for "auto"
  /// when that file exists ("" when it does not), else resume() itself. Looks at the file system each call
  /// (every rank resolves it before training starts, so before rank 0 can write a checkpoint).
  std::string resume_path() const;

 private:
  /// validate()'s checks of elastic: what in-place recovery cannot work with.
  void check_elastic() const;

  std::optional<int> devices_;
  std::optional<int> num_nodes_;
  AcceleratorKind accelerator_ = AcceleratorKind::kAuto;
  StrategyOptions strategy_;
  int tensor_parallel_ = 1;
  int pipeline_parallel_ = 1;
  int micro_batches_ = 1;
  pipeline::Schedule pipeline_schedule_ = pipeline::Schedule::k1F1B;
  std::vector<size_t> pipeline_cut_;
  comm::Backend backend_ = comm::Backend::kAuto;
  int threads_ = 0;
  int64_t max_epochs_ = 10;
  int64_t max_steps_ = -1;
  BatchLimit limit_train_batches_;
  BatchLimit limit_val_batches_;
  int64_t accumulate_grad_batches_ = 1;
  double gradient_clip_val_ = 0.0;
  Precision precision_ = Precision::k32;
  uint64_t seed_ = 0;
  std::string ckpt_dir_;
  int64_t ckpt_every_n_steps_ = 0;
  std::string resume_;
  std::string metrics_file_;
  int64_t log_every_n_steps_ = 0;
  std::string logger_;
  std::string default_root_dir_ = ".";
  Hparams hparams_;
  int64_t breakdown_every_n_batches_ = 10;
  bool cuda_graphs_ = false;
  bool elastic_ = false;
  bool keep_global_batch_ = false;
  bool save_final_weights_ = true;
  bool progress_bar_ = false;
  std::FILE* out_ = stdout;
  std::vector<std::shared_ptr<Callback>> callbacks_;
  std::optional<env::Environment> environment_;
  std::optional<std::chrono::milliseconds> collective_timeout_;
  comm::ProcessGroup* process_group_ = nullptr;
  OnNan on_nan_ = OnNan::kStop;
  std::string description_;
  std::string producer_ = "lockstep Trainer";
};

/// The accumulation count that keeps `batches_per_step` rank-batches in each optimizer step on `world`
/// ranks (TrainerOptions::keep_global_batch): batches_per_step / world where the world divides it, else the
/// nearest whole count (halves round up), at least 1; the global batch then moves as little as it can.
/// Example: 3 ranks accumulating 2 keep 6 batches a step: 2 ranks accumulate 3; 4 ranks accumulate 2
/// (8 batches, the nearest to 6); 8 ranks accumulate 1.
int64_t accumulation_keeping(int64_t batches_per_step, int world);

}  // namespace lockstep::train
