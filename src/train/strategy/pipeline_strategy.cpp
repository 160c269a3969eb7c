// Pipeline parallelism under a strategy (strategy.h, pipeline_model): the model run as a
// pipeline::PipelineParallel over the pipeline group, its stage's gradients averaged over the strategy's
// (data-parallel) group after each batch.
#include <chrono>
#include <stdexcept>
#include <unordered_set>

#include <ATen/ops/zeros_like.h>

#include "../option_checks.h"
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

struct PipelineOwner {
  PipelineSync sync;
  std::unique_ptr<pipeline::PipelineParallel> pipe;
};

}  // namespace

pipeline::PipelineParallel& Strategy::pipeline_model(std::shared_ptr<torch::nn::Module> module,
                                                     models::Staged& staged, comm::ProcessGroup& pp,
                                                     const pipeline::PipelineOptions& options) {
  detail::PipelineParallelUse use;
  use.pipeline_parallel = pp.size();
  use.micro_batches = options.micro_batches;
  use.strategy = kind();
  use.precision = precision_;
  detail::check_pipeline_parallel(use);
  if (!models_.empty())
    throw std::invalid_argument("pipeline parallelism cuts one model, and a second one was prepared");
  auto owner = std::make_shared<PipelineOwner>();
  owner->pipe = std::make_unique<pipeline::PipelineParallel>(module, staged, pp, options);
  pipeline::PipelineParallel& pipe = *owner->pipe;
  if (group_.size() > 1) {  // the pipelines start from group rank 0's model, as DDP's replicas do
    at::NoGradGuard no_grad;
    for (at::Tensor& p : module->parameters()) group_.broadcast(p, 0).wait();
    for (at::Tensor& b : module->buffers()) group_.broadcast(b, 0).wait();
  }
  Model model{std::move(module), &owner->sync, nullptr, nullptr, nullptr, &pipe};
  model.keep = std::move(owner);
  models_.push_back(std::move(model));
  return pipe;
}

pipeline::PipelineParallel* Strategy::pipeline() const {
  return models_.empty() ? nullptr : models_.front().pipeline;
}

double Strategy::pipeline_step(const at::Tensor& input, const at::Tensor& target,
                               const std::function<at::Tensor(const at::Tensor&)>& forward,
                               const std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>& loss) {
  pipeline::PipelineParallel* pipe = pipeline();
  if (pipe == nullptr) throw std::logic_error("Strategy::pipeline_step without a pipeline_model()");
  const double value = pipe->forward_backward(input, target, forward, loss);
  auto& sync = static_cast<PipelineSync&>(*models_.front().sync);
  if (!sync.sync() || group_.size() == 1) {
    sync.set_exposed_seconds(0.0);
    return value;
  }
  const auto start = std::chrono::steady_clock::now();
  std::vector<at::Tensor> gradients;
  for (const at::Tensor& p : pipe->parameters()) {
    // A held parameter the batch did not use averages as a zero gradient (DDP with unused parameters
    // found).
    if (!p.grad().defined()) const_cast<at::Tensor&>(p).mutable_grad() = at::zeros_like(p);
    gradients.push_back(p.grad());
  }
  group_.all_reduce(gradients, comm::ReduceOp::kAvg).wait();
  sync.set_exposed_seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return value;
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
