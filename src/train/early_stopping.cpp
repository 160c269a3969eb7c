// EarlyStopping: see include/lockstep/train/early_stopping.h.
#include "lockstep/train/early_stopping.h"
#include "lockstep/detail/join.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace lockstep::train {
namespace {

// Enough digits to tell close values apart in a message ("0.2513" vs "0.2514"), none wasted on the rest.
std::string number(double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.6g", value);
  return buffer;
}

nlohmann::json score_json(double value) {
  if (std::isfinite(value)) return value;
  return std::isnan(value) ? "nan" : value > 0 ? "inf" : "-inf";
}

double score_from(const nlohmann::json& value) {
  if (value.is_number()) return value.get<double>();
  const std::string text = value.get<std::string>();
  if (text == "inf") return std::numeric_limits<double>::infinity();
  if (text == "-inf") return -std::numeric_limits<double>::infinity();
  if (text == "nan") return std::numeric_limits<double>::quiet_NaN();
  throw std::runtime_error("best_score '" + text + "' is not a number");
}

}  // namespace

void EarlyStoppingOptions::validate() const {
  if (monitor_.empty()) {
    throw std::invalid_argument("EarlyStopping monitor '' names no metric (e.g. \"val_loss\")");
  }
  if (mode_ != "min" && mode_ != "max") {
    throw std::invalid_argument("EarlyStopping mode '" + mode_ + "' is not known (expected min or max)");
  }
  if (patience_ < 0) {
    throw std::invalid_argument("EarlyStopping patience must be >= 0, got " + std::to_string(patience_));
  }
  if (!(min_delta_ >= 0.0 && std::isfinite(min_delta_))) {
    throw std::invalid_argument("EarlyStopping min_delta must be a number >= 0, got " + number(min_delta_));
  }
  for (const auto& [name, value] : {std::pair{"stopping_threshold", stopping_threshold_},
                                    std::pair{"divergence_threshold", divergence_threshold_}}) {
    if (value && std::isnan(*value)) {
      throw std::invalid_argument(std::string("EarlyStopping ") + name + " must be a number, got nan");
    }
  }
}

EarlyStopping::EarlyStopping(EarlyStoppingOptions options) : options_(std::move(options)) {
  options_.validate();
  const double inf = std::numeric_limits<double>::infinity();
  best_score_ = options_.mode() == "min" ? inf : -inf;
}

std::string EarlyStopping::state_key() const {
  return "EarlyStopping{monitor=" + options_.monitor() + ",mode=" + options_.mode() + "}";
}

bool EarlyStopping::better(double candidate, double reference) const {
  return options_.mode() == "min" ? candidate < reference : candidate > reference;
}

void EarlyStopping::on_validation_end(TrainerContext& trainer) {
  const auto& metrics = trainer.callback_metrics();
  const auto found = metrics.find(options_.monitor());
  if (found == metrics.end()) {
    if (!options_.strict()) return;
    const std::string keys =
        lockstep::detail::join(metrics, ", ", [](const auto& entry) { return entry.first; });
    throw std::runtime_error(
        "EarlyStopping(monitor='" + options_.monitor() +
        "') cannot find its metric in the logged metrics (available: " + (keys.empty() ? "none" : keys) +
        "): log it from the TrainModule, or monitor one of those");
  }
  const double current = found->second;
  const std::string& monitor = options_.monitor();
  const bool is_min = options_.mode() == "min";
  std::string reason;
  if (options_.check_finite() && !std::isfinite(current)) {
    reason = "monitored metric " + monitor + " = " + number(current) + " is not finite; the best value was " +
             number(best_score_);
  } else if (options_.stopping_threshold() && better(current, *options_.stopping_threshold())) {
    reason = "stopping threshold reached: " + monitor + " = " + number(current) + (is_min ? " < " : " > ") +
             number(*options_.stopping_threshold());
  } else if (options_.divergence_threshold() && better(*options_.divergence_threshold(), current)) {
    reason = "divergence threshold reached: " + monitor + " = " + number(current) + (is_min ? " > " : " < ") +
             number(*options_.divergence_threshold());
  } else if (better(is_min ? current + options_.min_delta() : current - options_.min_delta(), best_score_)) {
    best_score_ = current;
    wait_count_ = 0;
    return;
  } else {
    ++wait_count_;
    if (wait_count_ < options_.patience()) return;
    reason = "monitored metric " + monitor + " did not improve by more than " + number(options_.min_delta()) +
             " in the last " + std::to_string(wait_count_) + " checks (patience " +
             std::to_string(options_.patience()) + "); it is " + number(current) + ", the best was " +
             number(best_score_);
  }
  stopped_epoch_ = trainer.current_epoch();
  stop_reason_ = "EarlyStopping: " + reason;
  trainer.request_stop(stop_reason_);
}

std::string EarlyStopping::state_dict() const {
  return nlohmann::json{{"wait_count", wait_count_},
                        {"stopped_epoch", stopped_epoch_},
                        {"best_score", score_json(best_score_)},
                        {"patience", options_.patience()}}
      .dump();
}

void EarlyStopping::load_state_dict(const std::string& text) {
  if (text.empty()) return;  // a checkpoint written before the callback was added
  try {
    const nlohmann::json state = nlohmann::json::parse(text);
    const int64_t wait_count = state.at("wait_count").get<int64_t>();
    const int64_t stopped_epoch = state.at("stopped_epoch").get<int64_t>();
    const double best_score = score_from(state.at("best_score"));
    wait_count_ = wait_count;
    stopped_epoch_ = stopped_epoch;
    best_score_ = best_score;
  } catch (const std::exception& e) {
    throw std::runtime_error(state_key() + ": the checkpoint's state of this callback cannot be read (" +
                             e.what() + "): it was written by another version of lockstep, or is damaged");
  }
}

}  // namespace lockstep::train
