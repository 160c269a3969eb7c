#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/comm/process_group_options.h"
#include "lockstep/detail/option.h"
#include "lockstep/detail/worker_contract.h"
#include "lockstep/env/environment.h"
#include "lockstep/train/callback.h"
#include "lockstep/train/epoch_metrics.h"
#include "lockstep/train/fit_config.h"
#include "lockstep/train/precision.h"
#include "lockstep/train/train_module.h"

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

/// How a Trainer trains (Lightning's Trainer arguments, same names and defaults where they exist).
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
  /// The comm backend (comm::Backend; kAuto picks one for the machine).
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
  /// Size cap of DDP's gradient buckets in MiB (DdpOptions::bucket_cap_mb; > 0). Unset: DDP's default,
  /// a 16th of the model's gradients within [1, 25] MiB.
  LOCKSTEP_OPTION(TrainerOptions, std::optional<double>, bucket_cap_mb)
  /// Precision::k32, kBf16Mixed or k16Mixed (see precision.h).
  LOCKSTEP_OPTION(TrainerOptions, Precision, precision)
  /// Seeds the sampler's shuffle and each rank's generator (dropout): seed + 1000003 x (rank + 1).
  LOCKSTEP_OPTION(TrainerOptions, uint64_t, seed)
  /// last.ckpt at every epoch end (and every ckpt_every_n_steps) and the final weights go here; also the
  /// default directory of ModelCheckpoint. "" = none.
  LOCKSTEP_OPTION(TrainerOptions, std::string, ckpt_dir)
  LOCKSTEP_OPTION(TrainerOptions, int64_t, ckpt_every_n_steps)
  /// "" | "last" (ckpt_dir/last.ckpt) | a checkpoint path.
  LOCKSTEP_OPTION(TrainerOptions, std::string, resume)
  /// JSONL: one record per epoch, per logged step and per log_metrics() call (rank 0). "" = none.
  LOCKSTEP_OPTION(TrainerOptions, std::string, metrics_file)
  LOCKSTEP_OPTION(TrainerOptions, int64_t, log_every_n_steps)
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
  /// Throws std::invalid_argument naming the option, the bad value and what is accepted.
  void validate() const;

 private:
  std::optional<int> devices_;
  std::optional<int> num_nodes_;
  comm::Backend backend_ = comm::Backend::kAuto;
  int threads_ = 0;
  int64_t max_epochs_ = 10;
  int64_t max_steps_ = -1;
  BatchLimit limit_train_batches_;
  BatchLimit limit_val_batches_;
  int64_t accumulate_grad_batches_ = 1;
  double gradient_clip_val_ = 0.0;
  std::optional<double> bucket_cap_mb_;
  Precision precision_ = Precision::k32;
  uint64_t seed_ = 0;
  std::string ckpt_dir_;
  int64_t ckpt_every_n_steps_ = 0;
  std::string resume_;
  std::string metrics_file_;
  int64_t log_every_n_steps_ = 0;
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

/// The exit status lockstep's programs use after a preemption notice (SIGUSR1 or SIGTERM while training
/// with a ckpt_dir): last.ckpt holds the position, and the job should be requeued with `--resume last`
/// (EX_TEMPFAIL; the launcher's side of it: lockstep/detail/worker_contract.h).
inline constexpr int kPreemptedExitStatus = lockstep::detail::kPreemptedExitStatus;

/// Intra-op threads per rank: `requested` when > 0, else the host's cores shared by this node's ranks.
int threads_per_rank(int requested, const env::Environment& environment);

/// What fit() produced (the same on every rank).
struct TrainerResult {
  std::vector<EpochMetrics> epochs;  ///< one per completed epoch, reduced over all ranks
  int64_t global_step = 0;
  bool stopped_early = false;  ///< a callback (or max_steps) ended the run before max_epochs
  int64_t skipped_steps = 0;   ///< optimizer steps skipped for a non-finite loss (on_nan "skip")
  std::string stop_reason;
  /// A preemption notice (SIGUSR1 or SIGTERM, to any rank) stopped the run at a step boundary after
  /// last.ckpt was written on every rank's behalf; no final weights. Exit with kPreemptedExitStatus.
  bool preempted = false;
  std::string weights_path;      ///< ckpt_dir/final.pt, when written
  std::string safetensors_path;  ///< ckpt_dir/final.safetensors, when written
};

/// Lightning's Trainer: runs a TrainModule on a DataModule with N data-parallel ranks.
///
/// One epoch: the DistributedSampler shuffles for the epoch, each rank trains its shard (forward under
/// the precision's autocast, backward with DDP's overlapped all-reduce, accumulation through no_sync,
/// clipping, the optimizer step, the schedule's learning rate), then validates its part of the
/// validation set; the logged values are reduced (sync_dist ones over all ranks), rank 0's table is
/// broadcast so that every rank's callbacks see the same numbers, callbacks run, rank 0 prints and
/// records the epoch, last.ckpt is written, and a stop asked for by any rank stops all of them.
///
/// Checkpoints hold the model, the optimizer, the position (epoch, batch, step), every rank's generator
/// and logged sums, the callbacks' states and the GradScaler's: resuming with the same world size
/// reproduces the uninterrupted run bit for bit. With another world size, a checkpoint written at an
/// epoch end resumes normally, and one written mid-epoch re-shards the rest of that epoch: the samples
/// the old ranks had not yet reached are dealt to the new ranks (docs/trainer.md says what stays exact).
class Trainer : public TrainerContext {
 public:
  explicit Trainer(TrainerOptions options = {});
  ~Trainer() override;
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  /// Trains `module` on `data`. Collective: every rank calls it with the same options.
  ///
  /// Started without a launcher (a plain `./train`) with devices(N > 1), fit() starts the ranks itself,
  /// as Lightning's Trainer does: it re-runs this program as N ranks (torchrun's environment, rank 0's
  /// output on this terminal) and, when they finish, exits this process with their status: code after
  /// fit() runs in the ranks, not in the process that started them.
  ///
  /// Throws std::invalid_argument for bad options, std::runtime_error for unreadable checkpoints or
  /// metrics files, comm::CommError when a collective fails or times out.
  TrainerResult fit(std::shared_ptr<TrainModule> module, DataModule& data);

  const TrainerOptions& options() const { return options_; }

  // TrainerContext (what callbacks see).
  int rank() const override;
  int world_size() const override;
  int64_t current_epoch() const override;
  int64_t global_step() const override;
  const std::map<std::string, double>& callback_metrics() const override;
  std::vector<double> learning_rates() const override;
  void request_stop(const std::string& reason) override;
  bool should_stop() const override;
  void save_checkpoint(const std::string& path) override;
  void remove_checkpoint(const std::string& path) override;
  void log_metrics(const std::map<std::string, double>& values) override;
  std::string default_ckpt_dir() const override { return options_.ckpt_dir(); }
  comm::ProcessGroup* process_group() override;

 private:
  struct Run;
  TrainerOptions options_;
  std::unique_ptr<Run> run_;  // the state of the fit() in progress
  int rank_ = 0;              // of the last fit(), still valid after it
  int world_size_ = 1;
};

}  // namespace lockstep::train
