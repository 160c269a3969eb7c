#include <lockstep/env/slurm.h>

#include <numeric>

#include "parse.h"
#include "sources.h"

// The variables srun sets for each task of a job step.
//
// Slurm has no notion of a rendezvous master, so it is derived: the host is the first node of the
// step (SLURM_STEP_NODELIST; the job's list when the step's is missing), the port is a function of the
// job id, 10000 + SLURM_JOB_ID % 10000 (Lightning's), so that every task of the job computes the same port
// without talking and two jobs sharing a node rarely collide. The range, [10000, 19999], stays below
// Linux's ephemeral ports (32768-60999): no outgoing connection on the node can be holding the port, and
// a rank that connects before rank 0 listens cannot be given the port itself as its own source port (a
// TCP self-connect). MASTER_ADDR / MASTER_PORT, when set, win.

namespace lockstep::env::detail {
namespace {

constexpr long long kMaxJobId = 4294967295LL;  // Slurm job and step ids are 32-bit unsigned
constexpr int kPortBase = 10000;
constexpr int kPortSpan = 10000;

// The first variable of `names` that is set, with its name; std::nullopt when none is.
std::optional<std::pair<std::string, std::string>> first_set(const EnvLookup& lookup,
                                                             std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (auto value = lookup(name)) return std::make_pair(std::string(name), *value);
  }
  return std::nullopt;
}

// local_world_size from the tasks-per-node list, checked against SLURM_NTASKS and SLURM_NNODES.
void read_tasks_per_node(const EnvLookup& lookup, Layout& l) {
  const auto tasks = first_set(lookup, {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"});
  if (!tasks) return;
  const auto& [name, value] = *tasks;
  const std::vector<int> counts = expand_tasks_per_node(value, name);
  const long long total = std::accumulate(counts.begin(), counts.end(), 0LL);
  if (total != l.world_size.get()) {
    throw EnvError(l.world_size.describe() + " does not match " + describe(name, value) +
                   ", which adds up to " + std::to_string(total) +
                   " tasks: SLURM_NTASKS must be the sum of the tasks per node");
  }
  const int nodes = static_cast<int>(counts.size());
  if (l.num_nodes.has() && l.num_nodes.get() != nodes) {
    throw EnvError(l.num_nodes.describe() + " does not match " + describe(name, value) + ", which lists " +
                   std::to_string(nodes) + " node(s): SLURM_NNODES must be the number of nodes listed");
  }
  l.num_nodes.fill(nodes, "num_nodes", "from " + describe(name, value));
  if (!l.node_rank.has()) {
    if (nodes == 1) {
      l.local_world_size.set(counts[0], "local_world_size", "from " + describe(name, value));
    }
    return;  // otherwise derived in resolve()
  }
  const int node = l.node_rank.get();
  if (node >= nodes) {
    throw EnvError(l.node_rank.describe() + " is out of range for " + describe(name, value) + " (" +
                   std::to_string(nodes) + " node(s)): SLURM_NODEID must be in [0, " +
                   std::to_string(nodes - 1) + "]");
  }
  l.local_world_size.set(counts[static_cast<std::size_t>(node)], "local_world_size",
                         "from " + describe(name, value) + " at " + l.node_rank.brief());
}

void read_master(const EnvLookup& lookup, Layout& l, const std::optional<long long>& job_id) {
  if (const auto list = first_set(lookup, {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"})) {
    const auto& [name, value] = *list;
    const std::vector<std::string> hosts = expand_nodelist(value, name);
    l.master_addr.set(hosts.front(), "master_addr", "first host of " + describe(name, value));
  }
  if (job_id) {
    l.master_port.set(kPortBase + static_cast<int>(*job_id % kPortSpan), "master_port",
                      "10000 + SLURM_JOB_ID=" + std::to_string(*job_id) + " % 10000");
  }
  read_master_override(lookup, l);
}

}  // namespace

Layout read_slurm(const EnvLookup& lookup) {
  Layout l;
  l.source = Source::kSlurm;
  const std::string selector = "SLURM_PROCID";
  read_int(lookup, selector, l.rank, 0);
  l.world_size.set(parse_int("SLURM_NTASKS", require(lookup, "SLURM_NTASKS", selector, "srun"), 1),
                   "SLURM_NTASKS");
  read_int(lookup, "SLURM_LOCALID", l.local_rank, 0);
  read_int(lookup, "SLURM_NODEID", l.node_rank, 0);
  read_int(lookup, "SLURM_NNODES", l.num_nodes, 1);
  read_tasks_per_node(lookup, l);

  std::optional<long long> job_id;
  if (const auto value = lookup("SLURM_JOB_ID")) {
    job_id = parse_integer("SLURM_JOB_ID", *value, 0, kMaxJobId);
    std::string run_id = "slurm-" + std::to_string(*job_id);
    if (const auto step = lookup("SLURM_STEP_ID")) {
      run_id += "." + std::to_string(parse_integer("SLURM_STEP_ID", *step, 0, kMaxJobId));
    }
    l.run_id.set(run_id, "run_id", "from SLURM_JOB_ID and SLURM_STEP_ID");
  }
  read_master(lookup, l, job_id);
  read_int(lookup, "SLURM_RESTART_COUNT", l.restart_count, 0);
  return l;
}

}  // namespace lockstep::env::detail
