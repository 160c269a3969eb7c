// Gloo stub, compiled when CMake found no gloo headers (cmake/LockstepTorch.cmake): a clear error that says
// what to install. hier uses Gloo between nodes, so it fails with the same message.
#include <torch/version.h>

#include "backend.h"
#include "lockstep/comm/comm_error.h"

namespace lockstep::comm::detail {

c10::intrusive_ptr<NativeBackend> make_gloo(const c10::intrusive_ptr<c10d::Store>&,
                                            const ProcessGroupOptions& options) {
  throw CommError(options.rank(), "init_process_group",
                  "backend 'gloo' (also used by 'hier' between nodes) needs gloo's headers when lockstep is "
                  "built, and none were found for LibTorch " TORCH_VERSION
                  ", which ships none. Install them (Debian/Ubuntu: apt-get install libgloo-dev, or pass "
                  "-DLOCKSTEP_GLOO_INCLUDE_DIR=DIR) and rebuild lockstep, or use backend 'shm' (ranks on one "
                  "host) or mpi.");
}

}  // namespace lockstep::comm::detail
