#include "lockstep/comm/process_group_mpi.h"

#include <algorithm>
#include <climits>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include "../average.h"
#include "../queued_work.h"
#include "../serial_executor.h"
#include "mpi_runtime.h"

// Each group owns a duplicate of MPI_COMM_WORLD (so its messages never meet another group's) and one
// worker thread that runs its collectives in issue order, through mpi_call_and_wait: MPI's blocking calls
// while the process has one group, non-blocking ones polled when it has several (so that the groups'
// workers do not wait on each other; mpi_runtime.h says why). MPI cannot cancel a collective, so the
// timeout bounds the caller's wait, not the call: a collective whose peer never arrives keeps the worker
// inside MPI, the group then stays behind at destruction, and MPI_Finalize is skipped at exit
// (mpi_runtime.cpp).

namespace lockstep::comm {
namespace detail {

// What the group's collectives share with the executor's thread, which outlives the group when a
// collective never returns.
struct MpiGroupState {
  int rank = 0;
  MPI_Comm comm = MPI_COMM_NULL;
  std::mutex mutex;
  std::condition_variable cv;
  bool created = false;             // the MPI_Comm_dup returned (comm or create_error is set)
  std::exception_ptr create_error;  // why it failed
};

class MpiWork final : public QueuedWork {
 public:
  MpiWork(int rank, const std::shared_ptr<SerialExecutor>& executor, c10d::OpType type,
          std::vector<at::Tensor> outputs, std::chrono::milliseconds timeout, std::string what)
      : QueuedWork(rank, type, std::move(outputs)),
        rank_(rank),
        timeout_(timeout),
        what_(std::move(what)),
        executor_(executor) {}

  // kNoTimeout (0) and kUnsetTimeout (-1) mean the group's: no wait on an MPI collective is unbounded.
  bool wait(std::chrono::milliseconds timeout) override {
    const auto bound = timeout.count() <= 0 ? timeout_ : std::min(timeout, timeout_);
    try {
      return c10d::Work::wait(bound);
    } catch (const c10::Error&) {
      // Completed between the timeout and here: its result (or its own error) stands.
      if (isCompleted()) return c10d::Work::wait(bound);
      // Since it was issued, not this wait's bound: lockstep's Work waits in slices of the group's timeout.
      const auto waited =
          std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - issued_);
      const std::string blocker = running_other_than_this();
      throw std::runtime_error(
          "rank " + std::to_string(rank_) + ": mpi " + what_ + " did not complete within " +
          std::to_string(waited.count()) + " ms of being issued: " +
          (blocker.empty() ? "a rank has not joined it or an earlier collective of this group"
                           : "it is queued behind mpi " + blocker +
                                 ", still inside MPI: a rank has not joined that one") +
          " (it exited, is stuck, or called a different collective). MPI cannot cancel it; it may still "
          "complete.");
    }
  }

 private:
  int rank_;
  std::chrono::milliseconds timeout_;
  std::string what_;
  std::weak_ptr<SerialExecutor> executor_;
  std::chrono::steady_clock::time_point issued_ = std::chrono::steady_clock::now();

  // The collective this group's worker is inside now when it is not this one, else "".
  std::string running_other_than_this() const {
    const auto executor = executor_.lock();
    if (!executor) return "";
    const std::string running = executor->running();
    return running == what_ ? "" : running;
  }
};

}  // namespace detail

