// `lockstep fit` on the Trainer: a ready classifier as a TrainModule, `--data` as a DataModule. See
// include/lockstep/train/fit.h.
#include "lockstep/train/fit.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <thread>

#include <ATen/Parallel.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>

#include "fit_data.h"
#include "lockstep/data/loader.h"
#include "lockstep/models/classifier.h"
#include "lockstep/optim/foreach_sgd.h"
#include "lockstep/optim/fused_adam.h"
#include "lockstep/optim/lr_schedule.h"
#include "lockstep/train/early_stopping.h"
#include "lockstep/train/model_checkpoint.h"
#include "lockstep/train/trainer.h"

namespace lockstep::train {
namespace {

using Clock = std::chrono::steady_clock;
using Model = std::shared_ptr<models::ClassifierImpl>;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Loader threads: as asked, or (auto) one if every rank's training threads leave it a core. On a host
// whose cores are all busy training, a loader thread only takes time from the training thread it feeds.
int64_t loader_workers(const FitConfig& config, const env::Environment& environment, int threads) {
  if (config.num_workers >= 0) return config.num_workers;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  return static_cast<int64_t>(cores) >=
                 static_cast<int64_t>(std::max(1, environment.local_world_size)) * (threads + 1)
             ? 1
             : 0;
}

// `lr`: the scaled rate (FitConfig::scaled_lr); the schedule sets each step's rate anyway.
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const FitConfig& config, torch::nn::Module& model,
                                                        double lr) {
  // SGD with ATen's multi-tensor operations (bit-identical to LibTorch's; see foreach_sgd.h).
  if (config.optimizer == "sgd") {
    return std::make_unique<optim::ForeachSgd>(
        model.parameters(),
        torch::optim::SGDOptions(lr).momentum(config.momentum).weight_decay(config.weight_decay));
  }
  // Adam and AdamW update each parameter in one pass (bit-identical to LibTorch's; see fused_adam.h).
  if (config.optimizer == "adamw") {
    return std::make_unique<optim::FusedAdamW>(
        model.parameters(), torch::optim::AdamWOptions(lr).weight_decay(config.weight_decay));
  }
  return std::make_unique<optim::FusedAdam>(model.parameters(),
                                            torch::optim::AdamOptions(lr).weight_decay(config.weight_decay));
}

data::LoaderOptions loader_options(const FitConfig& config, const data::TransformOptions& transform,
                                   bool augment, int64_t workers) {
  return data::LoaderOptions(config.batch_size)
      .num_workers(workers)
      .prefetch_factor(config.prefetch_factor)
      .persistent_workers(config.persistent_workers)
      .transform(transform)
      .augment(augment)
      .seed(config.trainer.seed());
}

// "adam lr 0.004 (linear-scaled from 0.001: global batch 256 / reference 64) step (x0.1 every 3 epochs)".
std::string describe_lr(const FitConfig& config, int64_t global_batch) {
  char text[256];
  int used = std::snprintf(text, sizeof text, "%s lr %g", config.optimizer.c_str(),
                           config.lr_for_global_batch(global_batch));
  if (config.lr_scaling != "none") {
    used += std::snprintf(
        text + used, sizeof text - used, " (%s-scaled from %g: global batch %lld / reference %lld)",
        config.lr_scaling.c_str(), config.resolved_lr(), static_cast<long long>(global_batch),
        static_cast<long long>(config.resolved_lr_reference_batch()));
  }
  used += std::snprintf(text + used, sizeof text - used, " %s", config.lr_schedule.c_str());
  if (config.lr_schedule == "step") {
    std::snprintf(text + used, sizeof text - used, " (x%g every %lld epochs)", config.lr_gamma,
                  static_cast<long long>(config.resolved_lr_step_epochs()));
  }
  return text;
}

// The run's configuration in a line, recorded in checkpoints for whoever reads them later.
std::string describe_run(const FitConfig& config, int world) {
  char text[256];
  std::snprintf(
      text, sizeof text,
      "model=%s data=%s batch_size=%lld world_size=%d max_epochs=%lld seed=%llu accumulate_grad_batches=%lld "
      "limit_train_batches=%s; ",
      config.model.c_str(), config.data.c_str(), static_cast<long long>(config.batch_size), world,
      static_cast<long long>(config.trainer.max_epochs()),
      static_cast<unsigned long long>(config.trainer.seed()),
      static_cast<long long>(config.trainer.accumulate_grad_batches()),
      config.trainer.limit_train_batches().to_string().c_str());
  return text + describe_lr(config, config.global_batch_size(world));
}

// `lockstep fit`'s model as a TrainModule: a ready classifier, cross-entropy, the flags' optimizer and
// schedule. Its parameters are the classifier's own, under the same names (checkpoints and final.pt
// hold "fc1.weight", not "model.fc1.weight").
class FitModule : public TrainModule {
 public:
  FitModule(const FitConfig& config, Model model, std::function<void(const TrainingPlan&)> banner)
      : config_(config), model_(std::move(model)), banner_(std::move(banner)) {
    // A model not built in stages (cnn, resnet18) is one stage for fsdp: one unit, the whole model.
    if (dynamic_cast<models::Staged*>(model_.get()) == nullptr)
      single_stage_ = std::make_unique<models::SingleStage>(model_);
    for (const auto& child : model_->named_children()) register_module(child.key(), child.value());
    for (auto& parameter : model_->named_parameters(/*recurse=*/false)) {
      register_parameter(parameter.key(), parameter.value());
    }
    for (auto& buffer : model_->named_buffers(/*recurse=*/false))
      register_buffer(buffer.key(), buffer.value());
  }

