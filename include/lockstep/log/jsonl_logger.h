#pragma once

#include <fstream>
#include <string>

#include "lockstep/log/logger.h"

namespace lockstep::log {

/// `dir`/metrics.jsonl: one JSON object a log_metrics call, on its own line, flushed:
///   {"step":50,"epoch":0,"train_loss_step":0.25,"lr":0.1}
/// "step" first (the call's step, an integer), then "epoch" when logged, then the other metrics in the
/// caller's order. Doubles are written as the shortest text that reads back as the same double; NaN and
/// infinities, which JSON lacks, as null. log_hyperparams does nothing (hparams.yaml is the csv and
/// tensorboard loggers'). Not thread-safe.
class JsonlLogger : public Logger {
 public:
  /// Creates `dir` (with parents) and metrics.jsonl in it (an existing one is replaced). Throws
  /// std::runtime_error naming the path when either cannot be created.
  explicit JsonlLogger(std::string dir);

  void log_hyperparams(const Hparams& hparams) override;
  void log_metrics(const Metrics& metrics, std::int64_t step) override;
  void flush() override;
  const std::string& dir() const override { return dir_; }
  /// `dir`/metrics.jsonl.
  const std::string& metrics_file() const { return path_; }

 private:
  std::string dir_;
  std::string path_;
  std::ofstream out_;
};

}  // namespace lockstep::log