namespace {

using detail::Contiguous;
using detail::mpi_call_and_wait;
using detail::mpi_check;
using detail::MpiCallScope;

// MPI counts are ints: larger messages go in pieces of this many elements.
constexpr int64_t kMaxCount = int64_t{1} << 30;

// All-reduces go in pieces of at most this many bytes. Open MPI 4.1 all-reduces a large message (2 ranks:
// Rabenseifner's algorithm) through a temporary buffer of the message's size that it mallocs per call; from
// 32 MiB (glibc's largest mmap threshold) that is a fresh mmap whose every page faults, and on the CI VMs
// a 40 MiB all-reduce took 126-152 ms instead of ~15 ms (docs/mpi.md). 4 MiB pieces measured best here:
// 1-4 MiB messages ran at 5-7 GB/s, 16 MiB at 3.7 GB/s.
constexpr int64_t kAllreducePieceBytes = int64_t{4} << 20;

void check_tensor(const at::Tensor& t, const char* op, const char* what) {
  TORCH_CHECK(t.defined(), "mpi ", op, ": ", what, " is an undefined tensor");
  TORCH_CHECK(t.device().is_cpu(), "mpi ", op, ": ", what, " (", t.scalar_type(), "[", t.numel(), "]) is on ",
              t.device(),
              "; lockstep's MPI backend moves CPU tensors only: use backend 'nccl' (or 'gloo') for GPU "
              "tensors, or copy the tensor to the CPU first");
  TORCH_CHECK(t.layout() == at::kStrided, "mpi ", op, ": ", what, " is a ", t.layout(),
              " tensor; the mpi backend moves dense (strided) tensors only");
}

void check_single(const std::vector<at::Tensor>& tensors, const char* op) {
  TORCH_CHECK(tensors.size() == 1, "mpi ", op, " takes one tensor per rank, got ", tensors.size(),
              " (flatten them into one, or call once per tensor)");
  check_tensor(tensors[0], op, "the tensor");
}

MPI_Datatype reduce_datatype(const at::Tensor& t, const char* op) {
  const MPI_Datatype type = detail::mpi_reduce_datatype(t.scalar_type());
  TORCH_CHECK(type != MPI_DATATYPE_NULL, "mpi ", op, " cannot reduce ", t.scalar_type(),
              " tensors (it reduces float32, float64, float16, bfloat16, int32, int64, uint8, int8)");
  return type;
}

int to_count(int64_t count, const char* op) {
  TORCH_CHECK(
      count <= INT_MAX, "mpi ", op, ": ", count,
      " elements (bytes, where nothing is reduced) per rank exceed MPI's int count; split the tensor");
  return static_cast<int>(count);
}

// Queues `run` on the group's executor; the Work completes when it returns (or fails with its error).
c10::intrusive_ptr<c10d::Work> enqueue(const std::shared_ptr<detail::MpiGroupState>& state,
                                       const std::shared_ptr<detail::SerialExecutor>& executor,
                                       std::chrono::milliseconds timeout, c10d::OpType type, const char* op,
                                       std::vector<at::Tensor> outputs, std::function<void(MPI_Comm)> run) {
  c10::intrusive_ptr<detail::MpiWork> work;
  executor->submit([&](std::uint64_t sequence, std::size_t /*queued_ahead*/) {
    const std::string what = std::string(op) + " #" + std::to_string(sequence);
    work =
        c10::make_intrusive<detail::MpiWork>(state->rank, executor, type, std::move(outputs), timeout, what);
    detail::SerialExecutor::Entry entry;
    entry.label = what;
    entry.job = [state, work, what, run = std::move(run)] {
      try {
        run(state->comm);
        work->complete(nullptr);
      } catch (const std::exception& e) {
        work->complete(std::make_exception_ptr(
            std::runtime_error("rank " + std::to_string(state->rank) + ": mpi " + what + ": " + e.what())));
      }
    };
    entry.abandon = [state, work, what] {
      work->complete(
          std::make_exception_ptr(std::runtime_error("rank " + std::to_string(state->rank) + ": mpi " + what +
                                                     " never ran: its process group was destroyed")));
    };
    return entry;
  });
  return work;
}

void divide_if_average(at::Tensor& t, c10d::ReduceOp::RedOpType op, int size) {
  if (op == c10d::ReduceOp::AVG && size > 1) detail::divide_for_average(t, size);
}

// The error for a process whose MPI world is not lockstep's: `why` says what MPI (or its launcher) made it.
std::string needs_mpirun(int rank, int size, const std::string& why) {
  return "this process is rank " + std::to_string(rank) + " of " + std::to_string(size) +
         " for lockstep but " + why +
         ". The mpi backend needs its ranks started by mpirun, one process per rank: `mpirun -np " +
         std::to_string(size) +
         " lockstep fit --backend mpi ...` (as root add --allow-run-as-root), not by `lockstep run`, "
         "`lockstep fit --devices` or srun without MPI wiring (each such process is an MPI world of its "
         "own); "
         "or use backend 'gloo' with those launchers.";
}

}  // namespace

