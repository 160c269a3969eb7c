#pragma once

#include <chrono>

#include <c10/util/intrusive_ptr.h>

#include "lockstep/comm/c10d_compat.h"

namespace lockstep::comm {

/// Hierarchical all-reduce for multi-node CPU jobs: reduce inside each node over shared memory, all-reduce
/// between the nodes' local rank 0 ("leaders") over Gloo, broadcast the result inside each node. Only
/// each node's leader touches the network, with the node's already-reduced tensor, so the bytes on the
/// wire do not grow with the ranks per node. Built by init_process_group for Backend::kHier (and for
/// Backend::kAuto in multi-node CPU jobs) from three groups: `local` (this node's ranks, shm),
/// `leaders` (one rank per node, Gloo; null on the other ranks) and `flat` (all ranks, Gloo), which
/// carries every other collective (broadcast, allgather, reduce_scatter, barrier: start-up and metrics
/// traffic, not the per-step gradients).
///
/// All-reduce runs on the caller's thread, its three steps one after the other, and returns a completed
/// Work (a failure is stored in it and rethrown by wait()); it does not overlap with the caller.
/// Sum, avg, min, max and product: avg is a sum divided by the world size at the end.
class ProcessGroupHier final : public NativeBackend {
 public:
  /// `timeout` bounds each step of an all-reduce whose options leave the timeout unset.
  ProcessGroupHier(int rank, int size, c10::intrusive_ptr<NativeBackend> local,
                   c10::intrusive_ptr<NativeBackend> leaders, c10::intrusive_ptr<NativeBackend> flat,
                   std::chrono::milliseconds timeout);

  const std::string getBackendName() const override { return "hier"; }

  c10::intrusive_ptr<c10d::Work> allreduce(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceOptions& opts = c10d::AllreduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> broadcast(
      std::vector<at::Tensor>& tensors,
      const c10d::BroadcastOptions& opts = c10d::BroadcastOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts = c10d::BarrierOptions()) override;

  const c10::intrusive_ptr<NativeBackend>& local() const { return local_; }
  const c10::intrusive_ptr<NativeBackend>& leaders() const { return leaders_; }

 private:
  c10::intrusive_ptr<NativeBackend> local_;
  c10::intrusive_ptr<NativeBackend> leaders_;
  c10::intrusive_ptr<NativeBackend> flat_;
  std::chrono::milliseconds timeout_;
};

}  // namespace lockstep::comm
