#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <c10/core/ScalarType.h>

namespace lockstep::ddp {

/*
 * Bucket assignment.
 *
 * Autograd produces gradients roughly in reverse order of registration (the last layer first), so the
 * parameters are walked from last to first and packed into buckets of one dtype each. The first
 * bucket is small (first_bucket_cap, default 1 MiB): it fills almost as soon as backward starts, so
 * the first all-reduce goes out early and overlaps with the rest of backward; later buckets are large
 * (bucket_cap) so that few collectives carry the bulk, each amortising the per-call latency (~1-2 ms
 * for Gloo here). A parameter larger than the cap gets a bucket of its own. Buckets are numbered in
 * the order they are opened; every rank launches them in that order (a bucket goes out only once all
 * lower-numbered buckets have), so collectives match across ranks even when gradients arrive in a
 * different order.
 *
 * The default bucket_cap depends on the model (auto_bucket_cap_bytes). A bucket goes out only when
 * its last gradient is ready, so the gradients that were ready earlier wait in it; whatever is still
 * to send when backward ends is not hidden behind it. PyTorch's fixed 25 MiB puts most of a
 * ResNet18 (44.7 MB of gradients) into the bucket that closes with the first layers, at the very end
 * of backward: over a 1 Gbit/s link only ~45% of its all-reduce overlaps backward. With buckets of
 * at most 1/kAutoBuckets of the gradients the tail is about one bucket, and the rest overlaps as
 * long as the link keeps up with backward (docs/benchmarks.md: ResNet18, 2 hosts). The cap stays
 * >= 1 MiB, below which per-call latency would dominate, and <= 25 MiB, PyTorch's default, for
 * models large enough that 25 MiB is already a small share of them.
 */
struct BucketAssignment {
  /// Parameter indices (into the registration-ordered list) per bucket, in bucket order.
  std::vector<std::vector<size_t>> buckets;
};

/// Buckets the default cap aims for: each holds at most this share of the gradients (see above).
constexpr size_t kAutoBuckets = 16;
/// Bounds of the default cap, in bytes.
constexpr size_t kAutoBucketCapMinBytes = size_t{1} << 20;
constexpr size_t kAutoBucketCapMaxBytes = size_t{25} << 20;

/// The default cap of every bucket but the first, for `gradient_bytes` of gradients in all:
/// gradient_bytes / kAutoBuckets, kept within [1 MiB, 25 MiB].
size_t auto_bucket_cap_bytes(size_t gradient_bytes);

/// `numels[i]` / `dtypes[i]`: element count and dtype of parameter i (registration order).
/// Caps in bytes; both must be > 0.
BucketAssignment assign_buckets(const std::vector<int64_t>& numels,
                                const std::vector<c10::ScalarType>& dtypes, size_t first_bucket_cap_bytes,
                                size_t bucket_cap_bytes);

}  // namespace lockstep::ddp
