#pragma once

// Backend factories (private to comm/). Each lives in its own file; CMake picks the real NCCL/MPI
// files only when LibTorch was built with them, and the *_unavailable.cpp stubs otherwise.

#include <vector>

#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "lockstep/comm/c10d_compat.h"
#include "lockstep/comm/process_group_options.h"

namespace lockstep::comm::detail {

c10::intrusive_ptr<NativeBackend> make_gloo(const c10::intrusive_ptr<c10d::Store>& store,
                                            const ProcessGroupOptions& options);
c10::intrusive_ptr<NativeBackend> make_nccl(const c10::intrusive_ptr<c10d::Store>& store,
                                            const ProcessGroupOptions& options);
/// Whether make_nccl can make a group (lockstep was built with NCCL's headers against a CUDA LibTorch).
bool nccl_available();
/// Ends an nccl backend's communicators in order (ProcessGroupNCCL::shutdown, LibTorch 2.4 and later),
/// before it is destroyed: LibTorch 2.x warns of a group destroyed without it. It waits for the
/// collectives in flight: only for a clean end. Nothing for another backend or in the stub.
void shutdown_nccl(NativeBackend& backend);
/// Whether this thread's current CUDA stream is capturing a CUDA graph (false without CUDA): a collective
/// issued then only joins the graph, runs at each replay, and is not watched for the collective timeout.
bool capturing_cuda_graph();
/// `world_ranks` (here and in make_hier, make_mpi): a subgroup's members' world ranks, for messages (and
/// MPI's communicator); empty for the world.
c10::intrusive_ptr<NativeBackend> make_shm(const c10::intrusive_ptr<c10d::Store>& store,
                                           const ProcessGroupOptions& options,
                                           const std::vector<int>& world_ranks = {});

c10::intrusive_ptr<NativeBackend> make_hier(const c10::intrusive_ptr<c10d::Store>& store,
                                            const ProcessGroupOptions& options,
                                            const std::vector<int>& world_ranks = {});
/// Ranks per node for the hierarchical backend: options.local_world_size(), or world / nodes when unset.
int hier_local_world_size(const ProcessGroupOptions& options);

/// The backend to create: options.backend(), or for Backend::kAuto the one that fits where the ranks
/// are (every rank must call it: it exchanges host identities through `store`).
Backend resolve_backend(const c10::intrusive_ptr<c10d::Store>& store, const ProcessGroupOptions& options);

c10::intrusive_ptr<NativeBackend> make_mpi(const c10::intrusive_ptr<c10d::Store>& store,
                                           const ProcessGroupOptions& options,
                                           const std::vector<int>& world_ranks);

/// The options of a subgroup of `parent` (ProcessGroup::split) made of the parent's ranks `members` (in
/// order), for the member `rank` of it: its rank and size, its nodes, and a backend of the parent's kind
/// that fits them (hier: shm inside one node, hier with the same ranks on each node, else Gloo).
ProcessGroupOptions subgroup_options(const ProcessGroupOptions& parent, const std::vector<int>& members,
                                     int rank);

}  // namespace lockstep::comm::detail
