#include "lockstep/train/fit_config.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <sstream>
#include <stdexcept>

namespace lockstep::train {
namespace {

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

template <typename T>
std::string text(const T& value) {
  std::ostringstream s;
  s << value;
  return s.str();
}

void check_member(const char* flag, const std::string& value, const std::vector<std::string>& accepted) {
  if (std::find(accepted.begin(), accepted.end(), value) == accepted.end()) {
    throw std::invalid_argument(std::string(flag) + " '" + value +
                                "' is not known (expected one of: " + joined(accepted) + ")");
  }
}

template <typename T>
void check_at_least(const char* flag, T value, T minimum) {
  if (value < minimum) {
    throw std::invalid_argument(std::string(flag) + " must be >= " + text(minimum) + ", got " + text(value));
  }
}

// "5.3" (GiB, one decimal).
std::string gib(double bytes) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(1) << bytes / static_cast<double>(int64_t{1} << 30);
  return s.str();
}

// Per rank, the synthetic train and test splits together (uint8): more is a typo in --synthetic-size or
// --synthetic-shape, not a benchmark (every rank holds its own copy).
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

// --monitor, --monitor-mode, --save-top-k, --checkpoint-filename, --early-stopping-*: the ModelCheckpoint and
// EarlyStopping callbacks check the same again, but only after the first epoch; here they fail at once.
void check_monitor_flags(const FitConfig& config) {
  check_member("--monitor-mode", config.monitor_mode, {"min", "max"});
  if (config.save_top_k < -1) {
    throw std::invalid_argument("--save-top-k must be -1 (keep all), 0 (none) or a count >= 1, got " +
                                text(config.save_top_k));
  }
  check_at_least<int64_t>("--early-stopping-patience", config.early_stopping_patience, 0);
  if (!(config.early_stopping_min_delta >= 0.0 && std::isfinite(config.early_stopping_min_delta))) {
    throw std::invalid_argument("--early-stopping-min-delta must be a number >= 0, got " +
                                text(config.early_stopping_min_delta));
  }
  const bool uses_monitor = config.save_top_k != 0 || config.early_stopping_patience > 0;
  if (uses_monitor && config.monitor.empty()) {
    throw std::invalid_argument(
        "--monitor '' names no metric: --save-top-k and --early-stopping-patience rank "
        "epochs by it (e.g. --monitor val_loss, or val_acc with --monitor-mode max)");
  }
  if (config.save_top_k != 0 && config.ckpt_dir.empty()) {
    throw std::invalid_argument("--save-top-k " + text(config.save_top_k) +
                                " needs --ckpt-dir DIR (where the best checkpoints are written)");
  }
  if (!config.checkpoint_filename.empty()) {
    if (config.save_top_k == 0) {
      throw std::invalid_argument("--checkpoint-filename '" + config.checkpoint_filename +
                                  "' names the --save-top-k files, and --save-top-k is 0: set --save-top-k K "
                                  "(or -1), or drop it");
    }
    // The pattern's full syntax is ModelCheckpoint's to check; what would break the path is checked here.
    const std::string& pattern = config.checkpoint_filename;
    int depth = 0;
    for (const char c : pattern) {
      depth += c == '{' ? 1 : c == '}' ? -1 : 0;
      if (depth < 0 || depth > 1) break;
    }
    if (depth != 0 || pattern.find('/') != std::string::npos) {
      throw std::invalid_argument("--checkpoint-filename '" + pattern +
                                  "' is not a file name pattern (expected text with {name} or {name:fmt} "
                                  "fields and no '/', e.g. '{epoch}-{val_loss:.4f}')");
    }
  }
}

}  // namespace

