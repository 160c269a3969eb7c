#pragma once

#include "lockstep/detail/option.h"

#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

namespace lockstep::env {

/// Where an `Environment` was read from.
enum class Source { kExplicit, kTorchrun, kSlurm, kOpenMpi, kTfConfig, kSingleProcess };

/// Name of a source as printed in messages and by `lockstep env`: "explicit", "torchrun", "slurm",
/// "openmpi", "tf_config", "single_process".
const char* to_string(Source source);

/// Who this process is in a distributed job.
///
/// Invariants (checked by `from_env`): 0 <= rank < world_size, 0 <= local_rank < local_world_size,
/// 0 <= node_rank < num_nodes, 1 <= master_port <= 65535.
struct Environment {
  int rank = 0;
  int local_rank = 0;
  int world_size = 1;
  int local_world_size = 1;
  int node_rank = 0;
  int num_nodes = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  int restart_count = 0;
  /// Job token: ranks of one job share it; rendezvous refuses a process with another one.
  std::string run_id = "none";
  Source source = Source::kSingleProcess;

  bool is_distributed() const { return world_size > 1; }
};

/// A caller mistake or an inconsistent environment. The message names the variable and its value and
/// says what is accepted, e.g. "RANK=4 is out of range for WORLD_SIZE=4: RANK must be in [0, 3]".
/// Values set through EnvOptions are named "EnvOptions::<field>".
class EnvError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Explicit values; each one set here wins over every environment variable, for that field only (the
/// other fields still come from the environment). Setting `rank` or `world_size` makes the result's
/// `source` Source::kExplicit. Every value is validated like the variables are.
///
/// Example:
///   auto e = lockstep::env::from_env(EnvOptions().rank(0).world_size(1));
class EnvOptions {
 public:
  LOCKSTEP_OPTION(EnvOptions, int, rank)
  LOCKSTEP_OPTION(EnvOptions, int, local_rank)
  LOCKSTEP_OPTION(EnvOptions, int, world_size)
  LOCKSTEP_OPTION(EnvOptions, int, local_world_size)
  LOCKSTEP_OPTION(EnvOptions, int, node_rank)
  LOCKSTEP_OPTION(EnvOptions, int, num_nodes)
  LOCKSTEP_OPTION(EnvOptions, std::string, master_addr)
  LOCKSTEP_OPTION(EnvOptions, int, master_port)
  LOCKSTEP_OPTION(EnvOptions, int, restart_count)
  LOCKSTEP_OPTION(EnvOptions, std::string, run_id)

 private:
  std::optional<int> rank_, local_rank_, world_size_, local_world_size_, node_rank_, num_nodes_;
  std::optional<std::string> master_addr_;
  std::optional<int> master_port_, restart_count_;
  std::optional<std::string> run_id_;
};

/// Reads one environment variable; std::nullopt when unset. Tests pass a table instead of getenv.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;

/// The process environment (getenv). The only place lockstep::env reads the real environment.
EnvLookup process_env();

/// Who this process is.
///
/// Sources, highest precedence first; the first launcher whose rank variable is set is the one read,
/// the others are ignored:
///  1. `options`: each field set there overrides that field only.
///  2. torchrun, selected by RANK: RANK, WORLD_SIZE (required with RANK), LOCAL_RANK, LOCAL_WORLD_SIZE,
///     GROUP_RANK (node_rank), MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT,
///     TORCHELASTIC_RUN_ID. num_nodes: LOCKSTEP_NNODES, else GROUP_WORLD_SIZE, else
///     WORLD_SIZE / LOCAL_WORLD_SIZE when that divides evenly. As torchrun runs the same number of
///     ranks on every node, RANK must equal GROUP_RANK * LOCAL_WORLD_SIZE + LOCAL_RANK when all four
///     are set, and WORLD_SIZE must equal GROUP_WORLD_SIZE * LOCAL_WORLD_SIZE when both are set;
///     LOCKSTEP_NNODES (set by hand, never by a launcher) declares nodes with different numbers of
///     ranks and turns both checks off.
///  3. Slurm, selected by SLURM_PROCID in a task started by srun (SLURM_STEP_ID set; a batch script,
///     which has SLURM_JOB_ID and SLURM_PROCID but no SLURM_STEP_ID, is one process, as under
///     torchrun's rules): SLURM_PROCID, SLURM_NTASKS (required), SLURM_LOCALID,
///     SLURM_NODEID, SLURM_NNODES; local_world_size is this node's entry (index SLURM_NODEID) of
///     SLURM_STEP_TASKS_PER_NODE or SLURM_TASKS_PER_NODE, whose sum must equal SLURM_NTASKS;
///     master_addr is the first host of SLURM_STEP_NODELIST, else SLURM_JOB_NODELIST, else
///     SLURM_NODELIST; master_port is 10000 + SLURM_JOB_ID % 10000 (so every rank of a job agrees
///     without talking, and two jobs sharing a node rarely collide; ports fall in [10000, 19999], below the
///     ephemeral range); run_id is "slurm-<SLURM_JOB_ID>" or "slurm-<SLURM_JOB_ID>.<SLURM_STEP_ID>";
///     restart_count is SLURM_RESTART_COUNT. SLURM_LOCALID must be below this node's task count and
///     SLURM_NODEID below the node count; SLURM_PROCID is not required to follow from them, as srun may
///     hand out ranks cyclically (--distribution=cyclic).
///  4. OpenMPI, selected by OMPI_COMM_WORLD_RANK: OMPI_COMM_WORLD_RANK, _SIZE (required), _LOCAL_RANK,
///     _LOCAL_SIZE; node_rank = rank / local size (OMPI_COMM_WORLD_NODE_RANK is not a node index in
///     Open MPI, see openmpi_source.cpp); num_nodes from LOCKSTEP_NNODES, else size / local size;
///     run_id is "ompi-<OMPI_MCA_ess_base_jobid>", else "ompi-<PMIX_NAMESPACE>" (so that two mpirun
///     jobs never share the default "none"), else "none".
///  5. TF_CONFIG (when set and not blank), `{"cluster": {"chief": ["h0:p"], "worker": ["h1:p", ...]},
///     "task": {"type": "worker", "index": i}}`: chief is rank 0 and workers follow, as in TensorFlow;
///     one rank per node; the master is the first entry.
///  6. Else a single process (the defaults of `Environment`).
/// MASTER_ADDR and MASTER_PORT, when set, override the master derived by Slurm, OpenMPI or TF_CONFIG.
/// Unset fields are derived assuming every node runs local_world_size ranks: local_world_size =
/// world_size / num_nodes (or world_size when num_nodes is unknown: one node), local_rank =
/// rank % local_world_size, node_rank = rank / local_world_size. A job on more than one node must name
/// its master (MASTER_ADDR, a Slurm nodelist, TF_CONFIG or `options`): 127.0.0.1 is only a default on
/// one node.
///
/// Integers are parsed strictly (decimal digits only, no sign, no spaces, no overflow). Every variable
/// of the selected source is validated, even one that `options` overrides. Throws EnvError naming the
/// variable and value on any malformed or inconsistent value. Thread-safe if `lookup` is.
///
/// Example:
///   auto env = lockstep::env::from_env();  // under torchrun, srun, mpirun, or alone
///   if (env.rank == 0) { /* ... */ }
Environment from_env(const EnvOptions& options = {}, const EnvLookup& lookup = process_env());

}  // namespace lockstep::env
