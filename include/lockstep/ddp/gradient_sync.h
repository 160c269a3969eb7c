#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "lockstep/comm/process_group.h"

namespace lockstep::ddp {

class DdpOptions;

/// How DDP synchronises gradients during backward: the Reducer (all-reduce: every rank ends with the
/// averaged gradients in .grad), or ZeRO-2's sharded reducer (shard/sharded_reducer.h: reduce-scatter:
/// every rank ends with its chunk of them). DdpCore drives either through this interface.
class GradientSync {
 public:
  virtual ~GradientSync() = default;

  /// When false (no_sync), backward passes leave gradients local.
  virtual void set_sync(bool sync) = 0;
  virtual bool sync() const = 0;
  /// Bytes of gradient memory the synchroniser keeps between steps (buckets, shards, staging).
  virtual size_t bucket_bytes() const = 0;
  /// For a rank that has joined (run out of inputs): takes part in one backward's collectives with zero
  /// gradients, in order, so the ranks still training are matched. Blocking.
  virtual void reduce_zeros() = 0;
  /// Moves the gradient hooks to parameters' new AccumulateGrad nodes (GradHooks::refresh); DdpCore calls
  /// it before every forward. Returns how many were moved.
  virtual size_t refresh_hooks() = 0;
  /// The communication the last synchronised backward did not hide, in seconds (the Trainer's step
  /// breakdown): the time backward's thread spent launching collectives (a backend may run one in the
  /// caller's thread, as shm does when idle, or block until the peers arrive) plus the wait, after the
  /// last gradient, for the rest to finish. A rank slower than the others shows little of it; the others
  /// wait for it here.
  virtual double exposed_seconds() const { return 0.0; }
};

/// Builds the GradientSync of a DDP model: its trainable `parameters` in registration order with their
/// `names`, the group (which outlives it) and the options.
using GradientSyncFactory = std::function<std::unique_ptr<GradientSync>(
    std::vector<at::Tensor> parameters, std::vector<std::string> names, comm::ProcessGroup& group,
    const DdpOptions& options)>;

}  // namespace lockstep::ddp
