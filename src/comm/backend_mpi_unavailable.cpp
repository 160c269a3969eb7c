// MPI stub, compiled when CMake found no MPI (src/comm/CMakeLists.txt): a clear error that says what to do.
#include "backend.h"
#include "lockstep/comm/comm_error.h"

namespace lockstep::comm::detail {

c10::intrusive_ptr<NativeBackend> make_mpi(const c10::intrusive_ptr<c10d::Store>&,
                                           const ProcessGroupOptions& options, const std::vector<int>&) {
  throw CommError(
      options.rank(), "init_process_group",
      "backend 'mpi' needs lockstep built with MPI, and CMake found no MPI when this lockstep was "
      "configured. Install Open MPI's headers (Debian: apt-get install libopenmpi-dev, or "
      "scripts/install-deps.sh) and reconfigure, or use backend 'gloo'; ranks started by mpirun "
      "still work with it (lockstep reads OMPI_COMM_WORLD_*).");
}

}  // namespace lockstep::comm::detail
