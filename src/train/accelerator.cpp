// Accelerate-style training (include/lockstep/train/accelerator.h).
#include "lockstep/train/accelerator.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ops/full.h>
#include <ATen/ops/tensor.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>
#include <torch/utils.h>

#include "lockstep/comm/process_group_options.h"
#include "lockstep/env/environment.h"
#include "lockstep/shard/shard_checkpoint.h"
#include "lockstep/shard/zero_optimizer.h"
#include "lockstep/train/atomic_file.h"
#include "lockstep/train/checkpoint.h"
#include "lockstep/train/device.h"

namespace lockstep::train {
namespace detail {

/// Where the accumulation stands, shared by the accelerator, its optimizers and its loaders (Accelerate's
/// GradientState).
struct GradientState {
  int64_t num_steps = 1;       // gradient_accumulation_steps
  int64_t micro_steps = 0;     // micro-steps of the current group so far
  int64_t group_size = 1;      // micro-steps in the current group: num_steps, or fewer at the end of a pass
  bool sync_gradients = true;  // the current micro-step synchronises (true outside accumulate())
  int64_t sync_steps = 0;      // sync micro-steps since the start (Accelerator::step())
  // Batches of a prepared loader's pass from the one being trained to the end (that one included);
  // -1 outside a pass.
  int64_t batches_left = -1;
};

struct PreparedLoaderState {
  PreparedLoaderState(std::unique_ptr<data::detail::AnyShardLoader> loader_in, data::ShardPlan plan_in,
                      std::shared_ptr<GradientState> gradient_state_in, c10::Device device_in)
      : loader(std::move(loader_in)),
        plan(plan_in),
        gradient_state(std::move(gradient_state_in)),
        device(device_in) {}

  data::ShardPlan epoch_plan() const {
    data::ShardPlan p = plan;
    p.epoch = epoch;
    return p;
  }

  void begin_pass() {
    batches = loader->start(epoch_plan());
    batch_index = -1;
  }

  // The next batch of the pass; false (and the epoch advanced) after the last one.
  bool advance() {
    current = loader->next_any();
    if (!current) {
      gradient_state->batches_left = -1;
      ++epoch;  // Accelerate's DataLoaderShard: each completed pass is the next epoch
      return false;
    }
    ++batch_index;
    if (device.type() != c10::kCPU) current = loader->to_device(current, device);
    // Read by the accumulate() of this batch: a group never reaches past the end of the pass, so a pass
    // whose length is not a multiple of gradient_accumulation_steps loses no gradients. A stream of
    // unknown length tells only at its last batch (the loader reads one ahead).
    if (batches >= 0) {
      gradient_state->batches_left = batches - batch_index;
    } else {
      gradient_state->batches_left = loader->at_last() ? 1 : -1;
    }
    return true;
  }

  std::unique_ptr<data::detail::AnyShardLoader> loader;
  data::ShardPlan plan;  // this rank's, but for the epoch
  std::shared_ptr<GradientState> gradient_state;
  c10::Device device;
  int64_t epoch = 0;
  int64_t batches = 0;  // of the pass in progress (-1: a stream of unknown length)
  int64_t batch_index = -1;
  data::detail::AnyBatch current;
};

bool PreparedLoaderCore::begin_pass() {
  state_->begin_pass();
  return state_->advance();
}
bool PreparedLoaderCore::advance() {
  return state_->advance();
}
void* PreparedLoaderCore::current() const {
  TORCH_INTERNAL_ASSERT(state_->current != nullptr, "dereferencing the end of a PreparedLoader pass");
  return state_->current.get();
}
void PreparedLoaderCore::set_epoch(int64_t epoch) {
  state_->epoch = epoch;
}
int64_t PreparedLoaderCore::epoch() const {
  return state_->epoch;
}
int64_t PreparedLoaderCore::size() const {
  return state_->loader->batches(state_->epoch_plan());
}
data::detail::AnyShardLoader& PreparedLoaderCore::loader() {
  return *state_->loader;
}

}  // namespace detail

namespace {

constexpr int64_t kAcceleratorStateVersion = 1;
constexpr const char* kStateFile = "accelerator_state.pt";

c10::IValue read_value(torch::serialize::InputArchive& archive, const std::string& path,
                       const std::string& key) {
  c10::IValue value;
  if (!archive.try_read(key, value)) {
    throw std::runtime_error("accelerator state '" + path + "' has no '" + key +
                             "' (damaged, or not written by " + "Accelerator::save_state)");
  }
  return value;
}

at::Tensor read_tensor(torch::serialize::InputArchive& archive, const std::string& path,
                       const std::string& key) {
  at::Tensor tensor;
  if (!archive.try_read(key, tensor, /*is_buffer=*/true)) {
    throw std::runtime_error("accelerator state '" + path + "' has no tensor '" + key + "' (damaged?)");
  }
  return tensor;
}

}  // namespace

void AcceleratorOptions::validate() const {
  if (gradient_accumulation_steps_ && *gradient_accumulation_steps_ < 1) {
    throw std::invalid_argument("AcceleratorOptions::gradient_accumulation_steps must be >= 1, got " +
                                std::to_string(*gradient_accumulation_steps_) + " (1 means no accumulation)");
  }
  try {
    strategy_.validate(mixed_precision_.value_or(Precision::k32), "mixed_precision");
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("AcceleratorOptions: ") + e.what());
  }
}

