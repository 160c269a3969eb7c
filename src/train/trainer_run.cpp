// One Trainer::fit() in phases: see trainer_run.h. Resuming is in trainer_restore.cpp.
#include "trainer_run.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/types.h>

#include <ATen/Parallel.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/output-archive.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

#include "epoch_reduce.h"
#include "lockstep/detail/atomic_file.h"
#include "lockstep/log/hparams_yaml.h"
#include "lockstep/log/make_loggers.h"
#include "lockstep/log/run_dir.h"
#include "lockstep/models/tensor_parallel_layout.h"
#include "lockstep/pipeline/pipeline_parallel.h"
#include "lockstep/shard/zero_optimizer.h"
#include "lockstep/train/atomic_file.h"
#include "lockstep/train/device.h"
#include "lockstep/train/safetensors.h"

namespace lockstep::train {
namespace {

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// The batches of an epoch that `limit` (limit_train_batches, limit_val_batches: the `option`) lets run out of
// `available`. -1 for `available`: a stream of unknown length, to which only a count applies (-1 returned:
// all of it); a fraction of it is refused.
int64_t limited_batches(const BatchLimit& limit, int64_t available, const char* option,
                        const std::string& data) {
  if (available >= 0) return limit.apply(available);
  if (!limit.is_fraction) return limit.count;
  if (limit.fraction < 1.0) {
    throw std::invalid_argument(std::string(option) + "=" + limit.to_string() +
                                " is a fraction of an epoch, but " + data +
                                " is a stream of unknown length: give a count of batches instead");
  }
  return -1;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double peak_rss_mb() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // KiB on Linux
}

void set_lr(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

// module_tensors(module) with each parameter that lies split over `tp` (models::parameter_splits) put
// together whole: an all-gather of `tp` per split parameter, in the module's order on every rank.
std::vector<NamedTensor> whole_module_tensors(const torch::nn::Module& module, comm::ProcessGroup& tp) {
  std::unordered_map<const void*, models::ParameterSplit> splits;
  const std::vector<at::Tensor> parameters = module.parameters();
  const std::vector<models::ParameterSplit> layout = models::parameter_splits(module);
  for (size_t i = 0; i < parameters.size(); ++i) splits[parameters[i].unsafeGetTensorImpl()] = layout[i];
  std::vector<NamedTensor> tensors = module_tensors(module);
  at::NoGradGuard no_grad;
  for (auto& [name, tensor] : tensors) {
    const auto found = splits.find(tensor.unsafeGetTensorImpl());
    if (found != splits.end()) tensor = models::gather_whole(found->second, tensor, tp);
  }
  return tensors;
}

}  // namespace

// ---- set-up ----

Trainer::Run::Run(Trainer& trainer_, std::shared_ptr<TrainModuleBase> module_, DataModuleBase& data,
                  const env::Environment& environment_)
    : trainer(trainer_),
      options(trainer_.options_),
      environment(environment_),
      module(std::move(module_)),
      step_state(std::make_shared<detail::StepState>()),
      precision_(options.precision()),
      bar_(options.out()) {
  detail::TrainModuleAccess::attach(*module, step_state);
  GradScalerOptions scaler_options;
  scaler_options.enabled = precision_ == Precision::k16Mixed;  // bfloat16 has float32's range: no scaling
  scaler = GradScaler(scaler_options);
  if (!options.process_group()) at::set_num_threads(threads_per_rank(options.threads(), environment));
  // With a process group of the caller's (threads in tests), who is who comes from the group.
  // A rank joining a running job (ElasticWorld::joining_id) comes in after the others: never rank 0 then.
  const bool joining = options.elastic() && !options.process_group() && comm::ElasticWorld::joining_id();
  is_main_ = !joining && (options.process_group() ? options.process_group()->rank() : environment.rank) == 0;
  local_rank_ = options.process_group() && !options.environment() ? options.process_group()->rank()
                                                                  : environment.local_rank;
  if (is_main_ && !options.ckpt_dir().empty()) {
    ensure_writable_dir(options.ckpt_dir());
    // A rank killed while writing a checkpoint left its temporary file; the checkpoint itself is whole.
    lockstep::detail::remove_orphaned_temporaries(options.ckpt_dir());
  }
  if (is_main_ && !options.metrics_file().empty())
    metrics_writer = std::make_unique<MetricsWriter>(options.metrics_file());
  if (is_main_ && !options.logger().empty()) {
    const std::string dir = log::next_version_dir(options.default_root_dir());
    loggers = log::make_loggers(options.logger(), dir);
    // Once for all the loggers (each one's log_hyperparams writes this same file; jsonl's none).
    log::write_hparams_yaml(dir, options.hparams());
    print_line("logging (" + options.logger() + ") to " + dir);
  }
  choose_device();
  // cuda_graphs: the capture stream is current from here on, before DDP holds the parameters' gradient
  // accumulators. Whether the step is then captured is decided in setup_graph().
  graph_.prepare(options, precision_, device_);
  connect();
  setup_data(data);
  setup_model();
}

Trainer::Run::~Run() {
  step_state->mesh = nullptr;  // the module outlives the run
}

// The ranks of a tensor-parallel group compute the epoch's metrics from other slices, equal up to rounding,
// and a pipeline's stages see what its last stage logged (pipeline_loss runs there): `root`'s table of
// `group` becomes every rank's (names, values bit for bit, prog_bar), so that callbacks deciding from
// callback_metrics() (ModelCheckpoint, EarlyStopping) decide alike on every rank.
void Trainer::Run::share_metrics(std::vector<detail::MetricValue>& metrics, comm::ProcessGroup& group,
                                 int root) {
  if (group.size() == 1) return;
  std::string text;
  for (const auto& metric : metrics) {
    uint64_t bits = 0;
    std::memcpy(&bits, &metric.value, sizeof bits);
    text += metric.name + '\n' + std::to_string(bits) + '\n' + (metric.prog_bar ? "1" : "0") + '\n';
  }
  std::istringstream shared(group.broadcast_string(text, root));
  metrics.clear();
  for (std::string name, bits, prog_bar;
       std::getline(shared, name) && std::getline(shared, bits) && std::getline(shared, prog_bar);) {
    const uint64_t word = std::stoull(bits);
    double value = 0;
    std::memcpy(&value, &word, sizeof value);
    metrics.push_back(detail::MetricValue{name, value, prog_bar == "1"});
  }
}

void Trainer::Run::shutdown_mesh() {
  if (!mesh) return;
  if (strategy) strategy->shutdown();
  mesh->shutdown();
  step_state->mesh = nullptr;
  scaler.agree_over(nullptr);
}

void Trainer::Run::choose_device() {
  const comm::ProcessGroup* given = options.process_group();
  const int local_world = given && !options.environment() ? given->size() : environment.local_world_size;
  device_ = rank_device(options.accelerator(), local_rank_, local_world,
                        given ? given->backend() : options.backend());
  // The Trainer runs 16-mixed on CUDA only (TrainerOptions::check_cpu_training), so auto without a GPU is
  // refused as accelerator 'cpu' is, also where LibTorch >= 2.5 could autocast to float16 on the CPU (the
  // Accelerator does).
  if (!device_.is_cuda() && precision_ == Precision::k16Mixed)
    options.check_cpu_training("accelerator 'auto', and LibTorch sees no GPU");
  check_precision_supported(precision_, device_.type());
  // On a GPU the sampled batches wait for the device at each phase boundary, so kernels count where queued.
  const auto synchronize = [](const void* device) {
    synchronize_device(*static_cast<const c10::Device*>(device));
  };
  step_timer_ =
      StepTimer(options.breakdown_every_n_batches(), device_.is_cuda() ? +synchronize : nullptr, &device_);
}

data::detail::AnyBatch Trainer::Run::on_device(const data::detail::AnyShardLoader& loader,
                                               data::detail::AnyBatch batch) const {
  return device_.is_cpu() || !batch ? batch : loader.to_device(batch, device_);
}

void Trainer::Run::connect() {
  if (options.process_group()) {
    group = options.process_group();
  } else {
    auto group_options = comm::ProcessGroupOptions::from_environment(environment)
                             .backend(options.backend())
                             .cuda(device_.is_cuda());
    if (options.collective_timeout()) group_options.collective_timeout(*options.collective_timeout());
    if (options.elastic()) {
      elastic = std::make_unique<comm::ElasticWorld>(group_options);
      group = &elastic->group();
    } else {
      owned_group.emplace(comm::init_process_group(group_options));
      group = &*owned_group;
    }
  }
  trainer.rank_ = group->rank();
  trainer.world_size_ = group->size();
  if (options.tensor_parallel() > 1 || options.pipeline_parallel() > 1) {
    mesh = std::make_unique<comm::DeviceMesh>(*group, options.tensor_parallel(), options.pipeline_parallel());
    step_state->mesh = mesh.get();
    // fp16: every slice's inf skips the step on every rank
    if (options.tensor_parallel() > 1) scaler.agree_over(&mesh->tp());
  }
}

// Prepared once per node, then loaded everywhere.
void Trainer::Run::setup_data(DataModuleBase& data) {
  data.device_ = device_;
  if (local_rank_ == 0) data.prepare_data();
  // A joiner's group is the running job's: its first collective is the one the others hold for it (DDP's).
  if (!elastic || !elastic->joined()) group->barrier();
  data.setup();
  train_loader_ = data.make_train_loader();
  val_loader_ = data.make_val_loader();
  if (device_.is_cuda()) {  // workers build batches in pinned memory: copies to the GPU do not block
    train_loader_->pin_memory();
    if (val_loader_) val_loader_->pin_memory();
  }
  batch_size_ = train_loader_->options().batch_size();
  plan_batches();
  if (train_batches_ == 0) {
    throw std::invalid_argument("the training data (" + train_loader_->description() +
                                ") gives no batch per rank with batch_size " + std::to_string(batch_size_) +
                                " on " + std::to_string(data_group().size()) +
                                " data-parallel rank(s): nothing to train on");
  }
}

void Trainer::Run::plan_batches() {
  train_batches_ = planned_batches(data_group().size());
  if (val_loader_) {
    val_batches_ = -1;  // val_plan's limit: the count below is this world's, unlimited
    val_batches_ = limited_batches(options.limit_val_batches(), val_loader_->batches(val_plan(0)),
                                   "limit_val_batches", val_loader_->description());
  }
}

int64_t Trainer::Run::planned_batches(int world) const {
  data::ShardPlan plan;
  plan.world = world;
  plan.seed = options.seed();
  return limited_batches(options.limit_train_batches(), train_loader_->batches(plan), "limit_train_batches",
                         train_loader_->description());
}

data::ShardPlan Trainer::Run::train_plan(int64_t e) const {
  data::ShardPlan plan;
  plan.epoch = e;
  plan.world = data_group().size();
  plan.rank = data_group().rank();
  plan.seed = options.seed();
  plan.max_batches = train_batches_;
  return plan;
}

data::ShardPlan Trainer::Run::val_plan(int64_t e) const {
  data::ShardPlan plan;  // every sample once, in dataset order, whatever the world size
  plan.epoch = e;
  plan.world = data_group().size();
  plan.rank = data_group().rank();
  plan.seed = options.seed();
  plan.even = false;
  plan.shuffle = false;
  plan.max_batches = val_batches_;
  return plan;
}

// The model across ranks, the module's plan, then the optimizer.
void Trainer::Run::setup_model() {
  module->configure_model();
  if (!device_.is_cpu()) module->to(device_);
  wrap_model(/*init_sync=*/true);
  // Dropout and augmentation differ per rank, reproducibly (a process group of threads shares one
  // generator: leave it to the test that made it).
  if (!options.process_group())
    torch::manual_seed(options.seed() + 1000003ULL * static_cast<uint64_t>(data_group().rank() + 1));
  TrainingPlan& plan = step_state->plan;
  plan.device = device_.str();
  plan.max_epochs = options.max_epochs();
  plan.batch_size = batch_size_;
  if (options.keep_global_batch()) batches_per_step = data_group().size() * options.accumulate_grad_batches();
  plan_world();
  optim = module->configure_optimizers();
  if (!optim.optimizer) throw std::invalid_argument("configure_optimizers() returned no optimizer");
  optimizer = strategy->wrap_optimizer(std::move(optim.optimizer));
}

void Trainer::Run::wrap_model(bool init_sync) {
  // The strategy wraps the model: DDP (its options from the strategy), FSDP over the Staged model, or a
  // pipeline of its stages.
  strategy = Strategy::make(options.strategy(), data_group(), precision_, StrategyApi::kTrainer);
  if (mesh && mesh->tensor_parallel() > 1) strategy->split_over(mesh->tp());
  if (mesh && mesh->pipeline_parallel() > 1) {
    strategy->pipeline_model(module, module->staged_model(), mesh->pp(),
                             {options.pipeline_schedule(), options.micro_batches(), options.pipeline_cut()});
  } else if (strategy->shards_parameters()) {
    fsdp = strategy->shard_model(module, module->staged_model());
  } else {
    ddp = std::make_shared<Ddp>(module, data_group(), strategy->ddp_options().init_sync(init_sync));
    strategy->add_model(module, ddp->gradient_sync(), ddp);
  }
}

void Trainer::Run::plan_world() {
  TrainingPlan& plan = step_state->plan;
  plan.world_size = data_group().size();
  plan.rank = data_group().rank();
  plan.tensor_parallel = mesh ? mesh->tensor_parallel() : 1;
  plan.tp_rank = mesh ? mesh->tp_rank() : 0;
  plan.pipeline_parallel = mesh ? mesh->pipeline_parallel() : 1;
  plan.pp_rank = mesh ? mesh->pp_rank() : 0;
  plan.accumulate_grad_batches = batches_per_step > 0
                                     ? accumulation_keeping(batches_per_step, data_group().size())
                                     : options.accumulate_grad_batches();
  plan.batches_per_epoch = train_batches_;
  plan.steps_per_epoch = train_batches_ < 0 ? -1 : ceil_div(train_batches_, plan.accumulate_grad_batches);
  if (train_batches_ < 0) {  // a stream of unknown length: only max_steps bounds the run
    plan.estimated_stepping_batches = options.max_steps() > 0 ? options.max_steps() : -1;
  } else {
    plan.estimated_stepping_batches = std::max<int64_t>(1, plan.steps_per_epoch * options.max_epochs());
    if (options.max_steps() > 0) {
      plan.estimated_stepping_batches = std::min(plan.estimated_stepping_batches, options.max_steps());
    }
  }
}

// ---- the epochs ----

TrainerResult Trainer::Run::fit() {
  // The rate of the last step taken (of step 0 before any): a run resumed after an epoch's last batch
  // reports that epoch, before its next step, as the uninterrupted run did.
  lr = optim.lr_schedule ? optim.lr_schedule->at(std::max<int64_t>(0, start_.step - 1))
                         : trainer.learning_rates().at(0);
  last_ckpt_ =
      options.ckpt_dir().empty() ? "" : (std::filesystem::path(options.ckpt_dir()) / "last.ckpt").string();
  // A preemption notice becomes a checkpoint at the next step, agreed by all ranks; only where there is
  // somewhere to write it.
  preemption_ = std::make_unique<PreemptionHandlers>(!last_ckpt_.empty());
  setup_graph();
  for (const auto& callback : options.callbacks()) callback->on_fit_start(trainer);
  position = start_;
  for (int64_t e = start_.epoch; e < options.max_epochs() && !max_steps_reached_ && !stop_requested; ++e) {
    const EpochTraining training = train_epoch(e);
    if (report_cut_short(e, training)) break;
    const LoggedMetrics trained = logged();
    const int64_t world = group->size();
    const EpochMetrics metrics = elastic_retry([&] {
      logged() = trained;  // a retry validates again from the epoch's training sums
      const Validation validation = validate(e);
      return reduce_epoch(e, training, validation);
    });
    if (group->size() != world) replan_schedule(e, 0);  // the world changed between the epochs
    end_epoch(e, metrics);
  }
  if (max_steps_reached_) {
    result_.stopped_early = true;
    result_.stop_reason = "max_steps";
  }
  return finish();
}

Trainer::Run::EpochTraining Trainer::Run::train_epoch(int64_t e) {
  const bool resumed_epoch = e == start_.epoch;
  const int64_t first_batch = resumed_epoch ? start_.batch : 0;
  EpochTraining training;
  data::ShardPlan plan = train_plan(e);
  plan.first_batch = first_batch;
  if (resumed_epoch && !reshard_parts.empty()) {  // the rest of an epoch begun by other world sizes
    plan.before = reshard_parts;
    plan.max_batches = -1;
  }
  training.planned = train_loader_->start(plan);
  if (replan_at_start_) {  // a joiner: the schedule the survivors replanned at its admission
    replan_at_start_ = false;
    replan_schedule(e, training.planned);
  }
  if (!resumed_epoch || !resumed_) logged().clear();  // else: the checkpoint's sums
  position = TrainPosition{e, first_batch, position.step};
  step_state->epoch = e;
  step_state->step = position.step;  // also for validation_step when no batch is left (resumed at the end)
  module->train();
  for (const auto& callback : options.callbacks()) callback->on_train_epoch_start(trainer);
  if (is_main_ && options.progress_bar()) bar_.start(e, options.max_epochs(), training.planned);
  const auto start = Clock::now();
  training.batches = first_batch;
  const int64_t& accumulate = step_state->plan.accumulate_grad_batches;  // a change of world may change it
  bool ended = training.planned >= 0 && first_batch >= training.planned;
  committed_ = Commit{first_batch, 0, logged(), group->size()};
  for (int64_t b = first_batch; !ended && !max_steps_reached_ && preempted_by_ == 0; ++b) {
    try {
      step_timer_.start_batch(b);
      const data::detail::AnyBatch batch = on_device(*train_loader_, train_loader_->next_any());
      step_timer_.end(StepPhase::kData);
      if (!batch) {  // a stream that ended exactly after a batch
        TORCH_INTERNAL_ASSERT(training.planned < 0, "loader ended after ", b, " of ", training.planned,
                              " batches");
        ended = true;
        break;
      }
      ended = training.planned >= 0 ? b + 1 == training.planned : train_loader_->at_last();
      const bool steps_now = (b + 1) % accumulate == 0 || ended;
      const int64_t samples = train_loader_->samples(batch.get());
      const std::optional<double> replayed = graph_step(batch, b);  // cuda_graphs (trainer_graph.cpp)
      const double batch_loss = replayed ? *replayed : train_batch(batch.get(), samples, b, steps_now);
      training.samples += samples;
      logged().samples += samples;
      training.batches = b + 1;
      mid_accumulation = !steps_now;
      bool stepped = replayed.has_value();
      if (steps_now && !replayed) stepped = step(b);
      step_timer_.end(StepPhase::kOptimizer);
      position.batch = b + 1;
      if (steps_now) {
        if (elastic) committed_ = Commit{b + 1, training.samples, logged(), group->size()};
        step_boundary(b, stepped, batch_loss);
      }
      for (const auto& callback : options.callbacks())
        callback->on_train_batch_end(trainer, BatchEnd{b, stepped, batch_loss});
      if (is_main_ && options.progress_bar())
        bar_.update(b + 1, training.samples * data_group().size(), batch_loss);
      if (steps_now && elastic && elastic->admitting()) {
        training.planned = admit_in_epoch(e, training);
        ended = training.planned == 0;
        b = -1;  // as after a recovery
      }
    } catch (const comm::CommError&) {
      if (!elastic) throw;
      training.planned = recover_in_epoch(e, training);
      ended = training.planned == 0;
      b = -1;  // the rest of the epoch counts its batches from 0 (as a resumed re-sharded epoch does)
    }
  }
  // A stream's length is known once it ended; cut short by max_steps or preemption it stays unknown.
  if (training.planned < 0 && ended) training.planned = training.batches;
  graph_.wait_for_replays();  // cuda_graphs: the host ran ahead; the epoch ends when the GPU's does
  training.seconds = seconds_since(start);
  if (is_main_ && options.progress_bar()) bar_.finish();
  return training;
}

int64_t Trainer::Run::recover_in_epoch(int64_t e, EpochTraining& training) {
  const comm::MembershipChange change = elastic->reform();  // rethrows when no rank was lost
  // The dropped step: its batches' samples, logged values and gradients.
  training.samples = committed_.samples;
  logged() = committed_.logged;
  group_has_nan_ = false;
  mid_accumulation = false;
  optimizer->zero_grad();
  // fp16: what unscale() recorded for the dropped step (a clip before the vote); the scale stays.
  if (scaler.enabled()) scaler.load_state(scaler.state());
  rejoin(change);
  return restart_rest(e, training, change);
}

int64_t Trainer::Run::admit_in_epoch(int64_t e, EpochTraining& training) {
  const comm::MembershipChange change = elastic->reform();
  rejoin(change);
  return restart_rest(e, training, change);
}

int64_t Trainer::Run::restart_rest(int64_t e, EpochTraining& training, const comm::MembershipChange& change) {
  // What the old world trained becomes one more part of the epoch; the rest is dealt over the new one. A
  // later part of no batches is none (as on resume), so that a rank that finished an admission before a
  // failure and one that failed inside it deal the same rest. (The first part is kept even empty: its
  // planned count carries limit_train_batches.)
  std::vector<data::EpochPart> parts = reshard_parts;
  const int old_world = committed_.world;
  if (committed_.batch > 0 || parts.empty())
    parts.push_back(
        data::EpochPart{old_world, committed_.batch, parts.empty() ? planned_batches(old_world) : -1});
  if (!change.joined.empty()) send_admission(e, parts);
  reshard_parts = std::move(parts);
  data::ShardPlan plan = train_plan(e);
  plan.before = reshard_parts;
  plan.max_batches = -1;
  position.batch = 0;
  training.batches = 0;
  committed_ = Commit{0, training.samples, logged(), group->size()};
  const int64_t rest = train_loader_->start(plan);
  replan_schedule(e, rest);
  return rest;
}

void Trainer::Run::replan_schedule(int64_t e, int64_t rest) {
  TrainingPlan& plan = step_state->plan;
  if (rest < 0 || plan.steps_per_epoch < 0) return;  // a stream: max_steps bounds it
  const int64_t remaining =
      ceil_div(rest, plan.accumulate_grad_batches) + (options.max_epochs() - e - 1) * plan.steps_per_epoch;
  plan.estimated_stepping_batches = std::max<int64_t>(1, position.step + remaining);
  if (options.max_steps() > 0)
    plan.estimated_stepping_batches = std::min(plan.estimated_stepping_batches, options.max_steps());
  if (optim.lr_schedule) refresh_schedule();
}

void Trainer::Run::refresh_schedule() {
  OptimizerConfig fresh = module->configure_optimizers();
  if (fresh.lr_schedule) optim.lr_schedule = std::move(fresh.lr_schedule);
}

std::string Trainer::Run::describe_batch() const {
  if (batches_per_step <= 0) return "";
  const TrainingPlan& plan = step_state->plan;
  const int64_t kept = batches_per_step * plan.batch_size;
  std::string text = "; global batch " + std::to_string(plan.global_batch_size());
  text += plan.world_size * plan.accumulate_grad_batches == batches_per_step
              ? " kept"
              : ", not " + std::to_string(kept) + " (" + std::to_string(plan.world_size) +
                    " ranks do not divide " + std::to_string(batches_per_step) + " batches a step)";
  return text + ": each rank accumulates " + std::to_string(plan.accumulate_grad_batches) + " batch(es)";
}

void Trainer::Run::rejoin(const comm::MembershipChange& change) {
  strategy.reset();  // it holds the DDP of the old group
  ddp.reset();
  group = &elastic->group();
  trainer.rank_ = group->rank();
  trainer.world_size_ = group->size();
  wrap_model(/*init_sync=*/!change.joined.empty());  // the survivors hold the same parameters
  optimizer = strategy->wrap_optimizer(optimizer);
  plan_batches();
  plan_world();
  if (group->rank() == 0 && !is_main_) {  // rank 0 was lost: this rank takes over its duties
    is_main_ = true;
    if (!options.metrics_file().empty())
      metrics_writer = std::make_unique<MetricsWriter>(options.metrics_file());
  }
  print_line("membership change at step " + std::to_string(position.step) + " (epoch " +
             std::to_string(step_state->epoch + 1) + "): " + change.describe() + describe_batch());
  trainer.log_metrics({{"world_size", static_cast<double>(group->size())},
                       {"membership_change_s", change.seconds_since_seen}});
}

double Trainer::Run::train_batch(const void* batch, int64_t samples, int64_t b, bool steps_now) {
  step_state->batch_size = samples;
  step_state->step = position.step;
  const bool skip_nan = options.on_nan() == OnNan::kSkip;
  if (skip_nan) logged_before_ = logged();
  // Gradients of a partial accumulation group stay local (no all-reduce) until its last batch.
  std::optional<ddp::NoSyncGuard> no_sync;
  if (!steps_now) no_sync.emplace(strategy->gradient_sync());
  if (strategy->pipeline() != nullptr) {
    const double value = pipeline_batch(batch);
    check_finite_loss(value, b);
    // The schedule interleaves the passes: forward counts as backward; the waits on neighbours and the
    // average as communication.
    step_timer_.end(StepPhase::kBackward);
    step_timer_.move(StepPhase::kBackward, StepPhase::kAllreduce,
                     strategy->gradient_sync().exposed_seconds());
    return value;
  }
  if (ddp) ddp->before_forward();  // fsdp's runs inside the model's forward
  at::Tensor loss;
  {
    AutocastScope autocast(precision_, device_.type());
    loss = detail::TrainModuleAccess::training_step(*module, batch, b);
  }
  if (!loss.defined() || loss.numel() != 1) {
    throw std::invalid_argument("training_step must return the batch's loss as a scalar tensor (batch " +
                                std::to_string(b) + " of epoch " + std::to_string(step_state->epoch) + ")");
  }
  for (const auto& callback : options.callbacks()) callback->on_before_backward(trainer, loss);
  const double value = loss.item<double>();
  step_timer_.end(StepPhase::kForward);
  check_finite_loss(value, b);
  const int64_t accumulate = step_state->plan.accumulate_grad_batches;
  scaler.scale(accumulate > 1 ? loss / static_cast<double>(accumulate) : loss).backward();
  step_timer_.end(StepPhase::kBackward);
  // The communication the computation did not hide: the gradient sync's, and under fsdp the gathers'.
  if (steps_now)
    step_timer_.move(StepPhase::kBackward, StepPhase::kAllreduce,
                     strategy->gradient_sync().exposed_seconds());
  if (fsdp) {
    const shard::FullyShardedDataParallel::GatherWaits waits = fsdp->take_gather_waits();
    step_timer_.move(StepPhase::kForward, StepPhase::kAllreduce, waits.forward_s);
    step_timer_.move(StepPhase::kBackward, StepPhase::kAllreduce, waits.backward_s);
  }
  return value;
}

double Trainer::Run::pipeline_batch(const void* batch) {
  const auto [input, target] = detail::TrainModuleAccess::pipeline_input(*module, batch);
  TrainModuleBase& m = *module;
  const double value = strategy->pipeline_step(
      input, target, [&m](const at::Tensor& x) { return m.pipeline_forward(x); },
      [&m](const at::Tensor& output, const at::Tensor& t) { return m.pipeline_loss(output, t); },
      step_state->plan.accumulate_grad_batches);
  m.log("train_loss", value, LogOptions().sync_dist(true).prog_bar(true));
  return value;
}

void Trainer::Run::check_finite_loss(double value, int64_t b) {
  if (std::isfinite(value)) return;
  if (options.on_nan() != OnNan::kSkip) {
    throw std::runtime_error(
        "non-finite training loss " + std::to_string(value) + " at step " +
        std::to_string(position.step + 1) + " (epoch " + std::to_string(step_state->epoch) + ", batch " +
        std::to_string(b) + ") on rank " + std::to_string(group->rank()) +
        ": lower the learning rate, clip gradients (gradient_clip_val), check the data, or "
        "skip such steps on every rank (on_nan skip)");
  }
  group_has_nan_ = true;
  logged() = logged_before_;  // what this batch logged is dropped with the step
}

bool Trainer::Run::step(int64_t b) {
  if (options.on_nan() == OnNan::kSkip) {
    // Every rank must skip the same steps: a NaN on one rank only still skips it everywhere.
    const bool skip = detail::any_rank(*group, group_has_nan_);
    group_has_nan_ = false;
    if (skip) {
      optimizer->zero_grad();
      strategy->clear_gradients();
      ++result_.skipped_steps;
      print_line("skipped optimizer step " + std::to_string(position.step + 1) + " (epoch " +
                 std::to_string(step_state->epoch) + ", batch " + std::to_string(b) +
                 "): non-finite loss on a rank");
      return false;
    }
  }
  if (options.gradient_clip_val() > 0) {
    scaler.unscale(*optimizer);
    strategy->clip_grad_norm_(options.gradient_clip_val());  // what it steps from (zero2, fsdp: every chunk)
  }
  // elastic: no rank applies a step that another survivor drops (comm::ElasticWorld::should_commit).
  if (elastic && !elastic->should_commit()) {
    throw comm::MembershipChanged(
        group->rank(), "should_commit",
        "the world changed before every rank voted for step " + std::to_string(position.step + 1));
  }
  apply_lr();
  scaler.step(*optimizer);
  scaler.update();
  optimizer->zero_grad();
  ++position.step;
  step_state->step = position.step;
  return true;
}

void Trainer::Run::apply_lr() {
  if (optim.lr_schedule) {
    lr = optim.lr_schedule->at(position.step);
    set_lr(*optimizer, lr);
  } else {
    lr = trainer.learning_rates().at(0);
  }
}

int64_t Trainer::Run::step_record_interval() const {
  return options.log_every_n_steps() > 0 ? options.log_every_n_steps() : 50;
}

void Trainer::Run::step_boundary(int64_t b, bool stepped, double batch_loss) {
  for (const auto& callback : options.callbacks())
    callback->on_train_step_end(trainer, BatchEnd{b, stepped, batch_loss});
  const int64_t step = position.step;
  if (metrics_writer && stepped && options.log_every_n_steps() > 0 &&
      step % options.log_every_n_steps() == 0) {
    metrics_writer->write(StepMetrics{step, step_state->epoch, b + 1, batch_loss, lr});
  }
  if (!loggers.empty() && stepped && step % step_record_interval() == 0)
    log_scalars(StepMetrics{step, step_state->epoch, b + 1, batch_loss, lr}.scalars(), step);
  max_steps_reached_ = options.max_steps() > 0 && step >= options.max_steps();
  const bool due = options.ckpt_every_n_steps() > 0 && step % options.ckpt_every_n_steps() == 0;
  // One tiny all-reduce per step, only with a ckpt_dir: the ranks got the notice at different steps, and
  // all must stop at the same one.
  if (preemption_->installed())
    preempted_by_ = static_cast<int>(detail::max_over_ranks(*group, preemption_notice()));
  if (!last_ckpt_.empty() && (due || max_steps_reached_ || preempted_by_ != 0))
    trainer.save_checkpoint(last_ckpt_);
  if (preempted_by_ != 0) group->barrier();  // every rank leaves after rank 0 has written it
}

bool Trainer::Run::report_cut_short(int64_t e, const EpochTraining& training) {
  if (preempted_by_ != 0) {
    result_.preempted = true;
    result_.stopped_early = true;
    result_.stop_reason = std::string("preempted by ") + (preempted_by_ == SIGUSR1 ? "SIGUSR1" : "SIGTERM");
    print_line(result_.stop_reason + " at step " + std::to_string(position.step) + " (epoch " +
               std::to_string(e + 1) + ", batch " + std::to_string(training.batches) + "): " + last_ckpt_ +
               " holds the position; exiting with status " + std::to_string(kPreemptedExitStatus) +
               " (requeue the job with resume 'last' or 'auto')");
    return true;
  }
  if (training.planned < 0 ||
      training.batches < training.planned) {  // max_steps stopped the epoch: no validation, no epoch metrics
    print_line("stopped at max_steps " + std::to_string(options.max_steps()) + " (epoch " +
               std::to_string(e + 1) + ", batch " + std::to_string(training.batches) +
               (training.planned < 0 ? "" : " of " + std::to_string(training.planned)) + ")" +
               (last_ckpt_.empty() ? "" : ": " + last_ckpt_ + " holds the position"));
    result_.stopped_early = true;
    result_.stop_reason = "max_steps";
    return true;
  }
  return false;
}

Trainer::Run::Validation Trainer::Run::validate(int64_t e) {
  const auto start = Clock::now();
  Validation validation;
  if (!val_loader_) return validation;
  module->eval();
  torch::NoGradGuard no_grad;
  const shard::FullParameters whole =
      strategy->whole_parameters();  // fsdp: ranks may run different numbers of batches
  val_loader_->start(val_plan(e));
  int64_t i = 0;
  while (const data::detail::AnyBatch batch = on_device(*val_loader_, val_loader_->next_any())) {
    const int64_t samples = val_loader_->samples(batch.get());
    step_state->batch_size = samples;
    AutocastScope autocast(precision_, device_.type());
    detail::TrainModuleAccess::validation_step(*module, batch.get(), i++);
    validation.samples += samples;
  }
  module->train();
  validation.seconds = seconds_since(start);
  return validation;
}

EpochMetrics Trainer::Run::reduce_epoch(int64_t e, const EpochTraining& training,
                                        const Validation& validation) {
  flush_graph_logs();
  const detail::RankEpoch mine{
      logged().samples,       validation.samples,
      training.seconds,       validation.seconds,
      peak_rss_mb(),          static_cast<double>(strategy->model_state_bytes()) / (1024.0 * 1024.0),
      peak_device_mb(device_)};
  detail::ReducedEpoch reduced = detail::reduce_epoch(data_group(), logged(), mine, e);
  if (mesh) {
    share_metrics(reduced.metrics, mesh->tp(), 0);
    share_metrics(reduced.metrics, mesh->pp(), mesh->pipeline_parallel() - 1);
  }
  EpochMetrics m;
  m.epoch = e;
  m.step = position.step;
  m.train_samples = reduced.train_samples;
  m.val_samples = reduced.val_samples;
  m.epoch_s = reduced.train_s;
  m.val_s = reduced.val_s;
  m.samples_per_s = reduced.train_s > 0 ? static_cast<double>(reduced.train_samples) / reduced.train_s : 0.0;
  m.lr = lr;
  m.world_size = group->size();
  m.peak_rss_mb = reduced.peak_rss_mb;
  m.model_state_mb = reduced.model_state_mb;
  if (device_.is_cuda()) m.peak_cuda_mb = reduced.peak_cuda_mb;
  if (options.breakdown_every_n_batches() > 0 && !graph_.on())  // the same on every rank
    m.breakdown = make_breakdown(detail::gather_phase_times(data_group(), step_timer_.take()));
  callback_metrics.clear();
  for (const auto& metric : reduced.metrics) {
    callback_metrics[metric.name] = metric.value;
    m.logged.emplace_back(metric.name, metric.value);
    if (metric.prog_bar) m.prog_bar.push_back(metric.name);
  }
  callback_metrics["epoch"] = static_cast<double>(e);
  callback_metrics["step"] = static_cast<double>(position.step);
  callback_metrics["lr"] = lr;
  if (auto it = callback_metrics.find("train_loss"); it != callback_metrics.end()) m.train_loss = it->second;
  if (auto it = callback_metrics.find("val_loss"); it != callback_metrics.end()) m.val_loss = it->second;
  if (auto it = callback_metrics.find("val_acc"); it != callback_metrics.end()) m.val_acc = it->second;
  return m;
}

void Trainer::Run::end_epoch(int64_t e, const EpochMetrics& m) {
  position = TrainPosition{e + 1, 0, position.step};
  reshard_parts.clear();
  mid_accumulation = false;
  for (const auto& callback : options.callbacks()) callback->on_validation_end(trainer);
  result_.epochs.push_back(m);
  if (is_main_) {
    std::string line = "epoch " + std::to_string(e + 1) + "/" + std::to_string(options.max_epochs());
    char text[160];
    for (const std::string& name : m.prog_bar) {
      std::snprintf(text, sizeof text, "  %s %.4f", name.c_str(), callback_metrics[name]);
      line += text;
    }
    std::snprintf(text, sizeof text, "  train %.2f s  val %.2f s  %.0f samples/s", m.epoch_s, m.val_s,
                  m.samples_per_s);
    print_line(line + text);
    if (m.breakdown && m.breakdown->has_straggler()) print_line(m.breakdown->straggler_line(e + 1));
    if (metrics_writer) metrics_writer->write(m);
    log_scalars(m.scalars(), m.step);
  }
  for (const auto& callback : options.callbacks()) callback->on_train_epoch_end(trainer);
  // A stop asked for on any rank stops all of them, together.
  if (elastic_retry([&] { return detail::any_rank(*group, stop_requested); }) && !stop_requested) {
    stop_requested = true;
    stop_reason = "another rank's callback asked to stop";
  }
  if (!last_ckpt_.empty()) elastic_retry([&] { trainer.save_checkpoint(last_ckpt_); });
  if (stop_requested) {
    result_.stopped_early = e + 1 < options.max_epochs();
    result_.stop_reason = stop_reason;
    if (result_.stopped_early)
      print_line("stopping after epoch " + std::to_string(e + 1) + ": " + stop_reason);
  }
}

TrainerResult Trainer::Run::finish() {
  graph_.release();  // its stream finishes; the default one is current again
  result_.global_step = position.step;
  if (result_.preempted) {
    shutdown_mesh();
    if (owned_group) owned_group->shutdown();
    if (elastic) elastic->shutdown();
    return result_;
  }
  // on_fit_end and the caller after fit() see the whole trained model on every rank (pipeline: gathered for
  // good; the scopes below leave it so).
  strategy->leave_whole();
  for (const auto& callback : options.callbacks()) callback->on_fit_end(trainer);
  if (!options.ckpt_dir().empty() && options.save_final_weights()) {
    const shard::FullParameters whole = strategy->whole_parameters();
    result_.safetensors_path = (std::filesystem::path(options.ckpt_dir()) / "final.safetensors").string();
    // The same weights for Python without lockstep or LibTorch's archive format (docs/export.md).
    SafetensorsMetadata metadata{
        {"format", "pt"}, {"producer", options.producer()}, {"model", module->checkpoint_name()}};
    if (!result_.epochs.empty()) metadata["epochs"] = std::to_string(result_.epochs.back().epoch + 1);
    if (mesh && mesh->tensor_parallel() > 1) {
      // The model whole, gathered over the tensor-parallel group. final.pt, LibTorch's archive of this
      // module, would hold one rank's slices under the whole model's names: not written.
      const std::vector<NamedTensor> tensors = whole_module_tensors(*module, mesh->tp());
      if (is_main_) save_safetensors(result_.safetensors_path, tensors, metadata);
    } else {
      result_.weights_path = (std::filesystem::path(options.ckpt_dir()) / "final.pt").string();
      if (is_main_) {
        write_atomically(result_.weights_path, [&](const std::string& tmp) {
          torch::serialize::OutputArchive archive;
          module->save(archive);
          archive.save_to(tmp);
        });
        save_module_safetensors(result_.safetensors_path, *module, metadata);
      }
    }
  }
  // bfloat16 parameters under zero1/zero2: the model the run leaves holds the float32 master weights, as
  // after ddp (the optimizer keeping them goes with the run).
  if (shard::ZeroOptimizer* master = strategy->master_optimizer()) master->gather_all();
  shutdown_mesh();
  if (owned_group) owned_group->shutdown();
  if (elastic) elastic->shutdown();
  char summary[128];
  std::snprintf(summary, sizeof summary, "%lld optimizer step(s), %d rank(s), %.1f s",
                static_cast<long long>(result_.global_step), group->size(), seconds_since(started_));
  print_line(summary);
  return result_;
}

void Trainer::Run::log_scalars(const std::vector<std::pair<std::string, double>>& scalars,
                               int64_t step) const {
  for (const auto& logger : loggers) logger->log_metrics(scalars, step);
}

// Rank 0 speaks; the others are silent.
void Trainer::Run::print_line(const std::string& line) const {
  if (!is_main_) return;
  std::fprintf(options.out(), "%s\n", line.c_str());
  std::fflush(options.out());
}

}  // namespace lockstep::train
