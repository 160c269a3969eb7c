#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/detail/option.h"
#include "lockstep/train/callback.h"

namespace lockstep::train {

/// Options of ModelCheckpoint; names and defaults follow Lightning's ModelCheckpoint.
///
/// Example:
///   ModelCheckpointOptions().monitor("val_acc").mode("max").save_top_k(3).filename("{epoch}-{val_acc:.4f}")
class ModelCheckpointOptions {
 public:
  /// Directory of the checkpoints. "" (default): the Trainer's default_ckpt_dir() (`--ckpt-dir`); an
  /// error at the first save when that is empty too.
  LOCKSTEP_OPTION(ModelCheckpointOptions, std::string, dirpath)
  /// File name pattern, without ".ckpt" (Lightning's): text with `{name}` or `{name:fmt}` fields. `{epoch}`
  /// is the 0-based epoch, `{step}` the global step, any other name a key of callback_metrics(). `fmt` is a
  /// Python/printf format spec: `.4f`, `.2e`, `03d` (`d` rounds the value to an integer). Without `fmt`,
  /// epoch and step print as integers and metrics as `.4f`. A name not in callback_metrics() at save time
  /// is an error naming the available keys (Lightning silently writes 0 instead). "" (default): Lightning's
  /// "{epoch}-{step}". Braces cannot be written literally, and '/' is refused (the file goes in dirpath).
  LOCKSTEP_OPTION(ModelCheckpointOptions, std::string, filename)
  /// Write each field as "name=value" (Lightning's auto_insert_metric_name): "{epoch}-{val_loss:.2f}"
  /// gives "epoch=3-val_loss=0.25.ckpt"; false gives "3-0.25.ckpt".
  LOCKSTEP_OPTION(ModelCheckpointOptions, bool, auto_insert_metric_name)
  /// The callback_metrics() key that ranks the checkpoints. "" (default): none, the latest checkpoints
  /// are kept (save_top_k must then be -1, 0 or 1).
  LOCKSTEP_OPTION(ModelCheckpointOptions, std::string, monitor)
  /// "min" (default): a lower monitor is better; "max": a higher one.
  LOCKSTEP_OPTION(ModelCheckpointOptions, std::string, mode)
  /// The best k checkpoints are kept (1, default); -1: all of them; 0: none (only save_last).
  LOCKSTEP_OPTION(ModelCheckpointOptions, int64_t, save_top_k)
  /// Also write dirpath/last.ckpt at each save point (Lightning's save_last). When dirpath is the
  /// Trainer's own checkpoint directory the Trainer already writes that very file (at every epoch end and
  /// every --ckpt-every-n-steps), so the callback leaves it to the Trainer instead of writing it twice.
  LOCKSTEP_OPTION(ModelCheckpointOptions, bool, save_last)
  /// Save from on_train_batch_end every n optimizer steps (when global_step() % n == 0); 0 (default): off.
  LOCKSTEP_OPTION(ModelCheckpointOptions, int64_t, every_n_train_steps)
  /// Save from on_validation_end every n epochs (after epochs n-1, 2n-1, ...); 0: never. Unset (default):
  /// 1, or 0 when every_n_train_steps is set (Lightning's rule: one trigger unless both are given).
  LOCKSTEP_OPTION(ModelCheckpointOptions, std::optional<int64_t>, every_n_epochs)

  int64_t resolved_every_n_epochs() const {
    return every_n_epochs_.value_or(every_n_train_steps_ > 0 ? 0 : 1);
  }

  /// Throws std::invalid_argument naming the option, its value and what is accepted.
  void validate() const;

