#include "lockstep/launch/launch_config.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <string>

#include "lockstep/launch/detail/host.h"
#include "lockstep/launch/launch_error.h"

namespace lockstep::launch {
namespace {

void check(bool ok, const std::string& message) {
  if (!ok) throw LaunchError(message);
}

}  // namespace

LaunchConfig resolve(const LaunchOptions& options) {
  LaunchConfig config;

  check(!options.command().empty() && !options.command().front().empty(),
        "no worker command given (expected: lockstep run [options] [--] CMD [ARGS...])");
  config.command = options.command();

  const NprocPerNode& nproc = options.nproc_per_node();
  check(nproc.is_auto() || nproc.count() >= 1, "nproc_per_node=" + std::to_string(nproc.count()) +
                                                   " is not valid (expected a positive integer or 'auto')");
  config.nproc_per_node = nproc.resolve(options.device_counter());

  check(options.nnodes() >= 1,
        "nnodes=" + std::to_string(options.nnodes()) + " is not valid (expected an integer >= 1)");
  config.nnodes = options.nnodes();

  // world_size() and rank_of() compute in int: every rank must fit.
  const long long world = static_cast<long long>(config.nnodes) * config.nproc_per_node;
  check(world <= INT_MAX, "nnodes=" + std::to_string(config.nnodes) + " * nproc_per_node=" +
                              std::to_string(config.nproc_per_node) + " = " + std::to_string(world) +
                              " workers is too many (at most " + std::to_string(INT_MAX) + ")");

  check(options.node_rank() >= 0 && options.node_rank() < options.nnodes(),
        "node_rank=" + std::to_string(options.node_rank()) +
            " is out of range for nnodes=" + std::to_string(options.nnodes()) + " (must be in [0, " +
            std::to_string(options.nnodes() - 1) + "])");
  config.node_rank = options.node_rank();

  check(options.max_restarts() >= 0, "max_restarts=" + std::to_string(options.max_restarts()) +
                                         " is not valid (expected an integer >= 0)");
  config.max_restarts = options.max_restarts();

  check(options.grace_period().count() >= 0,
        "grace_period=" + std::to_string(options.grace_period().count()) + "ms is not valid (expected >= 0)");
  config.grace_period = options.grace_period();
  if (options.direct_stdout_local_rank())
    config.direct_stdout_local_rank = *options.direct_stdout_local_rank();

  if (options.collective_timeout()) {
    check(options.collective_timeout()->count() > 0,
          "collective_timeout=" + std::to_string(options.collective_timeout()->count() / 1000.0) +
              " is not valid (expected a positive number of seconds)");
    config.collective_timeout = *options.collective_timeout();
    config.collective_timeout_given = true;
  } else if (const char* raw = std::getenv("LOCKSTEP_TIMEOUT"); raw != nullptr && *raw != '\0') {
    char* end = nullptr;
    const double seconds = std::strtod(raw, &end);
    check(end != raw && *end == '\0' && seconds > 0 && seconds <= 1e7,
          std::string("LOCKSTEP_TIMEOUT='") + raw +
              "' is not a valid timeout: give a positive number of seconds");
    config.collective_timeout = std::chrono::milliseconds(static_cast<long long>(seconds * 1000.0));
  }

  if (options.master_port()) {
    const int port = *options.master_port();
    check(port >= 1 && port <= 65535,
          "master_port=" + std::to_string(port) + " is out of range (expected 1..65535)");
  }
  if (options.master_addr()) {
    check(!options.master_addr()->empty(), "master_addr='' is not valid (expected a host name or IP)");
  }
  if (options.run_id()) {
    check(!options.run_id()->empty(), "run_id='' is not valid (expected a non-empty job id)");
  }

  if (options.standalone()) {
    check(options.nnodes() == 1, "standalone runs a single-node job, but nnodes=" +
                                     std::to_string(options.nnodes()) + " (drop one of them)");
    check(!options.master_addr(),
          "standalone picks 127.0.0.1 itself; it cannot be combined with "
          "master_addr=" +
              options.master_addr().value_or(""));
    check(!options.master_port(),
          "standalone picks a free port itself; it cannot be combined with "
          "master_port=" +
              std::to_string(options.master_port().value_or(0)));
    config.master_addr = "127.0.0.1";
    config.master_port = detail::find_free_port();
  } else {
    config.master_addr = options.master_addr().value_or("127.0.0.1");
    config.master_port = options.master_port().value_or(29500);
  }

  if (options.run_id()) {
    config.run_id = *options.run_id();
  } else {
    // Every node must agree on the id; a random one only works when this launcher is the only one.
    config.run_id = config.nnodes == 1 ? detail::random_run_id() : "none";
  }

  if (options.log_dir()) {
    check(!options.log_dir()->empty(), "log_dir='' is not valid (expected a directory)");
    config.log_dir = *options.log_dir();
  }

  config.omp_num_threads = std::max(1, detail::online_cpu_count() / config.nproc_per_node);
  return config;
}

}  // namespace lockstep::launch
