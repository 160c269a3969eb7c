// `lockstep env`: prints who this process is, as every lockstep program will read it. Useful inside
// `srun`, `mpirun` or `lockstep run` to check a job's wiring before training.
#include <cstdio>
#include <exception>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

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
      // nlohmann::json escapes the strings (a run id or host may hold quotes or backslashes).
      const nlohmann::ordered_json object = {
          {"source", env::to_string(e.source)},
          {"rank", e.rank},
          {"local_rank", e.local_rank},
          {"world_size", e.world_size},
          {"local_world_size", e.local_world_size},
          {"node_rank", e.node_rank},
          {"num_nodes", e.num_nodes},
          {"master_addr", e.master_addr},
          {"master_port", e.master_port},
          {"restart_count", e.restart_count},
          {"run_id", e.run_id},
      };
      // Invalid UTF-8 (environment values are bytes) becomes U+FFFD instead of an exception.
      std::printf("%s\n", object.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
      std::printf(
          "source=%s\nrank=%d\nlocal_rank=%d\nworld_size=%d\nlocal_world_size=%d\nnode_rank=%d\nnum_nodes=%"
          "d\n"
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