ImageShape ImageShape::parse(const std::string& flag, const std::string& text_value) {
  constexpr const char* kExample = "e.g. 3,32,32 for CIFAR-10-sized images, 1,28,28 for Fashion-MNIST-sized";
  const std::vector<std::string> items = split_commas(text_value);
  if (items.size() != 3) {
    throw std::invalid_argument(flag + " '" + text_value + "' is not C,H,W: expected 3 whole numbers " +
                                "separated by commas, got " + text(items.size()) + " (" + kExample + ")");
  }
  const char* names[] = {"channels", "height", "width"};
  const int64_t maxima[] = {kMaxChannels, kMaxSide, kMaxSide};
  int64_t values[3] = {0, 0, 0};
  for (int i = 0; i < 3; ++i) {
    if (!is_whole_number(items[i])) {
      throw std::invalid_argument(flag + " '" + text_value + "': " + names[i] + " '" + items[i] +
                                  "' is not a whole number (expected C,H,W, " + kExample + ")");
    }
    try {
      values[i] = std::stoll(items[i]);
    } catch (const std::out_of_range&) {
      throw std::invalid_argument(flag + " '" + text_value + "': " + names[i] + " must be in 1.." +
                                  text(maxima[i]) + ", got " + items[i] + " (" + kExample + ")");
    }
  }
  ImageShape shape{values[0], values[1], values[2]};
  shape.check(flag);
  return shape;
}

void ImageShape::check(const std::string& flag) const {
  const char* names[] = {"channels", "height", "width"};
  const int64_t values[] = {channels, height, width};
  const int64_t maxima[] = {kMaxChannels, kMaxSide, kMaxSide};
  for (int i = 0; i < 3; ++i) {
    if (values[i] < 1 || values[i] > maxima[i]) {
      throw std::invalid_argument(flag + " '" + to_string() + "': " + names[i] + " must be in 1.." +
                                  text(maxima[i]) + ", got " + text(values[i]) +
                                  " (expected C,H,W, e.g. 3,32,32 for CIFAR-10-sized images)");
    }
  }
}

std::string ImageShape::to_string() const {
  return text(channels) + "," + text(height) + "," + text(width);
}

BatchLimit BatchLimit::parse(const std::string& flag, const std::string& text_value) {
  BatchLimit limit;
  const bool fractional = text_value.find_first_of(".eE") != std::string::npos;
  try {
    std::size_t used = 0;
    if (fractional) {
      const double f = std::stod(text_value, &used);
      if (used == text_value.size() && f > 0.0 && f <= 1.0) {
        limit.is_fraction = true;
        limit.fraction = f;
        return limit;
      }
    } else {
      const long long n = std::stoll(text_value, &used);
      if (used == text_value.size() && n >= 1) {
        limit.is_fraction = false;
        limit.count = n;
        return limit;
      }
    }
  } catch (const std::exception&) {
    // fall through to the error below
  }
  throw std::invalid_argument(flag + " '" + text_value +
                              "' is not a batch count >= 1 (e.g. 50) or a fraction in (0, 1] (e.g. 0.25)");
}

int64_t BatchLimit::apply(int64_t available) const {
  if (available <= 0) return 0;
  if (!is_fraction) return std::min(available, count);
  const auto n = static_cast<int64_t>(std::floor(fraction * static_cast<double>(available)));
  return std::clamp<int64_t>(n, 1, available);
}

std::string BatchLimit::to_string() const {
  return is_fraction ? text(fraction) : text(count);
}

