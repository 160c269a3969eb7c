// Pipeline parallelism under a strategy (strategy.h, pipeline_model): the model run as a
// pipeline::PipelineParallel over the pipeline group, its stage's gradients averaged over the strategy's
// (data-parallel) group after each batch.
#include <chrono>
#include <stdexcept>
#include <string>
#include <unordered_set>

#include <ATen/ops/zeros_like.h>

#include "../option_checks.h"
#include "lockstep/models/staged.h"
#include "lockstep/pipeline/pipeline_parallel.h"
#include "lockstep/train/strategy/strategy.h"

namespace lockstep::train {
namespace {

// What gradient_sync() is for a pipeline: no hooks (the pipeline's backward passes run micro-batch by
// micro-batch, and a module shared by stages is summed after them); the strategy averages the stage's
// gradients once the batch is through, when sync() is on.
class PipelineSync final : public ddp::GradientSync {
 public:
  void set_sync(bool sync) override { sync_ = sync; }
  bool sync() const override { return sync_; }
  size_t bucket_bytes() const override { return 0; }
  void reduce_zeros() override {
    throw std::logic_error("pipeline parallelism does not let a rank join early (uneven inputs)");
  }
  size_t refresh_hooks() override { return 0; }
  double exposed_seconds() const override { return exposed_seconds_; }
  void set_exposed_seconds(double seconds) { exposed_seconds_ = seconds; }

 private:
  bool sync_ = true;
  double exposed_seconds_ = 0.0;
};

// The pipeline's whole model for a scope (Strategy::whole_parameters): the other stages' parameters
// gathered, then freed again at the outermost scope's end unless they were whole before it.
class PipelineWhole final : public shard::ShardedParameters {
 public:
  explicit PipelineWhole(pipeline::PipelineParallel& pipe) : pipe_(pipe) {}
  void gather_all() override {
    if (depth_ == 0) {
      release_after_ = pipe_.released();
      pipe_.gather_whole();
    }
    ++depth_;  // after the gather: one that threw leaves no scope open
  }
  void reshard(bool /*from_parameters: each stage's parameters are its own*/) override {
    if (--depth_ == 0 && release_after_) pipe_.release_others();
  }

