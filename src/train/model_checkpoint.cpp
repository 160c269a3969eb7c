// ModelCheckpoint: see include/lockstep/train/model_checkpoint.h.
#include "lockstep/train/model_checkpoint.h"
#include "lockstep/detail/join.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace lockstep::train {
namespace {

std::string keys_of(const std::map<std::string, double>& metrics) {
  if (metrics.empty()) return "none";
  return lockstep::detail::join(metrics, ", ", [](const auto& entry) { return entry.first; });
}

// One piece of a filename pattern: literal text, or a {name[:spec]} field.
struct Piece {
  bool is_field = false;
  std::string text;  // the literal, or the field's name
  std::string spec;  // the field's format spec ("" when none)
};

// Python format specs that map onto printf unchanged: flags, width, precision, conversion.
const std::regex& spec_syntax() {
  static const std::regex syntax("[-+ #0]*[0-9]*(\\.[0-9]+)?[dfFeEgG]?");
  return syntax;
}

std::vector<Piece> parse_pattern(const std::string& pattern) {
  const auto bad = [&](const std::string& what) {
    return std::invalid_argument(
        "ModelCheckpoint filename '" + pattern + "': " + what +
        " (expected text with {name} or {name:fmt} fields, e.g. '{epoch}-{val_loss:.4f}')");
  };
  if (pattern.find('/') != std::string::npos) throw bad("'/' is not allowed (set dirpath for the directory)");
  std::vector<Piece> pieces;
  std::size_t at = 0;
  while (at < pattern.size()) {
    const std::size_t open = pattern.find_first_of("{}", at);
    if (open == std::string::npos) {
      pieces.push_back({false, pattern.substr(at), ""});
      break;
    }
    if (pattern[open] == '}') throw bad("'}' at " + std::to_string(open) + " closes no field");
    if (open > at) pieces.push_back({false, pattern.substr(at, open - at), ""});
    const std::size_t close = pattern.find_first_of("{}", open + 1);
    if (close == std::string::npos || pattern[close] == '{') {
      throw bad("the field opened at " + std::to_string(open) + " is not closed");
    }
    const std::string field = pattern.substr(open + 1, close - open - 1);
    const std::size_t colon = field.find(':');
    Piece piece{true, field.substr(0, colon), colon == std::string::npos ? "" : field.substr(colon + 1)};
    if (piece.text.empty()) throw bad("a field has no name");
    if (!std::regex_match(piece.spec, spec_syntax())) {
      throw bad("field '" + piece.text + "' has format '" + piece.spec +
                "', not a number format like .4f, .2e or 03d");
    }
    pieces.push_back(std::move(piece));
    at = close + 1;
  }
  return pieces;
}

std::string format_value(double value, const std::string& spec, bool integral) {
  std::string conversion;
  std::string flags = spec;
  if (!spec.empty() && std::string("dfFeEgG").find(spec.back()) != std::string::npos) {
    conversion = spec.substr(spec.size() - 1);
    flags.pop_back();
  }
  if (conversion.empty()) conversion = integral ? "d" : (spec.empty() ? "" : "g");
  if (conversion.empty()) {
    flags = ".4";
    conversion = "f";
  }
  char buffer[128];
  if (conversion == "d") {
    const std::string format = "%" + flags + "lld";
    std::snprintf(buffer, sizeof buffer, format.c_str(), static_cast<long long>(std::llround(value)));
  } else {
    const std::string format = "%" + flags + conversion;
    std::snprintf(buffer, sizeof buffer, format.c_str(), value);
  }
  return buffer;
}

std::string join(const std::string& dir, const std::string& name) {
  return (std::filesystem::path(dir) / name).string();
}

// "ck", "ck/" and "./ck" are one directory; the comparison is lexical, the same on every rank.
bool same_dir(const std::string& a, const std::string& b) {
  const auto normal = [](const std::string& dir) {
    std::string text = std::filesystem::path(dir).lexically_normal().string();
    while (text.size() > 1 && text.back() == '/') text.pop_back();
    return text;
  };
  return normal(a) == normal(b);
}

nlohmann::json optional_json(const std::optional<double>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

std::optional<double> optional_from(const nlohmann::json& value) {
  if (value.is_null()) return std::nullopt;
  return value.get<double>();
}

}  // namespace

void ModelCheckpointOptions::validate() const {
  if (mode_ != "min" && mode_ != "max") {
    throw std::invalid_argument("ModelCheckpoint mode '" + mode_ + "' is not known (expected min or max)");
  }
  if (save_top_k_ < -1) {
    throw std::invalid_argument(
        "ModelCheckpoint save_top_k must be -1 (all), 0 (none) or a count >= 1, got " +
        std::to_string(save_top_k_));
  }
  if (monitor_.empty() && save_top_k_ > 1) {
    throw std::invalid_argument(
        "ModelCheckpoint save_top_k " + std::to_string(save_top_k_) +
        " needs a monitor to rank the checkpoints by: set monitor(\"val_loss\") (or another "
        "metric), or save_top_k -1 (all) or 1 (the latest)");
  }
  if (every_n_train_steps_ < 0) {
    throw std::invalid_argument("ModelCheckpoint every_n_train_steps must be >= 0 (0 = off), got " +
                                std::to_string(every_n_train_steps_));
  }
  if (every_n_epochs_ && *every_n_epochs_ < 0) {
    throw std::invalid_argument("ModelCheckpoint every_n_epochs must be >= 0 (0 = never), got " +
                                std::to_string(*every_n_epochs_));
  }
}

ModelCheckpoint::ModelCheckpoint(ModelCheckpointOptions options) : options_(std::move(options)) {
  options_.validate();
  parse_pattern(options_.filename());  // a bad pattern fails here, not after the first epoch
}

std::string ModelCheckpoint::state_key() const {
  return "ModelCheckpoint{monitor=" + options_.monitor() + ",mode=" + options_.mode() +
         ",every_n_train_steps=" + std::to_string(options_.every_n_train_steps()) +
         ",every_n_epochs=" + std::to_string(options_.resolved_every_n_epochs()) + "}";
}

std::string ModelCheckpoint::format_checkpoint_name(const std::string& filename, bool auto_insert_metric_name,
                                                    int64_t epoch, int64_t step,
                                                    const std::map<std::string, double>& metrics) {
  // Lightning's default pattern, "{epoch}-{step}" ("epoch=3-step=120.ckpt" with auto_insert_metric_name).
  const std::string pattern = filename.empty() ? "{epoch}-{step}" : filename;
  std::string name;
  for (const Piece& piece : parse_pattern(pattern)) {
    if (!piece.is_field) {
      name += piece.text;
      continue;
    }
    double value = 0.0;
    bool integral = false;
    if (piece.text == "epoch" || piece.text == "step") {
      value = static_cast<double>(piece.text == "epoch" ? epoch : step);
      integral = true;
    } else if (const auto found = metrics.find(piece.text); found != metrics.end()) {
      value = found->second;
    } else {
      throw std::invalid_argument("ModelCheckpoint filename '" + pattern + "' names '" + piece.text +
                                  "', which is not among the logged metrics (available: " + keys_of(metrics) +
                                  ", epoch, step)");
    }
    if (auto_insert_metric_name) name += piece.text + "=";
    name += format_value(value, piece.spec, integral);
  }
  return name + ".ckpt";
}

std::map<std::string, double> ModelCheckpoint::best_k_models() const {
  return std::map<std::string, double>(best_k_.begin(), best_k_.end());
}

std::string ModelCheckpoint::resolve_dir(const TrainerContext& trainer) {
  const std::string dir = options_.dirpath().empty() ? trainer.default_ckpt_dir() : options_.dirpath();
  if (dir.empty()) {
    throw std::runtime_error(
        "ModelCheckpoint has no directory for its checkpoints: set "
        "ModelCheckpointOptions().dirpath(DIR), or give the Trainer one (ckpt_dir DIR)");
  }
  // A state restored from a run that wrote elsewhere: its files are not ours to rank or remove (Lightning
  // keeps only best_model_path then).
  if (!dirpath_used_.empty() && !same_dir(dirpath_used_, dir)) {
    best_k_.clear();
    best_model_score_.reset();
    kth_best_model_path_.clear();
    kth_value_.reset();
    last_model_path_.clear();
  }
  dirpath_used_ = dir;
  return dir;
}

void ModelCheckpoint::on_fit_start(TrainerContext& trainer) {
  if (options_.save_top_k() != 0 || options_.save_last()) resolve_dir(trainer);
}

void ModelCheckpoint::on_train_batch_end(TrainerContext& trainer, const BatchEnd& batch) {
  const int64_t every = options_.every_n_train_steps();
  if (every <= 0 || !batch.stepped || trainer.global_step() % every != 0) return;
  save(trainer);
}

void ModelCheckpoint::on_validation_end(TrainerContext& trainer) {
  validated_ = true;
  const int64_t every = options_.resolved_every_n_epochs();
  if (every <= 0 || (trainer.current_epoch() + 1) % every != 0) return;
  save(trainer);
}

void ModelCheckpoint::save(TrainerContext& trainer) {
  if (options_.save_top_k() == 0 && !options_.save_last()) return;
  // A step-triggered save at the epoch's last step and the epoch-end save would write the same state.
  if (last_global_step_saved_ == trainer.global_step()) return;
  const std::string dir = resolve_dir(trainer);
  if (options_.save_top_k() != 0) save_top_k(trainer, dir);
  if (options_.save_last()) {
    last_model_path_ = join(dir, "last.ckpt");
    // The Trainer writes its own last.ckpt in its checkpoint directory: the same file, not written twice.
    if (!same_dir(dir, trainer.default_ckpt_dir())) trainer.save_checkpoint(last_model_path_);
  }
  last_global_step_saved_ = trainer.global_step();
}

bool ModelCheckpoint::better(double candidate, double reference) const {
  return options_.mode() == "min" ? candidate < reference : candidate > reference;
}

void ModelCheckpoint::update_best_and_kth() {
  // Ties go to the earliest saved, as Lightning's min/max over its insertion-ordered dict.
  best_model_path_.clear();
  best_model_score_.reset();
  kth_best_model_path_.clear();
  kth_value_.reset();
  if (best_k_.empty()) return;
  const auto* best = &best_k_.front();
  const auto* worst = &best_k_.front();
  for (const auto& entry : best_k_) {
    if (better(entry.second, best->second)) best = &entry;
    if (better(worst->second, entry.second)) worst = &entry;
  }
  best_model_path_ = best->first;
  best_model_score_ = best->second;
  const auto k = options_.save_top_k();
  if (k == -1 || static_cast<int64_t>(best_k_.size()) == k) {
    kth_best_model_path_ = worst->first;
    kth_value_ = worst->second;
  }
}

std::string ModelCheckpoint::unique_path(const std::string& dir, const std::string& name,
                                         const std::string& replacing) const {
  const std::string stem = name.substr(0, name.size() - std::string(".ckpt").size());
  std::string path = join(dir, name);
  for (int version = 1;; ++version) {
    bool taken = false;
    for (const auto& entry : best_k_) taken = taken || entry.first == path;
    if (!taken || path == replacing) return path;
    path = join(dir, stem + "-v" + std::to_string(version) + ".ckpt");
  }
}

void ModelCheckpoint::save_top_k(TrainerContext& trainer, const std::string& dir) {
  const auto& metrics = trainer.callback_metrics();
  const int64_t k = options_.save_top_k();
  const auto name = [&] {
    return format_checkpoint_name(options_.filename(), options_.auto_insert_metric_name(),
                                  trainer.current_epoch(), trainer.global_step(), metrics);
  };

  if (options_.monitor().empty()) {  // keep the latest: all of them (-1) or one
    const std::string previous = best_model_path_;
    const std::string path = unique_path(dir, name(), k == 1 ? previous : "");
    if (k == 1) best_k_.clear();
    best_k_.emplace_back(path, 0.0);
    best_model_path_ = path;
    trainer.save_checkpoint(path);
    if (k == 1 && !previous.empty() && previous != path) trainer.remove_checkpoint(previous);
    return;
  }

  const auto found = metrics.find(options_.monitor());
  if (found == metrics.end()) {
    // Before the first validation (a step-triggered save in the first epoch) the metric cannot be there yet.
    if (!validated_) return;
    throw std::runtime_error("ModelCheckpoint(monitor='" + options_.monitor() +
                             "') cannot find its metric in the logged metrics (available: " +
                             keys_of(metrics) + "): log it from the TrainModule, or monitor one of those");
  }
  const double current = found->second;
  if (!std::isfinite(current)) return;  // a diverged model is never a candidate
  const auto kept = static_cast<int64_t>(best_k_.size());
  if (k != -1 && kept >= k && !(kth_value_ && better(current, *kth_value_))) return;

  std::string removed;
  if (k != -1 && kept >= k) {
    removed = kth_best_model_path_;
    for (auto it = best_k_.begin(); it != best_k_.end(); ++it) {
      if (it->first == removed) {
        best_k_.erase(it);
        break;
      }
    }
  }
  const std::string path = unique_path(dir, name(), removed);
  best_k_.emplace_back(path, current);
  update_best_and_kth();
  // The new file first: a crash in between leaves one checkpoint too many, never one too few.
  trainer.save_checkpoint(path);
  if (!removed.empty() && removed != path) trainer.remove_checkpoint(removed);
}

std::string ModelCheckpoint::state_dict() const {
  nlohmann::json best_k = nlohmann::json::array();
  for (const auto& [path, score] : best_k_) best_k.push_back({path, score});
  nlohmann::json state{
      {"monitor", options_.monitor()},
      {"dirpath", dirpath_used_},
      {"best_model_path", best_model_path_},
      {"best_model_score", optional_json(best_model_score_)},
      {"kth_best_model_path", kth_best_model_path_},
      {"kth_value", optional_json(kth_value_)},
      {"best_k_models", best_k},
      {"last_model_path", last_model_path_},
      {"last_global_step_saved",
       last_global_step_saved_ ? nlohmann::json(*last_global_step_saved_) : nlohmann::json(nullptr)},
      {"validated", validated_},
  };
  return state.dump();
}

void ModelCheckpoint::load_state_dict(const std::string& text) {
  if (text.empty()) return;  // a checkpoint written before the callback was added
  try {
    const nlohmann::json state = nlohmann::json::parse(text);
    std::vector<std::pair<std::string, double>> best_k;
    for (const auto& entry : state.at("best_k_models")) {
      best_k.emplace_back(entry.at(0).get<std::string>(), entry.at(1).get<double>());
    }
    best_k_ = std::move(best_k);
    dirpath_used_ = state.at("dirpath").get<std::string>();
    best_model_path_ = state.at("best_model_path").get<std::string>();
    best_model_score_ = optional_from(state.at("best_model_score"));
    kth_best_model_path_ = state.at("kth_best_model_path").get<std::string>();
    kth_value_ = optional_from(state.at("kth_value"));
    last_model_path_ = state.at("last_model_path").get<std::string>();
    const auto& step = state.at("last_global_step_saved");
    last_global_step_saved_ = step.is_null() ? std::nullopt : std::optional<int64_t>(step.get<int64_t>());
    validated_ = state.at("validated").get<bool>();
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(state_key() + ": the checkpoint's state of this callback cannot be read (" +
                             e.what() + "): it was written by another version of lockstep, or is damaged");
  }
}

}  // namespace lockstep::train
