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
 * (bucket_cap, default 25 MiB) so that few collectives carry the bulk, each amortising the per-call
 * latency (~1-2 ms for Gloo here). A parameter larger than the cap gets a bucket of its own. Buckets
 * are numbered in the order they are opened; every rank launches them in that order (a bucket goes
 * out only once all lower-numbered buckets have), so collectives match across ranks even when
 * gradients arrive in a different order.
 */
struct BucketAssignment {
  /// Parameter indices (into the registration-ordered list) per bucket, in bucket order.
  std::vector<std::vector<size_t>> buckets;
};

/// `numels[i]` / `dtypes[i]`: element count and dtype of parameter i (registration order).
/// Caps in bytes; both must be > 0.
BucketAssignment assign_buckets(const std::vector<int64_t>& numels, const std::vector<c10::ScalarType>& dtypes,
                                size_t first_bucket_cap_bytes, size_t bucket_cap_bytes);

}  // namespace lockstep::ddp
