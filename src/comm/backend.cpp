#include "lockstep/comm/backend.h"

#include <stdexcept>

namespace lockstep::comm {

const char* to_string(Backend backend) {
  switch (backend) {
    case Backend::kGloo:
      return "gloo";
    case Backend::kNccl:
      return "nccl";
    case Backend::kMpi:
      return "mpi";
    case Backend::kShm:
      return "shm";
    case Backend::kAuto:
      return "auto";
    case Backend::kHier:
      return "hier";
  }
  return "?";
}

Backend parse_backend(const std::string& name) {
  for (const Backend backend :
       {Backend::kAuto, Backend::kGloo, Backend::kShm, Backend::kHier, Backend::kNccl, Backend::kMpi}) {
    if (name == to_string(backend)) return backend;
  }
  throw std::invalid_argument("backend '" + name +
                              "' is not known (expected one of: auto, gloo, shm, hier, nccl, mpi)");
}

}  // namespace lockstep::comm
