#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace lockstep::log {

/// Scalars of one log call, in the caller's order: (key, value). Keys are unique within one call.
using Metrics = std::vector<std::pair<std::string, double>>;
/// A run's configuration, flat: (key, value as text), e.g. {"lr", "0.1"}, {"strategy", "ddp"}.
using Hparams = std::vector<std::pair<std::string, std::string>>;

/// A destination of a run's hyperparameters and metrics, inside one run directory (run_dir.h). Rank 0
/// alone logs; a logger is not thread-safe (one thread calls it).
///
/// The `step` of log_metrics is the x axis of every scalar of that call. A metric named "step" is that
/// same step: it is not logged twice (csv and jsonl have a "step" column/key from `step`; TensorBoard
/// plots against it).
///
/// Example:
///   for (auto& logger : make_loggers("tensorboard,csv", next_version_dir("."))) {
///     logger->log_hyperparams({{"lr", "0.1"}});
///     logger->log_metrics({{"train_loss_step", 0.7}, {"epoch", 0}}, /*step=*/10);
///   }
class Logger {
 public:
  virtual ~Logger() = default;

  /// Records the run's configuration (hparams.yaml for csv and tensorboard; jsonl ignores it). Call it
  /// once, before the first log_metrics. Throws std::runtime_error naming the file on an I/O error.
  virtual void log_hyperparams(const Hparams& hparams) = 0;
  /// Records `metrics` at `step` and flushes them, so a reader of the running job sees them. Throws
  /// std::runtime_error naming the file on an I/O error.
  virtual void log_metrics(const Metrics& metrics, std::int64_t step) = 0;
  /// Hands everything written to the operating system (log_metrics already does).
  virtual void flush() = 0;
  /// The directory this logger writes into (the run's version dir).
  virtual const std::string& dir() const = 0;
};

}  // namespace lockstep::log