 private:
  std::string dirpath_;
  std::string filename_;
  bool auto_insert_metric_name_ = true;
  std::string monitor_;
  std::string mode_ = "min";
  int64_t save_top_k_ = 1;
  bool save_last_ = false;
  int64_t every_n_train_steps_ = 0;
  std::optional<int64_t> every_n_epochs_;
};

/// Saves checkpoints and keeps the best k of them by a monitored metric (Lightning's ModelCheckpoint).
///
/// At each save point (on_validation_end every every_n_epochs epochs; on_train_batch_end every
/// every_n_train_steps steps; never twice at one global step) it reads the monitor from callback_metrics()
/// and saves dirpath/<filename>.ckpt through trainer.save_checkpoint when the value is better than the
/// k-th best kept so far (strictly), or while fewer than k are kept. The file that falls out of the top k
/// is removed (trainer.remove_checkpoint) after the new one is written, so a crash in between leaves one
/// file too many, never one too few. A non-finite value (NaN, ±inf) never enters the top k: a diverged
/// model is not a candidate. Without a monitor, each save point writes a new file and save_top_k 1 keeps
/// only the latest.
///
/// A name that the pattern would repeat (e.g. filename "best") gets "-v1", "-v2", ... unless the file it
/// repeats is the one leaving the top k, which it then replaces (Lightning's version counter, decided from
/// the callback's own state rather than from the file system, so that every rank decides the same).
///
/// Errors: a monitor missing from callback_metrics() in on_validation_end throws std::runtime_error naming
/// the key and the available ones (Lightning's MisconfigurationException); before any validation has run
/// (step-triggered saves in the first epoch) such a save point is skipped, as Lightning does with a warning.
///
/// Thread-safety: none; the Trainer calls the hooks from one thread.
///
/// Example:
///   auto best = std::make_shared<ModelCheckpoint>(
///       ModelCheckpointOptions().monitor("val_loss").save_top_k(2).filename("{epoch}-{val_loss:.4f}"));
///   trainer.fit(module, {best});
///   std::cout << best->best_model_path() << " " << *best->best_model_score() << "\n";
class ModelCheckpoint : public Callback {
 public:
  /// Throws std::invalid_argument for invalid options (ModelCheckpointOptions::validate) and a filename
  /// pattern that does not parse.
  explicit ModelCheckpoint(ModelCheckpointOptions options = {});

  /// "ModelCheckpoint{monitor=val_loss,mode=min,every_n_train_steps=0,every_n_epochs=1}".
  std::string state_key() const override;

  /// Resolves the directory (an error when there is none) so that a missing one fails before training.
  void on_fit_start(TrainerContext& trainer) override;
  void on_train_batch_end(TrainerContext& trainer, const BatchEnd& batch) override;
  void on_validation_end(TrainerContext& trainer) override;

  /// JSON: {"dirpath", "best_model_path", "best_model_score", "kth_best_model_path", "kth_value",
  /// "best_k_models": [[path, score], ...] (in the order they were saved), "last_model_path",
  /// "last_global_step_saved", "validated"}. As in Lightning, a state saved with another dirpath restores
  /// only best_model_path (the files it lists live elsewhere and are not this run's to remove).
  std::string state_dict() const override;
  void load_state_dict(const std::string& state) override;

  /// The best checkpoint kept so far ("" before the first).
  const std::string& best_model_path() const { return best_model_path_; }
  /// Its monitor value (unset without a monitor or before the first save).
  std::optional<double> best_model_score() const { return best_model_score_; }
  /// The checkpoints kept, path -> monitor value (without a monitor: the latest files, scored 0).
  std::map<std::string, double> best_k_models() const;
  /// The worst of the top k once k are kept ("" / unset until then): the next to be removed.
  const std::string& kth_best_model_path() const { return kth_best_model_path_; }
  std::optional<double> kth_value() const { return kth_value_; }
  /// The last.ckpt written by save_last ("" when none).
  const std::string& last_model_path() const { return last_model_path_; }

  /// The file name (with ".ckpt", without the directory) that `filename` gives for these values:
  /// ModelCheckpoint's pattern rules (see ModelCheckpointOptions::filename). Throws std::invalid_argument
  /// for a malformed pattern or a name missing from `metrics` (naming it and the available keys).
  ///
  /// Example: format_checkpoint_name("{epoch}-{val_loss:.2f}", true, 3, 120, {{"val_loss", 0.2514}})
  ///          == "epoch=3-val_loss=0.25.ckpt"
  static std::string format_checkpoint_name(const std::string& filename, bool auto_insert_metric_name,
                                            int64_t epoch, int64_t step,
                                            const std::map<std::string, double>& metrics);

  const ModelCheckpointOptions& options() const { return options_; }

 private:
  void save(TrainerContext& trainer);
  void save_top_k(TrainerContext& trainer, const std::string& dir);
  std::string resolve_dir(const TrainerContext& trainer);
  std::string unique_path(const std::string& dir, const std::string& name,
                          const std::string& replacing) const;
  bool better(double candidate, double reference) const;
  void update_best_and_kth();

  ModelCheckpointOptions options_;
  std::vector<std::pair<std::string, double>> best_k_;  // in the order they were saved
  std::string best_model_path_;
  std::optional<double> best_model_score_;
  std::string kth_best_model_path_;
  std::optional<double> kth_value_;
  std::string last_model_path_;
  std::optional<int64_t> last_global_step_saved_;
  std::string dirpath_used_;  // the directory of the files in best_k_ (checked against a restored state)
  bool validated_ = false;    // on_validation_end has run: a missing monitor is then an error
};

}  // namespace lockstep::train
