#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

namespace lockstep::models {

/// Runs one stage of a Staged model, doing what it must around it (FSDP gathers the stage's parameters
/// before it and frees them after: shard/fully_sharded_data_parallel.h).
class StageRunner {
 public:
  virtual ~StageRunner() = default;
  /// Stage `index` applied to `x` is `stage(x)`.
  virtual at::Tensor run_stage(size_t index, const std::function<at::Tensor(at::Tensor)>& stage,
                               at::Tensor x) = 0;
};

/*
 * A model whose forward is a chain of stages, each owning its parameters, with a place to step in around
 * each stage.
 *
 * LibTorch's C++ modules have no forward hooks: a wrapper cannot see when a submodule runs. A model that
 * derives from Staged (besides torch::nn::Module) names its stages' modules in forward order and runs each
 * stage through run_stage(); with no runner set that is a plain call. Sharded strategies install a runner
 * (FSDP: parameters gathered before a stage group runs and freed after). lockstep's Mlp is Staged; a user's
 * model becomes so by the same two steps.
 */
class Staged {
 public:
  virtual ~Staged() = default;
  /// The modules of the stages, in the order forward runs them. Every trainable parameter of the model
  /// belongs to exactly one of them.
  virtual std::vector<std::shared_ptr<torch::nn::Module>> stage_modules() = 0;
  /// The stage index of each run_stage() call forward makes, in order: by default every stage once, in
  /// order. A model that runs a stage twice says so (Gpt: 0 .. L + 1, then 0 again for its tied head). A
  /// pipeline cuts this sequence (pipeline/pipeline_parallel.h), and needs all of forward's computation
  /// inside these calls.
  virtual std::vector<size_t> forward_stages() {
    std::vector<size_t> order(stage_modules().size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    return order;
  }
  /// Installs `runner` (null: none); it must outlive its installation.
  void set_stage_runner(StageRunner* runner) { runner_ = runner; }

 protected:
  /// Stage `index` of forward: `stage(x)`, through the runner when one is installed.
  at::Tensor run_stage(size_t index, at::Tensor x, const std::function<at::Tensor(at::Tensor)>& stage) {
    return runner_ != nullptr ? runner_->run_stage(index, stage, std::move(x)) : stage(std::move(x));
  }

 private:
  StageRunner* runner_ = nullptr;
};

/// Any module as a Staged model of one stage, the whole of it: for a model not built in stages under a
/// strategy that needs stages (FSDP then has one unit: the parameters are sharded between steps and
/// gathered whole for forward and backward, as PyTorch's FSDP wrapped around the root module alone). The
/// caller runs the module's forward through forward().
///
/// Example:
///   models::SingleStage stages(net);                      // FSDP(root, group, options, &stages)
///   at::Tensor y = stages.forward(x, [&](at::Tensor in) { return net->forward(in); });
class SingleStage : public Staged {
 public:
  explicit SingleStage(std::shared_ptr<torch::nn::Module> module) : module_(std::move(module)) {}
  std::vector<std::shared_ptr<torch::nn::Module>> stage_modules() override { return {module_}; }
  at::Tensor forward(at::Tensor x, const std::function<at::Tensor(at::Tensor)>& whole) {
    return run_stage(0, std::move(x), whole);
  }

 private:
  std::shared_ptr<torch::nn::Module> module_;
};

}  // namespace lockstep::models
