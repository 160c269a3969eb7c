#include "lockstep/ddp/ddp_options.h"

#include <stdexcept>
#include <string>

namespace lockstep::ddp {

void DdpOptions::validate() const {
  if (bucket_cap_mb_ && !(*bucket_cap_mb_ > 0)) {
    throw std::invalid_argument("DdpOptions::bucket_cap_mb must be > 0 (MiB) or unset (auto), got " +
                                std::to_string(*bucket_cap_mb_));
  }
  if (!(first_bucket_cap_mb_ > 0)) {
    throw std::invalid_argument("DdpOptions::first_bucket_cap_mb must be > 0 (MiB), got " +
                                std::to_string(first_bucket_cap_mb_));
  }
}

}  // namespace lockstep::ddp