// ---- PreparedOptimizer

void PreparedOptimizer::step() {
  accelerator_->optimizer_step(*this);
}
void PreparedOptimizer::zero_grad() {
  accelerator_->optimizer_zero_grad(*this);
}

// ---- Accelerator

// Both constructors resolve and validate the options before any connection: a bad option fails at once,
// on every rank.
Accelerator::Accelerator(AcceleratorOptions options)
    : options_(resolve_launch_environment(options)), precision_from_launcher_(!options.mixed_precision()) {
  const env::Environment environment = env::from_env();
  init(environment.local_rank, environment.local_world_size, options_.backend());
  owned_group_ = std::make_unique<comm::ProcessGroup>(
      comm::init_process_group(comm::ProcessGroupOptions::from_environment(environment)
                                   .backend(options_.backend())
                                   .cuda(device_.is_cuda())));
  group_ = owned_group_.get();
  strategy_ = Strategy::make(options_.strategy(), *group_, precision_, StrategyApi::kAccelerator);
}

Accelerator::Accelerator(comm::ProcessGroup& group, AcceleratorOptions options)
    : options_(resolve_launch_environment(options)),
      precision_from_launcher_(!options.mixed_precision()),
      group_(&group) {
  const auto& group_options = group.options();
  int local_world_size = group_options.local_world_size();
  if (local_world_size <= 0)
    local_world_size = std::max(1, group.size() / std::max(1, group_options.num_nodes()));
  init(group.rank() % local_world_size, std::min(local_world_size, group.size()), group.backend());
  strategy_ = Strategy::make(options_.strategy(), *group_, precision_, StrategyApi::kAccelerator);
}

Accelerator::~Accelerator() = default;

void Accelerator::init(int local_rank, int local_world_size, comm::Backend backend) {
  local_process_index_ = local_rank;
  precision_ = *options_.mixed_precision();
  const AcceleratorKind kind = *options_.cpu() ? AcceleratorKind::kCpu : options_.accelerator();
  device_ = rank_device(kind, local_rank, local_world_size, backend);
  try {
    check_precision_supported(precision_, device_.type());
  } catch (const std::invalid_argument& e) {
    if (!precision_from_launcher_) throw;
    throw std::invalid_argument(
        std::string(e.what()) +
        " (the precision is the launcher's: ACCELERATE_MIXED_PRECISION, from lockstep "
        "launch or accelerate launch --mixed_precision)");
  }
  GradScalerOptions scaler_options = options_.scaler();
  scaler_options.enabled = scaler_options.enabled && precision_ == Precision::k16Mixed;
  scaler_ = GradScaler(scaler_options);
  gradient_state_ = std::make_shared<detail::GradientState>();
  gradient_state_->num_steps = *options_.gradient_accumulation_steps();
  gradient_state_->group_size = *options_.gradient_accumulation_steps();
}

void Accelerator::move_to_device(torch::nn::Module& module) const {
  if (device_.type() != c10::kCPU) module.to(device_);
}

