#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "lockstep/detail/option.h"
#include "lockstep/train/callback.h"

namespace lockstep::train {

/// Options of EarlyStopping; names and defaults follow Lightning's EarlyStopping.
///
/// Example:
///   EarlyStoppingOptions("val_loss").patience(5).min_delta(1e-3)
class EarlyStoppingOptions {
 public:
  /// `monitor`: the callback_metrics() key to watch ("val_loss").
  explicit EarlyStoppingOptions(std::string monitor) : monitor_(std::move(monitor)) {}

  LOCKSTEP_OPTION(EarlyStoppingOptions, std::string, monitor)
  /// "min" (default): a lower monitor is better; "max": a higher one.
  LOCKSTEP_OPTION(EarlyStoppingOptions, std::string, mode)
  /// Checks in a row without improvement after which training stops (3, default; >= 0; 0 stops at the
  /// first check without improvement). A check is one on_validation_end.
  LOCKSTEP_OPTION(EarlyStoppingOptions, int64_t, patience)
  /// The least change that counts as an improvement (>= 0; default 0: any strict improvement).
  LOCKSTEP_OPTION(EarlyStoppingOptions, double, min_delta)
  /// Stop at once when the monitor is NaN or ±inf (default true).
  LOCKSTEP_OPTION(EarlyStoppingOptions, bool, check_finite)
  /// Stop at once when the monitor reaches this value (is below it for min, above it for max).
  LOCKSTEP_OPTION(EarlyStoppingOptions, std::optional<double>, stopping_threshold)
  /// Stop at once when the monitor gets worse than this value (above it for min, below it for max).
  LOCKSTEP_OPTION(EarlyStoppingOptions, std::optional<double>, divergence_threshold)
  /// A monitor missing from callback_metrics() is an error (default true); false: that check is skipped.
  LOCKSTEP_OPTION(EarlyStoppingOptions, bool, strict)

  /// Throws std::invalid_argument naming the option, its value and what is accepted.
  void validate() const;

 private:
  std::string monitor_;
  std::string mode_ = "min";
  int64_t patience_ = 3;
  double min_delta_ = 0.0;
  bool check_finite_ = true;
  std::optional<double> stopping_threshold_;
  std::optional<double> divergence_threshold_;
  bool strict_ = true;
};

/// Stops training when a monitored metric stops improving (Lightning's EarlyStopping).
///
/// In on_validation_end it reads the monitor from callback_metrics(), and in this order: a non-finite
/// value stops (check_finite); reaching stopping_threshold stops; passing divergence_threshold stops; a
/// value better than the best so far by more than min_delta becomes the best and resets the wait count;
/// anything else counts one check without improvement, and `patience` of them in a row stop. Stopping is
/// trainer.request_stop(reason), the reason naming the metric, its value, the best value and the
/// patience; the Trainer stops at the end of the epoch. It decides only from callback_metrics() and its
/// own state, so every rank decides the same.
///
/// Thread-safety: none; the Trainer calls the hooks from one thread.
///
/// Example:
///   auto stop = std::make_shared<EarlyStopping>(EarlyStoppingOptions("val_loss").patience(2));
///   trainer.fit(module, {stop});
///   if (stop->stopped_epoch() > 0) std::cout << "stopped after epoch " << stop->stopped_epoch() << "\n";
class EarlyStopping : public Callback {
 public:
  /// Throws std::invalid_argument for invalid options.
  explicit EarlyStopping(EarlyStoppingOptions options);

  /// "EarlyStopping{monitor=val_loss,mode=min}".
  std::string state_key() const override;
  void on_validation_end(TrainerContext& trainer) override;

  /// JSON: {"wait_count", "stopped_epoch", "best_score", "patience"}; best_score as a number, or the
  /// string "inf"/"-inf" before any finite value (JSON has no infinity).
  std::string state_dict() const override;
  void load_state_dict(const std::string& state) override;

  /// Checks in a row without improvement.
  int64_t wait_count() const { return wait_count_; }
  /// The epoch during which it asked to stop (0 when it has not).
  int64_t stopped_epoch() const { return stopped_epoch_; }
  /// The best monitor value so far (+inf for min, -inf for max before the first).
  double best_score() const { return best_score_; }
  /// Why it asked to stop ("" when it has not).
  const std::string& stop_reason() const { return stop_reason_; }

  const EarlyStoppingOptions& options() const { return options_; }

 private:
  bool better(double candidate, double reference) const;

  EarlyStoppingOptions options_;
  int64_t wait_count_ = 0;
  int64_t stopped_epoch_ = 0;
  double best_score_ = 0.0;  // set by the constructor: +inf for min, -inf for max
  std::string stop_reason_;
};

}  // namespace lockstep::train
