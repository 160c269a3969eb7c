#include "parse.h"
#include "sources.h"

// Open MPI's per-process variables (mpirun / orterun / prterun).
//
// OMPI_COMM_WORLD_NODE_RANK is deliberately not read as the node index: Open MPI documents it as "the
// relative rank of this process on this node looking across all jobs", i.e. a local rank, not the
// index of the node. The node index is derived as rank / local size, which is right for Open MPI's
// default by-slot mapping with the same number of ranks on every node.
//
// run_id is "ompi-<OMPI_MCA_ess_base_jobid>" (the job id mpirun gives its processes), else
// "ompi-<PMIX_NAMESPACE>" (the job's PMIx namespace, set by Open MPI 5 / PRRTE), so that two mpirun jobs
// never share the default "none"; an empty value counts as unset.

namespace lockstep::env::detail {

Layout read_openmpi(const EnvLookup& lookup) {
  Layout l;
  l.source = Source::kOpenMpi;
  const std::string selector = "OMPI_COMM_WORLD_RANK";
  read_int(lookup, selector, l.rank, 0);
  l.world_size.set(
      parse_int("OMPI_COMM_WORLD_SIZE", require(lookup, "OMPI_COMM_WORLD_SIZE", selector, "mpirun"), 1),
      "OMPI_COMM_WORLD_SIZE");
  read_int(lookup, "OMPI_COMM_WORLD_LOCAL_RANK", l.local_rank, 0);
  read_int(lookup, "OMPI_COMM_WORLD_LOCAL_SIZE", l.local_world_size, 1);
  read_int(lookup, "LOCKSTEP_NNODES", l.num_nodes, 1);
  read_master_override(lookup, l);
  for (const char* name : {"OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE"}) {
    const auto value = lookup(name);
    if (value && !value->empty()) {
      l.run_id.set("ompi-" + *value, "run_id", "from " + describe(name, *value));
      break;
    }
  }
  return l;
}

}  // namespace lockstep::env::detail
