#include "lockstep/train/fit_config.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <sstream>
#include <stdexcept>

#include "option_checks.h"

namespace lockstep::train {
namespace {

using detail::check_at_least;
using detail::check_member;
using detail::text;

// "5.3" (GiB, one decimal).
std::string gib(double bytes) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(1) << bytes / static_cast<double>(int64_t{1} << 30);
  return s.str();
}

// Per rank, the synthetic train and test splits together (uint8): more is a typo in synthetic_size or
// synthetic_shape, not a benchmark (every rank holds its own copy).
constexpr int64_t kMaxSyntheticBytes = int64_t{4} << 30;

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> items;
  std::size_t begin = 0;
  while (true) {
    const std::size_t comma = text.find(',', begin);
    items.push_back(text.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin));
    if (comma == std::string::npos) return items;
    begin = comma + 1;
  }
}

// An optional sign and at least one digit (a negative value then gets the range error, which says more).
bool is_whole_number(const std::string& item) {
  const std::size_t start = !item.empty() && (item[0] == '-' || item[0] == '+') ? 1 : 0;
  return item.size() > start && item.find_first_not_of("0123456789", start) == std::string::npos;
}

// monitor, monitor_mode, save_top_k, checkpoint_filename, early_stopping_*: the ModelCheckpoint and
// EarlyStopping callbacks check the same again, but only after the first epoch; here they fail at once.
void check_monitor_options(const FitConfig& config) {
  check_member("monitor_mode", config.monitor_mode, {"min", "max"});
  if (config.save_top_k < -1) {
    throw std::invalid_argument("save_top_k must be -1 (keep all), 0 (none) or a count >= 1, got " +
                                text(config.save_top_k));
  }
  check_at_least<int64_t>("early_stopping_patience", config.early_stopping_patience, 0);
  if (!(config.early_stopping_min_delta >= 0.0 && std::isfinite(config.early_stopping_min_delta))) {
    throw std::invalid_argument("early_stopping_min_delta must be a number >= 0, got " +
                                text(config.early_stopping_min_delta));
  }
  const bool uses_monitor = config.save_top_k != 0 || config.early_stopping_patience > 0;
  if (uses_monitor && config.monitor.empty()) {
    throw std::invalid_argument(
        "monitor '' names no metric: save_top_k and early_stopping_patience rank epochs by it (e.g. monitor "
        "'val_loss', or 'val_acc' with monitor_mode 'max')");
  }
  if (config.save_top_k != 0 && config.trainer.ckpt_dir().empty()) {
    throw std::invalid_argument("save_top_k " + text(config.save_top_k) +
                                " needs ckpt_dir, where the best checkpoints are written");
  }
  if (!config.checkpoint_filename.empty()) {
    if (config.save_top_k == 0) {
      throw std::invalid_argument("checkpoint_filename '" + config.checkpoint_filename +
                                  "' names the save_top_k files, and save_top_k is 0: set save_top_k to K "
                                  "(or -1), or leave checkpoint_filename empty");
    }
    // The pattern's full syntax is ModelCheckpoint's to check; what would break the path is checked here.
    const std::string& pattern = config.checkpoint_filename;
    int depth = 0;
    for (const char c : pattern) {
      depth += c == '{' ? 1 : c == '}' ? -1 : 0;
      if (depth < 0 || depth > 1) break;
    }
    if (depth != 0 || pattern.find('/') != std::string::npos) {
      throw std::invalid_argument("checkpoint_filename '" + pattern +
                                  "' is not a file name pattern (expected text with {name} or {name:fmt} "
                                  "fields and no '/', e.g. '{epoch}-{val_loss:.4f}')");
    }
  }
}

// What `lockstep fit` asks of the Trainer's options beyond TrainerOptions::validate: at least one epoch.
void check_fit_trainer_options(const TrainerOptions& trainer) {
  check_at_least<int64_t>("max_epochs", trainer.max_epochs(), 1);
}

