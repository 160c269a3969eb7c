#include "lockstep/log/jsonl_logger.h"

#include <cmath>
#include <filesystem>
#include <utility>

#include <nlohmann/json.hpp>

#include "files.h"

namespace lockstep::log {
namespace {

nlohmann::ordered_json json_number(double value) {
  if (!std::isfinite(value)) return nullptr;  // JSON has no NaN or infinity
  return value;
}

}  // namespace

JsonlLogger::JsonlLogger(std::string dir)
    : dir_(std::move(dir)), path_((std::filesystem::path(dir_) / "metrics.jsonl").string()) {
  detail::create_log_dir(dir_);
  out_.open(path_, std::ios::binary | std::ios::trunc);
  if (!out_) detail::throw_io_error("creating", path_);
}

void JsonlLogger::log_hyperparams(const Hparams& /*hparams*/) {}

void JsonlLogger::log_metrics(const Metrics& metrics, std::int64_t step) {
  nlohmann::ordered_json line;
  line["step"] = step;
  for (const auto& [key, value] : metrics) {
    if (key == "epoch") line["epoch"] = json_number(value);
  }
  for (const auto& [key, value] : metrics) {
    if (key != "step" && key != "epoch") line[key] = json_number(value);
  }
  // replace: a key that is not UTF-8 gets U+FFFD instead of throwing mid-run.
  out_ << line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << '\n';
  flush();
}

void JsonlLogger::flush() {
  out_.flush();
  if (!out_) detail::throw_io_error("writing", path_);
}

}  // namespace lockstep::log
