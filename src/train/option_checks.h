// The checks that options records (TrainerOptions, AcceleratorOptions, FitConfig, BatchLimit) share, each
// throwing std::invalid_argument that names the option, the bad value and what is accepted. Free of LibTorch.
#pragma once

#include <algorithm>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "lockstep/comm/backend.h"
#include "lockstep/detail/join.h"
#include "lockstep/train/strategy/strategy_options.h"

namespace lockstep::train::detail {

/// A value as a message shows it ("0.25", "-1").
template <typename T>
std::string text(const T& value) {
  std::ostringstream s;
  s << value;
  return s.str();
}

/// "option must be >= least, got value".
template <typename T>
void check_at_least(const char* option, T value, T least) {
  if (value < least) {
    throw std::invalid_argument(std::string(option) + " must be >= " + text(least) + ", got " + text(value));
  }
}

/// "option 'value' is not known (expected one of: a, b, c)".
inline void check_member(const char* option, const std::string& value,
                         const std::vector<std::string>& accepted) {
  if (std::find(accepted.begin(), accepted.end(), value) != accepted.end()) return;
  throw std::invalid_argument(std::string(option) + " '" + value + "' is not known (expected one of: " +
                              lockstep::detail::join(accepted, ", ") + ")");
}

/// What a run asks in-place recovery (elastic) to work with: the Trainer's and the Accelerator's options.
struct ElasticUse {
  StrategyKind strategy = StrategyKind::kDdp;
  comm::Backend backend = comm::Backend::kAuto;
  bool cuda_graphs = false;
  /// How the caller handed over a process group of its own; empty when it did not.
  std::string callers_group;
};

/// The one home of what in-place recovery (docs/elastic.md, "In place") cannot work with: throws
/// "elastic (in-place recovery) does not work with <what>: <fix>".
inline void check_elastic(const ElasticUse& use) {
  const auto refuse = [](const std::string& what, const std::string& fix) {
    throw std::invalid_argument("elastic (in-place recovery) does not work with " + what + ": " + fix);
  };
  if (use.strategy != StrategyKind::kDdp) {
    refuse(std::string("strategy '") + to_string(use.strategy) + "'",
           "zero1, zero2 and fsdp hold each optimizer or parameter shard once, so a lost rank's shard is "
           "gone; use strategy ddp, or recover by restarts from a checkpoint (max_restarts and ckpt_dir)");
  }
  if (use.backend != comm::Backend::kAuto && use.backend != comm::Backend::kGloo) {
    refuse(std::string("backend '") + comm::to_string(use.backend) + "'",
           "only Gloo's collectives can be abandoned when a peer is lost; use backend gloo or auto");
  }
  if (use.cuda_graphs)
    refuse("cuda_graphs", "a captured step cannot be dropped half-way; turn cuda_graphs off");
  if (!use.callers_group.empty()) {
    refuse(use.callers_group,
           "the ranks must be started by `lockstep run --recovery in-place`, whose store the group is formed "
           "from");
  }
}

/// What a run asks of tensor parallelism (TrainerOptions::tensor_parallel): the options it meets.
struct TensorParallelUse {
  int tensor_parallel = 1;
  StrategyKind strategy = StrategyKind::kDdp;
  bool elastic = false;
  bool cuda_graphs = false;
};

/// The one home of what tensor parallelism works with: throws "tensor_parallel T does not work with
/// <what>: <fix>" (or names a T below 1).
inline void check_tensor_parallel(const TensorParallelUse& use) {
  check_at_least("tensor_parallel", use.tensor_parallel, 1);
  if (use.tensor_parallel == 1) return;
  const auto refuse = [&](const std::string& what, const std::string& fix) {
    throw std::invalid_argument("tensor_parallel " + text(use.tensor_parallel) + " does not work with " +
                                what + ": " + fix);
  };
  if (use.strategy != StrategyKind::kDdp && use.strategy != StrategyKind::kZero1) {
    refuse(std::string("strategy '") + to_string(use.strategy) + "'",
           "the data-parallel dimension runs ddp or zero1; use one of them, or tensor_parallel 1");
  }
  if (use.elastic)
    refuse("elastic",
           "a lost rank takes a slice of the model with it; turn elastic off, or use tensor_parallel 1");
  if (use.cuda_graphs) refuse("cuda_graphs", "turn cuda_graphs off, or use tensor_parallel 1");
}

/// What a run asks of pipeline parallelism (TrainerOptions::pipeline_parallel): the options it meets.
struct PipelineParallelUse {
  int pipeline_parallel = 1;
  int micro_batches = 1;
  size_t cut_starts = 0;  ///< pipeline_cut's stage starts (0: a balanced cut)
  int tensor_parallel = 1;
  StrategyOptions strategy;
  Precision precision = Precision::k32;
  bool elastic = false;
  bool cuda_graphs = false;
};

/// The one home of what pipeline parallelism works with: throws "pipeline_parallel P does not work with
/// <what>: <fix>" (or names a P or micro_batches below 1, or micro-batches without a pipeline).
inline void check_pipeline_parallel(const PipelineParallelUse& use) {
  check_at_least("pipeline_parallel", use.pipeline_parallel, 1);
  check_at_least("micro_batches", use.micro_batches, 1);
  if (use.pipeline_parallel == 1) {
    if (use.cut_starts > 0)
      throw std::invalid_argument(
          "pipeline_cut cuts a pipeline, and pipeline_parallel is 1: set both, or neither");
    if (use.micro_batches > 1) {
      throw std::invalid_argument("micro_batches " + text(use.micro_batches) +
                                  " cuts a batch for a pipeline, and pipeline_parallel is 1: set "
                                  "pipeline_parallel > 1, or micro_batches 1");
    }
    return;
  }
  const auto refuse = [&](const std::string& what, const std::string& fix) {
    throw std::invalid_argument("pipeline_parallel " + text(use.pipeline_parallel) + " does not work with " +
                                what + ": " + fix);
  };
  const StrategyKind kind = use.strategy.kind();
  if (kind != StrategyKind::kDdp && kind != StrategyKind::kZero1) {
    refuse(std::string("strategy '") + to_string(kind) + "'",
           "the data-parallel dimension runs ddp or zero1; use one of them, or pipeline_parallel 1");
  }
  // The stage's gradients are averaged in one all-reduce after the pipeline's flush, not by DDP's buckets.
  if (use.strategy.find_unused_parameters() || use.strategy.comm_hook() || use.strategy.bucket_cap_mb()) {
    refuse("DDP's find_unused_parameters, comm_hook or bucket_cap_mb",
           "a stage's gradients are averaged in one all-reduce after the pipeline's last backward (an "
           "unused parameter's as zero); leave them unset");
  }
  if (use.cut_starts != 0 && use.cut_starts + 1 != static_cast<size_t>(use.pipeline_parallel)) {
    throw std::invalid_argument("pipeline_cut names " + text(use.cut_starts) +
                                " stage start(s); pipeline_parallel " + text(use.pipeline_parallel) +
                                " needs " + text(use.pipeline_parallel - 1) + " (or none: a balanced cut)");
  }
  if (use.precision != Precision::k32) {
    refuse(std::string("precision '") + to_string(use.precision) + "'",
           "the pipeline trains in float32 for now; use precision 32, or pipeline_parallel 1");
  }
  if (use.tensor_parallel > 1) {
    refuse("tensor_parallel " + text(use.tensor_parallel),
           "the tensor-parallel gpt is not cut into pipeline stages yet; use one of them");
  }
  if (use.elastic)
    refuse("elastic", "a lost rank takes a stage with it; turn elastic off, or use pipeline_parallel 1");
  if (use.cuda_graphs) refuse("cuda_graphs", "turn cuda_graphs off, or use pipeline_parallel 1");
}

}  // namespace lockstep::train::detail
