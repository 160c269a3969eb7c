// Who starts the ranks: see include/lockstep/launch/rank_start.h.
#include "lockstep/launch/rank_start.h"

#include <stdexcept>

namespace lockstep::launch {
namespace {

// A rank of a job someone else started: what it was asked must agree with that job.
void check_against_job(const RankRequest& request, const env::Environment& environment) {
  const std::string launcher = env::to_string(environment.source);
  if (request.devices && *request.devices != environment.local_world_size) {
    throw std::invalid_argument("devices " + std::to_string(*request.devices) +
                                " contradicts the environment (" + launcher + " started " +
                                std::to_string(environment.local_world_size) +
                                " rank(s) on this node): drop devices, or start that many ranks per node");
  }
  if (request.num_nodes && *request.num_nodes != environment.num_nodes) {
    throw std::invalid_argument("num_nodes " + std::to_string(*request.num_nodes) +
                                " contradicts the environment (" + launcher + " reports " +
                                std::to_string(environment.num_nodes) +
                                " node(s)): drop num_nodes, or make them agree");
  }
  if (request.max_restarts > 0) {
    throw std::invalid_argument(
        "max_restarts " + std::to_string(request.max_restarts) + " applies when " + request.program +
        " starts the ranks itself; this process is one rank of a job started by " + launcher +
        ": give the restarts to that launcher (`lockstep run --max-restarts K`), and keep ckpt_dir so that "
        "restarted ranks resume");
  }
}

// srun's task of one node starts that node's ranks.
LaunchOptions node_launch(const RankRequest& request, const std::vector<std::string>& command,
                          const env::SlurmNode& node) {
  if (request.num_nodes && *request.num_nodes != node.num_nodes) {
    throw std::invalid_argument("num_nodes " + std::to_string(*request.num_nodes) +
                                " does not match the Slurm job's " + std::to_string(node.num_nodes) +
                                " node(s) (SLURM_NNODES): make them equal, or drop num_nodes");
  }
  LaunchOptions options(command);
  options.nproc_per_node(*request.devices)
      .nnodes(node.num_nodes)
      .node_rank(node.node_rank)
      .master_addr(node.master_addr)
      .master_port(node.master_port)
      .run_id(node.run_id);
  if (node.node_rank == 0) options.direct_stdout_local_rank(0);
  return options;
}

// What a process of its own cannot start.
void check_single_process(const RankRequest& request) {
  if (request.num_nodes.value_or(1) > 1) {
    throw std::invalid_argument(
        "num_nodes " + std::to_string(*request.num_nodes) +
        " needs one launcher per node: run `lockstep run --nnodes " + std::to_string(*request.num_nodes) +
        " --node-rank R --master-addr HOST ... -- " + request.program + " ...` on each node, or use srun");
  }
  if (request.mpi_backend && request.devices.value_or(1) > 1) {
    throw std::invalid_argument(
        "backend 'mpi' needs its ranks started by mpirun: run `mpirun -np " +
        std::to_string(*request.devices) + " " + request.program +
        " ...` and leave devices unset (as root add --allow-run-as-root), or keep devices=" +
        std::to_string(*request.devices) + " and use another backend ('auto', 'shm', 'gloo')");
  }
}

// A process of its own starts its local ranks.
LaunchOptions local_launch(const RankRequest& request, const std::vector<std::string>& command) {
  LaunchOptions options(command);
  options.nproc_per_node(request.devices.value_or(1)).standalone(true).direct_stdout_local_rank(0);
  return options;
}

}  // namespace

RankPlan plan_rank_start(const RankRequest& request, const std::vector<std::string>& command,
                         env::Environment environment, const std::optional<env::SlurmNode>& slurm_node) {
  RankPlan plan;
  // Inside an sbatch script but not started by srun: Slurm's variables describe the job, not this process.
  if (environment.source == env::Source::kSlurm && !slurm_node) environment = env::Environment();
  if (slurm_node && slurm_node->tasks_on_node == 1 && request.devices.value_or(1) > 1) {
    plan.launch = node_launch(request, command, *slurm_node);
  } else if (environment.source != env::Source::kSingleProcess) {
    check_against_job(request, environment);
    plan.become_rank = true;
    plan.environment = environment;
  } else {
    check_single_process(request);
    if (request.devices.value_or(1) > 1 || request.always_launch) {
      plan.launch = local_launch(request, command);
    } else {
      plan.become_rank = true;  // the only rank
      plan.environment = environment;
    }
  }
  if (plan.launch) plan.launch->max_restarts(request.max_restarts).in_place(request.in_place);
  return plan;
}

RankPlan plan_rank_start(const RankRequest& request, const std::vector<std::string>& command) {
  env::Environment environment = env::from_env();
  std::optional<env::SlurmNode> node;
  if (environment.source == env::Source::kSlurm) node = env::slurm_node();
  return plan_rank_start(request, command, environment, node);
}

}  // namespace lockstep::launch
