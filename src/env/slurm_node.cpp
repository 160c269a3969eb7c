#include <lockstep/env/environment.h>
#include <lockstep/env/slurm.h>

// A launcher started by srun (one per node) reads the same SLURM_* variables as a rank started by srun,
// with one difference in meaning: the step's tasks are launchers, not ranks, so the node count, the node
// index, the master and the job token carry over while the rank and world size do not (the launcher
// makes its own workers' ranks from --nproc-per-node).

namespace lockstep::env {

std::optional<SlurmNode> slurm_node(const EnvLookup& lookup) {
  if (!lookup) throw EnvError("slurm_node: lookup is empty; pass process_env() or a table lookup");
  // The batch script of sbatch (and an salloc shell) has SLURM_PROCID too, but no SLURM_STEP_ID: a
  // launcher started there directly runs on that one node, as a job of its own.
  if (!lookup("SLURM_PROCID") || !lookup("SLURM_STEP_ID") || lookup("RANK")) return std::nullopt;
  const Environment environment = from_env(EnvOptions(), lookup);
  SlurmNode node;
  node.num_nodes = environment.num_nodes;
  node.node_rank = environment.node_rank;
  node.tasks_on_node = environment.local_world_size;
  node.master_addr = environment.master_addr;
  node.master_port = environment.master_port;
  node.run_id = environment.run_id;
  return node;
}

}  // namespace lockstep::env
