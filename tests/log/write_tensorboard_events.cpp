// write_tensorboard_events DIR: a TensorBoardLogger writes known scalars into a fresh DIR, and
// DIR/expected.json records what it wrote (the event file's name; per scalar its tag, step, value as float32
// and wall time), for read_tensorboard.py to compare with what the tensorboard package reads. The clock is
// fake, so every wall time is known.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "lockstep/log/tensorboard_logger.h"

namespace {

struct Written {
  std::string tag;
  long long step;
  float value;
  double wall_time;
};

// Shortest round-trip text of a double: enough for Python's float() to give back the same number.
std::string exact(double value) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.17g", value);
  return text;
}

void write_expected(const std::string& path, const std::string& event_file, const std::vector<Written>& all) {
  std::ofstream out(path);
  out << "{\"event_file\": \"" << std::filesystem::path(event_file).filename().string()
      << "\", \"scalars\": [\n";
  for (std::size_t i = 0; i < all.size(); ++i) {
    const Written& w = all[i];
    out << "  {\"tag\": \"" << w.tag << "\", \"step\": " << w.step << ", \"value\": " << exact(w.value)
        << ", \"wall_time\": " << exact(w.wall_time) << "}" << (i + 1 < all.size() ? ",\n" : "\n");
  }
  out << "]}\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: write_tensorboard_events DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  std::filesystem::remove_all(dir);
  double now = 1764000000.125;  // 2025-11-24, a quarter second past; +1.5 s per call
  lockstep::log::TensorBoardLogger logger(dir, [&now] { return now; });
  std::vector<Written> written;
  for (long long step = 0; step <= 40; step += 10) {
    now += 1.5;
    const double loss = 2.0 / (1.0 + static_cast<double>(step)) + 1e-9;  // not exact in float32
    const lockstep::log::Metrics metrics = {{"train_loss_step", loss},
                                            {"lr", 0.1 * std::pow(0.5, static_cast<double>(step) / 10)},
                                            {"time/epoch_s", -3.25e-7 * static_cast<double>(step)},
                                            {"step", static_cast<double>(step)}};  // not a scalar: the step
    logger.log_metrics(metrics, step);
    for (const auto& [tag, value] : metrics) {
      if (tag != "step") written.push_back({tag, step, static_cast<float>(value), now});
    }
  }
  now += 1.5;
  logger.log_metrics({{"val_loss", 1e30}, {"breakdown/rank_0/step_ms", 12.5}}, /*step=*/1ll << 40);
  written.push_back({"val_loss", 1ll << 40, 1e30F, now});
  written.push_back({"breakdown/rank_0/step_ms", 1ll << 40, 12.5F, now});
  write_expected(dir + "/expected.json", logger.event_file(), written);
  std::printf("wrote %zu scalars to %s\n", written.size(), logger.event_file().c_str());
  return 0;
}
