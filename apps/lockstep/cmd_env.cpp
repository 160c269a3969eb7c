// `lockstep env`: prints who this process is, as every lockstep program will read it. Useful inside
// `srun`, `mpirun` or `lockstep run` to check a job's wiring before training.
#include <cstdio>
#include <exception>

#include <CLI/CLI.hpp>

#include "commands.h"
#include "lockstep/env/environment.h"

namespace lockstep::cli {

int env_main(int argc, char** argv) {
  CLI::App app{
      "Print this process's rank, world size, node and master as lockstep reads them from the environment\n"
      "(torchrun's variables, Slurm, OpenMPI or TF_CONFIG, in that order of precedence).",
      "lockstep env"};
  bool json = false;
  app.add_flag("--json", json, "one JSON object instead of KEY=VALUE lines");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    const env::Environment e = env::from_env();
    if (json) {
      std::printf(
          "{\"source\": \"%s\", \"rank\": %d, \"local_rank\": %d, \"world_size\": %d, \"local_world_size\": %d, "
          "\"node_rank\": %d, \"num_nodes\": %d, \"master_addr\": \"%s\", \"master_port\": %d, "
          "\"restart_count\": %d, \"run_id\": \"%s\"}\n",
          env::to_string(e.source), e.rank, e.local_rank, e.world_size, e.local_world_size, e.node_rank,
          e.num_nodes, e.master_addr.c_str(), e.master_port, e.restart_count, e.run_id.c_str());
    } else {
      std::printf(
          "source=%s\nrank=%d\nlocal_rank=%d\nworld_size=%d\nlocal_world_size=%d\nnode_rank=%d\nnum_nodes=%d\n"
          "master_addr=%s\nmaster_port=%d\nrestart_count=%d\nrun_id=%s\n",
          env::to_string(e.source), e.rank, e.local_rank, e.world_size, e.local_world_size, e.node_rank,
          e.num_nodes, e.master_addr.c_str(), e.master_port, e.restart_count, e.run_id.c_str());
    }
    return 0;
  } catch (const env::EnvError& error) {
    std::fprintf(stderr, "lockstep env: %s\n", error.what());
    return 2;
  }
}

}  // namespace lockstep::cli