void MpiOptions::validate() const {
  if (timeout_.count() <= 0) {
    throw std::invalid_argument("mpi timeout must be > 0 ms, got " + std::to_string(timeout_.count()));
  }
}

ProcessGroupMpi::ProcessGroupMpi(int rank, int size, MpiOptions options)
    : NativeBackend(rank, size), options_(std::move(options)) {
  options_.validate();
  TORCH_CHECK(size >= 1 && rank >= 0 && rank < size, "mpi: rank ", rank, " is not in [0, ", size, ")");
  // Refused before MPI starts: a process no launcher started would become a world of its own.
  const std::vector<int>& members = options_.world_ranks();
  TORCH_CHECK(members.empty() || static_cast<int>(members.size()) == size, "mpi: ", members.size(),
              " world ranks given for a group of ", size);
  const int launched = detail::mpi_launcher_world_size();
  if (members.empty() && size > 1 && (launched < 0 || (launched > 0 && launched != size))) {
    throw std::runtime_error(
        needs_mpirun(rank, size,
                     launched < 0 ? "was not started by an MPI launcher"
                                  : "was started by one for a world of " + std::to_string(launched)));
  }
  try {
    detail::mpi_ensure_initialized(options_.timeout());
  } catch (const std::exception& e) {
    throw std::runtime_error("rank " + std::to_string(rank) + ": mpi process group creation: " + e.what());
  }
  state_ = std::make_shared<detail::MpiGroupState>();
  state_->rank = rank;
  int mpi_rank = -1;
  int mpi_size = -1;
  {
    MpiCallScope scope("rank " + std::to_string(rank) + ": MPI_Comm_rank", options_.timeout());
    mpi_check(MPI_Comm_rank(MPI_COMM_WORLD, &mpi_rank), "MPI_Comm_rank");
    mpi_check(MPI_Comm_size(MPI_COMM_WORLD, &mpi_size), "MPI_Comm_size");
  }
  if (members.empty() && (mpi_rank != rank || mpi_size != size)) {
    throw std::runtime_error(needs_mpirun(
        rank, size, "is rank " + std::to_string(mpi_rank) + " of " + std::to_string(mpi_size) + " for MPI"));
  }
  if (!members.empty() &&
      (members[rank] != mpi_rank || *std::max_element(members.begin(), members.end()) >= mpi_size)) {
    throw std::runtime_error("mpi subgroup: this process is MPI rank " + std::to_string(mpi_rank) + " of " +
                             std::to_string(mpi_size) + ", not the world rank " +
                             std::to_string(members[rank]) + " the group's rank " + std::to_string(rank) +
                             " stands for");
  }
  // Group creation is a collective: every rank dups MPI_COMM_WORLD, in the same order. The dup runs on the
  // group's worker thread, so that a rank which never creates its group (it exited, or is stuck before
  // this) costs the others the group's timeout, not a hang. Errors come back as codes, so a failing
  // collective becomes an exception naming it instead of aborting the whole job.
  init();
  executor_ = std::make_shared<detail::SerialExecutor>("mpi");
  executor_->start([state = state_, timeout = options_.timeout(), members] {
    try {
      MpiCallScope scope("rank " + std::to_string(state->rank) + ": MPI_Comm_dup", timeout);
      if (members.empty()) {
        mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &state->comm), "MPI_Comm_dup");
      } else {
        // Only the members call it (MPI_Comm_split would need every rank of the world).
        MPI_Group world = MPI_GROUP_NULL;
        MPI_Group group = MPI_GROUP_NULL;
        mpi_check(MPI_Comm_group(MPI_COMM_WORLD, &world), "MPI_Comm_group");
        mpi_check(MPI_Group_incl(world, static_cast<int>(members.size()), members.data(), &group),
                  "MPI_Group_incl");
        mpi_check(MPI_Comm_create_group(MPI_COMM_WORLD, group, /*tag=*/0, &state->comm),
                  "MPI_Comm_create_group");
        MPI_Group_free(&group);
        MPI_Group_free(&world);
      }
      mpi_check(MPI_Comm_set_errhandler(state->comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    } catch (const std::exception&) {
      std::lock_guard<std::mutex> lock(state->mutex);
      state->create_error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(state->mutex);
      state->created = true;
    }
    state->cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(state_->mutex);
  const bool created = state_->cv.wait_for(lock, options_.timeout(), [&] { return state_->created; });
  if (created && !state_->create_error) {
    detail::mpi_group_opened();
    return;
  }
  // The executor's thread leaves when (if ever) the dup returns; nothing may be queued on this group.
  // ~ProcessGroup does not run for a constructor that throws, so stop it here.
  lock.unlock();
  executor_->stop(std::chrono::milliseconds(0));
  if (created) std::rethrow_exception(state_->create_error);
  throw std::runtime_error(
      "rank " + std::to_string(rank) + ": mpi process group creation (" +
      std::string(members.empty() ? "MPI_Comm_dup of MPI_COMM_WORLD" : "MPI_Comm_create_group") +
      ") did "
      "not complete within " +
      std::to_string(options_.timeout().count()) +
      " ms: a rank has not created its group (it exited, is stuck before init_process_group, or creates "
      "its groups in another order). MPI cannot cancel it; this process leaves without MPI_Finalize.");
}

ProcessGroupMpi::~ProcessGroupMpi() {
  detail::mpi_group_closed();
  // Queued collectives fail; a collective that never returns leaves the executor's thread behind (it
  // owns the state with us), and the communicator with it.
  if (!executor_->stop(options_.timeout())) return;
  try {
    MpiCallScope scope("rank " + std::to_string(getRank()) + ": MPI_Comm_free", options_.timeout());
    MPI_Comm_free(&state_->comm);
  } catch (const std::exception&) {
    // MPI was finalised already (a group destroyed after exit began: it freed the communicator), or
    // another group's stuck collective holds MPI: the communicator stays behind, as a stuck group's does.
  }
}

std::string ProcessGroupMpi::library_version() {
  detail::mpi_ensure_initialized();
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  MPI_Get_library_version(text, &length);
  std::string version(text, static_cast<std::size_t>(length));
  const auto end = version.find_first_of("\n,");
  return end == std::string::npos ? version : version.substr(0, end);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupMpi::allreduce(std::vector<at::Tensor>& tensors,
                                                          const c10d::AllreduceOptions& opts) {
  check_single(tensors, "allreduce");
  const MPI_Datatype type = reduce_datatype(tensors[0], "allreduce");
  const auto op = opts.reduceOp.op_;
  const MPI_Op mpi_op = detail::mpi_reduce_op(op, tensors[0].scalar_type());
  auto tensor = std::make_shared<Contiguous>(tensors[0]);
  const int size = getSize();
  return enqueue(state_, executor_, options_.timeout(), c10d::OpType::ALLREDUCE, "allreduce", tensors,
                 [tensor, type, mpi_op, op, size](MPI_Comm comm) {
                   at::Tensor& t = tensor->work;
                   auto* data = static_cast<char*>(t.data_ptr());
                   const int64_t numel = t.numel();
                   const int64_t piece =
                       std::max<int64_t>(1, kAllreducePieceBytes / static_cast<int64_t>(t.element_size()));
                   int64_t off = 0;
                   do {
                     const int count = static_cast<int>(std::min(piece, numel - off));
                     void* at = data + off * t.element_size();
                     mpi_call_and_wait("MPI_Allreduce", [&](MPI_Request* request) {
                       return request ? MPI_Iallreduce(MPI_IN_PLACE, at, count, type, mpi_op, comm, request)
                                      : MPI_Allreduce(MPI_IN_PLACE, at, count, type, mpi_op, comm);
                     });
                     off += count;
                   } while (off < numel);
                   divide_if_average(t, op, size);
                   tensor->write_back();
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupMpi::broadcast(std::vector<at::Tensor>& tensors,
                                                          const c10d::BroadcastOptions& opts) {
  check_single(tensors, "broadcast");
  TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < getSize(), "mpi broadcast: root rank ", opts.rootRank,
              " is not in [0, ", getSize(), ")");
  TORCH_CHECK(opts.rootTensor == 0, "mpi broadcast: rootTensor must be 0 (one tensor per rank), got ",
              opts.rootTensor);
  auto tensor = std::make_shared<Contiguous>(tensors[0]);
  const int root = static_cast<int>(opts.rootRank);
  return enqueue(state_, executor_, options_.timeout(), c10d::OpType::BROADCAST, "broadcast", tensors,
                 [tensor, root](MPI_Comm comm) {
                   at::Tensor& t = tensor->work;
                   auto* data = static_cast<char*>(t.data_ptr());
                   const int64_t bytes = t.numel() * static_cast<int64_t>(t.element_size());
                   int64_t off = 0;
                   do {
                     const int count = static_cast<int>(std::min(kMaxCount, bytes - off));
                     mpi_call_and_wait("MPI_Bcast", [&](MPI_Request* request) {
                       return request ? MPI_Ibcast(data + off, count, MPI_BYTE, root, comm, request)
                                      : MPI_Bcast(data + off, count, MPI_BYTE, root, comm);
                     });
                     off += count;
                   } while (off < bytes);
                   tensor->write_back();
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupMpi::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                          std::vector<at::Tensor>& inputs,
                                                          const c10d::AllgatherOptions& /*opts*/) {
  check_single(inputs, "allgather");
  TORCH_CHECK(outputs.size() == 1, "mpi allgather takes one output list per rank, got ", outputs.size());
  TORCH_CHECK(static_cast<int>(outputs[0].size()) == getSize(),
              "mpi allgather needs one output tensor per rank (", getSize(), "), got ", outputs[0].size());
  for (const auto& out : outputs[0]) {
    check_tensor(out, "allgather", "an output");
    TORCH_CHECK(out.numel() == inputs[0].numel() && out.scalar_type() == inputs[0].scalar_type(),
                "mpi allgather: every output must match the input (", inputs[0].scalar_type(), "[",
                inputs[0].numel(), "]), got ", out.scalar_type(), "[", out.numel(), "]");
  }
  const int count = to_count(inputs[0].numel() * static_cast<int64_t>(inputs[0].element_size()), "allgather");
  auto input = inputs[0].contiguous();
  auto outs = outputs[0];
  const int size = getSize();
  return enqueue(state_, executor_, options_.timeout(), c10d::OpType::ALLGATHER, "allgather", outs,
                 [input, outs, count, size](MPI_Comm comm) {
                   // Into one buffer (MPI needs the blocks back to back), then out into the caller's tensors.
                   at::Tensor flat = at::empty({size, input.numel()}, input.options());
                   mpi_call_and_wait("MPI_Allgather", [&](MPI_Request* request) {
                     return request ? MPI_Iallgather(input.data_ptr(), count, MPI_BYTE, flat.data_ptr(),
                                                     count, MPI_BYTE, comm, request)
                                    : MPI_Allgather(input.data_ptr(), count, MPI_BYTE, flat.data_ptr(), count,
                                                    MPI_BYTE, comm);
                   });
                   for (int r = 0; r < size; ++r) {
                     at::Tensor out = outs[r];
                     out.copy_(flat[r].view(out.sizes()));  // out may be non-contiguous
                   }
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupMpi::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                const c10d::AllgatherOptions& /*opts*/) {
  check_tensor(input, "_allgather_base", "the input");
  check_tensor(output, "_allgather_base", "the output");
  TORCH_CHECK(output.is_contiguous() && output.numel() == input.numel() * getSize() &&
                  output.scalar_type() == input.scalar_type(),
              "mpi _allgather_base: the output must be a contiguous ", input.scalar_type(),
              " tensor of world size x the input's elements (", input.numel() * getSize(), "), got ",
              output.scalar_type(), "[", output.numel(), "]");
  const int count = to_count(input.numel() * static_cast<int64_t>(input.element_size()), "_allgather_base");
  auto in = input.contiguous();
  auto out = output;
  return enqueue(state_, executor_, options_.timeout(), c10d::OpType::_ALLGATHER_BASE, "_allgather_base",
                 {output}, [in, out, count](MPI_Comm comm) {
                   mpi_call_and_wait("MPI_Allgather", [&](MPI_Request* request) {
                     return request ? MPI_Iallgather(in.data_ptr(), count, MPI_BYTE, out.data_ptr(), count,
                                                     MPI_BYTE, comm, request)
                                    : MPI_Allgather(in.data_ptr(), count, MPI_BYTE, out.data_ptr(), count,
                                                    MPI_BYTE, comm);
                   });
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupMpi::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                               std::vector<std::vector<at::Tensor>>& inputs,
                                                               const c10d::ReduceScatterOptions& opts) {
  check_single(outputs, "reduce_scatter");
  const MPI_Datatype type = reduce_datatype(outputs[0], "reduce_scatter");
  TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(),
              "mpi reduce_scatter needs one list of ", getSize(), " input tensors (one per rank)");
  for (const auto& in : inputs[0]) {
    check_tensor(in, "reduce_scatter", "an input");
    TORCH_CHECK(in.numel() == outputs[0].numel() && in.scalar_type() == outputs[0].scalar_type(),
                "mpi reduce_scatter: every input must match the output (", outputs[0].scalar_type(), "[",
                outputs[0].numel(), "]), got ", in.scalar_type(), "[", in.numel(), "]");
  }
  const auto op = opts.reduceOp.op_;
  const MPI_Op mpi_op = detail::mpi_reduce_op(op, outputs[0].scalar_type());
  const int count = to_count(outputs[0].numel(), "reduce_scatter");
  auto output = std::make_shared<Contiguous>(outputs[0]);
  auto ins = inputs[0];
  const int size = getSize();
  return enqueue(state_, executor_, options_.timeout(), c10d::OpType::REDUCE_SCATTER, "reduce_scatter",
                 outputs, [output, ins, type, mpi_op, op, count, size](MPI_Comm comm) {
                   // MPI takes the blocks back to back in one buffer.
                   at::Tensor flat = at::empty({size, static_cast<int64_t>(count)}, output->work.options());
                   for (int r = 0; r < size; ++r) flat[r].copy_(ins[r].reshape({-1}));
                   mpi_call_and_wait("MPI_Reduce_scatter_block", [&](MPI_Request* request) {
                     void* in = flat.data_ptr();
                     void* out = output->work.data_ptr();
                     return request ? MPI_Ireduce_scatter_block(in, out, count, type, mpi_op, comm, request)
                                    : MPI_Reduce_scatter_block(in, out, count, type, mpi_op, comm);
                   });
                   divide_if_average(output->work, op, size);
                   output->write_back();
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupMpi::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                     const c10d::ReduceScatterOptions& opts) {
  check_tensor(input, "_reduce_scatter_base", "the input");
  TORCH_CHECK(input.numel() == output.numel() * getSize() && input.scalar_type() == output.scalar_type(),
              "mpi _reduce_scatter_base: the input must be a ", output.scalar_type(),
              " tensor of world size x the output's elements (", output.numel() * getSize(), "), got ",
              input.scalar_type(), "[", input.numel(), "]");
  std::vector<std::vector<at::Tensor>> inputs(1);
  auto flat = input.reshape({-1});
  for (int r = 0; r < getSize(); ++r) inputs[0].push_back(flat.narrow(0, r * output.numel(), output.numel()));
  std::vector<at::Tensor> outputs{output};
  return reduce_scatter(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupMpi::barrier(const c10d::BarrierOptions& /*opts*/) {
  return enqueue(state_, executor_, options_.timeout(), c10d::OpType::BARRIER, "barrier", {},
                 [](MPI_Comm comm) {
                   mpi_call_and_wait("MPI_Barrier", [&](MPI_Request* request) {
                     return request ? MPI_Ibarrier(comm, request) : MPI_Barrier(comm);
                   });
                 });
}

}  // namespace lockstep::comm
