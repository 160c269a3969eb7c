#pragma once

#include <optional>
#include <string>
#include <vector>

#include "lockstep/env/environment.h"

namespace lockstep::env {

/// Expands a Slurm hostlist, as found in SLURM_JOB_NODELIST / SLURM_STEP_NODELIST, into host names in
/// Slurm's order (the order `scontrol show hostnames` prints).
///
/// Grammar: comma-separated host expressions; each is literal text ([A-Za-z0-9._-]) with any number of
/// bracket groups `[a-b,c,...]` of decimal ranges. A range keeps the width of its lower bound
/// (`n[08-10]` -> n08 n09 n10). Several groups expand as a cartesian product, the first group varying
/// slowest (`a[0-1]b[2-3]` -> a0b2 a0b3 a1b2 a1b3). Duplicates are kept.
///
/// `variable` only names the value in error messages. Throws EnvError for an empty or garbled list
/// (unclosed or nested bracket, empty range, reversed range like `[03-01]`, character that cannot be
/// in a host name, more than 2^20 hosts), e.g.
/// "SLURM_JOB_NODELIST='gpu[03-01]' is not a valid Slurm hostlist: range 03-01 is reversed; ...".
///
/// Example:
///   expand_nodelist("gpu[01-02],login1")  // {"gpu01", "gpu02", "login1"}
std::vector<std::string> expand_nodelist(const std::string& value,
                                         const std::string& variable = "SLURM_JOB_NODELIST");

/// Expands Slurm's compressed tasks-per-node list (SLURM_TASKS_PER_NODE) into one count per node, in
/// node order (the index is SLURM_NODEID).
///
/// Grammar: comma-separated items, each `N` or `N(xK)` meaning K nodes with N tasks each; N >= 0,
/// K >= 1, at most 2^20 nodes in all. `variable` only names the value in error messages; throws
/// EnvError for anything else.
///
/// Example:
///   expand_tasks_per_node("2(x3),1")  // {2, 2, 2, 1}
std::vector<int> expand_tasks_per_node(const std::string& value,
                                       const std::string& variable = "SLURM_TASKS_PER_NODE");

/// Where one launcher per node (`srun --ntasks-per-node=1 lockstep run ...`, or `lockstep fit --devices N`
/// started one task per node, Lightning's shape) stands in its Slurm job step: what such a launcher takes
/// from Slurm for the flags it was not given.
struct SlurmNode {
  int num_nodes = 1;        ///< SLURM_NNODES (or the length of the tasks-per-node list): --nnodes
  int node_rank = 0;        ///< SLURM_NODEID: --node-rank
  int tasks_on_node = 1;    ///< this node's entry of SLURM_STEP_TASKS_PER_NODE; 1 for one launcher per node
  std::string master_addr;  ///< first host of SLURM_STEP_NODELIST (MASTER_ADDR wins): --master-addr
  int master_port = 29500;  ///< 10000 + SLURM_JOB_ID % 10000 (MASTER_PORT wins): --master-port
  std::string run_id;       ///< "slurm-<SLURM_JOB_ID>.<SLURM_STEP_ID>": --rdzv-id
};

/// This process's place as a per-node launcher of a Slurm job step, read with the rules of `from_env`'s
/// Slurm source; std::nullopt when srun did not start it: SLURM_PROCID or SLURM_STEP_ID unset (the batch
/// script of sbatch has SLURM_PROCID but no step id: a launcher run there directly is a one-node job), or
/// RANK set (a worker of torchrun or `lockstep run` inside a Slurm job is that launcher's, not Slurm's).
/// Throws EnvError, naming the variable, for malformed or inconsistent SLURM_* variables.
///
/// The caller checks `tasks_on_node`: one launcher per node wants 1 (`srun --ntasks-per-node=1`); with
/// more, every task would start its own copy of the node's workers.
///
/// Example:
///   // srun -N2 --ntasks-per-node=1 lockstep run --nproc-per-node 2 -- ./train
///   if (auto node = slurm_node()) options.nnodes(node->num_nodes).node_rank(node->node_rank);
std::optional<SlurmNode> slurm_node(const EnvLookup& lookup = process_env());

}  // namespace lockstep::env
