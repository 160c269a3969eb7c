#include "lockstep/log/tensorboard_logger.h"

#include <chrono>
#include <filesystem>
#include <stdexcept>
#include <system_error>
#include <utility>

#include <unistd.h>

#include "files.h"
#include "lockstep/log/event_proto.h"
#include "lockstep/log/hparams_yaml.h"

namespace lockstep::log {
namespace {

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

// events.out.tfevents.<unix_seconds>.<hostname>.<pid>.<n>: the first n whose file does not exist yet.
// Creating it exclusively (TfRecordWriter) still refuses a name another process took in between.
std::string new_event_file_path(const std::string& dir, double wall_time) {
  const std::string stem = "events.out.tfevents." + std::to_string(static_cast<long long>(wall_time)) + "." +
                           host_name() + "." + std::to_string(getpid()) + ".";
  for (int n = 0;; ++n) {
    const auto path = std::filesystem::path(dir) / (stem + std::to_string(n));
    std::error_code error;
    if (!std::filesystem::exists(path, error)) return path.string();
  }
}

TfRecordWriter open_event_file(const std::string& dir, const WallClock& clock) {
  if (!clock) throw std::invalid_argument("TensorBoardLogger: the clock is empty (pass system_wall_time)");
  detail::create_log_dir(dir);
  const double now = clock();
  TfRecordWriter writer(new_event_file_path(dir, now));
  writer.write(encode_file_version_event(now));
  writer.flush();
  return writer;
}

}  // namespace

double system_wall_time() {
  const auto since_epoch = std::chrono::system_clock::now().time_since_epoch();
  return std::chrono::duration<double>(since_epoch).count();
}

TensorBoardLogger::TensorBoardLogger(std::string dir, WallClock clock)
    : dir_(std::move(dir)), clock_(std::move(clock)), writer_(open_event_file(dir_, clock_)) {}

void TensorBoardLogger::log_hyperparams(const Hparams& hparams) {
  write_hparams_yaml(dir_, hparams);
}

void TensorBoardLogger::log_metrics(const Metrics& metrics, std::int64_t step) {
  const double now = clock_();
  for (const auto& [tag, value] : metrics) {
    if (tag == "step") continue;  // the events' own step (logger.h)
    writer_.write(encode_scalar_event(tag, static_cast<float>(value), step, now));
  }
  writer_.flush();
}

void TensorBoardLogger::flush() {
  writer_.flush();
}

}  // namespace lockstep::log
