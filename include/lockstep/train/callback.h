#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace at {
class Tensor;
}
namespace lockstep::comm {
class ElasticWorld;
class ProcessGroup;
}  // namespace lockstep::comm

namespace lockstep::train {

/// What a callback sees of the Trainer running it (Lightning passes `trainer`). The Trainer implements it;
/// tests of callbacks use a fake.
///
/// Rank consistency: callback_metrics() are the same on every rank (the Trainer broadcasts rank 0's values
/// after reducing the sync_dist ones), and the hooks run on every rank in the same order. A callback that
/// decides only from them and from its own state decides identically on all ranks, so a save or a stop
/// can never be taken by one rank alone (the hang of Lightning#19045). Keep it that way: never decide
/// from rank-local values (time, files, a rank's own loss).
class TrainerContext {
 public:
  virtual ~TrainerContext() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  bool is_global_zero() const { return rank() == 0; }
  /// The epoch in progress (0-based).
  virtual int64_t current_epoch() const = 0;
  /// Optimizer steps taken since the start of the run.
  virtual int64_t global_step() const = 0;
  /// The epoch's values logged through TrainModule::log (epoch means, reduced when sync_dist), plus the
  /// Trainer's own ("epoch", "step", "lr"); identical on every rank. Valid in on_validation_end and later;
  /// in on_train_batch_end it holds the previous epoch's values.
  virtual const std::map<std::string, double>& callback_metrics() const = 0;
  /// The learning rate of each of the optimizer's parameter groups, as of the last step.
  virtual std::vector<double> learning_rates() const = 0;

  /// Asks the Trainer to stop at the end of this epoch (after validation and the callbacks). All ranks
  /// must agree: the Trainer combines the requests of all ranks (any rank asking stops all), so a request
  /// made on one rank only still stops every rank together.
  virtual void request_stop(const std::string& reason) = 0;
  virtual bool should_stop() const = 0;

  /// Writes a full checkpoint (model, optimizer, position, RNG state of every rank, callback states) to
  /// `path`. Collective: every rank calls it with the same path, rank 0 writes it atomically. Throws
  /// std::runtime_error naming both when ranks pass different paths.
  virtual void save_checkpoint(const std::string& path) = 0;
  /// Removes a file written by save_checkpoint (rank 0 removes; others return). Not collective.
  virtual void remove_checkpoint(const std::string& path) = 0;
  /// Appends one record {"epoch", "step", name: value...} to the metrics file (rank 0; a no-op without
  /// a metrics file or on other ranks).
  virtual void log_metrics(const std::map<std::string, double>& values) = 0;
  /// The directory for checkpoints when a callback is given none (ckpt_dir; "" when unset).
  virtual std::string default_ckpt_dir() const = 0;
  /// The group the run trains in (Lightning's trainer.strategy); nullptr outside a run. A callback that
  /// runs a collective must run it on every rank, in the same hook.
  virtual comm::ProcessGroup* process_group() { return nullptr; }
  /// The in-place world the run trains in (TrainerOptions::elastic: its members, the changes announced);
  /// nullptr otherwise.
  virtual comm::ElasticWorld* elastic_world() { return nullptr; }
};

/// What on_train_batch_end learns about the batch that just ended.
struct BatchEnd {
  int64_t batch_idx = 0;  ///< 0-based within the epoch
  bool stepped = false;   ///< the optimizer stepped after this batch (the last of an accumulation group)
  double loss = 0.0;      ///< this rank's loss of the batch (rank-local: do not decide from it)
};

/// A hook into training (Lightning's Callback). Every hook runs on every rank, in the order the callbacks
/// were given. Callbacks that keep state (the best scores, a patience counter) return it from
/// state_dict(), which checkpoints store under state_key() and load_state_dict() gets back on resume.
class Callback {
 public:
  virtual ~Callback() = default;

  /// Unique among the run's callbacks, stable across runs: "ModelCheckpoint{monitor=val_loss,mode=min}".
  virtual std::string state_key() const = 0;

  virtual void on_fit_start(TrainerContext& /*trainer*/) {}
  virtual void on_train_epoch_start(TrainerContext& /*trainer*/) {}
  /// After training_step, before the Trainer checks the loss and runs backward (Lightning's hook of the
  /// same name). `loss` may be replaced.
  virtual void on_before_backward(TrainerContext& /*trainer*/, at::Tensor& /*loss*/) {}
  /// At the end of an accumulation group, after the optimizer step (or the step skipped: `batch.stepped`
  /// false) and before the Trainer's step-time work: the checkpoint every ckpt_every_n_steps, the
  /// preemption vote. global_step() counts the step just taken.
  virtual void on_train_step_end(TrainerContext& /*trainer*/, const BatchEnd& /*batch*/) {}
  virtual void on_train_batch_end(TrainerContext& /*trainer*/, const BatchEnd& /*batch*/) {}
  /// After validation: callback_metrics() hold the epoch's training and validation values. Lightning's
  /// ModelCheckpoint and EarlyStopping act here. Runs also when there is no validation data.
  virtual void on_validation_end(TrainerContext& /*trainer*/) {}
  virtual void on_train_epoch_end(TrainerContext& /*trainer*/) {}
  virtual void on_fit_end(TrainerContext& /*trainer*/) {}

  /// The callback's state as text (JSON by convention); "" when it has none.
  virtual std::string state_dict() const { return {}; }
  virtual void load_state_dict(const std::string& /*state*/) {}
};

}  // namespace lockstep::train
