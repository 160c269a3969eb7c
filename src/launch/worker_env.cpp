#include "lockstep/launch/worker_env.h"

#include <unistd.h>  // environ (glibc declares it with _GNU_SOURCE, which g++ defines)

#include <string>

#include <utility>
#include <vector>
#include "lockstep/comm/job_secret.h"

namespace lockstep::launch {
namespace {

std::string key_of(const std::string& entry) {
  return entry.substr(0, entry.find('='));
}

}  // namespace

EnvEntries worker_environment(const LaunchConfig& config, const NodeWorld& world, int local_rank,
                              const EnvEntries& base) {
  std::vector<std::pair<std::string, std::string>> vars = {
      {"RANK", std::to_string(world.rank_of(local_rank))},
      {"LOCAL_RANK", std::to_string(config.virtual_local_rank ? 0 : local_rank)},
      {"WORLD_SIZE", std::to_string(world.world_size)},
      {"LOCAL_WORLD_SIZE", std::to_string(config.nproc_per_node)},
      {"GROUP_RANK", std::to_string(world.node_rank)},
      {"GROUP_WORLD_SIZE", std::to_string(world.nnodes)},
      {"ROLE_RANK", std::to_string(world.role_rank_offset + local_rank)},
      {"ROLE_WORLD_SIZE", std::to_string(world.role_world_size)},
      {"ROLE_NAME", config.role},
      {"MASTER_ADDR", world.master_addr},
      {"MASTER_PORT", std::to_string(world.master_port)},
      {"TORCHELASTIC_RESTART_COUNT", std::to_string(world.restart_count)},
      {"TORCHELASTIC_MAX_RESTARTS", std::to_string(config.max_restarts)},
      {"TORCHELASTIC_RUN_ID", config.run_id},
      {"TORCHELASTIC_USE_AGENT_STORE", "False"},
      // What torchrun names here, the signals its agent handles: lockstep run's (launcher.h).
      {"TORCHELASTIC_SIGNALS_TO_HANDLE", signal_list_text(config.signals_to_handle)},
      // The write end of the worker's heartbeat pipe (worker_process.cpp puts it there); lockstep's
      // process groups report their progress through it (comm/progress.h).
      {lockstep::detail::kHeartbeatFdVariable, std::to_string(lockstep::detail::kHeartbeatFd)},
  };
  // The job's secret reaches the workers in the variable, whichever way the launcher got it.
  if (!config.job_secret.empty()) vars.emplace_back(comm::kJobSecretVariable, config.job_secret);
  if (config.no_job_secret) vars.emplace_back(comm::kNoJobSecretVariable, "1");
  if (config.collective_timeout_given) {
    vars.emplace_back("LOCKSTEP_TIMEOUT", std::to_string(config.collective_timeout.count() / 1000.0));
  }
  vars.insert(vars.end(), config.worker_env.begin(), config.worker_env.end());

  // --virtual-local-rank: the worker's one GPU at index 0 (torchrun narrows CUDA_VISIBLE_DEVICES the same
  // way: the local rank's entry of the launcher's list, or the local rank itself; resolve() checked that
  // the list is long enough).
  if (config.virtual_local_rank) {
    std::string visible = std::to_string(local_rank);
    for (const std::string& entry : base) {
      if (key_of(entry) != "CUDA_VISIBLE_DEVICES") continue;
      std::vector<std::string> devices(1);
      for (char c : entry.substr(entry.find('=') + 1)) {
        if (c == ',') {
          devices.emplace_back();
        } else if (c != ' ') {
          devices.back() += c;
        }
      }
      if (static_cast<std::size_t>(local_rank) < devices.size())
        visible = devices[static_cast<std::size_t>(local_rank)];
    }
    vars.emplace_back("CUDA_VISIBLE_DEVICES", visible);
  }

  // The defaults below apply where neither the launcher's environment nor worker_env sets the name.
  const auto given = [&](const char* name) {
    for (const auto& var : vars) {
      if (var.first == name) return true;
    }
    for (const std::string& entry : base) {
      if (key_of(entry) == name) return true;
    }
    return false;
  };
  const bool user_omp = given("OMP_NUM_THREADS");
  const bool user_unbuffered = given("PYTHONUNBUFFERED");
  const bool user_nccl_async = given("TORCH_NCCL_ASYNC_ERROR_HANDLING");
  EnvEntries env;
  env.reserve(base.size() + vars.size() + 2);
  for (const std::string& entry : base) {
    const std::string key = key_of(entry);
    bool replaced = false;
    for (const auto& var : vars) replaced = replaced || var.first == key;
    if (!replaced) env.push_back(entry);
  }
  for (const auto& [key, value] : vars) {
    std::string& entry = env.emplace_back(key);
    entry += '=';
    entry += value;
  }
  if (!user_omp) env.push_back("OMP_NUM_THREADS=" + std::to_string(config.omp_num_threads));
  // A worker's stdout is a pipe, which Python block-buffers: without this its lines would reach the
  // launcher (and the user) kilobytes late, or be lost when it is killed.
  if (!user_unbuffered) env.push_back("PYTHONUNBUFFERED=1");
  // As torchrun: NCCL errors and timeouts abort the communicator (and the process) instead of hanging it.
  if (!user_nccl_async) env.push_back("TORCH_NCCL_ASYNC_ERROR_HANDLING=1");
  return env;
}

EnvEntries current_environment() {
  EnvEntries env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) env.emplace_back(*entry);
  return env;
}

}  // namespace lockstep::launch
