// `lockstep fit` on the Trainer: a ready model (a classifier, or gpt on text) as a TrainModule, `--data` as a
// DataModule. See include/lockstep/train/fit.h.
#include "lockstep/train/fit.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <thread>

#include <ATen/Parallel.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>

#include "fit_data.h"
#include "lockstep/comm/device_mesh.h"
#include "lockstep/data/loader.h"
#include "lockstep/data/text_dataset.h"
#include "lockstep/models/classifier.h"
#include "lockstep/models/gpt.h"
#include "lockstep/models/tensor_parallel_gpt.h"
#include "lockstep/models/vocab_parallel.h"
#include "lockstep/optim/foreach_sgd.h"
#include "lockstep/optim/fused_adam.h"
#include "lockstep/optim/lr_schedule.h"
#include "lockstep/train/early_stopping.h"
#include "lockstep/train/model_checkpoint.h"
#include "lockstep/train/trainer.h"

namespace lockstep::train {
namespace {

using Clock = std::chrono::steady_clock;
using Model = std::shared_ptr<torch::nn::Module>;
using Forward = std::function<at::Tensor(const at::Tensor&)>;

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

// `lockstep fit`'s model as a TrainModule: a ready model, cross-entropy, the flags' optimizer and schedule.
// A classifier's logits [B, classes] meet labels [B]; gpt's [B, T, 256] meet the next bytes [B, T], every
// position a sample of the loss (flattened to [B·T, 256] and [B·T]); val_acc is the share of the labels,
// or of the next bytes, predicted. Its parameters are the model's own, under the same names (checkpoints
// and final.pt hold "fc1.weight", not "model.fc1.weight"). Under --tensor-parallel, configure_model()
// puts the gpt's slices (models::TensorParallelGpt) in place of the whole model's layers, under the same
// names, and the loss and val_acc are computed from the vocabulary-split logits.
class FitModule : public TrainModule, public models::TensorParallelModule {
 public:
  FitModule(const FitConfig& config, Model model, Forward model_forward,
            std::function<void(const TrainingPlan&)> banner)
      : config_(config),
        model_(std::move(model)),
        model_forward_(std::move(model_forward)),
        banner_(std::move(banner)) {
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

  void configure_model() override {
    comm::DeviceMesh* mesh = device_mesh();
    if (mesh == nullptr || mesh->tensor_parallel() == 1) return;
    auto* full = dynamic_cast<models::GptImpl*>(model_.get());
    if (full == nullptr)  // FitConfig::validate refuses it first
      throw std::logic_error("tensor parallelism splits model 'gpt' only, not '" + config_.model + "'");
    split_ = models::TensorParallelGpt(*full, mesh->tp(), config_.trainer.seed());
    for (const auto& child : split_->named_children()) replace_module(child.key(), child.value());
    model_ = split_.ptr();  // the whole model is dropped
  }

  // TensorParallelModule: the split's layers are registered here under their own names, so the strategy
  // finds how they lie (clipping by the whole model's norm) from this module.
  models::ParameterSplit split_of(const std::string& name) const override {
    return split_ ? split_->split_of(name) : models::ParameterSplit{};
  }
  comm::ProcessGroup& tensor_parallel_group() const override { return split_->tensor_parallel_group(); }

  at::Tensor training_step(const data::Batch& batch, int64_t /*batch_idx*/) override {
    at::Tensor loss = loss_of(forward(batch.data), batch.target);
    log("train_loss", loss, LogOptions().sync_dist(true).prog_bar(true));
    return loss;
  }

  // --pipeline-parallel: the model's forward and the loss of training_step, apart.
  at::Tensor pipeline_forward(const at::Tensor& input) override { return forward(input); }
  at::Tensor pipeline_loss(const at::Tensor& logits, const at::Tensor& target) override {
    return loss_of(logits, target);
  }

  void validation_step(const data::Batch& batch, int64_t /*batch_idx*/) override {
    const at::Tensor logits = forward(batch.data);
    log("val_loss", loss_of(logits, batch.target), LogOptions().sync_dist(true).prog_bar(true));
    const at::Tensor predicted =
        split_ ? models::vocab_parallel_argmax(logits.flatten(0, -2), device_mesh()->tp())
               : logits.argmax(-1).flatten();
    log("val_acc", predicted.eq(batch.target.flatten()).to(torch::kDouble).mean(),
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
    if (p.rank == 0 && p.tp_rank == 0 && p.pp_rank == 0 && !configured_)
      banner_(p);  // once: an elastic run asks again for a new world
    configured_ = true;
    return out;
  }

  std::string checkpoint_name() const override { return config_.model; }
  // The model's children are registered here directly (its parameter names stay "fc1.weight"...).
  models::Staged* staged_model() override {
    if (single_stage_) return single_stage_.get();
    return dynamic_cast<models::Staged*>(model_.get());
  }

 private:
  at::Tensor loss_of(const at::Tensor& logits, const at::Tensor& target) const {
    if (split_) {
      return models::vocab_parallel_cross_entropy(logits.flatten(0, -2), target.flatten(),
                                                  device_mesh()->tp())
          .mean();
    }
    return torch::nn::functional::cross_entropy(logits.flatten(0, -2), target.flatten());
  }
  at::Tensor forward(const at::Tensor& x) {
    if (split_) return split_->forward(x);
    if (!single_stage_) return model_forward_(x);
    return single_stage_->forward(x, [this](at::Tensor in) { return model_forward_(in); });
  }

  const FitConfig& config_;
  Model model_;
  Forward model_forward_;
  std::unique_ptr<models::SingleStage> single_stage_;
  models::TensorParallelGpt split_{nullptr};  // --tensor-parallel
  std::function<void(const TrainingPlan&)> banner_;
  bool configured_ = false;
};

// `--data` of images, loaded before the Trainer starts (a bad --data-dir fails before any rank waits on
// another).
class FitDataModule : public DataModule {
 public:
  FitDataModule(const FitConfig& config, const detail::FitData& data, int64_t workers)
      : config_(config), data_(data), workers_(workers) {}

  std::shared_ptr<const data::TensorDataset> train_dataset() override { return data_.train; }
  std::shared_ptr<const data::TensorDataset> val_dataset() override { return data_.test; }
  data::LoaderOptions train_loader_options() override {
    return loader_options(config_, data_.transform, config_.resolved_augment(), workers_);
  }
  data::LoaderOptions val_loader_options() override {
    return loader_options(config_, data_.transform, /*augment=*/false, workers_);
  }
  bool data_on_device() override { return config_.data_on_device; }

 private:
  const FitConfig& config_;
  detail::FitData data_;
  int64_t workers_;
};

// `--data text`: windows of bytes, shuffled and sharded by the DistributedSampler as images are.
class FitTextModule : public BasicDataModule<data::Batch> {
 public:
  FitTextModule(const FitConfig& config, data::TextSplits splits, int64_t workers)
      : config_(config), splits_(std::move(splits)), workers_(workers) {}

  data::DataSource<data::Batch> train_data() override { return {splits_.train, options()}; }
  std::optional<data::DataSource<data::Batch>> val_data() override {
    return data::DataSource<data::Batch>(splits_.val, options());
  }

 private:
  data::LoaderOptions options() const { return loader_options(config_, {}, /*augment=*/false, workers_); }

  const FitConfig& config_;
  data::TextSplits splits_;
  int64_t workers_;
};

// What fit() trains, whatever --model and --data: built before the first collective, so that everything
// that can fail on bad input fails there.
struct FitJob {
  std::unique_ptr<BasicDataModule<data::Batch>> data;
  Model model;
  Forward forward;
  std::string data_line;  // for the banner: "Fashion-MNIST (60000 train / 10000 test images)"
  std::optional<double> baseline_perplexity;  // text: the unigram model's, per byte
};

// "2 rank(s)", or under tensor or pipeline parallelism "2 data-parallel x 2 tensor-parallel rank(s)",
// "2 data-parallel x 2 pipeline-parallel rank(s)".
std::string ranks_line(const TrainingPlan& plan) {
  if (plan.tensor_parallel == 1 && plan.pipeline_parallel == 1)
    return std::to_string(plan.world_size) + " rank(s)";
  std::string line = std::to_string(plan.world_size) + " data-parallel";
  if (plan.pipeline_parallel > 1)
    line += " x " + std::to_string(plan.pipeline_parallel) + " pipeline-parallel";
  if (plan.tensor_parallel > 1) line += " x " + std::to_string(plan.tensor_parallel) + " tensor-parallel";
  return line + " rank(s)";
}

std::string count_line(const std::string& name, int64_t train, int64_t val, const std::string& what) {
  return name + " (" + std::to_string(train) + " train / " + std::to_string(val) + " " + what + ")";
}

// The model is built after torch::manual_seed(seed): the same initial weights everywhere, whatever the
// world (DDP broadcasts rank 0's anyway).
FitJob image_job(const FitConfig& config, int64_t workers) {
  const detail::FitData loaded = detail::load_fit_data(config);
  const models::InputShape shape{loaded.train->channels(), loaded.train->height(), loaded.train->width(),
                                 /*num_classes=*/10};
  FitJob job;
  job.data = std::make_unique<FitDataModule>(config, loaded, workers);
  job.data_line = count_line(loaded.name, loaded.train->size(), loaded.test->size(), "test images");
  torch::manual_seed(config.trainer.seed());
  std::shared_ptr<models::ClassifierImpl> model =
      models::make_model(config.model, shape, config.dropout, config.mlp_hidden);
  job.forward = [raw = model.get()](const at::Tensor& x) { return raw->forward(x); };
  job.model = std::move(model);
  return job;
}

FitJob text_job(const FitConfig& config, int64_t workers) {
  const models::GptOptions options = models::GptOptions::tiny().dropout(config.dropout.value_or(0.0));
  const std::string path = config.resolved_text_file();
  const at::Tensor text = data::read_text(path);
  data::TextSplits splits = data::split_text(text, options.context(), /*val_fraction=*/0.1, path);
  FitJob job;
  const at::Tensor val_targets = splits.val->bytes().slice(0, 1);  // the bytes the model predicts
  job.baseline_perplexity = data::unigram_perplexity(splits.train->bytes(), val_targets);
  char what[64];
  std::snprintf(what, sizeof what, "val windows of %lld bytes",
                static_cast<long long>(options.context() + 1));
  job.data_line = count_line("text " + path + ", " + std::to_string(text.numel()) + " bytes",
                             splits.train->size(), splits.val->size(), what);
  job.data = std::make_unique<FitTextModule>(config, std::move(splits), workers);
  torch::manual_seed(config.trainer.seed());
  auto model = std::make_shared<models::GptImpl>(options);
  job.forward = [raw = model.get()](const at::Tensor& tokens) { return raw->forward(tokens); };
  job.model = std::move(model);
  return job;
}

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
  const int64_t workers = loader_workers(config, environment, threads);
  FitJob job = config.data == "text" ? text_job(config, workers) : image_job(config, workers);
  const int64_t parameters = models::count_parameters(*job.model);
  auto banner = [&](const TrainingPlan& plan) {
    std::fprintf(output.out,
                 "lockstep fit: %s (%lld parameters) on %s, %s x batch %lld, %s, %s precision, %lld "
                 "epoch(s), %d thread(s)/rank, %s, on %s\n",
                 config.model.c_str(), static_cast<long long>(parameters), job.data_line.c_str(),
                 ranks_line(plan).c_str(), static_cast<long long>(config.batch_size),
                 describe_lr(config, plan.global_batch_size()).c_str(), to_string(config.trainer.precision()),
                 static_cast<long long>(config.trainer.max_epochs()), at::get_num_threads(),
                 config.data_on_device ? ("data kept on " + plan.device).c_str()
                                       : (std::to_string(workers) + " loader thread(s)/rank").c_str(),
                 plan.device.c_str());
    std::fflush(output.out);
  };
  auto module = std::make_shared<FitModule>(config, job.model, job.forward, banner);
  job.model.reset();  // the module holds it (under --tensor-parallel, until configure_model splits it)

  TrainerOptions options = trainer_options(config, environment, output, threads);
  for (const auto& callback : callbacks) options.callback(callback);
  Trainer trainer(options);
  const TrainerResult trained = trainer.fit(module, *job.data);

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
      if (job.baseline_perplexity) {  // per byte: exp of the mean loss over every predicted byte
        std::fprintf(
            output.out,
            "final val_loss %.4f perplexity %.3f (unigram baseline %.3f), next-byte val_acc %.4f over "
            "%lld windows (%d rank(s), %.1f s)\n",
            last.val_loss, std::exp(last.val_loss), *job.baseline_perplexity, last.val_acc,
            static_cast<long long>(last.val_samples), last.world_size, seconds_since(started));
      } else {
        std::fprintf(output.out, "final val_acc %.4f over %lld test images (%d rank(s), %.1f s)\n",
                     last.val_acc, static_cast<long long>(last.val_samples), last.world_size,
                     seconds_since(started));
      }
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
