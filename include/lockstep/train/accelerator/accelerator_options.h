// AcceleratorOptions, what an Accelerator is built with, and resolve_launch_environment, which fills the
// options a program left unset from Accelerate's launcher variables.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "lockstep/comm/backend.h"
#include "lockstep/detail/option.h"
#include "lockstep/env/environment.h"
#include "lockstep/pipeline/schedule.h"
#include "lockstep/train/device_choice.h"
#include "lockstep/train/precision.h"
#include "lockstep/train/precision_mode.h"
#include "lockstep/train/strategy/strategy_options.h"

namespace lockstep::train {

/// Options of an Accelerator; Hugging Face Accelerate's names and defaults.
///
/// mixed_precision, gradient_accumulation_steps and cpu remember whether the program set them: one left
/// unset is read from the variable Accelerate's launcher sets (`accelerate launch`, `lockstep launch`:
/// resolve_launch_environment below), so the launcher's `--mixed_precision fp16` reaches a program that
/// did not choose a precision, and a program that did keeps its own. Their getters return std::nullopt
/// while unset; Accelerator::options() returns them resolved.
///
/// Example:
///   Accelerator
///   accelerator(AcceleratorOptions().mixed_precision(Precision::kBf16Mixed).gradient_accumulation_steps(4));
class AcceleratorOptions {
 public:
  /// Precision::k32 (Accelerate's "no"), kBf16Mixed ("bf16") or k16Mixed ("fp16": CUDA, and the CPU with
  /// LibTorch >= 2.5; precision.h); parse_precision reads Accelerate's and Lightning's spellings. Unset:
  /// ACCELERATE_MIXED_PRECISION, else k32.
  LOCKSTEP_OPTION(AcceleratorOptions, Precision, mixed_precision)
  /// Micro-batches whose gradients are summed before each optimizer step, >= 1. Each rank's effective
  /// batch is batch_size * gradient_accumulation_steps; the job's is that times num_processes(). Unset:
  /// ACCELERATE_GRADIENT_ACCUMULATION_STEPS, else 1.
  LOCKSTEP_OPTION(AcceleratorOptions, int64_t, gradient_accumulation_steps)
  /// Collective backend (comm::Backend; comm::parse_backend reads "auto", "gloo", "shm", ...). Ignored by
  /// the constructor that takes an existing process group.
  LOCKSTEP_OPTION(AcceleratorOptions, comm::Backend, backend)
  /// Seeds the shuffle of every prepared data loader (DistributedSampler: seed + epoch).
  LOCKSTEP_OPTION(AcceleratorOptions, uint64_t, seed)
  /// Stay on the CPU even when LibTorch sees a GPU (Accelerate's `cpu=True`; the same as accelerator kCpu,
  /// and it wins over accelerator kGpu, as in Accelerate). Unset: ACCELERATE_USE_CPU, else false.
  LOCKSTEP_OPTION(AcceleratorOptions, bool, cpu)
  /// Where to train, as the Trainer's option (device_choice.h): kAuto (the default) is gpu when LibTorch
  /// sees one, one device per local rank.
  LOCKSTEP_OPTION(AcceleratorOptions, AcceleratorKind, accelerator)
  /// ddp (the default), zero1, zero2 or fsdp, with its options (strategy/strategy_options.h: DdpStrategy()
  /// .find_unused_parameters(true), FsdpStrategy().min_unit_params(n), ...): prepare_optimizer then shards
  /// the optimizer's state over the ranks (shard::ZeroOptimizer; step the prepared optimizer, not the one
  /// given); zero2 also reduce-scatters the gradients (shard::ShardedReducer: prepare the one model before
  /// its optimizer; clip_grad_norm_ clips the shards by the global 2-norm; not with fp16); fsdp shards the
  /// parameters too (shard::FullyShardedDataParallel; see prepare_model and full_parameters). save_state
  /// writes each rank's shard of a sharded optimizer's state. Under fsdp and mixed_precision bf16 the units
  /// compute in bfloat16 (float32 master shards) unless its param_dtype says otherwise.
  LOCKSTEP_OPTION(AcceleratorOptions, StrategyOptions, strategy)
  /// The loss scaler used with fp16 (ignored otherwise).
  LOCKSTEP_OPTION(AcceleratorOptions, GradScalerOptions, scaler)
  /// In-place recovery (docs/elastic.md, "In place"; default false): the accelerator forms its group as a
  /// comm::ElasticWorld under `lockstep run --recovery in-place`, every sync step's optimizer step first
  /// votes to commit (comm::MembershipChanged when the world changed), and Accelerator::recover() goes on
  /// over the survivors after a lost rank. Strategy ddp and backend gloo (or auto) only, and not with the
  /// constructor that takes a process group of the caller's: std::invalid_argument naming what and the fix.
  LOCKSTEP_OPTION(AcceleratorOptions, bool, elastic)
  /// Tensor parallelism (TrainerOptions::tensor_parallel): the accelerator makes a comm::DeviceMesh of
  /// world / T data-parallel × T tensor-parallel ranks (Accelerator::device_mesh()), over whose tp() the
  /// program builds its split model before prepare; prepared models (ddp or zero1), loaders, gather and
  /// reduce work over its dp(); save_state writes one part per tensor-parallel rank (dir, dir.tp1, ...), as
  /// the Trainer's checkpoints do. Not with elastic. Default 1.
  LOCKSTEP_OPTION(AcceleratorOptions, int, tensor_parallel)
  /// Pipeline parallelism (TrainerOptions::pipeline_parallel): the world as world / P data-parallel × P
  /// pipeline ranks (device_mesh()); prepare() cuts a models::Staged model into P stages
  /// (pipeline::PipelineParallel) instead of wrapping it in DDP, and each batch goes through it with
  /// Accelerator::pipeline_step in micro_batches micro-batches by pipeline_schedule (the model's own forward
  /// is not called outside it). Strategy ddp or zero1 (no find_unused_parameters, comm_hook or
  /// bucket_cap_mb), mixed_precision no; not with tensor_parallel or elastic. 1 (the default): none.
  LOCKSTEP_OPTION(AcceleratorOptions, int, pipeline_parallel)
  /// Micro-batches per batch under pipeline_parallel (>= 1).
  LOCKSTEP_OPTION(AcceleratorOptions, int, micro_batches)
  /// 1F1B (the default) or GPipe.
  LOCKSTEP_OPTION(AcceleratorOptions, pipeline::Schedule, pipeline_schedule)
  /// The first forward call of each stage after the first (P - 1 of them); empty: balanced by parameters.
  LOCKSTEP_OPTION(AcceleratorOptions, std::vector<size_t>, pipeline_cut)

