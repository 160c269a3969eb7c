#include "lockstep/train/fit_config.h"

#include <algorithm>
#include <cmath>
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
    throw std::invalid_argument(std::string(flag) + " '" + value + "' is not known (expected one of: " +
                                joined(accepted) + ")");
  }
}

template <typename T>
void check_at_least(const char* flag, T value, T minimum) {
  if (value < minimum) {
    throw std::invalid_argument(std::string(flag) + " must be >= " + text(minimum) + ", got " + text(value));
  }
}

}  // namespace

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

std::string BatchLimit::to_string() const { return is_fraction ? text(fraction) : text(count); }

void FitConfig::validate() const {
  check_member("--model", model, fit_model_names());
  check_member("--data", data, fit_data_names());
  check_member("--optimizer", optimizer, {"adam", "adamw", "sgd"});
  check_member("--lr-schedule", lr_schedule, {"cosine", "constant"});
  check_member("--progress", progress, {"auto", "on", "off"});
  if (backend == "mpi" || backend == "nccl") {
    throw std::invalid_argument("--backend " + backend +
                                " is not available in this build yet (use --backend auto, shm, hier or gloo; "
                                "nccl needs a LibTorch built with CUDA)");
  }
  check_member("--backend", backend, {"auto", "shm", "hier", "gloo"});
  if (precision != "32") {
    if (precision == "bf16-mixed" || precision == "16-mixed") {
      throw std::invalid_argument("--precision " + precision +
                                  " is not supported by `lockstep fit` yet: use --precision 32");
    }
    throw std::invalid_argument("--precision '" + precision + "' is not known (expected 32, bf16-mixed or 16-mixed)");
  }
  if (devices) check_at_least("--devices", *devices, 1);
  if (num_nodes) check_at_least("--num-nodes", *num_nodes, 1);
  check_at_least("--threads", threads, 0);
  check_at_least<int64_t>("--max-epochs", max_epochs, 1);
  check_at_least<int64_t>("--batch-size", batch_size, 1);
  check_at_least<int64_t>("--accumulate-grad-batches", accumulate_grad_batches, 1);
  check_at_least<int64_t>("--num-workers", num_workers, 0);
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
  if (!(gradient_clip_val >= 0.0 && std::isfinite(gradient_clip_val))) {
    throw std::invalid_argument("--gradient-clip-val must be >= 0 (0 = off), got " + text(gradient_clip_val));
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

double FitConfig::resolved_lr() const {
  if (lr) return *lr;
  return optimizer == "sgd" ? 0.05 : 1e-3;
}

}  // namespace lockstep::train
