// Strategy fsdp (strategy.h): one model's parameters, gradients and optimizer state sharded over the
// ranks (shard::FullyShardedDataParallel).
#include <stdexcept>

#include "lockstep/shard/fully_sharded_data_parallel.h"
#include "strategies.h"

namespace lockstep::train::detail {
namespace {

class FsdpStrategyImpl final : public Strategy {
 public:
  FsdpStrategyImpl(const StrategyOptions& options, comm::ProcessGroup& group, Precision precision,
                   StrategyApi api)
      : Strategy(options, group, precision, api) {}

  bool shards_parameters() const override { return true; }

  ddp::DdpOptions ddp_options() const override {
    throw std::logic_error("strategy fsdp wraps no model in DDP: call shard_model");
  }

  std::shared_ptr<shard::FullyShardedDataParallel> shard_model(std::shared_ptr<torch::nn::Module> module,
                                                               models::Staged* staged,
                                                               std::shared_ptr<void> staged_owner) override {
    if (!models_.empty()) {
      throw std::invalid_argument(
          "strategy fsdp shards one prepared model, and a second model was prepared: put both in one module");
    }
    auto fsdp = std::make_shared<shard::FullyShardedDataParallel>(module, group_, fsdp_options(), staged);
    models_.push_back(Model{std::move(module), &fsdp->reducer(), std::move(staged_owner), fsdp, fsdp.get()});
    return fsdp;
  }

 private:
  // PyTorch's MixedPrecision(param_dtype=torch.bfloat16) under bf16-mixed unless the user chose: units
  // gathered and computed in bfloat16, float32 master shards.
  shard::FsdpOptions fsdp_options() const {
    auto fsdp = shard::FsdpOptions()
                    .min_unit_params(options_.min_unit_params())
                    .unit_starts(options_.unit_starts())
                    .prefetch(options_.prefetch());
    if (options_.param_dtype()) {
      fsdp.param_dtype(*options_.param_dtype() == ParamDtype::kFloat16 ? at::kHalf : at::kBFloat16);
    } else if (precision_ == Precision::kBf16Mixed) {
      fsdp.param_dtype(at::kBFloat16);
    }
    return fsdp;
  }

  std::shared_ptr<torch::optim::Optimizer> wrap(std::shared_ptr<torch::optim::Optimizer> optimizer) override {
    if (models_.empty()) {
      throw std::invalid_argument(
          "strategy fsdp steps the gradients the prepared model's reducer shards: prepare the model before "
          "its optimizer");
    }
    // The same optimizer, stepping this rank's chunks, which FSDP keeps.
    return models_.front().fsdp->make_optimizer(std::move(optimizer));
  }
};

}  // namespace

std::unique_ptr<Strategy> make_fsdp_strategy(const StrategyOptions& options, comm::ProcessGroup& group,
                                             Precision precision, StrategyApi api) {
  return std::make_unique<FsdpStrategyImpl>(options, group, precision, api);
}

}  // namespace lockstep::train::detail
