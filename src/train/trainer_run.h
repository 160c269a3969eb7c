#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "epoch_reduce.h"
#include "lockstep/comm/device_mesh.h"
#include "lockstep/comm/elastic_world.h"
#include "lockstep/comm/process_group.h"
#include "lockstep/data/shard_loader.h"
#include "lockstep/ddp/distributed_data_parallel.h"
#include "lockstep/log/logger.h"
#include "lockstep/shard/fully_sharded_data_parallel.h"
#include "lockstep/train/precision.h"
#include "lockstep/train/preemption.h"
#include "lockstep/train/progress_bar.h"
#include "lockstep/train/step_breakdown.h"
#include "lockstep/train/strategy/strategy.h"
#include "lockstep/train/trainer.h"
#include "train_module_access.h"
#include "trainer_graph.h"

namespace lockstep::train {

/*
 * One Trainer::fit(), in phases. trainer.h says what a fit does; this is how, one phase per function:
 *
 *   Run(...)        set-up: the process group, the data, DDP around the module, the optimizer
 *   restore()       resume from a checkpoint; for another world size, re-shard the rest of its epoch
 *   train_epoch()   one epoch's batches: forward under autocast, the loss checked, backward (no_sync
 *                   inside an accumulation group), and step() at each group's end
 *   step()          a group's end: the ranks agree on a non-finite loss (on_nan skip), then clipping,
 *                   the learning rate and the optimizer step; step_boundary() follows: the step
 *                   record, the checkpoint every ckpt_every_n_steps and the preemption vote
 *   validate()      this rank's part of the validation set, each sample counted once
 *   reduce_epoch()  the epoch's metrics over all ranks (epoch_reduce.h), the same table everywhere
 *   end_epoch()     callbacks, the epoch line, the stop vote, last.ckpt
 *   finish()        on_fit_end, the final weights, the summary line
 *
 * Every phase runs on every rank in the same order, so the collectives inside match.
 */
struct Trainer::Run {
  using Clock = std::chrono::steady_clock;
  using Ddp = ddp::DistributedDataParallel<std::shared_ptr<TrainModuleBase>>;

  Run(Trainer& trainer, std::shared_ptr<TrainModuleBase> module, DataModuleBase& data,
      const env::Environment& environment);
  ~Run();

  /// Resumes from options.resume(), or from last.ckpt after a launcher restart; nothing otherwise.
  void restore();
  /// The epochs from the restored position on; then finish().
  TrainerResult fit();

  // ---- the state callbacks and the TrainerContext read ----
  Trainer& trainer;
  const TrainerOptions& options;
  env::Environment environment;
  std::optional<comm::ProcessGroup> owned_group;
  std::unique_ptr<comm::ElasticWorld> elastic;  // options.elastic(): `group` is its current generation's
  comm::ProcessGroup* group = nullptr;
  // tensor_parallel or pipeline_parallel > 1: the world as data × pipeline × tensor parallel; the strategy,
  // the data and the epoch's metrics then work over mesh->dp() (data_group()), and votes and rank 0's
  // duties over the world.
  std::unique_ptr<comm::DeviceMesh> mesh;
  std::shared_ptr<TrainModuleBase> module;
  // The module's step state, written here only: its epoch is the epoch in progress (or just finished, in
  // the epoch-end hooks); the module reads it (train_module.h) from set-up on, and after the fit.
  std::shared_ptr<detail::StepState> step_state;
  std::unique_ptr<Strategy> strategy;                     // what wraps the model and the optimizer
  std::shared_ptr<Ddp> ddp;                               // ddp, zero1, zero2
  std::shared_ptr<shard::FullyShardedDataParallel> fsdp;  // fsdp
  OptimizerConfig optim;  // configure_optimizers(): its schedule (its optimizer is moved to `optimizer`)
  std::shared_ptr<torch::optim::Optimizer> optimizer;  // as the strategy steps it
  GradScaler scaler;
  std::unique_ptr<MetricsWriter> metrics_writer;
  std::vector<std::unique_ptr<log::Logger>> loggers;  // rank 0's (options.logger()), in one run directory
  TrainPosition position;                             // where a checkpoint written now resumes
  bool mid_accumulation = false;                      // gradients of an unfinished accumulation group exist
  // The resumed epoch's parts on earlier world sizes (CheckpointState::reshard_parts), with their planned
  // counts filled in.
  std::vector<data::EpochPart> reshard_parts;
  // keep_global_batch: the rank-batches per optimizer step the run keeps (CheckpointState::
  // batches_per_step); 0 otherwise. plan_world() derives the accumulation count from it.
  int64_t batches_per_step = 0;
  std::map<std::string, double> callback_metrics;
  bool stop_requested = false;
  std::string stop_reason;
  double lr = 0.0;

  /// The ranks that train on different data: mesh->dp() under tensor or pipeline parallelism, else the world.
  comm::ProcessGroup& data_group() const { return mesh ? mesh->dp() : *group; }
  /// The checkpoint part this rank's data-parallel group writes and reads (tensor_parallel_path): one per
  /// tensor-parallel rank and stage, pp_rank × T + tp_rank of P × T; 0 of 1 without a mesh.
  int part_rank() const { return mesh ? mesh->model_parallel_rank() : 0; }
  int parts() const { return mesh ? mesh->model_parallel() : 1; }

