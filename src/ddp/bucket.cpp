#include "lockstep/ddp/bucket.h"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>

namespace lockstep::ddp {

size_t auto_bucket_cap_bytes(size_t gradient_bytes) {
  return std::clamp(gradient_bytes / kAutoBuckets, kAutoBucketCapMinBytes, kAutoBucketCapMaxBytes);
}

// The algorithm is described once, in bucket.h. In short: walk parameters from last to first, keep one
// open bucket per dtype, close it before a parameter would push it over its cap.
BucketAssignment assign_buckets(const std::vector<int64_t>& numels,
                                const std::vector<c10::ScalarType>& dtypes, size_t first_bucket_cap_bytes,
                                size_t bucket_cap_bytes) {
  if (numels.size() != dtypes.size()) {
    throw std::invalid_argument("assign_buckets: numels and dtypes must have one entry per parameter, got " +
                                std::to_string(numels.size()) + " numels and " +
                                std::to_string(dtypes.size()) + " dtypes");
  }
  if (first_bucket_cap_bytes == 0) {
    throw std::invalid_argument("assign_buckets: first_bucket_cap_bytes must be > 0, got 0");
  }
  if (bucket_cap_bytes == 0) {
    throw std::invalid_argument("assign_buckets: bucket_cap_bytes must be > 0, got 0");
  }

  struct OpenBucket {
    bool open = false;
    size_t index = 0;   // into result.buckets
    size_t bytes = 0;   // bytes assigned so far
    size_t cap = 0;     // this bucket's cap
    size_t opened = 0;  // buckets of this dtype opened so far
  };
  std::map<c10::ScalarType, OpenBucket> by_dtype;
  BucketAssignment result;

  for (size_t i = numels.size(); i-- > 0;) {
    if (numels[i] < 0) {
      throw std::invalid_argument("assign_buckets: numels[" + std::to_string(i) + "] must be >= 0, got " +
                                  std::to_string(numels[i]));
    }
    const size_t bytes = static_cast<size_t>(numels[i]) * c10::elementSize(dtypes[i]);
    OpenBucket& b = by_dtype[dtypes[i]];
    if (b.open && b.bytes > 0 && b.bytes + bytes > b.cap) b.open = false;  // would overflow: close it first
    if (!b.open) {
      b.open = true;
      b.index = result.buckets.size();
      b.bytes = 0;
      b.cap = b.opened == 0 ? first_bucket_cap_bytes : bucket_cap_bytes;
      ++b.opened;
      result.buckets.emplace_back();
    }
    result.buckets[b.index].push_back(i);
    b.bytes += bytes;
  }
  return result;
}

}  // namespace lockstep::ddp
