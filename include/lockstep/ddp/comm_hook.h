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

/// Compression: the bucket is cast to `dtype` (at::kBFloat16 or at::kHalf), all-reduced, divided by the
/// world size, and cast back into the bucket — half the bytes on the wire, at reduced precision.
/// The staging buffer is kept between steps (no per-step allocation once sizes are seen).
class CompressionHook : public CommHook {
 public:
  explicit CompressionHook(at::ScalarType dtype);
  comm::Work run(comm::ProcessGroup& group, at::Tensor& bucket) override;
  const char* name() const override;

 private:
  at::ScalarType dtype_;
  // One staging tensor per bucket (keyed by the bucket's data pointer).
  std::vector<std::pair<const void*, at::Tensor>> staging_;
};

}  // namespace lockstep::ddp