  /// Every logger records `scalars` at `step` (rank 0; nothing elsewhere).
  void log_scalars(const std::vector<std::pair<std::string, double>>& scalars, int64_t step) const;

  /// The module's table of logged values (what log() adds to; the epoch's, summed on this rank).
  LoggedMetrics& logged() const { return detail::TrainModuleAccess::logged(*module); }
  /// What replays of the CUDA graph step logged since the last call, added to logged()
  /// (TrainerGraph::flush_logs: at epoch ends and checkpoints). Nothing without a graph.
  void flush_graph_logs();

 private:
  /// What one epoch's training part did on this rank.
  struct EpochTraining {
    int64_t batches = 0;  // of the epoch, done (counted from its first batch, also when resumed)
    int64_t planned = 0;  // the epoch's batches (-1 until a stream of unknown length ends)
    int64_t samples = 0;  // this rank's, this run
    double seconds = 0.0;
  };
  /// elastic: the training state as of the last committed step, to which a dropped step returns.
  struct Commit {
    int64_t batch = 0;  // the batch after it, in the epoch's current part
    int64_t samples = 0;
    LoggedMetrics logged;
    // The world that trained the part up to `batch`: a re-formation that fails half-way (a joiner lost in
    // its admission) leaves the group changed, not the part.
    int world = 0;
  };
  /// This rank's validation.
  struct Validation {
    int64_t samples = 0;
    double seconds = 0.0;
  };

  /// Shuts the pipeline's links and the mesh's subgroups down; the world stays open.
  void shutdown_mesh();
  /// This rank's device (options.accelerator(), device_choice.h), made current.
  void choose_device();
  void connect();
  /// `batch` (from `loader`) on this rank's device.
  data::detail::AnyBatch on_device(const data::detail::AnyShardLoader& loader,
                                   data::detail::AnyBatch batch) const;
  void setup_data(DataModuleBase& data);
  /// This rank's part of training epoch `e` (limit_train_batches applied; no resume position).
  data::ShardPlan train_plan(int64_t e) const;
  /// train_batches_ and val_batches_ for the current group.
  void plan_batches();
  /// Batches per rank that `world` ranks plan for an epoch (limit_train_batches applied; -1: unknown).
  int64_t planned_batches(int world) const;
  /// This rank's part of validation epoch `e`: dataset order, every sample once, limit_val_batches applied.
  data::ShardPlan val_plan(int64_t e) const;
  void setup_model();
  /// The strategy over `group`, and the model in it: DDP (broadcasting rank 0's parameters when
  /// `init_sync`) or FSDP.
  void wrap_model(bool init_sync);
  /// The plan's place in the current group: world size, rank, batches and steps per epoch.
  void plan_world();
  // The module's schedule for the plan's new length (configure_optimizers() again); the optimizer it also
  // makes is dropped (the run's keeps its state).
  void refresh_schedule();
  // keep_global_batch: "; global batch 384 kept: each rank accumulates 3 batch(es)", or "; global batch
  // 512, not 384 (4 ranks do not divide 6 batches a step): ..."; "" otherwise.
  std::string describe_batch() const;
  std::string resume_path() const;
  void reshard_after(const CheckpointState& saved);
  CheckpointState load_tensor_parallel_part(const std::string& whole_path);
  void share_metrics(std::vector<detail::MetricValue>& metrics, comm::ProcessGroup& group, int root);
  void load_shards(const std::vector<std::string>& shards);

  // ---- cuda_graphs (trainer_graph.cpp: the Run's side of TrainerGraph) ----
  /// With cuda_graphs: the step is captured from the warm-up's end on, or a line says why not.
  void setup_graph();
  /// Batch `b` as the graph's step: captured (the first batch after the warm-up steps) and replayed, or
  /// replayed, as an optimizer step of the run; returns the last loss read on the host (at the step
  /// records; NaN before the first). std::nullopt: run it eagerly (warm-up, a batch of another shape, no
  /// graph).
  std::optional<double> graph_step(const data::detail::AnyBatch& batch, int64_t b);