 private:
  pipeline::PipelineParallel& pipe_;
  int depth_ = 0;
  bool release_after_ = false;
};

struct PipelineOwner {
  PipelineSync sync;
  std::unique_ptr<pipeline::PipelineParallel> pipe;
  std::unique_ptr<PipelineWhole> whole;
};

}  // namespace

namespace {

// The parameters of `module` that none of `staged`'s stage modules holds: a pipeline would never train them.
std::vector<std::string> outside_stages(const torch::nn::Module& module, models::Staged& staged) {
  std::unordered_set<const void*> staged_parameters;
  for (const auto& stage : staged.stage_modules())
    for (const at::Tensor& p : stage->parameters()) staged_parameters.insert(p.unsafeGetTensorImpl());
  std::vector<std::string> outside;
  for (const auto& named : module.named_parameters())
    if (staged_parameters.count(named.value().unsafeGetTensorImpl()) == 0) outside.push_back(named.key());
  return outside;
}

}  // namespace

pipeline::PipelineParallel& Strategy::pipeline_model(std::shared_ptr<torch::nn::Module> module,
                                                     models::Staged* staged, comm::ProcessGroup& pp,
                                                     const pipeline::PipelineOptions& options) {
  detail::PipelineParallelUse use;
  use.pipeline_parallel = pp.size();
  use.micro_batches = options.micro_batches;
  use.cut_starts = options.cut.size();
  use.strategy = options_;
  use.precision = precision_;
  detail::check_pipeline_parallel(use);
  const std::string where = api_ == StrategyApi::kTrainer ? "the TrainModule's staged_model()" : "the model";
  if (staged == nullptr) {
    throw std::invalid_argument("pipeline_parallel " + std::to_string(pp.size()) +
                                " cuts a model built in stages (models::Staged), and " + where +
                                " is none: make the model Staged (models/staged.h) and return it there");
  }
  if (const std::vector<std::string> outside = outside_stages(*module, *staged); !outside.empty()) {
    throw std::invalid_argument("pipeline_parallel trains the parameters of " + where +
                                "'s stage modules, and '" + outside.front() + "' (of " +
                                std::to_string(outside.size()) +
                                " outside them) is in none: move it into a stage of the Staged model");
  }
  if (!models_.empty())
    throw std::invalid_argument("pipeline parallelism cuts one model, and a second one was prepared");
  if (!optimizers_.empty()) {
    throw std::invalid_argument(
        "pipeline parallelism narrows the optimizer to a stage's parameters: prepare the model before its "
        "optimizer");
  }
  auto owner = std::make_shared<PipelineOwner>();
  owner->pipe = std::make_unique<pipeline::PipelineParallel>(module, *staged, pp, options);
  pipeline::PipelineParallel& pipe = *owner->pipe;
  owner->whole = std::make_unique<PipelineWhole>(pipe);
  if (group_.size() > 1) {  // the pipelines start from group rank 0's stage, as DDP's replicas do
    at::NoGradGuard no_grad;
    for (at::Tensor& p : pipe.held_parameters()) group_.broadcast(p, 0).wait();
    for (at::Tensor& b : pipe.buffers()) group_.broadcast(b, 0).wait();
  }
  Model model{std::move(module), &owner->sync, nullptr, nullptr, nullptr, &pipe, owner->whole.get()};
  model.keep = std::move(owner);
  models_.push_back(std::move(model));
  return pipe;
}

shard::FullParameters Strategy::checkpoint_parameters() const {
  std::vector<shard::ShardedParameters*> whole;
  for (const Model& model : models_)
    if (model.pipeline_whole != nullptr) whole.push_back(model.pipeline_whole);
  return shard::FullParameters(whole);
}

pipeline::PipelineParallel* Strategy::pipeline() const {
  return models_.empty() ? nullptr : models_.front().pipeline;
}

double Strategy::pipeline_step(const at::Tensor& input, const at::Tensor& target,
                               const std::function<at::Tensor(const at::Tensor&)>& forward,
                               const std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>& loss,
                               int64_t accumulation) {
  pipeline::PipelineParallel* pipe = pipeline();
  if (pipe == nullptr) throw std::logic_error("Strategy::pipeline_step without a pipeline_model()");
  auto& sync = static_cast<PipelineSync&>(*models_.front().sync);
  const bool averaged = sync.sync() && group_.size() > 1;
  // DDP's broadcast_buffers: BatchNorm's statistics are data-parallel rank 0's before each forward.
  if (group_.size() > 1 && options_.broadcast_buffers()) {
    at::NoGradGuard no_grad;
    for (at::Tensor& b : pipe->buffers()) group_.broadcast(b, 0).wait();
  }
  // Inside an accumulation group of `accumulation` batches each one's loss counts 1/accumulation (as the
  // Trainer's and the Accelerator's backward divide it); the batch's own loss is returned.
  const auto length = static_cast<double>(accumulation);
  const double value = pipe->forward_backward(input, target, forward,
                                              [&](const at::Tensor& output, const at::Tensor& t) {
                                                const at::Tensor mean = loss(output, t);
                                                return length > 1 ? mean / length : mean;
                                              }) *
                       length;
  const auto start = std::chrono::steady_clock::now();
  if (averaged) {
    std::vector<at::Tensor> gradients;
    for (at::Tensor p : pipe->parameters()) {
      // A held parameter the batch did not use averages as a zero gradient (unlike DDP's, it is stepped).
      if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
      gradients.push_back(p.grad());
    }
    group_.all_reduce(gradients, comm::ReduceOp::kAvg).wait();
  }
  // What the step breakdown counts as communication the computation did not hide: the stage's waits for
  // its neighbours (its bubble and the transfers) and the average.
  sync.set_exposed_seconds(pipe->waited_seconds() +
                           std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return value;
}

void Strategy::leave_whole() {
  if (pipeline::PipelineParallel* pipe = pipeline()) pipe->gather_whole();
}

void Strategy::shutdown() {
  if (pipeline::PipelineParallel* pipe = pipeline()) pipe->shutdown();
}

// The optimizer over the whole model (configure_optimizers) narrowed to the parameters this stage trains:
// the others get no gradient here, and their state would be another stage's.
void Strategy::narrow_to_stage(torch::optim::Optimizer& optimizer) const {
  pipeline::PipelineParallel* pipe = pipeline();
  if (pipe == nullptr) return;
  std::unordered_set<const void*> held;
  for (const at::Tensor& p : pipe->parameters()) held.insert(p.unsafeGetTensorImpl());
  for (auto& group : optimizer.param_groups()) {
    std::vector<at::Tensor> kept;
    for (const at::Tensor& p : group.params())
      if (held.count(p.unsafeGetTensorImpl()) != 0) kept.push_back(p);
    group.params() = std::move(kept);
  }
}

}  // namespace lockstep::train
