#pragma once

// The process-wide side of the MPI backend: MPI is initialised once per process and finalised once at its
// exit, and (at MPI_THREAD_SERIALIZED) no two threads may be inside MPI at the same time, whichever group
// they serve. Private to src/comm/mpi.

#include <mpi.h>

#include <chrono>
#include <mutex>
#include <string>

#include <c10/core/ScalarType.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

namespace lockstep::comm::detail {

/// Initialises MPI (MPI_Init_thread, MPI_THREAD_SERIALIZED) unless the program did already, on the first
/// call only; registers MPI_Finalize at exit when lockstep initialised it. Thread-safe. Throws
/// std::runtime_error when MPI cannot start, was finalised already, or offers less than SERIALIZED, and
/// when it has not started within `timeout`: under mpirun, MPI_Init_thread returns only once every rank
/// of the job has called it, so it runs on a thread of its own and a rank stuck before it costs the
/// others `timeout`, not a hang (the thread stays behind; a later call waits for it again).
void mpi_ensure_initialized(std::chrono::milliseconds timeout = std::chrono::milliseconds::max());

/// The world size an MPI launcher gave this process, read from its environment before MPI starts:
/// OMPI_COMM_WORLD_SIZE (Open MPI's mpirun), PMI_SIZE (MPICH's and Intel MPI's mpiexec, srun --mpi=pmi2);
/// 0 under a launcher that names no size (PMIX_RANK only); -1 when no MPI launcher started the process,
/// where MPI_Init would make it a singleton (a world of its own; two such processes starting at once race
/// for Open MPI's session directory).
int mpi_launcher_world_size();

/// Held around every MPI call (MPI_THREAD_SERIALIZED: one call at a time in the process). Throws
/// std::runtime_error naming `what` when MPI was finalised already (a group used after the process began
/// to exit), or when MPI stays busy for longer than `timeout`: another group's collective holds it, and
/// MPI cannot cancel that one. The default waits without bound: for a group's worker thread, whose
/// callers' waits are bounded; callers on a user's thread pass the group's timeout.
class MpiCallScope {
 public:
  explicit MpiCallScope(const std::string& what,
                        std::chrono::milliseconds timeout = std::chrono::milliseconds::max());
  ~MpiCallScope();
  MpiCallScope(const MpiCallScope&) = delete;
  MpiCallScope& operator=(const MpiCallScope&) = delete;

 private:
  std::unique_lock<std::timed_mutex> lock_;
};

/// Throws std::runtime_error "<what>: <MPI's text for code>" unless code is MPI_SUCCESS.
void mpi_check(int code, const std::string& what);

/// The MPI datatype that reduces `type` element-wise (float16 and bfloat16: lockstep's own 2-byte types),
/// or MPI_DATATYPE_NULL when MPI cannot reduce it. Call with MPI initialised.
MPI_Datatype mpi_reduce_datatype(at::ScalarType type);

/// The MPI_Op for `op` on `type` (float16 and bfloat16: lockstep's own commutative ops). AVG maps to sum
/// (the caller divides). Throws std::invalid_argument for other ops. Call with MPI initialised.
MPI_Op mpi_reduce_op(c10d::ReduceOp::RedOpType op, at::ScalarType type);

}  // namespace lockstep::comm::detail