  /// Throws std::invalid_argument naming the option, the bad value and what is accepted. Unset options
  /// count as their defaults.
  void validate() const;

 private:
  std::optional<Precision> mixed_precision_;
  std::optional<int64_t> gradient_accumulation_steps_;
  comm::Backend backend_ = comm::Backend::kAuto;
  uint64_t seed_ = 0;
  std::optional<bool> cpu_;
  AcceleratorKind accelerator_ = AcceleratorKind::kAuto;
  StrategyOptions strategy_;
  GradScalerOptions scaler_;
  int tensor_parallel_ = 1;
  int pipeline_parallel_ = 1;
  int micro_batches_ = 1;
  pipeline::Schedule pipeline_schedule_ = pipeline::Schedule::k1F1B;
  std::vector<size_t> pipeline_cut_;
  bool elastic_ = false;
};

/// `options` as an Accelerator runs with them: each of mixed_precision, gradient_accumulation_steps and
/// cpu that the program left unset is read from the variable Accelerate's launcher gives its workers
/// (`accelerate launch`, `lockstep launch`; docs/accelerator.md), else set to its default; then
/// validated. What the program set wins, as Accelerate's constructor argument wins over
/// ACCELERATE_MIXED_PRECISION:
///
///   ACCELERATE_MIXED_PRECISION              no, fp16 or bf16 (--mixed_precision)      unset: k32
///   ACCELERATE_GRADIENT_ACCUMULATION_STEPS  an integer >= 1                           unset: 1
///   ACCELERATE_USE_CPU                      y yes t true on 1 / n no f false off 0    unset: false
///                                           (Accelerate's truth values, any case)
/// (An empty variable counts as unset.)
///
/// (Python Accelerate lets ACCELERATE_GRADIENT_ACCUMULATION_STEPS win over its constructor argument,
/// although its docstring calls the variable the default; lockstep follows the docstring, one rule for
/// all three. A cpu(false) set by the program, or accelerator(kGpu), also wins over ACCELERATE_USE_CPU=true,
/// which Python's `cpu=False` cannot say.) Throws std::invalid_argument naming the variable, its value and
/// what is accepted (fp8 is refused: lockstep has no float8 training), or a validate() error that names the
/// variables the resolved options came from.
///
/// Example:
///   // under `lockstep launch --mixed_precision fp16`:
///   auto a = resolve_launch_environment(AcceleratorOptions());  // a.mixed_precision() == k16Mixed
///   auto b = resolve_launch_environment(AcceleratorOptions().mixed_precision(Precision::k32));  // k32
AcceleratorOptions resolve_launch_environment(AcceleratorOptions options,
                                              const env::EnvLookup& lookup = env::process_env());

}  // namespace lockstep::train
