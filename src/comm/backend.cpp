#include "lockstep/comm/backend.h"

#include <stdexcept>

#include "lockstep/detail/enum_names.h"
namespace lockstep::comm {

namespace {

constexpr lockstep::detail::EnumNames<Backend, 6> kBackendNames{{{Backend::kAuto, "auto"},
                                                                 {Backend::kGloo, "gloo"},
                                                                 {Backend::kShm, "shm"},
                                                                 {Backend::kHier, "hier"},
                                                                 {Backend::kNccl, "nccl"},
                                                                 {Backend::kMpi, "mpi"}}};

}  // namespace

const char* to_string(Backend backend) {
  return lockstep::detail::enum_to_string(kBackendNames, backend);
}

Backend parse_backend(const std::string& name) {
  return lockstep::detail::parse_enum(kBackendNames, name, "backend");
}

}  // namespace lockstep::comm