  EpochTraining train_epoch(int64_t epoch);
  /// elastic: the world changed (or a collective failed) during epoch `e`'s batches. Waits for the new
  /// generation (rethrowing when no rank was lost), drops what followed the last committed step, rebuilds
  /// the strategy over the new group and restarts the loader on the rest of the epoch re-sharded over it.
  /// Returns the rest's batch count.
  int64_t recover_in_epoch(int64_t e, EpochTraining& training);
  /// elastic: the last committed vote admits joining ranks (ElasticWorld::admitting) after batch
  /// committed_.batch of epoch `e`: the world grows there, the joiners get the state (send_admission), and
  /// the rest of the epoch is re-sharded. Returns the rest's batch count.
  int64_t admit_in_epoch(int64_t e, EpochTraining& training);
  /// elastic, after a re-formation inside epoch `e`: what the last world committed (committed_) becomes one
  /// more part of the epoch, the joiners (if any) get the state, and the loader restarts on the rest dealt
  /// over the new world. The part is kept only once the joiners have it, so that a failure in between
  /// recovers from the same commit. Returns the rest's batch count.
  int64_t restart_rest(int64_t e, EpochTraining& training, const comm::MembershipChange& change);
  /// elastic: the next generation's group in place of the old one: strategy, DDP (broadcasting rank 0's
  /// parameters only when ranks joined: the survivors applied the same steps), the plan's rank and world,
  /// and rank 0's duties for a new rank 0. Logs the change.
  void rejoin(const comm::MembershipChange& change);
  /// elastic, trainer_restore.cpp: rank 0 sends what a joining rank needs to go on with the others (the
  /// optimizer state, the step, the epoch's parts, the callbacks' and the scaler's state; the parameters
  /// came with DDP's broadcast); receive_admission is the joiner's side, in place of restore().
  void send_admission(int64_t e, const std::vector<data::EpochPart>& parts);
  void receive_admission();
  /// elastic: ranks joined in a re-formation between epochs (a loss there while a join was pending), where
  /// no step boundary can admit them: throws std::runtime_error saying so.
  [[noreturn]] void refuse_joined_between_epochs(const comm::MembershipChange& change) const;
  /// elastic: the schedule's length (TrainingPlan::estimated_stepping_batches, configure_optimizers' new
  /// schedule) for the steps done plus those left: `rest` batches of epoch `e`, then the later epochs on
  /// the new world. The rate moves to the new schedule's value at the current step.
  void replan_schedule(int64_t e, int64_t rest);
  /// f(), and under elastic f() again on the next generation's group after each CommError that a lost rank
  /// caused (for the collectives between epochs, which drop no step).
  template <typename F>
  auto elastic_retry(F&& f) -> decltype(f()) {
    for (;;) {
      try {
        return f();
      } catch (const comm::CommError&) {
        if (!elastic) throw;
        const comm::MembershipChange change = elastic->reform();
        if (!change.joined.empty()) refuse_joined_between_epochs(change);
        rejoin(change);
      }
    }
  }
  /// Forward and backward of batch `b` (of `samples` samples); returns its loss (non-finite only with
  /// on_nan skip).
  double train_batch(const void* batch, int64_t samples, int64_t b, bool steps_now);
  /// Under pipeline parallelism, train_batch's forward and backward: the batch through the strategy's
  /// pipeline, its loss logged as "train_loss". Returns the loss.
  double pipeline_batch(const void* batch);
  /// A non-finite training loss: thrown as an error, or (on_nan skip) the step marked to be skipped and
  /// what the batch logged dropped.
  void check_finite_loss(double value, int64_t b);
  /// The end of an accumulation group; returns whether the optimizer stepped.
  bool step(int64_t b);
  /// The learning rate of the step about to run (the schedule's), set on the optimizer.
  void apply_lr();
  /// Steps between the loggers' step records (log_every_n_steps; Lightning's 50 when that is 0).
  int64_t step_record_interval() const;
  void step_boundary(int64_t b, bool stepped, double batch_loss);
  Validation validate(int64_t epoch);
  EpochMetrics reduce_epoch(int64_t epoch, const EpochTraining& training, const Validation& validation);
  void end_epoch(int64_t epoch, const EpochMetrics& metrics);
  /// The report of an epoch cut short (preemption, max_steps); false when it ran to its end.
  bool report_cut_short(int64_t epoch, const EpochTraining& training);
  TrainerResult finish();
  void print_line(const std::string& line) const;

  const Clock::time_point started_ = Clock::now();
  bool is_main_ = false;
  int local_rank_ = 0;
  c10::Device device_{c10::kCPU};  // this rank's (device.h): the model's, the batches', autocast's
  Precision precision_ = Precision::k32;
  // data
  std::unique_ptr<data::detail::AnyShardLoader> train_loader_, val_loader_;  // val: null without validation
  int64_t batch_size_ = 0;
  int64_t train_batches_ = 0;  // per epoch, limit_train_batches applied; -1: unknown (a stream)
  int64_t val_batches_ = -1;   // this rank's, limit_val_batches applied; -1: all (a stream, no count)
  // resume
  TrainPosition start_;
  bool resumed_ = false;
  // step-time state
  std::string last_ckpt_;
  std::unique_ptr<PreemptionHandlers> preemption_;
  int preempted_by_ = 0;
  StepTimer step_timer_;        // the step breakdown's sampled batches (breakdown_every_n_batches)
  bool group_has_nan_ = false;  // a non-finite loss in the accumulation group in progress (on_nan skip)
  TrainerGraph graph_;  // cuda_graphs: the captured step (with cuda_graphs on a GPU its stream is current)
  LoggedMetrics logged_before_;
  Commit committed_;              // elastic
  bool replan_at_start_ = false;  // elastic, a joiner: its first epoch's schedule is the survivors'
  bool max_steps_reached_ = false;
  ProgressBar bar_;
  TrainerResult result_;
};

}  // namespace lockstep::train
