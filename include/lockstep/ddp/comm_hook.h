#pragma once

#include <ATen/core/Tensor.h>

#include "lockstep/comm/process_group.h"

namespace lockstep::ddp {

/// How DDP communicates one bucket of gradients: start the collective on `bucket` (a flat, contiguous
/// tensor of one dtype) and return its handle. After Work::wait() the bucket must hold the mean of the
/// ranks' gradients. Called on the backward thread, in bucket order, identically on every rank.
class CommHook {
 public:
  virtual ~CommHook() = default;
  virtual comm::Work run(comm::ProcessGroup& group, at::Tensor& bucket) = 0;
  /// Short name for logs and the timeline ("allreduce", "bf16_compress", ...).
  virtual const char* name() const = 0;
};

/// The default: an all-reduce of the bucket, then division by the world size.
class AllReduceHook : public CommHook {
 public:
  comm::Work run(comm::ProcessGroup& group, at::Tensor& bucket) override;
  const char* name() const override { return "allreduce"; }
};

/// Compression: the bucket is cast to `dtype` (at::kBFloat16 or at::kHalf), reduced, divided by the
/// world size, and cast back into the bucket — at reduced precision, with fewer bytes on the wire.
/// An all-reduce in the 16-bit dtype (half the bytes of fp32), except where the group cannot reduce it
/// (comm::ProcessGroup::can_reduce: bf16 over LibTorch 1.x's Gloo, also inside hier): there the payloads
/// are all-gathered (as 16-bit words) and summed locally in the bucket's dtype, which moves N/4 of an fp32
/// ring all-reduce's bytes for N ranks (half for 2 ranks, the same at 4, more beyond: prefer fp16 for
/// large jobs on 1.x with Gloo). On LibTorch 2.x, and over shm or MPI, bf16 is all-reduced.
/// Staging buffers are kept between steps (no per-step allocation once sizes are seen).
class CompressionHook : public CommHook {
 public:
  explicit CompressionHook(at::ScalarType dtype);
  comm::Work run(comm::ProcessGroup& group, at::Tensor& bucket) override;
  const char* name() const override;

 private:
  at::ScalarType dtype_;
  // One staging tensor per bucket (keyed by the bucket's data pointer).
  std::vector<std::pair<const void*, at::Tensor>> staging_;
  // bf16 on LibTorch 1.x: per bucket, one receive tensor per rank for the all-gather.
  std::vector<std::pair<const void*, std::vector<at::Tensor>>> gathered_;
};

}  // namespace lockstep::ddp
