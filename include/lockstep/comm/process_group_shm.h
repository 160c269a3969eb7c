#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "lockstep/comm/c10d_compat.h"
#include "lockstep/detail/option.h"

namespace lockstep::comm {

namespace detail {
class SerialExecutor;
class ShmChannel;
class ShmWork;
}  // namespace detail

/// Options of the shared-memory backend.
///
/// Example:
///   auto opts = ShmOptions().run_id("job-17").timeout(std::chrono::seconds(60));
class ShmOptions {
 public:
  /// Job token: part of the segment name (/dev/shm/lockstep-<run_id>-<pid>-<n>).
  LOCKSTEP_OPTION(ShmOptions, std::string, run_id)
  /// Bound on each collective (every wait inside it); the error names the ranks that did not arrive.
  LOCKSTEP_OPTION(ShmOptions, std::chrono::milliseconds, timeout)
  /// Bytes of each rank's slot in each of the two buffers (segment: 2 x world x slot_bytes, plus a
  /// page of control). Larger tensors are cut into chunks of this size and pipelined. A multiple of
  /// 64, at least 256. Default: LOCKSTEP_SHM_SLOT_BYTES when set, else 4 MiB.
  LOCKSTEP_OPTION(ShmOptions, std::size_t, slot_bytes)
  /// Run a collective on the calling thread when none is queued or running (the Work returned is then
  /// already complete): saves two thread hand-offs (~0.1 ms per call on a busy 2-core host). Off: every
  /// collective runs on the group's worker thread and overlaps with the caller. Default: true unless
  /// LOCKSTEP_SHM_ASYNC=1.
  LOCKSTEP_OPTION(ShmOptions, bool, inline_when_idle)
  /// The world rank each of the group's ranks stands for, in group rank order, for messages (a subgroup:
  /// ProcessGroup::split; a node's group under hier). Empty (the default): the group's own numbers.
  LOCKSTEP_OPTION(ShmOptions, std::vector<int>, world_ranks)

  ShmOptions();

  /// Throws std::invalid_argument naming the field and value when an option is out of range.
  void validate() const;

 private:
  std::string run_id_ = "none";
  std::chrono::milliseconds timeout_{std::chrono::minutes(30)};
  std::size_t slot_bytes_ = 4u << 20;
  bool inline_when_idle_ = true;
  std::vector<int> world_ranks_;
};

/// A c10d backend (NativeBackend: c10d_compat.h) for ranks on one host: collectives move through a POSIX
/// shared-memory segment (shm_open + mmap, mode 0600) instead of sockets, at memory speed.
///
/// Rank 0 creates the segment and publishes its name in `store`; every rank maps it; once all have,
/// rank 0 unlinks the name, so nothing is left in /dev/shm even if a rank is later killed with -9.
/// All-reduce is a reduce-scatter plus all-gather over the shared buffer: each rank copies its tensor
/// into its slot, reduces its own slice of every rank's slot (all ranks in parallel, in rank order, so
/// the result has the same bits on every rank), then copies the reduced tensor back; tensors larger
/// than a slot go in chunks through two alternating buffers, so a rank fills the next chunk while the
/// others still read the last one. Collectives run in issue order on one worker thread per group and
/// return at once with a Work (wait() rethrows a failure).
///
/// Supported: allreduce (sum, avg, min, max, product; float32, float64, bfloat16, float16, int32,
/// int64, uint8, int8), broadcast, allgather, _allgather_base, reduce_scatter, _reduce_scatter_base,
/// barrier; CPU tensors only, one tensor per rank per call. Collectives run in issue order, on the
/// calling thread when nothing else is queued (ShmOptions::inline_when_idle), else on the worker. A rank that
/// dies, times out or calls a different collective makes every rank fail with an error naming it (never a
/// hang).
///
/// Example (normally through lockstep::comm::init_process_group with Backend::kShm):
///   auto pg = c10::make_intrusive<ProcessGroupShm>(store, rank, world, ShmOptions().run_id("job"));
///   std::vector<at::Tensor> t{at::ones({4})};
///   pg->allreduce(t)->wait();  // t[0] == world everywhere
class ProcessGroupShm final : public NativeBackend {
 public:
  /// Sets up the segment over `store` (blocks until every rank has mapped it, at most the store's
  /// timeout). Throws std::runtime_error naming the segment and the cause when it cannot.
  ProcessGroupShm(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, ShmOptions options);
  /// Fails collectives still queued (their Work rethrows), stops the worker, unmaps the segment.
  ~ProcessGroupShm() override;

  const std::string getBackendName() const override { return "shm"; }

  /// Bytes of the segment for `world` ranks and `slot_bytes` per slot (what /dev/shm must hold).
  static std::size_t segment_bytes(int world, std::size_t slot_bytes);
  /// Whether /dev/shm has `bytes` free (tmpfs reserves nothing up front; writing past its end is SIGBUS).
  static bool dev_shm_has_room(std::size_t bytes);

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

  /// A zero-filled 1-D tensor of `numel` elements of `dtype` in shared memory that every rank of the
  /// group maps (a "symmetric" buffer). An all-reduce of a tensor that lies inside such a buffer, at the
  /// same offset on every rank, moves no data through the segment: each rank reduces its slice straight
  /// from every rank's buffer and writes the result into all of them (two barriers, about half the
  /// memory traffic of the copying path; DDP keeps its gradient buckets here). A collective: every rank
  /// calls it with the same numel and dtype, in the same order relative to the other collectives (a
  /// mismatch is an error naming both sides). Without room in /dev/shm (twice the buffer's size free),
  /// every rank gets an ordinary tensor instead, whose all-reduces take the copying path, and rank 0
  /// prints a warning. Like the segment, the buffer's name is unlinked as soon as every rank mapped it.
  at::Tensor new_shared_tensor(int64_t numel, at::ScalarType dtype);

  /// The segment's name (already unlinked once every rank attached), for diagnostics.
  const std::string& segment_name() const { return segment_name_; }

 private:
  struct SharedBuffer;
  // The shared buffer `t` lies in (its own region: base + rank * stride), and t's byte offset in it.
  std::pair<const SharedBuffer*, std::size_t> find_shared(const at::Tensor& t) const;
  /// Runs `run` (given the collective's number) on the executor, after every collective issued before.
  c10::intrusive_ptr<c10d::Work> enqueue(c10d::OpType type, std::vector<at::Tensor> outputs,
                                         std::function<void(std::uint64_t sequence)> run);

  ShmOptions options_;
  std::string segment_name_;
  std::unique_ptr<detail::ShmChannel> channel_;
  // Touched only by the collective running (the executor runs one at a time).
  std::vector<std::shared_ptr<SharedBuffer>> shared_buffers_;
  std::unique_ptr<detail::SerialExecutor> executor_;  // last: stopped first
};

}  // namespace lockstep::comm
