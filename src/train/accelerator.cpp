// Accelerate-style training (include/lockstep/train/accelerator.h): set-up, prepare, accumulation, the
// collectives. save_state/load_state: accelerator/accelerator_state.cpp.
#include "lockstep/train/accelerator.h"

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include "accelerator/gradient_state.h"
#include "accelerator/prepared_loader_state.h"
#include "admission.h"
#include "lockstep/comm/process_group_options.h"
#include "lockstep/env/environment.h"
#include "lockstep/pipeline/pipeline_parallel.h"
#include "lockstep/train/device.h"
#include "option_checks.h"

namespace lockstep::train {

// ---- Accelerator

// Both constructors resolve and validate the options before any connection: a bad option fails at once,
// on every rank.
Accelerator::Accelerator(AcceleratorOptions options)
    : options_(resolve_launch_environment(options)), precision_from_launcher_(!options.mixed_precision()) {
  const env::Environment environment = env::from_env();
  init(environment.local_rank, environment.local_world_size, options_.backend());
  const auto group_options = comm::ProcessGroupOptions::from_environment(environment)
                                 .backend(options_.backend())
                                 .cuda(device_.is_cuda());
  if (options_.elastic()) {  // validate() refused what in-place recovery cannot work with
    elastic_ = std::make_unique<comm::ElasticWorld>(group_options);
    group_ = &elastic_->group();
  } else {
    owned_group_ = std::make_unique<comm::ProcessGroup>(comm::init_process_group(group_options));
    group_ = owned_group_.get();
  }
  make_strategy();
}

Accelerator::Accelerator(comm::ProcessGroup& group, AcceleratorOptions options)
    : options_(resolve_launch_environment(options)),
      precision_from_launcher_(!options.mixed_precision()),
      group_(&group) {
  if (options_.elastic()) {
    try {
      detail::check_elastic({options_.strategy().kind(), options_.backend(), /*cuda_graphs=*/false,
                             "the Accelerator constructor that takes a process group of the caller's"});
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string("AcceleratorOptions: ") + e.what() +
                                  " (construct Accelerator(options) without the group)");
    }
  }
  const auto& group_options = group.options();
  int local_world_size = group_options.local_world_size();
  if (local_world_size <= 0)
    local_world_size = std::max(1, group.size() / std::max(1, group_options.num_nodes()));
  init(group.rank() % local_world_size, std::min(local_world_size, group.size()), group.backend());
  make_strategy();
}

