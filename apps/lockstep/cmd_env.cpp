// `lockstep env`: prints who this process is, as every lockstep program will read it. Useful inside
// `srun`, `mpirun` or `lockstep run` to check a job's wiring before training.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "gpu_report.h"
#include "lockstep/comm/job_secret.h"
#include "lockstep/env/environment.h"
#include "lockstep/launch/nproc_per_node.h"

namespace lockstep::cli {
namespace {

// Whether this process has a job secret and where from, never its value.
std::string job_secret_state() {
  try {
    const std::string secret = comm::job_secret_from_environment();
    if (!secret.empty()) {
      const char* value = std::getenv(comm::kJobSecretVariable);
      const bool from_variable = value != nullptr && *value != '\0';
      return std::string("given (") +
             (from_variable ? comm::kJobSecretVariable : comm::kJobSecretFileVariable) + ", " +
             std::to_string(secret.size()) + " bytes)";
    }
  } catch (const std::invalid_argument& e) {
    return std::string("unusable: ") + e.what();
  }
  return comm::job_secret_waived_by_environment() ? "waived (LOCKSTEP_NO_JOB_SECRET)" : "none";
}

}  // namespace

int env_main(int argc, char** argv) {
  CLI::App app{
      "Print this process's rank, world size, node and master as lockstep reads them from the environment\n"
      "(torchrun's variables, Slurm, OpenMPI or TF_CONFIG, in that order of precedence).",
      "lockstep env"};
  bool json = false;
  bool gpu = false;
  app.add_flag("--json", json, "one JSON object instead of KEY=VALUE lines");
  app.add_flag(
      "--gpu", gpu,
      "also the GPUs (nvidia-smi), the CUDA and NCCL versions lockstep was built with, the topology\n"
      "between the GPUs (nvidia-smi topo -m) and advice for it; on by itself where a GPU is visible");
  app.footer(
      "\nOn a GPU node the report says what NCCL needs: NCCL_P2P_DISABLE=1 where two GPUs reach each\n"
      "other only over SYS (another NUMA node), NCCL_DEBUG=INFO for a job that hangs at init.");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    const env::Environment e = env::from_env();
    std::vector<std::string> gpu_lines;
    if (gpu || launch::visible_cuda_device_count() > 0) gpu_lines = gpu_report_lines();
    if (json) {
      // nlohmann::json escapes the strings (a run id or host may hold quotes or backslashes).
      nlohmann::ordered_json object = {
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
          {"job_secret", job_secret_state()},
      };
      if (!gpu_lines.empty()) {
        nlohmann::ordered_json report = nlohmann::ordered_json::object();
        for (const std::string& line : gpu_lines) {
          const auto eq = line.find('=');
          const std::string key = line.substr(0, eq);
          const std::string value = line.substr(eq + 1);
          if (key == "gpu" || key == "topology" || key == "advice") {
            report[key].push_back(value);  // repeated: a list
          } else {
            report[key] = value;
          }
        }
        object["gpu"] = report;
      }
      // Invalid UTF-8 (environment values are bytes) becomes U+FFFD instead of an exception.
      std::printf("%s\n", object.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
      std::printf(
          "source=%s\nrank=%d\nlocal_rank=%d\nworld_size=%d\nlocal_world_size=%d\nnode_rank=%d\nnum_nodes=%"
          "d\n"
          "master_addr=%s\nmaster_port=%d\nrestart_count=%d\nrun_id=%s\njob_secret=%s\n",
          env::to_string(e.source), e.rank, e.local_rank, e.world_size, e.local_world_size, e.node_rank,
          e.num_nodes, e.master_addr.c_str(), e.master_port, e.restart_count, e.run_id.c_str(),
          job_secret_state().c_str());
      for (const std::string& line : gpu_lines) std::printf("%s\n", line.c_str());
    }
    return 0;
  } catch (const env::EnvError& error) {
    std::fprintf(stderr, "lockstep env: %s\n", error.what());
    return 2;
  }
}

}  // namespace lockstep::cli
