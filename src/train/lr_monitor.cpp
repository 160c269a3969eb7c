// LearningRateMonitor: see include/lockstep/train/lr_monitor.h.
#include "lockstep/train/lr_monitor.h"

#include <stdexcept>
#include <vector>

namespace lockstep::train {

LearningRateMonitor::LearningRateMonitor(std::string logging_interval)
    : logging_interval_(std::move(logging_interval)) {
  if (logging_interval_ != "epoch" && logging_interval_ != "step") {
    throw std::invalid_argument("LearningRateMonitor logging_interval '" + logging_interval_ +
                                "' is not known (expected epoch or step)");
  }
}

std::string LearningRateMonitor::state_key() const {
  return "LearningRateMonitor{logging_interval=" + logging_interval_ + "}";
}

void LearningRateMonitor::on_train_epoch_start(TrainerContext& trainer) {
  if (logging_interval_ == "epoch") record(trainer);
}

void LearningRateMonitor::on_train_batch_end(TrainerContext& trainer, const BatchEnd& batch) {
  if (logging_interval_ == "step" && batch.stepped) record(trainer);
}

void LearningRateMonitor::record(TrainerContext& trainer) {
  const std::vector<double> rates = trainer.learning_rates();
  std::map<std::string, double> values;
  for (std::size_t group = 0; group < rates.size(); ++group)
    values["lr-pg" + std::to_string(group)] = rates[group];
  last_values_ = values;
  if (!values.empty()) trainer.log_metrics(values);
}

}  // namespace lockstep::train
