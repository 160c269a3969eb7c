#pragma once

// The process-wide side of the MPI backend: MPI is initialised once per process and finalised once at its
// exit, and (at MPI_THREAD_SERIALIZED) no two threads may be inside MPI at the same time, whichever group
// they serve. Private to src/comm/mpi.

#include <mpi.h>

#include <chrono>
#include <functional>
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

/// Runs one collective to completion, holding MPI (an MpiCallScope) only while calling it: `call` issues
/// the non-blocking call (MPI_Iallreduce, ...) into the request it is given and returns MPI's code; then
/// MPI_Test polls the request, MPI released between polls. So the groups of one process progress their
/// collectives side by side. With blocking calls, a group's worker held MPI for a whole collective, and
/// two groups whose ranks enter their collectives in different orders (a data-parallel group's DDP
/// buckets beside a tensor-parallel group's all-reduces) waited on each other for ever. Throws
/// std::runtime_error naming `what` when MPI returns an error. The call counts as in flight until it
/// completes, so that the process does not finalise MPI under it at exit.
///
/// `call` is given a request to start the non-blocking call into, or null to make the blocking call
/// itself: until the process has had two MPI groups at once, nothing can wait on it, and the blocking
/// calls keep Open MPI's tuned algorithms (the non-blocking ones are libnbc's, and progress only while
/// polled). Once it has, every call is polled for the rest of the process (see mpi_runtime.cpp).
void mpi_call_and_wait(const char* what, const std::function<int(MPI_Request*)>& call);

/// The process's live ProcessGroupMpi objects, which mpi_call_and_wait counts: one more from a group's
/// creation, one fewer at its destruction.
void mpi_group_opened();
void mpi_group_closed();

/// Throws std::runtime_error "<what>: <MPI's text for code>" unless code is MPI_SUCCESS.
void mpi_check(int code, const std::string& what);

/// The MPI datatype that reduces `type` element-wise (float16 and bfloat16: lockstep's own 2-byte types),
/// or MPI_DATATYPE_NULL when MPI cannot reduce it. Call with MPI initialised.
MPI_Datatype mpi_reduce_datatype(at::ScalarType type);

/// The MPI_Op for `op` on `type` (float16 and bfloat16: lockstep's own commutative ops). AVG maps to sum
/// (the caller divides). Throws std::invalid_argument for other ops. Call with MPI initialised.
MPI_Op mpi_reduce_op(c10d::ReduceOp::RedOpType op, at::ScalarType type);

}  // namespace lockstep::comm::detail
