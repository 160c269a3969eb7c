#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/train/step_breakdown.h"

namespace lockstep::train {

/// What one epoch measured, reduced over all ranks (the metrics-file schema of DESIGN.md).
struct EpochMetrics {
  int64_t epoch = 0;           ///< 0-based, as Lightning and DistributedSampler::set_epoch count
  int64_t step = 0;            ///< optimizer steps taken since the start of the run, after this epoch
  double train_loss = 0.0;     ///< mean training loss over the epoch's batches of all ranks
  double val_loss = 0.0;       ///< mean loss per validation sample
  double val_acc = 0.0;        ///< correct / val_samples
  int64_t val_samples = 0;     ///< validation samples counted (the test set once, no padding twice)
  double epoch_s = 0.0;        ///< wall time of the training part (slowest rank)
  double val_s = 0.0;          ///< wall time of validation (slowest rank)
  double samples_per_s = 0.0;  ///< training samples of all ranks per second of epoch_s
  int64_t train_samples = 0;   ///< training samples of all ranks this epoch
  double lr = 0.0;             ///< learning rate of the epoch's last step
  int world_size = 1;
  /// Peak resident memory of a rank's process so far (getrusage's maxrss), the largest over the ranks, MiB.
  double peak_rss_mb = 0.0;
  /// Bytes a rank holds of the model's training state, the largest over the ranks, MiB: its parameters,
  /// DDP's gradient buckets and the optimizer's state tensors (Adam under ddp: 16 bytes a parameter; under
  /// zero1 the optimizer's share is 1/world).
  double model_state_mb = 0.0;
  /// On a GPU: the most memory its CUDA caching allocator has held allocated in a rank so far (tensors,
  /// not the allocator's cached reserve), the largest over the ranks, MiB. Unset (and not written) on the
  /// CPU.
  std::optional<double> peak_cuda_mb;
  /// Where each rank's training steps went (step_breakdown.h), when the Trainer sampled them.
  std::optional<EpochBreakdown> breakdown;
  /// The values the module logged (TrainModule::log), in the order logged, reduced as asked. When set,
  /// the JSON holds these instead of train_loss/val_loss/val_acc (which a module need not log).
  std::vector<std::pair<std::string, double>> logged;
  std::vector<std::string> prog_bar;  ///< the logged names shown on the epoch line

  /// One line of JSON (no newline).
  std::string to_json() const;
  /// The scalars the loggers record for the epoch (docs/logging.md): the logged values by their names
  /// ("train_loss", also logged per step, as "train_loss_epoch": Lightning's suffix), epoch, time/epoch_s,
  /// time/val_s, time/samples_per_s, memory/peak_rss_mb, memory/model_state_mb (memory/peak_cuda_mb on a
  /// GPU), and the step breakdown's.
  std::vector<std::pair<std::string, double>> scalars() const;
};

/// One optimizer step, as `--log-every-n-steps` records it (rank 0's own loss, not reduced: no collective
/// per logged step).
struct StepMetrics {
  int64_t step = 0;  ///< optimizer steps taken since the start of the run, after this one (1-based)
  int64_t epoch = 0;
  int64_t batch = 0;        ///< batches of the epoch done, this step's included
  double train_loss = 0.0;  ///< rank 0's loss of the step's last batch
  double lr = 0.0;          ///< learning rate this step used

  /// One line of JSON (no newline): {"step", "epoch", "batch", "train_loss", "lr"}.
  std::string to_json() const;
  /// The loggers' step record: train_loss_step, lr, epoch.
  std::vector<std::pair<std::string, double>> scalars() const;
};

/// Appends EpochMetrics (and StepMetrics) as JSON lines to a file, flushed after every line so that a crash
/// loses at most the epoch being written. Not thread-safe; rank 0 owns it.
class MetricsWriter {
 public:
  /// Opens `path` for appending (creating it); throws std::runtime_error naming the path and the
  /// reason when it cannot (e.g. a missing directory).
  explicit MetricsWriter(const std::string& path);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  void write(const EpochMetrics& metrics);
  void write(const StepMetrics& metrics);
  /// Any other record: one JSON object, without the newline.
  void write_line(const std::string& json);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace lockstep::train
