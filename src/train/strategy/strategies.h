// The strategies' makers, one per file of this folder (strategy.h says what a strategy does).
#pragma once

#include <memory>

#include "lockstep/train/strategy/strategy.h"

namespace lockstep::train::detail {

/// ddp: DDP around each model; optimizers stepped as given.
std::unique_ptr<Strategy> make_ddp_strategy(const StrategyOptions& options, comm::ProcessGroup& group,
                                            Precision precision, StrategyApi api);
/// zero1, zero2: DDP (zero2: its gradients reduce-scattered), optimizers sharded (shard::ZeroOptimizer).
std::unique_ptr<Strategy> make_zero_strategy(const StrategyOptions& options, comm::ProcessGroup& group,
                                             Precision precision, StrategyApi api);
/// fsdp: one model sharded by FullyShardedDataParallel, its optimizer stepping this rank's chunks.
std::unique_ptr<Strategy> make_fsdp_strategy(const StrategyOptions& options, comm::ProcessGroup& group,
                                             Precision precision, StrategyApi api);

}  // namespace lockstep::train::detail