void FitConfig::validate() const {
  check_member("--model", model, fit_model_names());
  check_member("--data", data, fit_data_names());
  check_member("--optimizer", optimizer, {"adam", "adamw", "sgd"});
  check_member("--lr-schedule", lr_schedule, {"cosine", "constant", "step"});
  check_member("--lr-scaling", lr_scaling, {"none", "linear", "sqrt"});
  check_member("--progress", progress, {"auto", "on", "off"});
  if (backend == "nccl") {
    // lockstep fit trains on the CPU; NCCL moves GPU tensors only.
    throw std::invalid_argument(
        "--backend nccl is not available to lockstep fit, which trains on the CPU (use "
        "--backend auto, shm, hier, gloo or mpi)");
  }
  // mpi: whether this build has it, and whether mpirun started the ranks, is checked where the group is made.
  check_member("--backend", backend, {"auto", "shm", "hier", "gloo", "mpi"});
  check_member("--precision", precision, {"32", "bf16-mixed", "16-mixed"});
  if (precision == "16-mixed") {
    // lockstep fit trains on the CPU, where autocast has no float16 (and the Trainer would refuse it too).
    throw std::invalid_argument(
        "--precision 16-mixed needs a CUDA device (float16 autocast with a gradient scaler); lockstep fit "
        "trains "
        "on the CPU: use --precision bf16-mixed (or 32)");
  }
  if (devices) check_at_least("--devices", *devices, 1);
  if (num_nodes) check_at_least("--num-nodes", *num_nodes, 1);
  check_at_least("--threads", threads, 0);
  check_at_least<int64_t>("--max-epochs", max_epochs, 1);
  check_at_least<int64_t>("--batch-size", batch_size, 1);
  check_at_least<int64_t>("--accumulate-grad-batches", accumulate_grad_batches, 1);
  if (lr_reference_batch) check_at_least<int64_t>("--lr-reference-batch", *lr_reference_batch, 1);
  if (lr_step_epochs) check_at_least<int64_t>("--lr-step-epochs", *lr_step_epochs, 1);
  if (!(lr_gamma > 0.0 && lr_gamma <= 1.0)) {
    throw std::invalid_argument("--lr-gamma must be in (0, 1] (the factor of each step decay), got " +
                                text(lr_gamma));
  }
  if (num_workers != -1) check_at_least<int64_t>("--num-workers", num_workers, 0);
  check_at_least<int64_t>("--prefetch-factor", prefetch_factor, 1);
  check_at_least<int64_t>("--synthetic-size", synthetic_size, 8);
  if (lr && !(*lr > 0.0 && std::isfinite(*lr))) {
    throw std::invalid_argument("--lr must be a positive number, got " + text(*lr));
  }
  if (!(weight_decay >= 0.0 && std::isfinite(weight_decay))) {
    throw std::invalid_argument("--weight-decay must be >= 0, got " + text(weight_decay));
  }
  if (!(momentum >= 0.0 && momentum < 1.0)) {
    throw std::invalid_argument("--momentum must be in [0, 1), got " + text(momentum));
  }
  if (!(warmup_epochs >= 0.0 && warmup_epochs <= static_cast<double>(max_epochs))) {
    throw std::invalid_argument("--warmup-epochs must be in [0, --max-epochs], got " + text(warmup_epochs));
  }
  if (bucket_cap_mb && !(*bucket_cap_mb > 0.0 && std::isfinite(*bucket_cap_mb))) {
    throw std::invalid_argument("--bucket-cap-mb must be a number of MiB > 0, or auto (the default), got " +
                                text(*bucket_cap_mb));
  }
  if (!(gradient_clip_val >= 0.0 && std::isfinite(gradient_clip_val))) {
    throw std::invalid_argument("--gradient-clip-val must be >= 0 (0 = off), got " + text(gradient_clip_val));
  }
  if (synthetic_shape && data != "synthetic") {
    throw std::invalid_argument("--synthetic-shape applies to --data synthetic only (--data " + data +
                                " has its own image shape): drop it, or use --data synthetic");
  }
  if (data == "synthetic") {
    const ImageShape shape = resolved_synthetic_shape();
    shape.check("--synthetic-shape");
    // Both splits (the test split is a quarter of the train split), one byte per pixel, on every rank.
    // (In double: --synthetic-size may be any int64.)
    const double images =
        static_cast<double>(synthetic_size) + static_cast<double>(std::max<int64_t>(1, synthetic_size / 4));
    const double bytes = images * static_cast<double>(shape.numel());
    if (bytes > static_cast<double>(kMaxSyntheticBytes)) {
      throw std::invalid_argument("--synthetic-size " + text(synthetic_size) + " of --synthetic-shape " +
                                  shape.to_string() + " needs " + gib(bytes) +
                                  " GiB per rank (train + test split), more than the 4 GiB allowed: lower "
                                  "--synthetic-size or the shape");
    }
    // SmallCnn max-pools 2x2 twice before its last convolution: a side under 4 pools away to nothing.
    if (model == "cnn" && (shape.height < 4 || shape.width < 4)) {
      throw std::invalid_argument(
          "--model cnn needs images of at least 4x4 (it max-pools twice), got --synthetic-shape " +
          shape.to_string() + ": use a height and width >= 4, or --model mlp or resnet18 (any size)");
    }
  }
  if (dropout && !(*dropout >= 0.0 && *dropout < 1.0)) {
    throw std::invalid_argument("--dropout must be in [0, 1), got " + text(*dropout));
  }
  if (dropout && model == "resnet18") {
    throw std::invalid_argument(
        "--dropout does not apply to --model resnet18 (it has no dropout layer): drop it");
  }
  check_at_least<int64_t>("--ckpt-every-n-steps", ckpt_every_n_steps, 0);
  check_at_least<int64_t>("--log-every-n-steps", log_every_n_steps, 0);
  check_at_least("--max-restarts", max_restarts, 0);
  check_member("--on-nan", on_nan, {"stop", "skip"});
  if (!(collective_timeout >= 0.0 && collective_timeout <= 1e7)) {
    throw std::invalid_argument(
        "--collective-timeout must be a number of seconds in (0, 1e7] (0 = the default), got " +
        text(collective_timeout));
  }
  if (max_steps != -1) check_at_least<int64_t>("--max-steps", max_steps, 1);
  check_monitor_flags(*this);
  if (ckpt_every_n_steps > 0 && ckpt_dir.empty()) {
    throw std::invalid_argument("--ckpt-every-n-steps " + text(ckpt_every_n_steps) +
                                " needs --ckpt-dir DIR (where last.ckpt is written)");
  }
  if (resume == "last" && ckpt_dir.empty()) {
    throw std::invalid_argument(
        "--resume last needs --ckpt-dir DIR (it resumes from DIR/last.ckpt); or give "
        "--resume the checkpoint's path");
  }
  if (resume == "auto" && ckpt_dir.empty()) {
    throw std::invalid_argument(
        "--resume auto needs --ckpt-dir DIR (it resumes from DIR/last.ckpt when that "
        "exists, else starts fresh); or give --resume the checkpoint's path");
  }
  if (!resume.empty() && !resolved_resume_path().empty()) {
    const std::string path = resolved_resume_path();
    std::FILE* file = std::fopen(path.c_str(), "rb");
    if (file == nullptr) {
      throw std::invalid_argument("--resume " + resume + ": cannot open checkpoint '" + path + "' (" +
                                  std::strerror(errno) +
                                  "): check the path, or drop --resume to start from scratch");
    }
    std::fclose(file);
  }
  if (data == "synthetic" && !data_dir.empty()) {
    throw std::invalid_argument("--data-dir is meaningless with --data synthetic (drop it)");
  }
  if ((data == "mnist" || data == "cifar10") && data_dir.empty()) {
    throw std::invalid_argument("--data " + data + " needs --data-dir DIR (the directory holding its files)");
  }
}

