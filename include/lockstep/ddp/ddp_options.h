#pragma once

#include "lockstep/detail/option.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "lockstep/ddp/comm_hook.h"
#include "lockstep/ddp/gradient_sync.h"

namespace lockstep::ddp {

/// Options of DistributedDataParallel; names and defaults follow PyTorch's DDP.
///
/// Example:
///   auto ddp = DistributedDataParallel<Net>(net, pg,
///   DdpOptions().bucket_cap_mb(4).find_unused_parameters(true));
class DdpOptions {
 public:
  /// Size cap of every bucket but the first, in MiB (> 0). Unset (the default): a 16th of the model's
  /// gradients, kept within [1, 25] MiB (auto_bucket_cap_bytes in bucket.h says why); PyTorch's fixed
  /// default is 25.
  LOCKSTEP_OPTION(DdpOptions, std::optional<double>, bucket_cap_mb)
  /// Size cap of the first bucket (the last layers' gradients, ready first), in MiB (> 0).
  LOCKSTEP_OPTION(DdpOptions, double, first_bucket_cap_mb)
  /// Re-broadcast buffers (e.g. BatchNorm running stats) from rank 0 before each forward.
  LOCKSTEP_OPTION(DdpOptions, bool, broadcast_buffers)
  /// Let parameters go without a gradient in an iteration (instead of failing), as PyTorch does: one
  /// used on some rank is averaged, one used on none keeps its .grad untouched (reducer.h).
  LOCKSTEP_OPTION(DdpOptions, bool, find_unused_parameters)
  /// How the error for a parameter without a gradient tells the user to set find_unused_parameters: the
  /// option of the API they are in (the Trainer's strategy, the Accelerator's). Default: this class's.
  LOCKSTEP_OPTION(DdpOptions, std::string, unused_parameters_advice)
  /// Make each .grad a view into its bucket: no copy in or out, no extra gradient memory.
  LOCKSTEP_OPTION(DdpOptions, bool, gradient_as_bucket_view)
  /// Verify at construction that every rank has the same parameters (names, shapes, dtypes).
  LOCKSTEP_OPTION(DdpOptions, bool, check_model_consistency)
  /// Broadcast rank 0's parameters and buffers at construction (PyTorch's init_sync). Off only where every
  /// rank holds the same values already: a DDP rebuilt over an elastic world's next generation, whose
  /// survivors applied the same steps (comm::ElasticWorld), skips a broadcast of the whole model.
  LOCKSTEP_OPTION(DdpOptions, bool, init_sync)
  /// How a full bucket is communicated. Default: mean all-reduce (AllReduceHook).
  LOCKSTEP_OPTION(DdpOptions, std::shared_ptr<CommHook>, comm_hook)
  /// What synchronises the gradients during backward. Default (empty): the Reducer (an all-reduce per
  /// bucket); shard::ShardedReducer::factory() gives ZeRO-2's reduce-scatter instead.
  LOCKSTEP_OPTION(DdpOptions, GradientSyncFactory, gradient_sync)

  /// Throws std::invalid_argument naming the field and the value when an option is out of range.
  void validate() const;

 private:
  std::optional<double> bucket_cap_mb_;
  double first_bucket_cap_mb_ = 1.0;
  bool broadcast_buffers_ = true;
  bool find_unused_parameters_ = false;
  std::string unused_parameters_advice_ = "construct DDP with DdpOptions().find_unused_parameters(true)";
  bool gradient_as_bucket_view_ = false;
  bool check_model_consistency_ = true;
  bool init_sync_ = true;
  std::shared_ptr<CommHook> comm_hook_;
  GradientSyncFactory gradient_sync_;
};

}  // namespace lockstep::ddp