  at::Tensor training_step(const data::Batch& batch, int64_t /*batch_idx*/) override {
    at::Tensor loss = torch::nn::functional::cross_entropy(forward(batch.data), batch.target);
    log("train_loss", loss, LogOptions().sync_dist(true).prog_bar(true));
    return loss;
  }

  void validation_step(const data::Batch& batch, int64_t /*batch_idx*/) override {
    const at::Tensor logits = forward(batch.data);
    log("val_loss", torch::nn::functional::cross_entropy(logits, batch.target),
        LogOptions().sync_dist(true).prog_bar(true));
    log("val_acc", logits.argmax(1).eq(batch.target).to(torch::kDouble).mean(),
        LogOptions().sync_dist(true).prog_bar(true));
  }

  OptimizerConfig configure_optimizers() override {
    const TrainingPlan& p = plan();
    OptimizerConfig out;
    const double lr = config_.lr_for_global_batch(p.global_batch_size());
    out.optimizer = make_optimizer(config_, *this, lr);
    const auto warmup_steps =
        static_cast<int64_t>(config_.warmup_epochs * static_cast<double>(p.steps_per_epoch));
    const int64_t total_steps = std::max<int64_t>(1, p.steps_per_epoch * config_.trainer.max_epochs());
    optim::LrSchedule schedule(lr, optim::parse_lr_shape(config_.lr_schedule), total_steps,
                               std::min(warmup_steps, total_steps - 1));
    if (schedule.shape() == optim::LrShape::kStep) {
      schedule.step_decay(
          /*every_steps=*/std::max<int64_t>(1, config_.resolved_lr_step_epochs() * p.steps_per_epoch),
          config_.lr_gamma);
    }
    out.lr_schedule = schedule;
    if (p.rank == 0 && !configured_) banner_(p);  // once: an elastic run asks again for a new world
    configured_ = true;
    return out;
  }

  std::string checkpoint_name() const override { return config_.model; }
  // The model's children are registered here directly (its parameter names stay "fc1.weight"...).
  models::Staged* staged_model() override {
    if (single_stage_) return single_stage_.get();
    return dynamic_cast<models::Staged*>(model_.get());
  }
  const Model& model() const { return model_; }

 private:
  at::Tensor forward(const at::Tensor& x) {
    if (!single_stage_) return model_->forward(x);
    return single_stage_->forward(x, [this](at::Tensor in) { return model_->forward(in); });
  }

  const FitConfig& config_;
  Model model_;
  std::unique_ptr<models::SingleStage> single_stage_;
  std::function<void(const TrainingPlan&)> banner_;
  bool configured_ = false;
};

// `--data`, loaded before the Trainer starts (a bad --data-dir fails before any rank waits on another).
class FitDataModule : public DataModule {
 public:
  FitDataModule(const FitConfig& config, int64_t workers)
      : config_(config), data_(detail::load_fit_data(config)), workers_(workers) {}

  std::shared_ptr<const data::TensorDataset> train_dataset() override { return data_.train; }
  std::shared_ptr<const data::TensorDataset> val_dataset() override { return data_.test; }
  data::LoaderOptions train_loader_options() override {
    return loader_options(config_, data_.transform, config_.resolved_augment(), workers_);
  }
  data::LoaderOptions val_loader_options() override {
    return loader_options(config_, data_.transform, /*augment=*/false, workers_);
  }
  bool data_on_device() override { return config_.data_on_device; }
  const detail::FitData& data() const { return data_; }
  int64_t workers() const { return workers_; }