std::string FitConfig::resolved_data_dir() const {
  if (!data_dir.empty()) return data_dir;
  if (data == "fashion-mnist") return "/usr/share/datasets/fashion-mnist";
  return "";
}

std::string FitConfig::resolved_resume_path() const {
  const std::string last =
      (ckpt_dir.empty() || ckpt_dir.back() == '/' ? ckpt_dir : ckpt_dir + "/") + "last.ckpt";
  if (resume == "last") return last;
  if (resume == "auto") {
    std::error_code error;
    return !ckpt_dir.empty() && std::filesystem::exists(last, error) ? last : "";
  }
  return resume;
}

std::string FitConfig::resolved_resume() const {
  if (resume != "auto") return resume;
  return resolved_resume_path().empty() ? "" : "last";
}

double FitConfig::resolved_lr() const {
  if (lr) return *lr;
  return optimizer == "sgd" ? 0.05 : 1e-3;
}

int64_t FitConfig::global_batch_size(int world_size) const {
  return batch_size * static_cast<int64_t>(world_size) * accumulate_grad_batches;
}

double FitConfig::scaled_lr(int world_size) const {
  if (world_size < 1) {
    throw std::invalid_argument("scaled_lr: world_size must be >= 1, got " + text(world_size));
  }
  const double ratio =
      static_cast<double>(global_batch_size(world_size)) / static_cast<double>(resolved_lr_reference_batch());
  if (lr_scaling == "linear") return resolved_lr() * ratio;
  if (lr_scaling == "sqrt") return resolved_lr() * std::sqrt(ratio);
  return resolved_lr();
}

}  // namespace lockstep::train