std::shared_ptr<detail::FsdpModel> Accelerator::shard_model(
    const std::shared_ptr<torch::nn::Module>& module) {
  auto sharded = std::make_shared<detail::FsdpModel>();
  const auto modules = module->modules(/*include_self=*/true);
  const bool staged = std::any_of(modules.begin(), modules.end(), [](const auto& m) {
    return dynamic_cast<models::Staged*>(m.get()) != nullptr;
  });
  if (!staged) sharded->single = std::make_shared<models::SingleStage>(module);
  sharded->fsdp = strategy_->shard_model(module, sharded->single.get(), sharded->single);
  return sharded;
}

FullParameters Accelerator::full_parameters() {
  return strategy_->whole_parameters();
}

PreparedOptimizer Accelerator::prepare_optimizer(torch::optim::Optimizer& optimizer) {
  // Borrowed: a shared_ptr that owns nothing.
  return prepare_optimizer(std::shared_ptr<torch::optim::Optimizer>(std::shared_ptr<void>(), &optimizer));
}

PreparedOptimizer Accelerator::prepare_optimizer(std::shared_ptr<torch::optim::Optimizer> optimizer) {
  if (!optimizer) throw std::invalid_argument("Accelerator::prepare_optimizer: the optimizer is null");
  if (precision_ == Precision::k16Mixed && strategy_->optimizer_count() > 0) {
    // The GradScaler keeps one optimizer's inf check per step (torch's keeps one per optimizer).
    throw std::invalid_argument(
        "Accelerator: mixed_precision fp16 supports one prepared optimizer, got a second: "
        "put all parameters in one optimizer (parameter groups), or use bf16");
  }
  try {
    optimizer = strategy_->wrap_optimizer(std::move(optimizer));
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("Accelerator::prepare_optimizer: ") + e.what());
  }
  return PreparedOptimizer(std::move(optimizer), *this);
}

std::shared_ptr<detail::PreparedLoaderState> Accelerator::prepare_loader_state(
    std::unique_ptr<data::detail::AnyShardLoader> loader) {
  data::ShardPlan plan;
  plan.world = num_processes();
  plan.rank = process_index();
  plan.seed = options_.seed();
  if (loader->batches(plan) == 0) {
    throw std::invalid_argument("Accelerator::prepare_data_loader: " + loader->description() +
                                " gives no batch per rank with batch_size " +
                                std::to_string(loader->options().batch_size()) + " on " +
                                std::to_string(num_processes()) + " rank(s): pass one with more samples");
  }
  if (device_.is_cuda()) loader->pin_memory();  // Accelerate's default for GPUs: non_blocking copies
  auto state =
      std::make_shared<detail::PreparedLoaderState>(std::move(loader), plan, gradient_state_, device_);
  loaders_.push_back(state);
  return state;
}

// Accelerate's GradientState._do_sync: a micro-step synchronises when it completes its group of
// gradient_accumulation_steps micro-steps. Inside a prepared loader's pass a group is cut short by the end
// of the pass (Accelerate's end_of_dataloader), and knowing that when the group begins lets backward()
// divide by the group's true length, so the tail step also gets the mean gradient of its micro-batches.
bool Accelerator::begin_micro_step() {
  auto& state = *gradient_state_;
  if (state.micro_steps == 0) {
    state.group_size =
        state.batches_left > 0 ? std::min(state.num_steps, state.batches_left) : state.num_steps;
  }
  // The last batch of a pass always syncs (a stream of unknown length only knows there).
  state.sync_gradients = ++state.micro_steps >= state.group_size || state.batches_left == 1;
  if (state.sync_gradients) {
    state.micro_steps = 0;
    ++state.sync_steps;
  }
  return state.sync_gradients;
}

bool Accelerator::sync_gradients() const {
  return gradient_state_->sync_gradients;
}

int64_t Accelerator::step() const {
  return gradient_state_->sync_steps;
}

void Accelerator::backward(const at::Tensor& loss) {
  if (strategy_->model_count() == 0) {
    throw std::logic_error(
        "Accelerator::backward called before a model was prepared: call "
        "accelerator.prepare(model) first (an unprepared model's gradients are not averaged "
        "across ranks)");
  }
  // The mean over a group's micro-batches: each one contributes loss / group size, and the sum over the
  // group accumulates in .grad.
  const int64_t group_size = gradient_state_->group_size;
  at::Tensor scaled = group_size > 1 ? loss / static_cast<double>(group_size) : loss;
  scaled = scaler_.scale(scaled);
  scaled.backward();
}