// data, data_dir and synthetic_*: the dataset exists and fits in memory.
void check_mlp_hidden(const FitConfig& config) {
  if (!config.mlp_hidden) return;
  if (config.model != "mlp") {
    throw std::invalid_argument("mlp_hidden applies to model 'mlp' only (model '" + config.model +
                                "' has its own layers): leave it unset, or use model 'mlp'");
  }
  for (int64_t width : *config.mlp_hidden) {
    if (width < 1 || width > (int64_t{1} << 16)) {
      throw std::invalid_argument("mlp_hidden widths must be in 1..65536, got " + text(width));
    }
  }
}

// Pipeline parallelism cuts a model built in stages, and the world into whole pipelines.
void check_pipeline_options(const FitConfig& config) {
  const std::optional<int> devices = config.trainer.devices();
  const int stages = config.trainer.pipeline_parallel();
  if (stages > 1 && config.model == "cnn") {
    throw std::invalid_argument("pipeline_parallel " + text(stages) +
                                " cuts a model built in stages, and model 'cnn' is one: use model mlp, "
                                "resnet18 or gpt, or pipeline_parallel 1");
  }
  if (devices && stages >= 1 && *devices % stages != 0) {
    throw std::invalid_argument("pipeline_parallel " + text(stages) +
                                " does not divide devices=" + text(*devices) +
                                ": choose a multiple of it (the world holds world / P pipelines)");
  }
}

// A language model reads text and only text; an image classifier, images.
void check_text_options(const FitConfig& config) {
  const bool text_data = config.data == "text";
  if ((config.model == "gpt") != text_data) {
    throw std::invalid_argument(
        text_data ? "data 'text' trains a language model, not model '" + config.model + "': use model 'gpt'"
                  : "model 'gpt' is a language model and trains on data 'text', not '" + config.data +
                        "': use data 'text' (text_file names the text; default: the fortunes package's)");
  }
  if (!config.text_file.empty() && !text_data) {
    throw std::invalid_argument("text_file applies to data 'text' only, got data '" + config.data +
                                "': leave it unset, or use data 'text'");
  }
  if (config.trainer.tensor_parallel() > 1 && config.model != "gpt") {
    throw std::invalid_argument("tensor_parallel " + text(config.trainer.tensor_parallel()) +
                                " splits model 'gpt' only, not '" + config.model +
                                "': use model 'gpt' (data 'text'), or tensor_parallel 1");
  }
  const std::optional<int> devices = config.trainer.devices();
  if (devices && config.trainer.tensor_parallel() >= 1 && *devices % config.trainer.tensor_parallel() != 0) {
    throw std::invalid_argument("tensor_parallel " + text(config.trainer.tensor_parallel()) +
                                " does not divide devices=" + text(*devices) +
                                ": choose a multiple of it (the world holds world / T data-parallel groups)");
  }
  if (!text_data) return;
  if (!config.data_dir.empty()) {
    throw std::invalid_argument("data_dir does not apply to data 'text': name the text with text_file");
  }
  if (config.data_on_device || config.augment.value_or(false)) {
    throw std::invalid_argument(std::string(config.data_on_device ? "data_on_device" : "augment") +
                                " applies to images, not to data 'text': leave it off");
  }
}

