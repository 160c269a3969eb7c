#pragma once

#include "lockstep/comm/process_group.h"

namespace lockstep::comm {

/// The world's ranks as a grid: data parallel × tensor parallel, tensor parallel innermost. With T-way
/// tensor parallelism, ranks [k*T, (k+1)*T) form tensor-parallel group k, and ranks with the same
/// position in their tensor-parallel group (rank % T) form a data-parallel group:
///
///   world 8, T = 2:  tp groups {0,1} {2,3} {4,5} {6,7}    dp groups {0,2,4,6} {1,3,5,7}
///
/// Why innermost: a tensor-parallel layer all-reduces activations in every forward and backward pass
/// (Megatron's split: two all-reduces per transformer block and pass), on the critical path; data
/// parallelism all-reduces gradients once a step, overlapped with the backward pass. Launchers number
/// ranks node by node (rank = node_rank * local_world_size + local_rank), so consecutive ranks share a
/// node: its fastest link (shared memory, NVLink) carries the tensor-parallel traffic. A mesh whose
/// tensor-parallel groups would span nodes is refused.
///
/// Example:
///   auto world = comm::init_process_group(comm::ProcessGroupOptions::from_environment(env::from_env()));
///   comm::DeviceMesh mesh(world, /*tensor_parallel=*/2);
///   models::ColumnParallelLinear fc(mesh.tp(), ...);   // splits across mesh.tp()
///   ... all-reduce gradients over mesh.dp() ...
///   mesh.shutdown();
///   world.shutdown();
class DeviceMesh {
 public:
  /// A collective of `world` (which must outlive the mesh). Throws std::invalid_argument on every rank
  /// naming the values when `tensor_parallel` is < 1, differs between ranks, does not divide the world
  /// size, or does not divide the ranks per node of a job on several nodes.
  DeviceMesh(ProcessGroup& world, int tensor_parallel);

  int tensor_parallel() const { return tp_.size(); }
  int data_parallel() const { return dp_.size(); }
  /// This rank's position in its tensor-parallel group (world rank % T) and in its data-parallel group
  /// (world rank / T).
  int tp_rank() const { return tp_.rank(); }
  int dp_rank() const { return dp_.rank(); }

  ProcessGroup& world() { return *world_; }
  /// The ranks that split a layer with this one.
  ProcessGroup& tp() { return tp_; }
  /// The ranks that hold the same slices as this one, on other data.
  ProcessGroup& dp() { return dp_; }

  /// Shuts both subgroups down (ProcessGroup::shutdown); the world stays open. Idempotent.
  void shutdown();

 private:
  ProcessGroup* world_;
  ProcessGroup tp_;
  ProcessGroup dp_;
};

}  // namespace lockstep::comm