void Accelerator::optimizer_step(PreparedOptimizer& optimizer) {
  if (!gradient_state_->sync_gradients) return;
  if (scaler_.enabled()) {
    optimizer.step_was_skipped_ = !scaler_.step(*optimizer.optimizer_);
    scaler_.update();
  } else {
    optimizer.optimizer_->step();
    optimizer.step_was_skipped_ = false;
  }
}

void Accelerator::optimizer_zero_grad(PreparedOptimizer& optimizer) {
  if (!gradient_state_->sync_gradients) return;
  optimizer.optimizer_->zero_grad();
  strategy_->clear_gradients();
}

std::optional<double> Accelerator::clip_grad_norm_(double max_norm, double norm_type) {
  if (!gradient_state_->sync_gradients) return std::nullopt;
  // Clip the true gradients, not the scaled ones (torch's "unscale before clipping").
  if (scaler_.enabled()) {
    for (size_t i = 0; i < strategy_->optimizer_count(); ++i) scaler_.unscale(strategy_->optimizer(i));
  }
  return strategy_->clip_grad_norm_(max_norm, norm_type);
}

void Accelerator::wait_for_everyone() {
  group_->barrier();
}

at::Tensor Accelerator::gather(const at::Tensor& tensor) {
  at::Tensor stacked = group_->all_gather_stacked(tensor.contiguous());
  return tensor.dim() == 0 ? stacked : stacked.flatten(0, 1);
}

at::Tensor Accelerator::reduce(const at::Tensor& tensor, Reduction reduction) {
  at::Tensor result = tensor.clone();
  group_->all_reduce(result, comm::ReduceOp::kSum).wait();
  if (reduction == Reduction::kMean) result = result.div(static_cast<double>(num_processes()));
  return result;
}

void Accelerator::save_state(const std::string& dir) {
  // Every rank's generator, so that each continues its own dropout stream.
  const at::Tensor rng_states = group_->all_gather_stacked(cpu_rng_state());
  const std::string path = (std::filesystem::path(dir) / kStateFile).string();
  const std::vector<std::vector<std::string>> shards = save_optimizer_shards(dir);
  // fsdp, bf16 zero1/zero2: the model is saved whole, in float32 (optimizer: shards above).
  const FullParameters whole = strategy_->whole_parameters();
  on_every_rank(dir, "rank 0 could not write " + path, [&] {
    if (!is_main_process()) return;
    ensure_writable_dir(dir);
    torch::serialize::OutputArchive archive;
    archive.write("lockstep_accelerator_state_version", c10::IValue(kAcceleratorStateVersion));
    archive.write("world_size", c10::IValue(static_cast<int64_t>(num_processes())));
    archive.write("mixed_precision", c10::IValue(std::string(to_string(precision_))));
    archive.write("step", c10::IValue(gradient_state_->sync_steps));
    archive.write("micro_steps", c10::IValue(gradient_state_->micro_steps));
    archive.write("group_size", c10::IValue(gradient_state_->group_size));
    archive.write("model_count", c10::IValue(static_cast<int64_t>(strategy_->model_count())));
    for (size_t i = 0; i < strategy_->model_count(); ++i) {
      torch::serialize::OutputArchive model_archive(archive.compilation_unit());
      strategy_->model(i).save(model_archive);
      archive.write("model_" + std::to_string(i), model_archive);
    }
    archive.write("optimizer_count", c10::IValue(static_cast<int64_t>(strategy_->optimizer_count())));
    for (size_t i = 0; i < strategy_->optimizer_count(); ++i) {
      if (!shards[i].empty()) {  // sharded: the files every rank wrote
        archive.write("optimizer_" + std::to_string(i) + "_shards",
                      c10::IValue(c10::List<std::string>(shards[i])));
        continue;
      }
      torch::serialize::OutputArchive optimizer_archive(archive.compilation_unit());
      strategy_->optimizer(i).save(optimizer_archive);
      archive.write("optimizer_" + std::to_string(i), optimizer_archive);
    }
    std::vector<int64_t> epochs;
    for (const auto& weak : loaders_) {
      auto loader = weak.lock();
      epochs.push_back(loader ? loader->epoch : -1);
    }
    archive.write("loader_epochs", at::tensor(epochs, at::kLong), /*is_buffer=*/true);
    archive.write("scaler", scaler_.state(), /*is_buffer=*/true);
    archive.write("rng_states", rng_states, /*is_buffer=*/true);
    save_checksummed_archive(archive, path);
    for (size_t i = 0; i < strategy_->optimizer_count(); ++i)  // the shards of the states this one replaced
      if (!shards[i].empty()) remove_checkpoint_shards(optimizer_base(dir, i), shards[i]);
  });
}