void check_data_options(const FitConfig& config) {
  if (config.data_on_device && config.resolved_augment()) {
    throw std::invalid_argument(
        "data_on_device keeps the images normalised once on the device, where they cannot be augmented, and "
        "augment 'on' is " +
        std::string(config.augment ? "asked for" : "the default for data '" + config.data + "'") +
        ": set augment 'off', or leave data_on_device off");
  }
  check_at_least<int64_t>("synthetic_size", config.synthetic_size, 8);
  if (config.synthetic_shape && config.data != "synthetic") {
    throw std::invalid_argument("synthetic_shape applies to data 'synthetic' only (data '" + config.data +
                                "' has its own image shape): leave it unset, or use data 'synthetic'");
  }
  if (config.data == "synthetic") {
    const ImageShape shape = config.resolved_synthetic_shape();
    shape.check("synthetic_shape");
    // Both splits (the test split is a quarter of the train split), one byte per pixel, on every rank.
    // (In double: synthetic_size may be any int64.)
    const double images = static_cast<double>(config.synthetic_size) +
                          static_cast<double>(std::max<int64_t>(1, config.synthetic_size / 4));
    const double bytes = images * static_cast<double>(shape.numel());
    if (bytes > static_cast<double>(kMaxSyntheticBytes)) {
      throw std::invalid_argument("synthetic_size " + text(config.synthetic_size) + " of synthetic_shape '" +
                                  shape.to_string() + "' needs " + gib(bytes) +
                                  " GiB per rank (train + test split), more than the 4 GiB allowed: lower "
                                  "synthetic_size or the shape");
    }
    // SmallCnn max-pools 2x2 twice before its last convolution: a side under 4 pools away to nothing.
    if (config.model == "cnn" && (shape.height < 4 || shape.width < 4)) {
      throw std::invalid_argument(
          "model 'cnn' needs images of at least 4x4 (it max-pools twice), got synthetic_shape '" +
          shape.to_string() + "': use a height and width >= 4, or model 'mlp' or 'resnet18' (any size)");
    }
    if (!config.data_dir.empty()) {
      throw std::invalid_argument("data_dir is meaningless with data 'synthetic' (leave it empty)");
    }
  }
  check_text_options(config);
  check_pipeline_options(config);
  if ((config.data == "mnist" || config.data == "cifar10") && config.data_dir.empty()) {
    throw std::invalid_argument("data '" + config.data + "' needs data_dir, the directory holding its files");
  }
}

// The optimizer, its learning rate and schedule.
void check_optimizer_options(const FitConfig& config) {
  check_member("optimizer", config.optimizer, {"adam", "adamw", "sgd"});
  check_member("lr_schedule", config.lr_schedule, {"cosine", "constant", "step"});
  check_member("lr_scaling", config.lr_scaling, {"none", "linear", "sqrt"});
  check_at_least<int64_t>("batch_size", config.batch_size, 1);
  if (config.lr_reference_batch) check_at_least<int64_t>("lr_reference_batch", *config.lr_reference_batch, 1);
  if (config.lr_step_epochs) check_at_least<int64_t>("lr_step_epochs", *config.lr_step_epochs, 1);
  if (!(config.lr_gamma > 0.0 && config.lr_gamma <= 1.0)) {
    throw std::invalid_argument("lr_gamma must be in (0, 1] (the factor of each step decay), got " +
                                text(config.lr_gamma));
  }
  if (config.lr && !(*config.lr > 0.0 && std::isfinite(*config.lr))) {
    throw std::invalid_argument("lr must be a positive number, got " + text(*config.lr));
  }
  if (!(config.weight_decay >= 0.0 && std::isfinite(config.weight_decay))) {
    throw std::invalid_argument("weight_decay must be >= 0, got " + text(config.weight_decay));
  }
  if (!(config.momentum >= 0.0 && config.momentum < 1.0)) {
    throw std::invalid_argument("momentum must be in [0, 1), got " + text(config.momentum));
  }
  if (!(config.warmup_epochs >= 0.0 &&
        config.warmup_epochs <= static_cast<double>(config.trainer.max_epochs()))) {
    throw std::invalid_argument("warmup_epochs must be in [0, max_epochs], got " +
                                text(config.warmup_epochs));
  }
}

}  // namespace

ImageShape ImageShape::parse(const std::string& option, const std::string& text_value) {
  constexpr const char* kExample = "e.g. 3,32,32 for CIFAR-10-sized images, 1,28,28 for Fashion-MNIST-sized";
  const std::vector<std::string> items = split_commas(text_value);
  if (items.size() != 3) {
    throw std::invalid_argument(option + " '" + text_value + "' is not C,H,W: expected 3 whole numbers " +
                                "separated by commas, got " + text(items.size()) + " (" + kExample + ")");
  }
  const char* names[] = {"channels", "height", "width"};
  const int64_t maxima[] = {kMaxChannels, kMaxSide, kMaxSide};
  int64_t values[3] = {0, 0, 0};
  for (int i = 0; i < 3; ++i) {
    if (!is_whole_number(items[i])) {
      throw std::invalid_argument(option + " '" + text_value + "': " + names[i] + " '" + items[i] +
                                  "' is not a whole number (expected C,H,W, " + kExample + ")");
    }
    try {
      values[i] = std::stoll(items[i]);
    } catch (const std::out_of_range&) {
      throw std::invalid_argument(option + " '" + text_value + "': " + names[i] + " must be in 1.." +
                                  text(maxima[i]) + ", got " + items[i] + " (" + kExample + ")");
    }
  }
  ImageShape shape{values[0], values[1], values[2]};
  shape.check(option);
  return shape;
}

