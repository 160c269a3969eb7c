#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "lockstep/comm/c10d_compat.h"
#include "lockstep/comm/comm_error.h"
#include "lockstep/comm/process_group_options.h"
#include "lockstep/comm/work.h"

namespace lockstep::comm {

namespace detail {
class Progress;
struct ProcessActivity;
}  // namespace detail

/// Reductions. kAvg is a sum divided by the world size (Gloo has no native average).
enum class ReduceOp { kSum, kAvg, kMin, kMax, kProduct };

/// A process group: lockstep's small interface over a c10d backend (Gloo, NCCL, or lockstep's shm, hier
/// and MPI), so that the layers above never touch c10d directly (LibTorch 2.x changed those classes; only
/// comm/ follows, see c10d_compat.h).
///
/// Collectives must be called in the same order on every rank. Each one is numbered (its sequence
/// number appears in errors) and bounded by the collective timeout.
///
/// Example:
///   auto pg = lockstep::comm::init_process_group(
///       lockstep::comm::ProcessGroupOptions::from_environment(lockstep::env::from_env()));
///   auto t = torch::ones({4});
///   pg.all_reduce(t, ReduceOp::kSum).wait();  // t == world_size everywhere
///   pg.shutdown();
class ProcessGroup {
 public:
  ProcessGroup() = default;
  /// Normally made by init_process_group. `native` carries out the collectives: in LibTorch 2.x its default
  /// backend does (c10d_compat.h: detail::as_process_group makes such a front). `host`, when given, carries
  /// out those of CPU tensors (and barriers) instead: beside nccl, which moves only CUDA tensors.
  ProcessGroup(c10::intrusive_ptr<c10d::ProcessGroup> native, c10::intrusive_ptr<c10d::Store> root_store,
               c10::intrusive_ptr<c10d::Store> job_store, ProcessGroupOptions options,
               c10::intrusive_ptr<NativeBackend> host = {});
  ProcessGroup(ProcessGroup&&) noexcept;
  ProcessGroup& operator=(ProcessGroup&&) noexcept;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;
  /// Releases the backend and the store without the check-out of shutdown() (a destructor may run
  /// while an exception unwinds and must not block). Call shutdown() at the end of a normal run so
  /// that rank 0, which serves the store, does not leave before the others are done with it.
  ~ProcessGroup();

  int rank() const { return rank_; }
  int size() const { return size_; }
  /// This process's rank in the world the group was split from (rank() for the world itself).
  int world_rank() const { return world_ranks_.empty() ? rank_ : world_ranks_[static_cast<size_t>(rank_)]; }
  /// The world rank of each of the group's ranks, in group rank order.
  std::vector<int> world_ranks() const;
  /// "" for the world; the name given to split() for a subgroup.
  const std::string& name() const { return name_; }

  /// A collective of this group (every rank calls it, in the same order as its other collectives): the
  /// ranks that pass the same `color` (>= 0) form a new group, ranked in this group's order, as
  /// MPI_Comm_split does. Every rank gets the one subgroup it is in. The subgroup has its own backend of
  /// this group's kind, set up through this group's store, and works beside it: their collectives do not
  /// meet, and a rank may have collectives of several groups in flight, each group's issued in the same
  /// order on its ranks (with mpi too: several groups poll non-blocking calls, docs/mpi.md). With hier, a
  /// subgroup inside one node is shm, one with a rank per node is Gloo. `name` ("tp", "dp") must be the
  /// same on every rank (a missing or differing one fails on every rank); it prefixes the subgroup's
  /// collectives in errors, where ranks are named by their world rank. Shut subgroups down before the
  /// world. `asynchronous`: the subgroup's collectives never run on the caller's thread
  /// (ProcessGroupOptions::asynchronous; a subgroup of an asynchronous group is so too).
  ProcessGroup split(int color, const std::string& name, bool asynchronous = false);
  Backend backend() const { return options_.backend(); }
  const ProcessGroupOptions& options() const { return options_; }

  /// In-place all-reduce of `tensor` (any dtype the backend supports) across all ranks.
  Work all_reduce(at::Tensor& tensor, ReduceOp op = ReduceOp::kSum);
  /// In-place all-reduce of several tensors (one dtype and device) as one collective of a flat copy,
  /// written back when the Work is waited for.
  Work all_reduce(std::vector<at::Tensor>& tensors, ReduceOp op = ReduceOp::kSum);
  /// Copies `tensor` of rank `root` into `tensor` on every rank.
  Work broadcast(at::Tensor& tensor, int root = 0);
  /// outputs[r] receives rank r's `input`; outputs must hold size() tensors shaped like input.
  Work all_gather(std::vector<at::Tensor>& outputs, at::Tensor& input);
  /// Every rank's `input` stacked along a new first dimension: [size(), input's sizes...]. Blocks.
  at::Tensor all_gather_stacked(const at::Tensor& input);
  /// Flat all-gather: `output` (contiguous, size() x input's elements, input's dtype) receives rank r's
  /// `input` (contiguous) at [r * n, (r + 1) * n). Backends with a flat collective (shm, mpi, nccl) use
  /// it; Gloo and hier gather into views of `output`.
  Work all_gather_into(at::Tensor& output, at::Tensor& input);
  /// Flat reduce-scatter: `input` (contiguous, size() x output's elements) is reduced elementwise over the
  /// ranks by `op`, and `output` receives chunk rank() of the result. shm, mpi and nccl have it flat, hier
  /// and Gloo on LibTorch 2.x as a list of chunk views; LibTorch 1.13's Gloo has no reduce-scatter at all,
  /// so there it is an all-reduce of a copy of `input` whose chunk is kept (twice the bytes on the wire:
  /// docs/benchmarks.md measures it).
  Work reduce_scatter(at::Tensor& output, at::Tensor& input, ReduceOp op = ReduceOp::kSum);
  /// Every rank's string, in rank order (two all-gathers: lengths, then the padded bytes). Blocks.
  std::vector<std::string> all_gather_strings(const std::string& mine);
  /// Rank `root`'s `text` on every rank (the others' `text` is ignored). Blocks.
  std::string broadcast_string(const std::string& text, int root = 0);
  /// Blocks until every rank has called barrier(), at most the collective timeout.
  void barrier();

