#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "lockstep/comm/process_group_options.h"
#include "lockstep/detail/option.h"
#include "lockstep/detail/worker_contract.h"
#include "lockstep/env/environment.h"
#include "lockstep/train/callback.h"
#include "lockstep/train/epoch_metrics.h"
#include "lockstep/train/precision.h"
#include "lockstep/train/train_module.h"
#include "lockstep/train/trainer_options.h"

namespace lockstep::comm {
class ProcessGroup;
}

namespace lockstep::train {

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
  int64_t graph_replays = 0;   ///< steps run by replaying the CUDA graph (cuda_graphs), this rank's
  std::string stop_reason;
  /// A preemption notice (SIGUSR1 or SIGTERM, to any rank) stopped the run at a step boundary after
  /// last.ckpt was written on every rank's behalf; no final weights. Exit with kPreemptedExitStatus.
  bool preempted = false;
  std::string weights_path;      ///< ckpt_dir/final.pt, when written
  std::string safetensors_path;  ///< ckpt_dir/final.safetensors, when written
};

/// Lightning's Trainer: runs a TrainModule on a DataModule with N data-parallel ranks, for batches of any
/// type (BasicTrainModule<B> on BasicDataModule<B>).
///
/// One epoch: the DistributedSampler shuffles for the epoch (or each rank reads its positions of a
/// stream, data::IterableDataset), each rank trains its shard (forward under
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
  ///
  /// `M` derives from BasicTrainModule<B> (TrainModule for the image datasets) and `D` from
  /// BasicDataModule<B> with the same batch type B.
  template <typename M, typename D>
  TrainerResult fit(std::shared_ptr<M> module, D& data) {
    using B = typename M::BatchType;
    static_assert(std::is_base_of_v<BasicTrainModule<B>, M>,
                  "fit: the module must derive from BasicTrainModule<B>");
    static_assert(std::is_base_of_v<BasicDataModule<B>, D>,
                  "fit: the DataModule's batch type must be the TrainModule's (BasicDataModule<B> and "
                  "BasicTrainModule<B> with the same B)");
    return fit_erased(std::move(module), data);
  }

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
  comm::ElasticWorld* elastic_world() override;

 private:
  struct Run;
  TrainerResult fit_erased(std::shared_ptr<TrainModuleBase> module, DataModuleBase& data);
  /// save_checkpoint's write, on rank 0 of the group whose part `path` is.
  void write_checkpoint(const std::string& path, at::Tensor rng_states, std::vector<std::string> logged,
                        std::vector<std::string> shards, const std::string& save);
  TrainerOptions options_;
  std::unique_ptr<Run> run_;  // the state of the fit() in progress
  int rank_ = 0;              // of the last fit(), still valid after it
  int world_size_ = 1;
};

}  // namespace lockstep::train
