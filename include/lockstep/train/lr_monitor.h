#pragma once

#include <map>
#include <string>

#include "lockstep/train/callback.h"

namespace lockstep::train {

/// Records the optimizer's learning rates in the metrics file (Lightning's LearningRateMonitor): one
/// record {"epoch", "step", "lr-pg0": ..., "lr-pg1": ...} per parameter group, through
/// trainer.log_metrics. Lightning names the keys after the optimizer ("lr-Adam", "lr-Adam/pg1"); the
/// TrainerContext does not tell the optimizer's name, so lockstep's keys are "lr-pg<i>" for group i, the
/// same whatever the number of groups.
///
/// logging_interval "epoch" (default): at each on_train_epoch_start (the rates the epoch starts with);
/// "step": at each on_train_batch_end after which the optimizer stepped (the rates of that step).
///
/// Thread-safety: none; the Trainer calls the hooks from one thread.
///
/// Example:
///   auto lr = std::make_shared<LearningRateMonitor>("step");
///   trainer.fit(module, {lr});
///   double last = lr->last_values().at("lr-pg0");
class LearningRateMonitor : public Callback {
 public:
  /// Throws std::invalid_argument unless `logging_interval` is "epoch" or "step".
  explicit LearningRateMonitor(std::string logging_interval = "epoch");

  /// "LearningRateMonitor{logging_interval=epoch}".
  std::string state_key() const override;
  void on_train_epoch_start(TrainerContext& trainer) override;
  void on_train_batch_end(TrainerContext& trainer, const BatchEnd& batch) override;

  /// The values last recorded ("lr-pg0" -> rate); empty before the first record.
  const std::map<std::string, double>& last_values() const { return last_values_; }
  const std::string& logging_interval() const { return logging_interval_; }

 private:
  void record(TrainerContext& trainer);

  std::string logging_interval_;
  std::map<std::string, double> last_values_;
};

}  // namespace lockstep::train