std::string Accelerator::optimizer_base(const std::string& dir, size_t i) {
  return (std::filesystem::path(dir) / ("optimizer_" + std::to_string(i))).string();
}

// Instead of a plain barrier: every rank runs `write` and learns whether all succeeded (one all-reduce),
// so none carries on believing the state was saved, and none waits for a rank that has thrown.
void Accelerator::on_every_rank(const std::string& dir, const std::string& failure,
                                const std::function<void()>& write) {
  std::string error;
  try {
    write();
  } catch (const std::exception& e) {
    error = e.what();
  }
  at::Tensor failed = at::full({1}, error.empty() ? 0 : 1, at::kInt);
  group_->all_reduce(failed, comm::ReduceOp::kSum).wait();
  if (!error.empty()) throw std::runtime_error("Accelerator::save_state('" + dir + "'): " + error);
  if (failed.item<int>() != 0)
    throw std::runtime_error("Accelerator::save_state('" + dir + "'): " + failure + " (its error says why)");
}

// A sharded optimizer (zero1, zero2): every rank writes its own shard (shard_checkpoint.h), nothing is
// gathered; the step in the names keeps the files the state on disk names until the new one replaces it.
// Returns, per optimizer, its shards' file names (empty: not sharded). Collective.
std::vector<std::vector<std::string>> Accelerator::save_optimizer_shards(const std::string& dir) {
  std::vector<std::vector<std::string>> names(strategy_->optimizer_count());
  std::vector<const shard::ZeroOptimizer*> sharded(names.size());
  for (size_t i = 0; i < names.size(); ++i) sharded[i] = strategy_->sharded_optimizer(i);
  if (std::none_of(sharded.begin(), sharded.end(), [](const auto* zero) { return zero != nullptr; }))
    return names;
  on_every_rank(dir, "rank 0 could not create the directory", [&] {
    if (is_main_process()) ensure_writable_dir(dir);
  });
  // Every shard is on disk (or every rank knows one is not) before rank 0 writes the state naming them.
  on_every_rank(dir, "a rank could not write its optimizer shard", [&] {
    const int64_t step = gradient_state_->sync_steps;
    for (size_t i = 0; i < names.size(); ++i) {
      if (sharded[i] == nullptr) continue;
      names[i] =
          save_checkpoint_shard(optimizer_base(dir, i), *sharded[i], process_index(), num_processes(), step);
    }
  });
  return names;
}

void Accelerator::load_optimizer_shards(const std::string& dir, size_t i,
                                        const std::vector<std::string>& names) {
  std::vector<std::string> paths;
  for (const std::string& name : names) paths.push_back((std::filesystem::path(dir) / name).string());
  const shard::ShardReader read = [&](int k, torch::serialize::InputArchive& archive) {
    load_checksummed_archive(
        archive, paths.at(static_cast<size_t>(k)), "Accelerator::load_state: optimizer shard",
        "copy the saved directory again with all its files, or load an older state", device_);
  };
  strategy_->load_optimizer_shards(i, static_cast<int>(paths.size()), read);
}