 private:
  const FitConfig& config_;
  detail::FitData data_;
  int64_t workers_;
};

// --save-top-k and --early-stopping-patience as Lightning's callbacks, ranking by --monitor.
std::vector<std::shared_ptr<Callback>> fit_callbacks(const FitConfig& config) {
  std::vector<std::shared_ptr<Callback>> callbacks;
  if (config.save_top_k != 0) {
    auto options = ModelCheckpointOptions()
                       .dirpath(config.trainer.ckpt_dir())
                       .monitor(config.monitor)
                       .mode(config.monitor_mode)
                       .save_top_k(config.save_top_k);
    if (!config.checkpoint_filename.empty()) options.filename(config.checkpoint_filename);
    callbacks.push_back(std::make_shared<ModelCheckpoint>(options));
  }
  if (config.early_stopping_patience > 0) {
    callbacks.push_back(std::make_shared<EarlyStopping>(EarlyStoppingOptions(config.monitor)
                                                            .mode(config.monitor_mode)
                                                            .patience(config.early_stopping_patience)
                                                            .min_delta(config.early_stopping_min_delta)));
  }
  return callbacks;
}

// The flags' TrainerOptions with what fit() adds: the callbacks of save_top_k and early stopping, the output,
// the environment and what checkpoints record of the run.
TrainerOptions trainer_options(const FitConfig& config, const env::Environment& environment,
                               const FitOutput& output, int threads) {
  TrainerOptions options = config.trainer;
  for (const auto& callback : fit_callbacks(config)) options.callback(callback);
  return options.threads(threads)
      .progress_bar(output.progress_bar)
      .out(output.out)
      .environment(environment)
      .description(describe_run(config, environment.world_size))
      .producer("lockstep fit");
}

}  // namespace

FitResult fit(const FitConfig& config, const env::Environment& environment, const FitOutput& output,
              const std::vector<std::shared_ptr<Callback>>& callbacks) {
  config.validate();
  const auto started = Clock::now();
  const int threads = threads_per_rank(config.trainer.threads(), environment);
  // Everything that can fail on bad input fails here, before the first collective.
  FitDataModule data(config, loader_workers(config, environment, threads));
  const detail::FitData& loaded = data.data();
  const models::InputShape shape{loaded.train->channels(), loaded.train->height(), loaded.train->width(),
                                 /*num_classes=*/10};
  torch::manual_seed(
      config.trainer.seed());  // the same initial weights everywhere (DDP broadcasts rank 0's anyway)
  Model model = models::make_model(config.model, shape, config.dropout, config.mlp_hidden);
  auto banner = [&](const TrainingPlan& plan) {
    std::fprintf(output.out,
                 "lockstep fit: %s (%lld parameters) on %s (%lld train / %lld test images), %d rank(s) x "
                 "batch %lld, %s, %s precision, %lld epoch(s), %d thread(s)/rank, %s, on %s\n",
                 config.model.c_str(), static_cast<long long>(models::count_parameters(*model)),
                 loaded.name.c_str(), static_cast<long long>(loaded.train->size()),
                 static_cast<long long>(loaded.test->size()), plan.world_size,
                 static_cast<long long>(config.batch_size),
                 describe_lr(config, plan.global_batch_size()).c_str(), to_string(config.trainer.precision()),
                 static_cast<long long>(config.trainer.max_epochs()), at::get_num_threads(),
                 config.data_on_device ? ("data kept on " + plan.device).c_str()
                                       : (std::to_string(data.workers()) + " loader thread(s)/rank").c_str(),
                 plan.device.c_str());
    std::fflush(output.out);
  };
  auto module = std::make_shared<FitModule>(config, model, banner);

  TrainerOptions options = trainer_options(config, environment, output, threads);
  for (const auto& callback : callbacks) options.callback(callback);
  Trainer trainer(options);
  const TrainerResult trained = trainer.fit(module, data);

  FitResult result;
  result.epochs = trained.epochs;
  result.weights_path = trained.weights_path;
  result.safetensors_path = trained.safetensors_path;
  result.preempted = trained.preempted;
  if (result.preempted) return result;  // the Trainer said where the position is
  if (trainer.rank() == 0) {            // the final world's (an elastic run may have lost the first rank 0)
    if (result.epochs.empty()) {        // resumed after the last epoch, or --max-steps within the first one
      std::fprintf(output.out, "no epoch completed in this run (%lld step(s) in all, %d rank(s), %.1f s)\n",
                   static_cast<long long>(trained.global_step), environment.world_size,
                   seconds_since(started));
    } else {
      const EpochMetrics& last = result.epochs.back();
      std::fprintf(output.out, "final val_acc %.4f over %lld test images (%d rank(s), %.1f s)\n",
                   last.val_acc, static_cast<long long>(last.val_samples), last.world_size,
                   seconds_since(started));
    }
    if (!result.weights_path.empty()) std::fprintf(output.out, "weights: %s\n", result.weights_path.c_str());
    if (!result.safetensors_path.empty()) {
      std::fprintf(output.out, "weights (safetensors): %s\n", result.safetensors_path.c_str());
    }
    std::fflush(output.out);
  }
  return result;
}

}  // namespace lockstep::train
