// Strategy ddp (strategy.h): every rank holds the whole model state; DDP all-reduces the gradients.
#include "strategies.h"

namespace lockstep::train::detail {
namespace {

class DdpStrategyImpl final : public Strategy {
 public:
  DdpStrategyImpl(const StrategyOptions& options, comm::ProcessGroup& group, Precision precision,
                  StrategyApi api)
      : Strategy(options, group, precision, api) {}

 private:
  std::shared_ptr<torch::optim::Optimizer> wrap(std::shared_ptr<torch::optim::Optimizer> optimizer) override {
    return optimizer;
  }
};

}  // namespace

std::unique_ptr<Strategy> make_ddp_strategy(const StrategyOptions& options, comm::ProcessGroup& group,
                                            Precision precision, StrategyApi api) {
  return std::make_unique<DdpStrategyImpl>(options, group, precision, api);
}

}  // namespace lockstep::train::detail