void Accelerator::load_state(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / kStateFile).string();
  if (!std::filesystem::is_directory(dir)) {
    throw std::runtime_error("Accelerator::load_state: directory '" + dir +
                             "' does not exist: pass the directory given to save_state");
  }
  if (!std::filesystem::is_regular_file(path)) {
    throw std::runtime_error("Accelerator::load_state: '" + dir + "' has no " + kStateFile +
                             ": it was not written by Accelerator::save_state (or the save did not finish)");
  }
  torch::serialize::InputArchive archive;
  load_checksummed_archive(archive, path, "Accelerator::load_state: accelerator state",
                           "load an older state saved by Accelerator::save_state, or start from scratch",
                           device_);
  const c10::IValue version = read_value(archive, path, "lockstep_accelerator_state_version");
  if (!version.isInt() || version.toInt() != kAcceleratorStateVersion) {
    throw std::runtime_error("Accelerator::load_state: '" + path + "' has format version " +
                             (version.isInt() ? std::to_string(version.toInt()) : std::string("?")) +
                             "; this lockstep reads version " + std::to_string(kAcceleratorStateVersion));
  }
  const int64_t model_count = read_value(archive, path, "model_count").toInt();
  const int64_t optimizer_count = read_value(archive, path, "optimizer_count").toInt();
  const auto models = static_cast<int64_t>(strategy_->model_count());
  const auto optimizers = static_cast<int64_t>(strategy_->optimizer_count());
  if (model_count != models || optimizer_count != optimizers) {
    throw std::runtime_error("Accelerator::load_state: '" + path + "' holds " + std::to_string(model_count) +
                             " model(s) and " + std::to_string(optimizer_count) + " optimizer(s), but " +
                             std::to_string(models) + " and " + std::to_string(optimizers) +
                             " are prepared: prepare the same objects, in the same order, before load_state");
  }
  {
    const FullParameters whole = strategy_->whole_parameters();  // loaded whole, then each keeps its chunks
    for (size_t i = 0; i < strategy_->model_count(); ++i) {
      torch::serialize::InputArchive model_archive;
      if (!archive.try_read("model_" + std::to_string(i), model_archive)) {
        throw std::runtime_error("Accelerator::load_state: '" + path + "' lacks model " + std::to_string(i) +
                                 " (damaged?)");
      }
      load_module_in_place(model_archive, strategy_->model(i), "accelerator state '" + path + "'");
    }
  }
  for (size_t i = 0; i < strategy_->optimizer_count(); ++i) {
    c10::IValue shards;
    if (archive.try_read("optimizer_" + std::to_string(i) + "_shards", shards)) {
      std::vector<std::string> names;
      for (const auto& name : shards.toListRef()) names.push_back(name.toStringRef());
      load_optimizer_shards(dir, i, names);
      continue;
    }
    torch::serialize::InputArchive optimizer_archive;
    if (!archive.try_read("optimizer_" + std::to_string(i), optimizer_archive)) {
      throw std::runtime_error("Accelerator::load_state: '" + path + "' lacks optimizer " +
                               std::to_string(i) + " (damaged?)");
    }
    try {
      strategy_->optimizer(i).load(optimizer_archive);
    } catch (const c10::Error& e) {
      throw std::runtime_error("Accelerator::load_state: '" + path + "' holds another kind of optimizer " +
                               std::to_string(i) + ": " + e.what_without_backtrace());
    }
  }
  scaler_.load_state(read_tensor(archive, path, "scaler").cpu());
  gradient_state_->sync_steps = read_value(archive, path, "step").toInt();
  gradient_state_->micro_steps = read_value(archive, path, "micro_steps").toInt();
  gradient_state_->group_size = read_value(archive, path, "group_size").toInt();
  gradient_state_->sync_gradients = true;
  const at::Tensor epochs = read_tensor(archive, path, "loader_epochs").cpu();
  for (size_t i = 0; i < loaders_.size() && static_cast<int64_t>(i) < epochs.numel(); ++i) {
    auto loader = loaders_[i].lock();
    const int64_t epoch = epochs[static_cast<int64_t>(i)].item<int64_t>();
    if (loader && epoch >= 0) loader->epoch = epoch;
  }
  const at::Tensor rng_states = read_tensor(archive, path, "rng_states").cpu();
  if (rng_states.dim() == 2 && rng_states.size(0) == num_processes()) {
    set_cpu_rng_state(rng_states[process_index()]);
  }
}

void Accelerator::end_training() {
  if (owned_group_) owned_group_->shutdown();
}

}  // namespace lockstep::train