std::vector<int64_t> FitConfig::parse_widths(const std::string& option, const std::string& text_value) {
  std::vector<int64_t> widths;
  for (const std::string& item : split_commas(text_value)) {
    if (!is_whole_number(item) || item.size() > 9) {
      throw std::invalid_argument(
          option + " '" + text_value +
          "' is not a list of widths (expected whole numbers separated by commas, e.g. "
          "4096,4096,4096)");
    }
    widths.push_back(std::stoll(item));
  }
  return widths;
}

void ImageShape::check(const std::string& option) const {
  const char* names[] = {"channels", "height", "width"};
  const int64_t values[] = {channels, height, width};
  const int64_t maxima[] = {kMaxChannels, kMaxSide, kMaxSide};
  for (int i = 0; i < 3; ++i) {
    if (values[i] < 1 || values[i] > maxima[i]) {
      throw std::invalid_argument(option + " '" + to_string() + "': " + names[i] + " must be in 1.." +
                                  text(maxima[i]) + ", got " + text(values[i]) +
                                  " (expected C,H,W, e.g. 3,32,32 for CIFAR-10-sized images)");
    }
  }
}

std::string ImageShape::to_string() const {
  return text(channels) + "," + text(height) + "," + text(width);
}

void FitConfig::validate() const {
  check_member("model", model, fit_model_names());
  check_member("data", data, fit_data_names());
  check_member("progress", progress, {"auto", "on", "off"});
  check_fit_trainer_options(trainer);
  trainer.validate();
  check_optimizer_options(*this);
  check_data_options(*this);
  check_mlp_hidden(*this);
  if (num_workers != -1) check_at_least<int64_t>("num_workers", num_workers, 0);
  check_at_least<int64_t>("prefetch_factor", prefetch_factor, 1);
  check_at_least("max_restarts", max_restarts, 0);
  if (dropout && !(*dropout >= 0.0 && *dropout < 1.0)) {
    throw std::invalid_argument("dropout must be in [0, 1), got " + text(*dropout));
  }
  if (dropout && model == "resnet18") {
    throw std::invalid_argument(
        "dropout does not apply to model 'resnet18' (it has no dropout layer): leave it "
        "unset");
  }
  check_monitor_options(*this);
}
std::string FitConfig::resolved_data_dir() const {
  if (!data_dir.empty()) return data_dir;
  if (data == "fashion-mnist") return "/usr/share/datasets/fashion-mnist";
  return "";
}

std::string FitConfig::resolved_text_file() const {
  if (!text_file.empty()) return text_file;
  return data == "text" ? "/usr/share/games/fortunes" : "";
}

double FitConfig::resolved_lr() const {
  if (lr) return *lr;
  return optimizer == "sgd" ? 0.05 : 1e-3;
}

int64_t FitConfig::global_batch_size(int world_size) const {
  return batch_size * static_cast<int64_t>(world_size) * trainer.accumulate_grad_batches();
}

double FitConfig::scaled_lr(int world_size) const {
  if (world_size < 1) {
    throw std::invalid_argument("scaled_lr: world_size must be >= 1, got " + text(world_size));
  }
  return lr_for_global_batch(global_batch_size(world_size));
}

double FitConfig::lr_for_global_batch(int64_t global_batch) const {
  if (global_batch < 1) {
    throw std::invalid_argument("lr_for_global_batch: global_batch must be >= 1, got " + text(global_batch));
  }
  const double ratio = static_cast<double>(global_batch) / static_cast<double>(resolved_lr_reference_batch());
  if (lr_scaling == "linear") return resolved_lr() * ratio;
  if (lr_scaling == "sqrt") return resolved_lr() * std::sqrt(ratio);
  return resolved_lr();
}

}  // namespace lockstep::train
