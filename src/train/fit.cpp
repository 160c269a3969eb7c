// The fit loop of `lockstep fit`: one rank's view. See include/lockstep/train/fit.h.
#include "lockstep/train/fit.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <thread>

#include <ATen/Parallel.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/output-archive.h>

#include "fit_data.h"
#include "lockstep/comm/process_group.h"
#include "lockstep/data/distributed_sampler.h"
#include "lockstep/data/loader.h"
#include "lockstep/ddp/distributed_data_parallel.h"
#include "lockstep/models/classifier.h"
#include "lockstep/optim/fused_adam.h"
#include "lockstep/optim/lr_schedule.h"
#include "lockstep/train/atomic_file.h"
#include "lockstep/train/checkpoint.h"
#include "lockstep/train/progress_bar.h"
#include "lockstep/train/safetensors.h"

namespace lockstep::train {
namespace {

using Clock = std::chrono::steady_clock;
using Model = std::shared_ptr<models::ClassifierImpl>;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A config that contradicts the launcher that started this rank is a mistake worth stopping for:
// Lightning likewise refuses devices=4 under an srun that started 2 tasks per node.
void check_against_environment(const FitConfig& config, const env::Environment& environment) {
  if (config.devices && *config.devices != environment.local_world_size) {
    throw std::invalid_argument(
        "--devices " + std::to_string(*config.devices) + " contradicts the environment (" +
        env::to_string(environment.source) + " started " + std::to_string(environment.local_world_size) +
        " rank(s) on this node): drop --devices, or start that many ranks per node");
  }
  if (config.num_nodes && *config.num_nodes != environment.num_nodes) {
    throw std::invalid_argument("--num-nodes " + std::to_string(*config.num_nodes) +
                                " contradicts the environment (" + env::to_string(environment.source) +
                                " reports " + std::to_string(environment.num_nodes) +
                                " node(s)): drop --num-nodes, or make them agree");
  }
}

int threads_per_rank(const FitConfig& config, const env::Environment& environment) {
  if (config.threads > 0) return config.threads;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  return std::max(1, static_cast<int>(cores) / std::max(1, environment.local_world_size));
}

// Loader threads: as asked, or (auto) one if every rank's training threads leave it a core. On a host
// whose cores are all busy training, a loader thread only takes time from the training thread it feeds.
int64_t loader_workers(const FitConfig& config, const env::Environment& environment, int threads) {
  if (config.num_workers >= 0) return config.num_workers;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  return static_cast<int64_t>(cores) >= static_cast<int64_t>(std::max(1, environment.local_world_size)) * (threads + 1)
             ? 1
             : 0;
}

// `lr`: the scaled rate (FitConfig::scaled_lr); the schedule sets each step's rate anyway.
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const FitConfig& config, const Model& model, double lr) {
  if (config.optimizer == "sgd") {
    return std::make_unique<torch::optim::SGD>(
        model->parameters(),
        torch::optim::SGDOptions(lr).momentum(config.momentum).weight_decay(config.weight_decay));
  }
  // Adam and AdamW update each parameter in one pass (bit-identical to LibTorch's; see fused_adam.h).
  if (config.optimizer == "adamw") {
    return std::make_unique<optim::FusedAdamW>(model->parameters(),
                                               torch::optim::AdamWOptions(lr).weight_decay(config.weight_decay));
  }
  return std::make_unique<optim::FusedAdam>(model->parameters(),
                                            torch::optim::AdamOptions(lr).weight_decay(config.weight_decay));
}

void set_lr(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

// Validation indices of this rank: the DistributedSampler's (no shuffle) without the padding it adds
// to make the shards equal, so that every test image counts exactly once whatever the world size.
// Rank r's k-th index sits at position r + k * R of the padded list; positions >= size are padding.
std::vector<int64_t> unpadded_shard(const data::DistributedSampler& sampler) {
  std::vector<int64_t> indices = sampler.indices();
  const int64_t rank = sampler.options().rank();
  const int64_t replicas = sampler.options().num_replicas();
  const int64_t size = sampler.dataset_size();
  int64_t keep = 0;
  while (keep < static_cast<int64_t>(indices.size()) && rank + keep * replicas < size) ++keep;
  indices.resize(static_cast<std::size_t>(keep));
  return indices;
}

data::LoaderOptions loader_options(const FitConfig& config, const data::TransformOptions& transform,
                                   bool augment, int64_t workers) {
  return data::LoaderOptions(config.batch_size)
      .num_workers(workers)
      .prefetch_factor(config.prefetch_factor)
      .persistent_workers(config.persistent_workers)
      .transform(transform)
      .augment(augment)
      .seed(config.seed);
}

// "adam lr 0.004 (linear-scaled from 0.001: global batch 256 / reference 64) step (x0.1 every 3 epochs)".
std::string describe_lr(const FitConfig& config, int world) {
  char text[256];
  int used = std::snprintf(text, sizeof text, "%s lr %g", config.optimizer.c_str(), config.scaled_lr(world));
  if (config.lr_scaling != "none") {
    used += std::snprintf(text + used, sizeof text - used,
                          " (%s-scaled from %g: global batch %lld / reference %lld)", config.lr_scaling.c_str(),
                          config.resolved_lr(),
                          static_cast<long long>(config.global_batch_size(world)),
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
  std::snprintf(text, sizeof text,
                "model=%s data=%s batch_size=%lld world_size=%d max_epochs=%lld seed=%llu accumulate_grad_batches=%lld "
                "limit_train_batches=%s; ",
                config.model.c_str(), config.data.c_str(), static_cast<long long>(config.batch_size), world,
                static_cast<long long>(config.max_epochs), static_cast<unsigned long long>(config.seed),
                static_cast<long long>(config.accumulate_grad_batches), config.limit_train_batches.to_string().c_str());
  return text + describe_lr(config, world);
}

}  // namespace

FitResult fit(const FitConfig& config, const env::Environment& environment, const FitOutput& output) {
  config.validate();
  check_against_environment(config, environment);
  const bool is_main = environment.rank == 0;
  const auto started = Clock::now();

  at::set_num_threads(threads_per_rank(config, environment));

  // Everything that can fail on bad input fails here, before the first collective.
  detail::FitData data = detail::load_fit_data(config);
  std::unique_ptr<MetricsWriter> metrics_writer;
  if (is_main && !config.ckpt_dir.empty()) ensure_writable_dir(config.ckpt_dir);
  if (is_main && !config.metrics_file.empty()) metrics_writer = std::make_unique<MetricsWriter>(config.metrics_file);

  const models::InputShape shape{data.train->channels(), data.train->height(), data.train->width(),
                                 /*num_classes=*/10};
  torch::manual_seed(config.seed);  // the same initial weights everywhere (DDP broadcasts rank 0's anyway)
  Model model = models::make_model(config.model, shape, config.dropout);

  comm::ProcessGroup group = comm::init_process_group(
      comm::ProcessGroupOptions::from_environment(environment).backend(comm::parse_backend(config.backend)));
  const int world = group.size();
  const int rank = group.rank();
  // .grad lives in the buckets (shared memory with shm): no copy into the buckets and back each step.
  ddp::DistributedDataParallel<Model> ddp(model, group, ddp::DdpOptions().gradient_as_bucket_view(true));
  // Dropout and augmentation differ per rank, reproducibly.
  torch::manual_seed(config.seed + 1000003ULL * static_cast<uint64_t>(rank + 1));

  auto optimizer = make_optimizer(config, model, config.scaled_lr(world));
  data::DistributedSampler train_sampler(
      data.train->size(), data::DistributedSamplerOptions(world, rank).shuffle(true).seed(config.seed));
  data::DistributedSampler val_sampler(data.test->size(),
                                       data::DistributedSamplerOptions(world, rank).shuffle(false));
  const int64_t workers = loader_workers(config, environment, at::get_num_threads());
  data::Loader train_loader(data.train, loader_options(config, data.transform, config.resolved_augment(), workers));
  data::Loader val_loader(data.test, loader_options(config, data.transform, /*augment=*/false, workers));

  // ---- resume: every rank reads the same checkpoint ----
  TrainPosition start;
  double resumed_loss_sum = 0.0;  // this rank's sums of the interrupted epoch's batches already trained
  int64_t resumed_samples = 0;
  if (const std::string path = config.resolved_resume_path(); !path.empty()) {
    const CheckpointState saved = load_checkpoint(path, config.model, *model, *optimizer);
    start = saved.position;
    if (saved.world_size == world) {
      set_cpu_rng_state(saved.rng_states[rank].contiguous());
      resumed_loss_sum = saved.epoch_sums[rank][0].item<double>();
      resumed_samples = static_cast<int64_t>(saved.epoch_sums[rank][1].item<double>());
    } else if (start.batch != 0) {
      throw std::invalid_argument("checkpoint '" + path + "' was written mid-epoch by " +
                                  std::to_string(saved.world_size) + " rank(s); this run has " +
                                  std::to_string(world) + ": resume it with " + std::to_string(saved.world_size) +
                                  " ranks, or from a checkpoint written at an epoch end (--ckpt-every-n-steps 0)");
    }
    if (is_main) {
      std::fprintf(output.out, "resumed from %s: epoch %lld, batch %lld, step %lld (written by %d rank(s))\n",
                   path.c_str(), static_cast<long long>(start.epoch), static_cast<long long>(start.batch),
                   static_cast<long long>(start.step), saved.world_size);
      std::fflush(output.out);
    }
  }

  const int64_t batches_available = (train_sampler.num_samples() + config.batch_size - 1) / config.batch_size;
  const int64_t train_batches = config.limit_train_batches.apply(batches_available);
  const int64_t accumulate = config.accumulate_grad_batches;
  const int64_t steps_per_epoch = (train_batches + accumulate - 1) / accumulate;
  const int64_t total_steps = std::max<int64_t>(1, steps_per_epoch * config.max_epochs);
  const auto warmup_steps = static_cast<int64_t>(config.warmup_epochs * static_cast<double>(steps_per_epoch));
  optim::LrSchedule schedule(config.scaled_lr(world), optim::parse_lr_shape(config.lr_schedule), total_steps,
                             std::min(warmup_steps, total_steps - 1));
  if (schedule.shape() == optim::LrShape::kStep) {
    schedule.step_decay(/*every_steps=*/std::max<int64_t>(1, config.resolved_lr_step_epochs() * steps_per_epoch),
                        config.lr_gamma);
  }

  if (is_main) {
    std::fprintf(output.out,
                 "lockstep fit: %s (%lld parameters) on %s (%lld train / %lld test images), %d rank(s) x "
                 "batch %lld, %s, %lld epoch(s), %d thread(s)/rank, %lld loader thread(s)/rank\n",
                 config.model.c_str(), static_cast<long long>(models::count_parameters(*model)), data.name.c_str(),
                 static_cast<long long>(data.train->size()), static_cast<long long>(data.test->size()), world,
                 static_cast<long long>(config.batch_size), describe_lr(config, world).c_str(),
                 static_cast<long long>(config.max_epochs), at::get_num_threads(), static_cast<long long>(workers));
    std::fflush(output.out);
  }

  if (start.batch > train_batches) {
    throw std::invalid_argument("checkpoint position (epoch " + std::to_string(start.epoch) + ", batch " +
                                std::to_string(start.batch) + ") is beyond this run's " +
                                std::to_string(train_batches) +
                                " batches per epoch: resume with the --batch-size and --limit-train-batches it "
                                "was written with");
  }

  // last.ckpt: every rank's generator state and epoch sums are gathered; rank 0 writes.
  const std::string last_ckpt =
      config.ckpt_dir.empty() ? "" : (std::filesystem::path(config.ckpt_dir) / "last.ckpt").string();
  auto write_last = [&](const TrainPosition& position, double loss_sum, int64_t samples) {
    const at::Tensor rng_states = group.all_gather_stacked(cpu_rng_state());
    const at::Tensor epoch_sums =
        group.all_gather_stacked(torch::tensor({loss_sum, static_cast<double>(samples)}, torch::kDouble));
    if (!is_main) return;
    CheckpointState state;
    state.position = position;
    state.world_size = world;
    state.model = config.model;
    state.config = describe_run(config, world);
    state.rng_states = rng_states;
    state.epoch_sums = epoch_sums;
    save_checkpoint(last_ckpt, *model, *optimizer, state);
  };

  ProgressBar bar(output.out);
  FitResult result;
  int64_t step = start.step;
  bool stopped = false;  // --max-steps reached
  for (int64_t epoch = start.epoch; epoch < config.max_epochs && !stopped; ++epoch) {
    // ---- train ----
    const bool resumed_epoch = epoch == start.epoch;
    const int64_t first_batch = resumed_epoch ? start.batch : 0;
    train_sampler.set_epoch(epoch);
    train_loader.start_epoch(train_sampler.indices(), epoch, first_batch);
    model->train();
    if (is_main && output.progress_bar) bar.start(epoch, config.max_epochs, train_batches);
    const auto train_start = Clock::now();
    double loss_sum = resumed_epoch ? resumed_loss_sum : 0.0;  // a double, as a double tensor would sum
    int64_t samples = resumed_epoch ? resumed_samples : 0;
    double lr = schedule.at(step);
    int64_t batches_done = first_batch;
    for (int64_t b = first_batch; b < train_batches && !stopped; ++b) {
      std::optional<data::Batch> batch = train_loader.next();
      TORCH_INTERNAL_ASSERT(batch.has_value(), "loader ended after ", b, " of ", train_batches, " batches");
      const bool steps_now = (b + 1) % accumulate == 0 || b + 1 == train_batches;
      at::Tensor loss;
      {
        // Gradients of a partial accumulation group stay local (no all-reduce) until its last batch.
        std::optional<ddp::NoSyncGuard> no_sync;
        if (!steps_now) no_sync.emplace(ddp.no_sync());
        loss = torch::nn::functional::cross_entropy(ddp(batch->data), batch->target);
        (accumulate > 1 ? loss / static_cast<double>(accumulate) : loss).backward();
      }
      const double batch_loss = loss.item<double>();
      loss_sum += batch_loss;
      samples += batch->target.size(0);
      batches_done = b + 1;
      if (steps_now) {
        if (config.gradient_clip_val > 0) torch::nn::utils::clip_grad_norm_(model->parameters(), config.gradient_clip_val);
        lr = schedule.at(step);
        set_lr(*optimizer, lr);
        optimizer->step();
        optimizer->zero_grad();
        ++step;
        if (metrics_writer && config.log_every_n_steps > 0 && step % config.log_every_n_steps == 0) {
          metrics_writer->write(StepMetrics{step, epoch, b + 1, batch_loss, lr});
        }
        stopped = config.max_steps > 0 && step >= config.max_steps;
        const bool due = config.ckpt_every_n_steps > 0 && step % config.ckpt_every_n_steps == 0;
        if (!last_ckpt.empty() && (due || stopped)) write_last(TrainPosition{epoch, b + 1, step}, loss_sum, samples);
      }
      if (is_main && output.progress_bar) bar.update(b + 1, samples * world, batch_loss);
    }
    const double epoch_s = seconds_since(train_start);
    if (is_main && output.progress_bar) bar.finish();
    if (batches_done < train_batches) {  // --max-steps stopped the epoch: no validation, no epoch metrics
      if (is_main) {
        std::fprintf(output.out, "stopped at --max-steps %lld (epoch %lld, batch %lld of %lld)%s\n",
                     static_cast<long long>(config.max_steps), static_cast<long long>(epoch + 1),
                     static_cast<long long>(batches_done), static_cast<long long>(train_batches),
                     last_ckpt.empty() ? "" : (": " + last_ckpt + " holds the position").c_str());
        std::fflush(output.out);
      }
      break;
    }

    // ---- validate ----
    const auto val_start = Clock::now();
    model->eval();
    auto val_totals = torch::zeros({3}, torch::kDouble);  // loss sum, correct, samples
    {
      torch::NoGradGuard no_grad;
      std::vector<int64_t> shard = unpadded_shard(val_sampler);
      const int64_t val_batches =
          config.limit_val_batches.apply((static_cast<int64_t>(shard.size()) + config.batch_size - 1) / config.batch_size);
      shard.resize(std::min<std::size_t>(shard.size(), static_cast<std::size_t>(val_batches * config.batch_size)));
      val_loader.start_epoch(std::move(shard), epoch);
      while (std::optional<data::Batch> batch = val_loader.next()) {
        const at::Tensor logits = model->forward(batch->data);
        val_totals[0] += torch::nn::functional::cross_entropy(
            logits, batch->target, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
        val_totals[1] += logits.argmax(1).eq(batch->target).sum();
        val_totals[2] += batch->target.size(0);
      }
    }
    const double val_s = seconds_since(val_start);

    // ---- reduce over ranks: sums, then the slowest rank's times ----
    at::Tensor sums = torch::stack({torch::scalar_tensor(loss_sum, torch::kDouble),
                                    torch::scalar_tensor(static_cast<double>(train_batches), torch::kDouble),
                                    torch::scalar_tensor(static_cast<double>(samples), torch::kDouble), val_totals[0],
                                    val_totals[1], val_totals[2]});
    group.all_reduce(sums).wait();
    at::Tensor times = torch::tensor({epoch_s, val_s}, torch::kDouble);
    group.all_reduce(times, comm::ReduceOp::kMax).wait();
    const auto s = sums.accessor<double, 1>();
    const auto t = times.accessor<double, 1>();

    EpochMetrics m;
    m.epoch = epoch;
    m.step = step;
    m.train_loss = s[0] / s[1];
    m.train_samples = static_cast<int64_t>(s[2]);
    m.val_samples = static_cast<int64_t>(s[5]);
    m.val_loss = m.val_samples > 0 ? s[3] / s[5] : 0.0;
    m.val_acc = m.val_samples > 0 ? s[4] / s[5] : 0.0;
    m.epoch_s = t[0];
    m.val_s = t[1];
    m.samples_per_s = t[0] > 0 ? s[2] / t[0] : 0.0;
    m.lr = lr;
    m.world_size = world;
    result.epochs.push_back(m);
    if (is_main) {
      std::fprintf(output.out,
                   "epoch %lld/%lld  train_loss %.4f  val_loss %.4f  val_acc %.4f  train %.2f s  val %.2f s  "
                   "%.0f samples/s\n",
                   static_cast<long long>(epoch + 1), static_cast<long long>(config.max_epochs), m.train_loss,
                   m.val_loss, m.val_acc, m.epoch_s, m.val_s, m.samples_per_s);
      std::fflush(output.out);
      if (metrics_writer) metrics_writer->write(m);
    }
    if (!last_ckpt.empty()) write_last(TrainPosition{epoch + 1, 0, step}, 0.0, 0);
  }

  if (!config.ckpt_dir.empty()) {
    result.weights_path = (std::filesystem::path(config.ckpt_dir) / "final.pt").string();
    if (is_main) {
      write_atomically(result.weights_path, [&](const std::string& tmp) {
        torch::serialize::OutputArchive archive;
        model->save(archive);
        archive.save_to(tmp);
      });
    }
    // The same weights for Python without lockstep or LibTorch's archive format (docs/export.md).
    result.safetensors_path = (std::filesystem::path(config.ckpt_dir) / "final.safetensors").string();
    if (is_main) {
      SafetensorsMetadata metadata{{"format", "pt"}, {"producer", "lockstep fit"}, {"model", config.model}};
      if (!result.epochs.empty()) metadata["epochs"] = std::to_string(result.epochs.back().epoch + 1);
      save_module_safetensors(result.safetensors_path, *model, metadata);
    }
  }
  group.shutdown();
  if (is_main) {
    if (result.epochs.empty()) {  // resumed after the last epoch, or --max-steps within the first one
      std::fprintf(output.out, "no epoch completed in this run (%lld step(s) in all, %d rank(s), %.1f s)\n",
                   static_cast<long long>(step), world, seconds_since(started));
    } else {
      const EpochMetrics& last = result.epochs.back();
      std::fprintf(output.out, "final val_acc %.4f over %lld test images (%d rank(s), %.1f s)\n", last.val_acc,
                   static_cast<long long>(last.val_samples), world, seconds_since(started));
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
