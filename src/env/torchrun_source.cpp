#include <string>

#include "parse.h"
#include "sources.h"

// torchrun's worker environment. torchrun always sets every variable read here; people launching by
// hand often set only RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT (what env:// needs), so only
// WORLD_SIZE is required with RANK and the rest is derived (see resolve()).
//
// The node count comes from GROUP_WORLD_SIZE, which torchrun and `lockstep run` set (the number of
// agents / launchers). LOCKSTEP_NNODES is set by nobody but the user: it wins over GROUP_WORLD_SIZE and
// declares a hand-made layout whose nodes run different numbers of ranks, which WORLD_SIZE /
// LOCAL_WORLD_SIZE cannot tell.
//
// torchrun runs the same number of ranks on every node and numbers them node by node, so when its
// variables are given they must satisfy
//   RANK = GROUP_RANK * LOCAL_WORLD_SIZE + LOCAL_RANK   and   WORLD_SIZE = GROUP_WORLD_SIZE *
//   LOCAL_WORLD_SIZE.
// Neither holds for uneven nodes, so LOCKSTEP_NNODES turns both checks off (the range checks of
// resolve() still apply).

namespace lockstep::env::detail {
namespace {

void check_torchrun_layout(const Layout& l) {
  const bool in_range = l.rank.has() && l.rank.get() < l.world_size.get() && l.local_rank.has() &&
                        l.local_world_size.has() && l.local_rank.get() < l.local_world_size.get();
  // Out-of-range values are left to resolve(), whose message says the range.
  if (in_range && l.node_rank.has() && (!l.num_nodes.has() || l.node_rank.get() < l.num_nodes.get())) {
    const long long expected =
        static_cast<long long>(l.node_rank.get()) * l.local_world_size.get() + l.local_rank.get();
    if (expected != l.rank.get()) {
      throw EnvError(l.rank.brief() + " does not match " + l.node_rank.brief() + " * " +
                     l.local_world_size.brief() + " + " + l.local_rank.brief() + " = " +
                     std::to_string(expected) +
                     ": torchrun numbers ranks node by node (RANK = GROUP_RANK * LOCAL_WORLD_SIZE + "
                     "LOCAL_RANK); set LOCKSTEP_NNODES if the nodes run different numbers of ranks");
    }
  }
  if (l.num_nodes.has() && l.local_world_size.has()) {
    const long long product = static_cast<long long>(l.local_world_size.get()) * l.num_nodes.get();
    if (product != l.world_size.get()) {
      throw EnvError(l.local_world_size.brief() + " * " + l.num_nodes.brief() + " = " +
                     std::to_string(product) + " does not match " + l.world_size.brief() +
                     ": torchrun runs LOCAL_WORLD_SIZE ranks on each of GROUP_WORLD_SIZE nodes; set "
                     "LOCKSTEP_NNODES instead of GROUP_WORLD_SIZE if the nodes run different numbers of "
                     "ranks");
    }
  }
}

}  // namespace

Layout read_torchrun(const EnvLookup& lookup) {
  Layout l;
  l.source = Source::kTorchrun;
  read_int(lookup, "RANK", l.rank, 0);
  l.world_size.set(parse_int("WORLD_SIZE", require(lookup, "WORLD_SIZE", "RANK", "torchrun"), 1),
                   "WORLD_SIZE");
  read_int(lookup, "LOCAL_RANK", l.local_rank, 0);
  read_int(lookup, "LOCAL_WORLD_SIZE", l.local_world_size, 1);
  read_int(lookup, "GROUP_RANK", l.node_rank, 0);
  // The node count: the user's LOCKSTEP_NNODES (uneven nodes), else the number of agents that torchrun
  // and `lockstep run` set; else resolve() divides WORLD_SIZE by LOCAL_WORLD_SIZE.
  if (!read_int(lookup, "LOCKSTEP_NNODES", l.num_nodes, 1)) {
    read_int(lookup, "GROUP_WORLD_SIZE", l.num_nodes, 1);
    check_torchrun_layout(l);
  }
  read_master_override(lookup, l);
  read_int(lookup, "TORCHELASTIC_RESTART_COUNT", l.restart_count, 0);
  read_string(lookup, "TORCHELASTIC_RUN_ID", l.run_id);
  return l;
}

}  // namespace lockstep::env::detail
