// Strategies zero1 and zero2 (strategy.h): DDP whose optimizer state is sharded over the ranks
// (shard::ZeroOptimizer), and under zero2 whose gradients are reduce-scattered (shard::ShardedReducer).
#include <stdexcept>

#include "lockstep/shard/sharded_reducer.h"
#include "lockstep/shard/zero_optimizer.h"
#include "strategies.h"

namespace lockstep::train::detail {
namespace {

class ZeroStrategy final : public Strategy {
 public:
  ZeroStrategy(const StrategyOptions& options, comm::ProcessGroup& group, Precision precision,
               StrategyApi api)
      : Strategy(options, group, precision, api) {}

  ddp::DdpOptions ddp_options() const override {
    ddp::DdpOptions options = Strategy::ddp_options();
    if (kind() != StrategyKind::kZero2) return options;
    if (!models_.empty()) {
      throw std::invalid_argument(
          "strategy zero2 shards one prepared model's gradients, and a second model was prepared: put both "
          "in "
          "one module, or use strategy zero1");
    }
    return options.gradient_sync(shard::ShardedReducer::factory());
  }

 private:
  std::shared_ptr<torch::optim::Optimizer> wrap(std::shared_ptr<torch::optim::Optimizer> optimizer) override {
    shard::ShardedReducer* sharded = sharded_gradients();
    if (kind() == StrategyKind::kZero2 && sharded == nullptr) {
      throw std::invalid_argument(
          "strategy zero2 steps the gradients the prepared model's reducer shards: prepare the model before "
          "its optimizer");
    }
    // DeepSpeed's bf16 ZeRO: bfloat16 parameters, float32 master chunks (shard/zero_optimizer.h); for the
    // one model's one optimizer, and not with BatchNorm's statistics (kept in float32).
    if (precision_ == Precision::kBf16Mixed && models_.size() == 1 && optimizers_.empty() &&
        !shard::holds_batch_norm(*models_.front().module)) {
      return std::make_shared<shard::ZeroOptimizer>(std::move(optimizer), group_, *models_.front().sync,
                                                    at::kBFloat16);
    }
    return std::make_shared<shard::ZeroOptimizer>(std::move(optimizer), group_, sharded);
  }
};

}  // namespace

std::unique_ptr<Strategy> make_zero_strategy(const StrategyOptions& options, comm::ProcessGroup& group,
                                             Precision precision, StrategyApi api) {
  return std::make_unique<ZeroStrategy>(options, group, precision, api);
}

}  // namespace lockstep::train::detail