  /// A zero-filled 1-D tensor for data that is all-reduced again and again (DDP's gradient buckets).
  /// With the shm backend (and inside each node with hier) it lives in memory every rank maps, and an
  /// all-reduce of it (or of a slice at the same offset on every rank) copies nothing through the
  /// segment; with other backends, or for non-CPU options, it is an ordinary tensor. A collective:
  /// every rank calls it with the same numel and dtype, in the same order.
  at::Tensor new_comm_buffer(int64_t numel, const at::TensorOptions& options);

  /// Clean exit: this rank's progress records end (the launcher's heartbeat gets "bye"), every rank
  /// checks out through the store; rank 0 (which serves the store) waits,
  /// up to the rendezvous timeout, until all have, so no rank loses its store mid-operation. Then the
  /// backend is released. Idempotent.
  void shutdown();

  /// Leaves the group without checking out (an elastic world moved on: ElasticWorld). Its backend is left
  /// alive to the end of the process, since its threads may still wait on a lost peer; the handle is
  /// closed. Idempotent.
  void abandon();

  /// The end of a group whose store outlives it (ElasticWorld's, served by the launcher): this rank's
  /// progress records end ("bye") and the backend is released, without shutdown()'s check-out, which would
  /// wait for ranks that may have been lost meanwhile. Idempotent.
  void leave();

  /// The c10d process group, for code that needs the raw LibTorch API (e.g. a custom comm hook). Its
  /// getBackendName() is the backend's ("gloo", "shm", ...) on every LibTorch.
  const c10::intrusive_ptr<c10d::ProcessGroup>& native() const { return native_; }

  /// Whether all_reduce can reduce `dtype` with this group's backend. Gloo in LibTorch 1.x cannot
  /// reduce bfloat16 ("Invalid scalar type"; it can still move it: all_gather and broadcast copy bytes);
  /// every other backend lockstep builds reduces the dtypes their headers list.
  bool can_reduce(at::ScalarType dtype) const;
  /// The job's namespace in the rendezvous store ("lockstep/<run_id>/...").
  const c10::intrusive_ptr<c10d::Store>& store() const { return job_store_; }

 private:
  /// Which backend carries out a collective of `tensors` (no tensors: a barrier), whether it averages
  /// itself, and whether waiting is ordered on the CUDA stream (nccl on device tensors:
  /// Work::wait_on_stream).
  struct Route {
    NativeBackend* backend;
    bool averages;
    bool on_stream;
  };
  Route route(const std::vector<at::Tensor>& tensors) const;
  /// A subgroup of split(): `activity` is the parent's (the heartbeat counts every group's collectives).
  ProcessGroup(c10::intrusive_ptr<c10d::ProcessGroup> native, c10::intrusive_ptr<c10d::Store> root_store,
               c10::intrusive_ptr<c10d::Store> job_store, ProcessGroupOptions options,
               c10::intrusive_ptr<NativeBackend> host, std::string name, std::vector<int> world_ranks,
               std::shared_ptr<detail::ProcessActivity> activity);
  /// An all-gather of empty inputs, `description`d: a barrier.
  Work empty_gather(std::string description);
  std::string describe(const char* op, const std::vector<at::Tensor>& tensors);
  /// The handle of the collective just described, tracked in this rank's progress records.
  Work tracked(c10::intrusive_ptr<c10d::Work> native, std::string description,
               std::function<void()> finish = {}, bool on_stream = false);
  void check_open(const char* op) const;
  /// Drops the progress records and the backend (left alive when a wait abandoned a collective in it).
  void release_backend();

  c10::intrusive_ptr<c10d::ProcessGroup> native_;  // the front (c10d_compat.h); in 1.x, backend_ itself
  c10::intrusive_ptr<NativeBackend> backend_;      // what every collective calls (see route())
  c10::intrusive_ptr<NativeBackend> host_;         // CPU tensors beside nccl; null otherwise
  c10::intrusive_ptr<c10d::Store> root_store_;
  c10::intrusive_ptr<c10d::Store> job_store_;
  ProcessGroupOptions options_{0, 1};
  int rank_ = 0;
  int size_ = 1;
  std::uint64_t sequence_ = 0;
  bool native_average_ = false;  // the backend averages itself (one pass fewer than sum, then divide)
  bool host_average_ = false;    // the same for host_
  bool shut_down_ = true;
  std::shared_ptr<detail::Progress> progress_;  // records of this rank's collectives (progress.h)
  std::string name_;                            // a subgroup's (split); "" for the world
  std::vector<int> world_ranks_;                // a subgroup's members' world ranks; empty for the world
  int splits_ = 0;         // subgroups made from this group: each gets its own store prefix
  bool diagnose_ = false;  // waits check the other ranks' records (the shm backend checks itself)
};

/// Rendezvous (see rendezvous.h) then the backend's process group. Throws CommError with the rank,
/// the address and what to check when the master cannot be reached, its port is taken, another job
/// answers, or a rank never arrives; std::invalid_argument for bad options; CommError naming the
/// backend when this LibTorch lacks it (e.g. NCCL without CUDA).
ProcessGroup init_process_group(const ProcessGroupOptions& options);

}  // namespace lockstep::comm
