// MPI: lockstep's own ProcessGroupMpi (src/comm/mpi, its own target), compiled when CMake found MPI.
#include <string>

#include "backend.h"
#include "lockstep/comm/comm_error.h"
#include "lockstep/comm/process_group_mpi.h"

namespace lockstep::comm::detail {

c10::intrusive_ptr<NativeBackend> make_mpi(const c10::intrusive_ptr<c10d::Store>& /*store*/,
                                           const ProcessGroupOptions& options,
                                           const std::vector<int>& world_ranks) {
  // MPI wires its ranks itself (mpirun); lockstep's store still serves rendezvous and progress records.
  try {
    return c10::make_intrusive<ProcessGroupMpi>(
        options.rank(), options.world_size(),
        MpiOptions().timeout(options.collective_timeout()).world_ranks(world_ranks));
  } catch (const std::exception& e) {
    throw CommError(options.rank(), "init_process_group", std::string("mpi backend: ") + e.what());
  }
}

}  // namespace lockstep::comm::detail
