#pragma once

#include <functional>
#include <string>

#include "lockstep/log/logger.h"
#include "lockstep/log/tfrecord_writer.h"

namespace lockstep::log {

/// Seconds since the Unix epoch, as an Event's wall_time holds them. Swappable for tests.
using WallClock = std::function<double()>;
/// The system clock (std::chrono::system_clock), with sub-second precision.
double system_wall_time();

/// TensorBoard's event file in a run directory:
/// `dir`/events.out.tfevents.<unix_seconds>.<hostname>.<pid>.0 (the last number goes up when that name is
/// taken, e.g. by a second logger in the same second). TFRecord-framed Event protos (tfrecord_writer.h,
/// event_proto.h): first the file_version event, then one scalar event per metric of each log_metrics
/// call (float simple_value, the call's step, wall_time = the clock at the call), flushed after each call.
/// A metric named "step" is not written (it is the events' step). log_hyperparams writes hparams.yaml
/// (hparams_yaml.h); the HParams plugin's events are not written.
///
/// Open with: tensorboard --logdir ROOT/lightning_logs
///
/// Example:
///   TensorBoardLogger tb(next_version_dir("."));
///   tb.log_metrics({{"train_loss_step", 0.25}, {"lr", 0.1}}, /*step=*/50);
class TensorBoardLogger : public Logger {
 public:
  /// Creates `dir` (with parents) and the event file, and writes the file_version event. Throws
  /// std::runtime_error naming the path when either cannot be created.
  explicit TensorBoardLogger(std::string dir, WallClock clock = system_wall_time);

  void log_hyperparams(const Hparams& hparams) override;
  void log_metrics(const Metrics& metrics, std::int64_t step) override;
  void flush() override;
  const std::string& dir() const override { return dir_; }
  /// The event file's path.
  const std::string& event_file() const { return writer_.path(); }

 private:
  std::string dir_;
  WallClock clock_;
  TfRecordWriter writer_;
};

}  // namespace lockstep::log
