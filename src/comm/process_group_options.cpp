#include "lockstep/comm/process_group_options.h"

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "lockstep/comm/job_secret.h"
#include "lockstep/comm/network.h"
#include "lockstep/env/environment.h"

namespace lockstep::comm {
namespace {

// Seconds from an environment variable, or `fallback` when it is unset. Accepts decimals ("0.5").
// Never throws (it runs in constructors): a malformed value is recorded in `error` for validate().
std::chrono::milliseconds seconds_from_env(const char* name, std::chrono::milliseconds fallback,
                                           std::string& error) {
  const char* raw = std::getenv(name);
  if (raw == nullptr || *raw == '\0') return fallback;
  char* end = nullptr;
  const double seconds = std::strtod(raw, &end);
  if (end == raw || *end != '\0' || !(seconds > 0) || seconds > 1e7) {
    if (error.empty()) {
      error = std::string(name) + "='" + raw + "' is not a valid timeout: give a positive number of seconds";
    }
    return fallback;
  }
  return std::chrono::milliseconds(static_cast<long long>(seconds * 1000.0));
}

// The job secret from the environment; never throws (as above): a bad one is recorded in `error`.
std::string secret_from_env(std::string& error) {
  try {
    return job_secret_from_environment();
  } catch (const std::invalid_argument& e) {
    if (error.empty()) error = e.what();
    return "";
  }
}

}  // namespace

ProcessGroupOptions::ProcessGroupOptions(int rank, int world_size)
    : rank_(rank),
      world_size_(world_size),
      rendezvous_timeout_(seconds_from_env("LOCKSTEP_RDZV_TIMEOUT", std::chrono::seconds(300), env_error_)),
      collective_timeout_(seconds_from_env("LOCKSTEP_TIMEOUT", std::chrono::seconds(1800), env_error_)) {
  job_secret_ = secret_from_env(env_error_);
  no_job_secret_ = job_secret_waived_by_environment();
}

ProcessGroupOptions ProcessGroupOptions::from_environment(const env::Environment& environment) {
  auto options = ProcessGroupOptions(environment.rank, environment.world_size)
                     .master_addr(environment.master_addr)
                     .master_port(environment.master_port)
                     .run_id(environment.run_id)
                     .num_nodes(environment.num_nodes)
                     .local_world_size(environment.local_world_size);
  // A process started on its own is the whole job: nobody connects to its store, so it needs no port (two
  // such programs on one host would otherwise both claim MASTER_PORT's default).
  if (environment.source == env::Source::kSingleProcess && environment.world_size == 1)
    options.store(c10::make_intrusive<c10d::HashStore>());
  return options;
}

bool ProcessGroupOptions::reachable_from_outside() const {
  try {
    return !is_loopback_address(local_address_for(master_addr_));
  } catch (const std::exception&) {
    return false;  // an unresolvable master: rendezvous says so, naming it
  }
}

void ProcessGroupOptions::validate() const {
  if (!env_error_.empty()) throw std::invalid_argument(env_error_);
  if (world_size_ < 1) {
    throw std::invalid_argument("world_size must be >= 1, got " + std::to_string(world_size_));
  }
  if (rank_ < 0 || rank_ >= world_size_) {
    throw std::invalid_argument("rank must be in [0, " + std::to_string(world_size_ - 1) +
                                "] for world_size " + std::to_string(world_size_) + ", got " +
                                std::to_string(rank_));
  }
  if (!store_ && (master_port_ < 1 || master_port_ > 65535)) {
    throw std::invalid_argument("master_port must be in [1, 65535], got " + std::to_string(master_port_));
  }
  if (!store_ && master_addr_.empty()) {
    throw std::invalid_argument("master_addr is empty: set MASTER_ADDR or master_addr to rank 0's host");
  }
  if (run_id_.empty()) {
    throw std::invalid_argument("run_id is empty: give every rank the same non-empty run id");
  }
  if (rendezvous_timeout_.count() <= 0) {
    throw std::invalid_argument("rendezvous_timeout must be > 0 ms, got " +
                                std::to_string(rendezvous_timeout_.count()));
  }
  if (collective_timeout_.count() <= 0) {
    throw std::invalid_argument("collective_timeout must be > 0 ms, got " +
                                std::to_string(collective_timeout_.count()));
  }
  if (num_nodes_ < 1 || num_nodes_ > world_size_) {
    throw std::invalid_argument("num_nodes must be in [1, world_size=" + std::to_string(world_size_) +
                                "], got " + std::to_string(num_nodes_));
  }
  if (local_world_size_ < 0 || local_world_size_ > world_size_) {
    throw std::invalid_argument("local_world_size must be in [0, world_size=" + std::to_string(world_size_) +
                                "] (0: world_size / num_nodes), got " + std::to_string(local_world_size_));
  }
  if (!store_ && job_secret_.empty() && !no_job_secret_ && (num_nodes_ > 1 || reachable_from_outside())) {
    throw std::invalid_argument(
        (num_nodes_ > 1 ? "this job spans " + std::to_string(num_nodes_) + " nodes"
                        : "this job's store listens on " + master_addr_ + ", which other hosts can reach,") +
        " and has no job secret, so anyone who can reach its rendezvous store at " + master_addr_ + ":" +
        std::to_string(master_port_) + " and knows its run id '" + run_id_ +
        "' could join it: " + job_secret_advice());
  }
  if (gloo_threads_ < 1) {
    throw std::invalid_argument("gloo_threads must be >= 1, got " + std::to_string(gloo_threads_));
  }
}

}  // namespace lockstep::comm
