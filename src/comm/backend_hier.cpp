// hier: shm inside each node, Gloo between the nodes' local rank 0, Gloo among all ranks for the rest
// (process_group_hier.h). Ranks follow torchrun's layout: rank = node_rank * local_world_size + local_rank.
#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

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

ProcessGroupOptions subgroup_options(const ProcessGroupOptions& parent, const std::vector<int>& members,
                                     int rank) {
  const int size = static_cast<int>(members.size());
  ProcessGroupOptions sub = parent;
  sub.rank(rank).world_size(size).local_world_size(0);
  const int local = hier_local_world_size(parent);
  const bool laid_out =
      parent.num_nodes() > 1 && local >= 1 && local * parent.num_nodes() == parent.world_size();
  if (!laid_out) {
    // One node, or nodes of unknown shape: only "more than one node" (Gloo keeps off loopback) carries over.
    sub.num_nodes(std::min(parent.num_nodes(), size));
    if (parent.backend() == Backend::kHier)
      sub.backend(parent.num_nodes() > 1 ? Backend::kGloo : Backend::kShm);
    return sub;
  }
  std::map<int, int> per_node;  // node -> members on it
  for (int member : members) ++per_node[member / local];
  const int nodes = static_cast<int>(per_node.size());
  const int on_first = per_node.begin()->second;
  const bool even = std::all_of(per_node.begin(), per_node.end(), [&](const std::pair<const int, int>& node) {
    return node.second == on_first;
  });
  sub.num_nodes(nodes);
  if (even) sub.local_world_size(on_first);
  if (parent.backend() == Backend::kHier) {
    sub.backend(nodes == 1 ? Backend::kShm : even && on_first > 1 ? Backend::kHier : Backend::kGloo);
  }
  return sub;
}

c10::intrusive_ptr<NativeBackend> make_hier(const c10::intrusive_ptr<c10d::Store>& store,
                                            const ProcessGroupOptions& options,
                                            const std::vector<int>& world_ranks) {
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
  std::vector<int> node_ranks(static_cast<size_t>(local_size));  // the node's ranks' world ranks
  for (int i = 0; i < local_size; ++i) {
    const int r = node * local_size + i;
    node_ranks[static_cast<size_t>(i)] = world_ranks.empty() ? r : world_ranks[static_cast<size_t>(r)];
  }
  c10::intrusive_ptr<NativeBackend> local;
  try {
    ShmOptions shm =
        ShmOptions().run_id(options.run_id()).timeout(options.collective_timeout()).world_ranks(node_ranks);
    if (options.asynchronous()) shm.inline_when_idle(false);
    local = c10::make_intrusive<ProcessGroupShm>(
        c10::make_intrusive<c10d::PrefixStore>("hier/node" + std::to_string(node), store), local_rank,
        local_size, shm);
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
