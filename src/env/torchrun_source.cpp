#include "parse.h"
#include "sources.h"

// torchrun's worker environment. torchrun always sets every variable read here; people launching by
// hand often set only RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT (what env:// needs), so only
// WORLD_SIZE is required with RANK and the rest is derived (see resolve()).

namespace lockstep::env::detail {

Layout read_torchrun(const EnvLookup& lookup) {
  Layout l;
  l.source = Source::kTorchrun;
  read_int(lookup, "RANK", l.rank, 0);
  l.world_size.set(parse_int("WORLD_SIZE", require(lookup, "WORLD_SIZE", "RANK", "torchrun"), 1),
                   "WORLD_SIZE");
  read_int(lookup, "LOCAL_RANK", l.local_rank, 0);
  read_int(lookup, "LOCAL_WORLD_SIZE", l.local_world_size, 1);
  read_int(lookup, "GROUP_RANK", l.node_rank, 0);
  // The node count: lockstep's own launcher says it; torchrun says it as the number of agents; else
  // resolve() divides WORLD_SIZE by LOCAL_WORLD_SIZE.
  if (!read_int(lookup, "LOCKSTEP_NNODES", l.num_nodes, 1)) {
    read_int(lookup, "GROUP_WORLD_SIZE", l.num_nodes, 1);
  }
  read_master_override(lookup, l);
  read_int(lookup, "TORCHELASTIC_RESTART_COUNT", l.restart_count, 0);
  read_string(lookup, "TORCHELASTIC_RUN_ID", l.run_id);
  return l;
}

}  // namespace lockstep::env::detail
