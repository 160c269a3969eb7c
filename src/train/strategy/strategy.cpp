// The strategy's shared part (strategy.h); each strategy's own is in its file beside this one.
#include "lockstep/train/strategy/strategy.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <unordered_set>
#include <utility>

#include <ATen/ops/zeros.h>
#include <torch/nn/utils/clip_grad.h>

#include "lockstep/models/tensor_parallel_layout.h"
#include "lockstep/optim/clip_coefficient.h"
#include "lockstep/pipeline/pipeline_parallel.h"
#include "lockstep/shard/fully_sharded_data_parallel.h"
#include "lockstep/shard/sharded_reducer.h"
#include "lockstep/shard/zero_optimizer.h"
#include "lockstep/train/device.h"
#include "strategies.h"

namespace lockstep::train {

c10::Device rank_device(AcceleratorKind kind, int local_rank, int local_world_size, comm::Backend backend) {
  const c10::Device device =
      training_device(kind, local_rank, local_world_size, ranks_may_share_gpu(backend));
  use_device(device);
  return device;
}

std::unique_ptr<Strategy> Strategy::make(const StrategyOptions& options, comm::ProcessGroup& group,
                                         Precision precision, StrategyApi api) {
  options.validate(precision, api == StrategyApi::kTrainer ? "precision" : "mixed_precision");
  switch (options.kind()) {
    case StrategyKind::kZero1:
    case StrategyKind::kZero2:
      return detail::make_zero_strategy(options, group, precision, api);
    case StrategyKind::kFsdp:
      return detail::make_fsdp_strategy(options, group, precision, api);
    case StrategyKind::kDdp:
      break;
  }
  return detail::make_ddp_strategy(options, group, precision, api);
}

Strategy::Strategy(const StrategyOptions& options, comm::ProcessGroup& group, Precision precision,
                   StrategyApi api)
    : options_(options), group_(group), precision_(precision), api_(api) {}

Strategy::~Strategy() = default;

ddp::DdpOptions Strategy::ddp_options() const {
  ddp::DdpOptions ddp =
      ddp::DdpOptions()
          .find_unused_parameters(options_.find_unused_parameters())
          .bucket_cap_mb(options_.bucket_cap_mb())
          .gradient_as_bucket_view(options_.gradient_as_bucket_view())
          .broadcast_buffers(options_.broadcast_buffers())
          .unused_parameters_advice(
              api_ == StrategyApi::kTrainer
                  ? "pass TrainerOptions().strategy(DdpStrategy().find_unused_parameters(true)) "
                    "(lockstep fit: --strategy ddp_find_unused_parameters_true)"
                  : "pass AcceleratorOptions().strategy(DdpStrategy().find_unused_parameters(true))");
  if (options_.comm_hook()) ddp.comm_hook(options_.comm_hook());
  return ddp;
}

void Strategy::add_model(std::shared_ptr<torch::nn::Module> module, ddp::GradientSync& sync,
                         std::shared_ptr<void> keep) {
  models_.push_back(Model{std::move(module), &sync, nullptr, std::move(keep), nullptr});
}

std::shared_ptr<shard::FullyShardedDataParallel> Strategy::shard_model(
    std::shared_ptr<torch::nn::Module> /*module*/, models::Staged* /*staged*/,
    std::shared_ptr<void> /*owner*/) {
  throw std::logic_error(std::string("Strategy::shard_model under strategy ") + to_string(kind()) +
                         ": only fsdp shards parameters");
}

ddp::GradientSync& Strategy::gradient_sync(size_t i) const {
  if (i >= models_.size())
    throw std::logic_error("Strategy::gradient_sync(" + std::to_string(i) + "): no such model prepared");
  return *models_[i].sync;
}

shard::ShardedReducer* Strategy::sharded_gradients() const {
  return models_.empty() ? nullptr : dynamic_cast<shard::ShardedReducer*>(models_.front().sync);
}

std::shared_ptr<torch::optim::Optimizer> Strategy::wrap_optimizer(
    std::shared_ptr<torch::optim::Optimizer> optimizer) {
  if (!optimizer) throw std::invalid_argument("the optimizer to prepare is null");
  narrow_to_stage(*optimizer);
  optimizer = wrap(std::move(optimizer));
  optimizers_.push_back(optimizer);
  return optimizer;
}

shard::ZeroOptimizer* Strategy::sharded_optimizer(size_t i) const {
  return dynamic_cast<shard::ZeroOptimizer*>(optimizers_.at(i).get());
}

shard::ZeroOptimizer* Strategy::master_optimizer() const {
  for (size_t i = 0; i < optimizers_.size(); ++i) {
    shard::ZeroOptimizer* zero = sharded_optimizer(i);
    if (zero != nullptr && zero->param_dtype()) return zero;
  }
  return nullptr;
}

void Strategy::clear_gradients() {
  if (shard::ShardedReducer* sharded = sharded_gradients()) sharded->clear();
}

// zero2, fsdp: the global norm over every rank's chunks (one model). bf16 zero1/zero2: the float32 gradients
// the masters step from, and the .grad of the parameters of models prepared after the one they step.
double Strategy::clip_grad_norm_(double max_norm, double norm_type) {
  if (tensor_parallel_ != nullptr) return clip_split_grad_norm_(max_norm, norm_type);
  if (pipeline::PipelineParallel* pipe = pipeline()) {
    if (norm_type != 2.0) {
      throw std::invalid_argument(
          "clip_grad_norm_ under pipeline parallelism clips by the 2-norm, got norm_type " +
          std::to_string(norm_type));
    }
    return pipe->clip_grad_norm(max_norm);
  }
  shard::ShardedReducer* sharded = sharded_gradients();
  shard::ZeroOptimizer* master = master_optimizer();
  if (sharded != nullptr || master != nullptr) {
    if (norm_type != 2.0) {
      throw std::invalid_argument(std::string("clip_grad_norm_: strategy ") + to_string(kind()) +
                                  (master ? " under bf16" : "") + " clips by the 2-norm, got norm_type " +
                                  std::to_string(norm_type));
    }
    if (master == nullptr) return sharded->clip_grad_norm_(max_norm);
    if (sharded != nullptr) return master->clip_grad_norm_(max_norm);
    std::unordered_set<const void*> stepped;
    for (const auto& group : master->param_groups())
      for (const auto& p : group.params()) stepped.insert(p.unsafeGetTensorImpl());
    std::vector<at::Tensor> others;
    for (const Model& model : models_) {
      for (const auto& p : model.module->parameters())
        if (stepped.count(p.unsafeGetTensorImpl()) == 0) others.push_back(p);
    }
    return master->clip_grad_norm_(max_norm, others);
  }
  std::vector<at::Tensor> parameters;
  for (const Model& model : models_)
    for (const auto& p : model.module->parameters()) parameters.push_back(p);
  return torch::nn::utils::clip_grad_norm_(parameters, max_norm, norm_type);
}

double Strategy::clip_split_grad_norm_(double max_norm, double norm_type) {
  if (norm_type != 2.0 || sharded_gradients() != nullptr || master_optimizer() != nullptr) {
    throw std::invalid_argument(
        "clip_grad_norm_ under tensor parallelism clips by the 2-norm of float32 gradients on the model "
        "(strategy ddp or zero1, precision 32); got norm_type " +
        std::to_string(norm_type) + ", strategy " + to_string(kind()) +
        (master_optimizer() ? " under bf16-mixed" : "") + ": change that, or turn clipping off");
  }
  const double replicated_weight = 1.0 / static_cast<double>(tensor_parallel_->size());
  std::vector<at::Tensor> gradients;
  at::Tensor squares = at::zeros({1}, at::kDouble);
  for (const Model& model : models_) {
    const std::vector<models::ParameterSplit> splits = models::parameter_splits(*model.module);
    const std::vector<at::Tensor> parameters = model.module->parameters();
    for (size_t i = 0; i < parameters.size(); ++i) {
      const at::Tensor& grad = parameters[i].grad();
      if (!grad.defined()) continue;
      gradients.push_back(grad);
      const at::Tensor square = grad.detach().to(at::kDouble).pow(2).sum().cpu();
      squares += splits[i].replicated() ? square * replicated_weight : square;
    }
  }
  tensor_parallel_->all_reduce(squares).wait();  // the same total on every rank of the group
  const double total = std::sqrt(squares.item<double>());
  const double coefficient = optim::clip_coefficient(max_norm, total);
  if (!(coefficient >= 1.0)) {
    at::NoGradGuard no_grad;
    for (at::Tensor& grad : gradients) grad.mul_(coefficient);
  }
  return total;
}

shard::FullParameters Strategy::whole_parameters() const {
  std::vector<shard::ShardedParameters*> sharded;
  for (const Model& model : models_) {
    if (model.fsdp != nullptr) sharded.push_back(model.fsdp);
    if (model.pipeline_whole != nullptr) sharded.push_back(model.pipeline_whole);
  }
  if (shard::ZeroOptimizer* master = master_optimizer()) sharded.push_back(master);
  return shard::FullParameters(sharded);
}

int64_t Strategy::model_state_bytes() const {
  int64_t bytes = 0;
  shard::ZeroOptimizer* master = master_optimizer();
  for (const Model& model : models_) {
    bytes += static_cast<int64_t>(model.sync->bucket_bytes());
    if (model.fsdp != nullptr) {
      bytes += static_cast<int64_t>(model.fsdp->shard_bytes());
      continue;
    }
    // zero1 under bf16-mixed: .grad beside the buckets; a pipeline stage: .grad, no buckets. A stage counts
    // the parameters it trains, not its copies of the others.
    const bool own_gradients = (master != nullptr && sharded_gradients() == nullptr) || model.pipeline;
    const int64_t copies = own_gradients ? 2 : 1;
    const std::vector<at::Tensor> parameters =
        model.pipeline != nullptr ? model.pipeline->parameters() : model.module->parameters();
    for (const auto& p : parameters) bytes += static_cast<int64_t>(p.nbytes()) * copies;
  }
  for (size_t i = 0; i < optimizers_.size(); ++i) {
    const shard::ZeroOptimizer* zero = sharded_optimizer(i);
    bytes += zero ? zero->state_bytes() : shard::optimizer_state_bytes(*optimizers_[i]);
  }
  return bytes;
}

void Strategy::load_optimizer_shards(size_t i, int count, const shard::ShardReader& read) {
  if (shard::ZeroOptimizer* zero = sharded_optimizer(i)) {
    zero->load_shards(count, read);
  } else {
    shard::load_whole_from_shards(*optimizers_.at(i), count, read);
  }
}

}  // namespace lockstep::train