void Accelerator::make_strategy() {
  if (options_.tensor_parallel() > 1 || options_.pipeline_parallel() > 1) {
    mesh_ =
        std::make_unique<comm::DeviceMesh>(*group_, options_.tensor_parallel(), options_.pipeline_parallel());
  }
  strategy_ = Strategy::make(options_.strategy(), data_group(), precision_, StrategyApi::kAccelerator);
  if (mesh_ && mesh_->tensor_parallel() > 1) {
    strategy_->split_over(mesh_->tp());
    scaler_.agree_over(&mesh_->tp());  // fp16: every slice's inf skips the step on every rank
  }
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

ddp::GradientSync& Accelerator::pipeline_model(const std::shared_ptr<torch::nn::Module>& module,
                                               models::Staged* staged) {
  strategy_->pipeline_model(
      module, staged, mesh_->pp(),
      {options_.pipeline_schedule(), options_.micro_batches(), options_.pipeline_cut()});
  return strategy_->gradient_sync(strategy_->model_count() - 1);
}

double Accelerator::pipeline_step(
    const at::Tensor& input, const at::Tensor& target,
    const std::function<at::Tensor(const at::Tensor&)>& forward,
    const std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>& loss) {
  if (strategy_->pipeline() == nullptr) {
    throw std::logic_error(
        "Accelerator::pipeline_step without a pipeline: set AcceleratorOptions().pipeline_parallel(P > 1) "
        "and prepare a models::Staged model");
  }
  // As backward(): each micro-step's loss counts 1 / the accumulation group's length.
  return strategy_->pipeline_step(input, target, forward, loss, gradient_state_->group_size);
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
  optimizers_.push_back(optimizer);
  return PreparedOptimizer(std::move(optimizer), *this);
}

std::shared_ptr<detail::PreparedLoaderState> Accelerator::prepare_loader_state(
    std::unique_ptr<data::detail::AnyShardLoader> loader) {
  data::ShardPlan plan;
  plan.world = data_group().size();
  plan.rank = data_group().rank();
  plan.seed = options_.seed();
  if (loader->batches(plan) == 0) {
    throw std::invalid_argument(
        "Accelerator::prepare_data_loader: " + loader->description() +
        " gives no batch per rank with batch_size " + std::to_string(loader->options().batch_size()) +
        " on " + std::to_string(data_group().size()) + " data-parallel rank(s): pass one with more samples");
  }
  if (device_.is_cuda()) loader->pin_memory();  // Accelerate's default for GPUs: non_blocking copies
  auto state =
      std::make_shared<detail::PreparedLoaderState>(std::move(loader), plan, gradient_state_, device_);
  if (elastic_) state->at_boundary = [this] { at_batch_boundary(); };
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
  ++backwards_;
  scaled.backward();
}

void Accelerator::vote_to_commit() {
  auto& state = *gradient_state_;
  if (voted_backward_ == backwards_) return;  // this step's vote is done (an optimizer before this one)
  if (!elastic_->should_commit()) {
    throw comm::MembershipChanged(
        process_index(), "should_commit",
        "the world changed before every rank voted for step " + std::to_string(state.sync_steps));
  }
  voted_backward_ = backwards_;
  state.committed_steps = state.sync_steps;
  for (const auto& weak : loaders_) {
    if (auto loader = weak.lock()) loader->commit();
  }
}

void Accelerator::optimizer_step(PreparedOptimizer& optimizer) {
  if (!gradient_state_->sync_gradients) return;
  if (elastic_) vote_to_commit();
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
  at::Tensor stacked = data_group().all_gather_stacked(tensor.contiguous());
  return tensor.dim() == 0 ? stacked : stacked.flatten(0, 1);
}

at::Tensor Accelerator::reduce(const at::Tensor& tensor, Reduction reduction) {
  at::Tensor result = tensor.clone();
  data_group().all_reduce(result, comm::ReduceOp::kSum).wait();
  if (reduction == Reduction::kMean) result = result.div(static_cast<double>(data_group().size()));
  return result;
}

void Accelerator::end_training() {
  // A pipeline leaves the whole trained model on every rank (as ddp does), its links closed before the mesh.
  strategy_->leave_whole();
  strategy_->shutdown();
  if (mesh_) mesh_->shutdown();
  if (owned_group_) owned_group_->shutdown();
  if (elastic_) elastic_->shutdown();
}

// The Trainer's recover_in_epoch (trainer_run.cpp) for a loop the user writes: the same protocol, with the
// dropped step rolled back here and the re-sharded rest handed to the loop through its prepared loaders.
comm::MembershipChange Accelerator::recover() {
  if (!elastic_) {
    throw std::logic_error(
        "Accelerator::recover needs in-place recovery: construct the Accelerator with "
        "AcceleratorOptions().elastic(true) and start the ranks with `lockstep run --recovery in-place`");
  }
  const int old_world = num_processes();
  comm::MembershipChange change = elastic_->reform();  // rethrows when no rank was lost
  // The dropped step: its gradients and its place in the accumulation.
  for (const auto& optimizer : optimizers_) optimizer->zero_grad();
  auto& state = *gradient_state_;
  state.micro_steps = 0;
  state.group_size = state.num_steps;
  state.sync_gradients = true;
  state.sync_steps = state.committed_steps;
  state.batches_left = -1;
  // fp16: what unscale() recorded for the dropped step (a clip before the vote); the scale stays.
  if (scaler_.enabled()) scaler_.load_state(scaler_.state());
  rejoin(change, old_world);
  return change;
}

void Accelerator::rejoin(const comm::MembershipChange& change, int old_world) {
  group_ = &elastic_->group();
  // The models over the new group (the old strategy holds the old DDPs: it goes first), the same optimizers.
  // The survivors hold the same parameters: DDP broadcasts them only to ranks that joined.
  strategy_.reset();
  strategy_ = Strategy::make(options_.strategy(), *group_, precision_, StrategyApi::kAccelerator);
  for (const auto& remake : remake_ddp_) remake(/*init_sync=*/!change.joined.empty());
  for (const auto& optimizer : optimizers_) {
    const auto wrapped = strategy_->wrap_optimizer(optimizer);
    TORCH_INTERNAL_ASSERT(wrapped == optimizer, "elastic runs strategy ddp, which steps the optimizer as is");
  }
  for (const auto& weak : loaders_) {
    if (auto loader = weak.lock()) loader->reshard(old_world, num_processes(), process_index());
  }
  if (!change.joined.empty()) send_state();
  changes_.push_back(change);
}

void Accelerator::at_batch_boundary() {
  receive_state();
  if (!elastic_->admitting()) return;
  const int old_world = num_processes();
  rejoin(elastic_->reform(), old_world);
}

int64_t Accelerator::first_epoch() {
  if (elastic_) receive_state();
  for (const auto& weak : loaders_) {
    if (auto loader = weak.lock()) return loader->epoch;
  }
  return 0;
}

// Rank 0's position and optimizer state, in prepare order; the joiners' side is receive_state().
void Accelerator::send_state() {
  std::string position;
  if (process_index() == 0) {
    nlohmann::json state = {{"sync_steps", gradient_state_->sync_steps},
                            {"committed_steps", gradient_state_->committed_steps},
                            {"loaders", nlohmann::json::array()}};
    const std::vector<data::EpochPart> none;
    for (const auto& weak : loaders_) {
      auto loader = weak.lock();
      state["loaders"].push_back({{"epoch", loader ? loader->epoch : 0},
                                  {"parts", detail::parts_to_json(loader ? loader->before : none)}});
    }
    position = state.dump();
  }
  group_->broadcast_string(position);
  for (const auto& optimizer : optimizers_)
    detail::share_optimizer_state(*group_, *optimizer, /*load=*/false, device_);
  detail::share_scaler_state(*group_, scaler_, /*load=*/false);
}

void Accelerator::receive_state() {
  if (!elastic_->joined() || state_received_) return;  // once, on a joiner
  state_received_ = true;
  const nlohmann::json state = nlohmann::json::parse(group_->broadcast_string(""));
  gradient_state_->sync_steps = state.at("sync_steps").get<int64_t>();
  gradient_state_->committed_steps = state.at("committed_steps").get<int64_t>();
  const auto& loaders = state.at("loaders");
  if (loaders.size() != loaders_.size()) {
    throw std::runtime_error("Accelerator: this joining rank prepared " + std::to_string(loaders_.size()) +
                             " data loader(s), the running job " + std::to_string(loaders.size()) +
                             ": every rank must prepare the same objects in the same order");
  }
  for (std::size_t i = 0; i < loaders_.size(); ++i) {
    auto loader = loaders_[i].lock();
    if (!loader) continue;
    loader->epoch = loaders[i].at("epoch").get<int64_t>();
    loader->before = detail::parts_from_json(loaders[i].at("parts"));
    loader->keep_before = true;
  }
  for (const auto& optimizer : optimizers_)
    detail::share_optimizer_state(*group_, *optimizer, /*load=*/true, device_);
  detail::share_scaler_state(*group_, scaler_, /*load=*/true);
}

}  // namespace lockstep::train
