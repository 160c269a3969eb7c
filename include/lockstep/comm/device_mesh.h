#pragma once

#include "lockstep/comm/process_group.h"

namespace lockstep::comm {

/// The world's ranks as a grid: data parallel × pipeline parallel × tensor parallel, tensor parallel
/// innermost, data parallel outermost: rank = d·(P·T) + p·T + t. With T-way tensor parallelism, ranks
/// [k*T, (k+1)*T) form tensor-parallel group k; ranks with the same d and t form a pipeline (stage p);
/// ranks with the same p and t a data-parallel group:
///
///   world 8, T = 2:         tp groups {0,1} {2,3} {4,5} {6,7}    dp groups {0,2,4,6} {1,3,5,7}
///   world 8, T = 2, P = 2:  tp {0,1} {2,3} {4,5} {6,7}   pp {0,2} {1,3} {4,6} {5,7}   dp {0,4} {1,5} {2,6}
///   {3,7}
///
/// Why innermost: a tensor-parallel layer all-reduces activations in every forward and backward pass
/// (Megatron's split: two all-reduces per transformer block and pass), on the critical path; data
/// parallelism all-reduces gradients once a step, overlapped with the backward pass. Launchers number
/// ranks node by node (rank = node_rank * local_world_size + local_rank), so consecutive ranks share a
/// node: its fastest link (shared memory, NVLink) carries the tensor-parallel traffic. A mesh whose
/// tensor-parallel groups would span nodes is refused. A pipeline sends an activation per micro-batch
/// between neighbouring stages, less often than tensor parallelism and more than data parallelism: it
/// sits between them (Megatron-LM's order).
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
  /// naming the values when `tensor_parallel` or `pipeline_parallel` is < 1 or differs between ranks, when
  /// T × P does not divide the world size, or when T does not divide the ranks per node of a job on
  /// several nodes.
  DeviceMesh(ProcessGroup& world, int tensor_parallel, int pipeline_parallel = 1);

  int tensor_parallel() const { return tp_.size(); }
  int pipeline_parallel() const { return pp_.size(); }
  int data_parallel() const { return dp_.size(); }
  /// This rank's position in its tensor-parallel group (t = world rank % T), its pipeline (the stage p) and
  /// its data-parallel group (d = world rank / (T × P)).
  int tp_rank() const { return tp_.rank(); }
  int pp_rank() const { return pp_.rank(); }
  int dp_rank() const { return dp_.rank(); }

  /// This rank's place among the ranks that hold different parts of the model (what a checkpoint writes
  /// one part for): pp_rank × T + tp_rank of model_parallel() = P × T.
  int model_parallel_rank() const { return pp_rank() * tensor_parallel() + tp_rank(); }
  int model_parallel() const { return pipeline_parallel() * tensor_parallel(); }

  ProcessGroup& world() { return *world_; }
  /// The ranks that split a layer with this one.
  ProcessGroup& tp() { return tp_; }
  /// The stages of this rank's pipeline, in stage order (pipeline::PipelineParallel's group).
  ProcessGroup& pp() { return pp_; }
  /// The ranks that hold the same slices as this one, on other data.
  ProcessGroup& dp() { return dp_; }

  /// Shuts the subgroups down (ProcessGroup::shutdown); the world stays open. Idempotent.
  void shutdown();

 private:
  ProcessGroup* world_;
  ProcessGroup tp_;
  ProcessGroup pp_;
  ProcessGroup dp_;
};

}  // namespace lockstep::comm
