// hier: shm inside each node, Gloo between the nodes' local rank 0, Gloo among all ranks for the rest
// (process_group_hier.h). Ranks follow torchrun's layout: rank = node_rank * local_world_size + local_rank.
#include <algorithm>
#include <string>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "backend.h"
#include "lockstep/comm/comm_error.h"
#include "lockstep/comm/process_group_hier.h"
#include "lockstep/comm/process_group_shm.h"

namespace lockstep::comm::detail {

int hier_local_world_size(const ProcessGroupOptions& options) {
  return options.local_world_size() > 0 ? options.local_world_size()
                                        : options.world_size() / std::max(1, options.num_nodes());
}

c10::intrusive_ptr<NativeBackend> make_hier(const c10::intrusive_ptr<c10d::Store>& store,
                                            const ProcessGroupOptions& options) {
  const int world = options.world_size();
  const int nodes = options.num_nodes();
  const int local_size = hier_local_world_size(options);
  if (local_size < 1 || local_size * nodes != world) {
    throw CommError(options.rank(), "init_process_group",
                    "backend 'hier' needs the same number of ranks on every node, but world_size " +
                        std::to_string(world) + " is not num_nodes " + std::to_string(nodes) +
                        " x local_world_size " + std::to_string(local_size) + "; use backend 'gloo'");
  }
  const int node = options.rank() / local_size;
  const int local_rank = options.rank() % local_size;
  c10::intrusive_ptr<NativeBackend> local;
  try {
    local = c10::make_intrusive<ProcessGroupShm>(
        c10::make_intrusive<c10d::PrefixStore>("hier/node" + std::to_string(node), store), local_rank,
        local_size, ShmOptions().run_id(options.run_id()).timeout(options.collective_timeout()));
  } catch (const std::exception& e) {
    throw CommError(
        options.rank(), "init_process_group",
        "hier backend: the shared-memory group of node " + std::to_string(node) + ": " + e.what());
  }
  c10::intrusive_ptr<NativeBackend> leaders;
  if (local_rank == 0) {
    ProcessGroupOptions leader_options = options;
    leader_options.rank(node).world_size(nodes);
    leaders = make_gloo(c10::make_intrusive<c10d::PrefixStore>("hier/leaders", store), leader_options);
  }
  auto flat = make_gloo(c10::make_intrusive<c10d::PrefixStore>("hier/flat", store), options);
  return c10::make_intrusive<ProcessGroupHier>(options.rank(), world, std::move(local), std::move(leaders),
                                               std::move(flat), options.collective_timeout());
}

}  // namespace lockstep::comm::detail
