#include "lockstep/train/trainer_options.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <stdexcept>

#include "lockstep/detail/enum_names.h"
#include "lockstep/log/make_loggers.h"
#include "option_checks.h"

namespace lockstep::train {
namespace {

constexpr lockstep::detail::EnumNames<OnNan, 2> kOnNanNames{{{OnNan::kStop, "stop"}, {OnNan::kSkip, "skip"}}};

using detail::check_at_least;
using detail::text;

void check_finite_at_least_zero(const char* option, double value, const char* meaning) {
  if (!(value >= 0.0) || !std::isfinite(value)) {
    throw std::invalid_argument(std::string(option) + " must be a finite number >= 0 (" + meaning +
                                "), got " + text(value));
  }
}

// The resume options that need a ckpt_dir, and a checkpoint path that cannot be opened.
void check_resume(const TrainerOptions& options) {
  const std::string& resume = options.resume();
  if ((resume == "last" || resume == "auto") && options.ckpt_dir().empty()) {
    throw std::invalid_argument(
        "resume '" + resume + "' needs ckpt_dir, where last.ckpt lives" +
        (resume == "auto" ? " (auto resumes from it when it exists, else starts fresh)" : "") +
        "; or give the checkpoint's path as resume 'PATH'");
  }
  const std::string path = options.resume_path();
  if (path.empty()) return;
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    throw std::invalid_argument("resume '" + resume + "': cannot open checkpoint '" + path + "' (" +
                                std::strerror(errno) + "): check the path, or leave resume empty to start " +
                                "from scratch");
  }
  std::fclose(file);
}

}  // namespace

OnNan parse_on_nan(const std::string& text) {
  return lockstep::detail::parse_enum(kOnNanNames, text, "on_nan");
}

const char* to_string(OnNan on_nan) {
  return lockstep::detail::enum_to_string(kOnNanNames, on_nan);
}

void TrainerOptions::validate() const {
  if (devices_) check_at_least("devices", *devices_, 1);
  if (num_nodes_) check_at_least("num_nodes", *num_nodes_, 1);
  check_at_least("threads", threads_, 0);
  check_at_least<int64_t>("max_epochs", max_epochs_, 0);
  if (max_steps_ != -1 && max_steps_ < 1) {
    throw std::invalid_argument("max_steps must be >= 1 (or -1: no limit), got " + text(max_steps_));
  }
  check_at_least<int64_t>("accumulate_grad_batches", accumulate_grad_batches_, 1);
  check_at_least<int64_t>("ckpt_every_n_steps", ckpt_every_n_steps_, 0);
  check_at_least<int64_t>("log_every_n_steps", log_every_n_steps_, 0);
  check_at_least<int64_t>("breakdown_every_n_batches", breakdown_every_n_batches_, 0);
  log::check_logger_names(logger_);
  check_finite_at_least_zero("gradient_clip_val", gradient_clip_val_, "0 = off");
  if (collective_timeout_ && collective_timeout_->count() <= 0) {
    throw std::invalid_argument(
        "collective_timeout must be > 0 (unset: LOCKSTEP_TIMEOUT, else 1800 s), got " +
        text(collective_timeout_->count()) + " ms");
  }
  if (ckpt_every_n_steps_ > 0 && ckpt_dir_.empty()) {
    throw std::invalid_argument("ckpt_every_n_steps " + text(ckpt_every_n_steps_) +
                                " needs ckpt_dir, where last.ckpt is written");
  }
  strategy_.validate(precision_, "precision");
  check_elastic();
  detail::check_tensor_parallel({tensor_parallel_, strategy_.kind(), elastic_, cuda_graphs_});
  detail::check_pipeline_parallel({pipeline_parallel_, micro_batches_, pipeline_cut_.size(), tensor_parallel_,
                                   strategy_, precision_, elastic_, cuda_graphs_});
  if (accelerator_ == AcceleratorKind::kCpu) check_cpu_training("accelerator 'cpu'");
  check_resume(*this);
}

int64_t accumulation_keeping(int64_t batches_per_step, int world) {
  check_at_least<int64_t>("batches_per_step", batches_per_step, 1);
  check_at_least<int>("world", world, 1);
  return std::max<int64_t>(1, (2 * batches_per_step + world) / (2 * static_cast<int64_t>(world)));
}

void TrainerOptions::check_elastic() const {
  if (!elastic_) return;
  detail::check_elastic(
      {strategy_.kind(), backend_, cuda_graphs_, process_group_ ? "a process_group of the caller's" : ""});
}

void TrainerOptions::check_cpu_training(const std::string& why) const {
  if (backend_ == comm::Backend::kNccl) {
    throw std::invalid_argument("backend 'nccl' moves CUDA tensors, and this run trains on the CPU (" + why +
                                "): use accelerator 'gpu' on a machine with GPUs, or backend 'auto', 'shm', "
                                "'hier', 'gloo' or 'mpi' on the CPU");
  }
  if (precision_ == Precision::k16Mixed) {
    throw std::invalid_argument(
        "precision '16-mixed' needs a CUDA device (float16 autocast with a gradient scaler), and this run "
        "trains on the CPU (" +
        why + "): use precision 'bf16-mixed' (or '32'), or accelerator 'gpu' on a machine with GPUs");
  }
}

std::string TrainerOptions::resume_path() const {
  std::string last = (std::filesystem::path(ckpt_dir_) / "last.ckpt").string();
  if (resume_ == "last") return last;
  if (resume_ == "auto") {
    std::error_code error;
    return !ckpt_dir_.empty() && std::filesystem::is_regular_file(last, error) ? last : "";
  }
  return resume_;
}

}  // namespace lockstep::train
