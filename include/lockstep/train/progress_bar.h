#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace lockstep::train {

/// A one-line live progress bar for a terminal: "epoch 3/10 [=======>      ] 234/469  25,310 samples/s
/// loss 0.4123", redrawn in place (carriage return) at most every `interval`. `finish()` erases it, so
/// the permanent per-epoch line prints on a clean line. Only for a terminal: callers decide (isatty).
class ProgressBar {
 public:
  explicit ProgressBar(std::FILE* out, std::chrono::milliseconds interval = std::chrono::milliseconds(200))
      : out_(out), interval_(interval) {}

  /// Starts an epoch of `total` steps (-1: unknown, a stream; the bar then shows the batch count alone).
  void start(int64_t epoch, int64_t max_epochs, int64_t total);
  /// Reports progress: `done` steps, `samples` seen by all ranks so far (estimated), last loss.
  void update(int64_t done, int64_t samples, double loss);
  /// Erases the bar.
  void finish();

 private:
  void draw(int64_t done, int64_t samples, double loss);

  std::FILE* out_;
  std::chrono::milliseconds interval_;
  std::chrono::steady_clock::time_point started_, last_draw_;
  int64_t epoch_ = 0, max_epochs_ = 0, total_ = 0;
  bool drawn_ = false;
};

}  // namespace lockstep::train
