#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <c10/util/intrusive_ptr.h>

#include "lockstep/comm/c10d_compat.h"

#include "lockstep/detail/option.h"

namespace lockstep::comm {

namespace detail {
struct MpiGroupState;
class SerialExecutor;
}  // namespace detail

/// Options of the MPI backend.
///
/// Example:
///   auto opts = MpiOptions().timeout(std::chrono::seconds(60));
class MpiOptions {
 public:
  /// Bound on waiting for each collective (Work::wait never blocks longer than this, whatever timeout the
  /// caller passes). MPI cannot cancel a collective: after a timeout it stays queued (later collectives
  /// of the group wait behind it and time out too), and while it is inside MPI the process skips
  /// MPI_Finalize at exit (which would wait for the missing rank forever).
  LOCKSTEP_OPTION(MpiOptions, std::chrono::milliseconds, timeout)
  /// The MPI_COMM_WORLD ranks of the group's members, in group rank order: a subgroup
  /// (ProcessGroup::split), whose communicator only its members create (MPI_Comm_create_group). Empty (the
  /// default): every rank of MPI_COMM_WORLD, in its order.
  LOCKSTEP_OPTION(MpiOptions, std::vector<int>, world_ranks)

  /// Throws std::invalid_argument naming the field and value when an option is out of range.
  void validate() const;

 private:
  std::chrono::milliseconds timeout_{std::chrono::minutes(30)};
  std::vector<int> world_ranks_;
};

/// A c10d backend (NativeBackend: c10d_compat.h) over MPI's MPI_COMM_WORLD (a duplicate of it per group; a
/// communicator of the members for a subgroup: MpiOptions::world_ranks), for
/// processes started by `mpirun -np N` (Open MPI; as root also `--allow-run-as-root`). lockstep's own:
/// Debian's LibTorch is built without c10d's ProcessGroupMPI.
///
/// The first group of a process initialises MPI (MPI_Init_thread, MPI_THREAD_SERIALIZED) unless the
/// program did already; lockstep then finalises it at process exit, except when a collective was left in
/// flight (MPI_Finalize would wait for it forever; mpirun reports such a rank as having exited without
/// finalising). Collectives run in issue order on one worker thread per group and return at once with a
/// Work whose future completes, or fails, when the collective is done. MPI calls of all groups in the
/// process are serialised by one mutex (what MPI_THREAD_SERIALIZED requires), held through each blocking
/// call: with two MPI groups, finish one group's collectives before issuing on, creating or destroying
/// the other (the same order on every rank is not enough, as each group's worker runs on its own).
///
/// Supported: allreduce (sum, avg, product, min, max; float32, float64, float16, bfloat16, int32, int64,
/// uint8, int8), broadcast, allgather, _allgather_base, reduce_scatter, _reduce_scatter_base, barrier (any
/// dtype where nothing is reduced); CPU tensors only, one tensor per rank per call, non-contiguous tensors
/// are copied (and written back). Refused with an error naming the tensor and the fix: tensors that are
/// not on the CPU (use --backend nccl or gloo), sparse tensors, more than one tensor per call.
///
/// Example (normally through lockstep::comm::init_process_group with Backend::kMpi, under mpirun):
///   auto pg = c10::make_intrusive<ProcessGroupMpi>(rank, world, MpiOptions());
///   std::vector<at::Tensor> t{at::ones({4})};
///   pg->allreduce(t)->wait();  // t[0] == world everywhere
class ProcessGroupMpi final : public NativeBackend {
 public:
  /// Initialises MPI when needed and checks that this process is MPI rank `rank` of `size`. Throws
  /// std::runtime_error when MPI's rank or size differ (the usual cause: the ranks were not started by
  /// mpirun, so each is an MPI world of its own), when MPI was initialised with less thread support
  /// than MPI_THREAD_SERIALIZED, or when creation (MPI_Comm_dup, a collective of all ranks) does not
  /// complete within the timeout because a rank has not created its group.
  ProcessGroupMpi(int rank, int size, MpiOptions options);
  /// Fails collectives still queued (their Work rethrows) and stops the worker; when a collective is
  /// still running it waits at most the timeout for it, then leaves the worker to the end of the process.
  ~ProcessGroupMpi() override;

  const std::string getBackendName() const override { return "mpi"; }

  /// The MPI library's version string (MPI_Get_library_version), e.g. "Open MPI v4.1.4, ...".
  static std::string library_version();

  c10::intrusive_ptr<c10d::Work> broadcast(
      std::vector<at::Tensor>& tensors,
      const c10d::BroadcastOptions& opts = c10d::BroadcastOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceOptions& opts = c10d::AllreduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts = c10d::BarrierOptions()) override;

 private:
  MpiOptions options_;
  // Shared with the executor's thread, which outlives the group when a collective never returns.
  std::shared_ptr<detail::MpiGroupState> state_;
  std::shared_ptr<detail::SerialExecutor> executor_;  // its Works ask it what runs now
};

}  // namespace lockstep::comm
