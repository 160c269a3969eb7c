#include "lockstep/launch/launch_config.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "lockstep/comm/job_secret.h"
#include "lockstep/launch/detail/host.h"
#include "lockstep/launch/launch_error.h"

namespace lockstep::launch {
namespace {

void check(bool ok, const std::string& message) {
  if (!ok) throw LaunchError(message);
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The interpreter for a program that runs under Python (torchrun: PYTHON_EXEC, else its own sys.executable;
// lockstep has no Python of its own, so python3 from PATH).
std::string python_interpreter(const LaunchOptions& options, const std::string& what) {
  std::string python;
  const char* from;
  if (options.python()) {
    python = *options.python();
    from = "python";
  } else if (const char* exec = std::getenv("PYTHON_EXEC"); exec != nullptr && *exec != '\0') {
    python = exec;
    from = "PYTHON_EXEC";
  } else {
    python = "python3";
    from = "";
  }
  std::string found;
  check(
      detail::find_in_path(python, found) == 0,
      what + " runs under Python, but " +
          (*from != '\0' ? std::string(from) + "='" + python + "' is not an executable"
                         : std::string("no python3 was found in PATH")) +
          ": install Python, set PYTHON_EXEC to the interpreter, or pass --no-python to execute it directly");
  return python;
}

// The argv each worker runs (ProgramMode).
std::vector<std::string> worker_command(const LaunchOptions& options) {
  const std::vector<std::string>& command = options.command();
  const std::string& program = command.front();
  const ProgramMode mode = options.program_mode();
  if (mode == ProgramMode::kExecutable || (mode == ProgramMode::kAuto && !ends_with(program, ".py"))) {
    return command;
  }
  const std::string what = mode == ProgramMode::kModule    ? "module '" + program + "' (-m)"
                           : mode == ProgramMode::kRunPath ? "'" + program + "' (--run-path)"
                                                           : "'" + program + "' (a .py script)";
  std::vector<std::string> argv{python_interpreter(options, what), "-u"};  // -u: as torchrun
  if (mode == ProgramMode::kModule) argv.emplace_back("-m");
  if (mode == ProgramMode::kRunPath) {
    // runpy.run_path in a fresh interpreter, with sys.argv as the script would see it.
    argv.emplace_back("-c");
    argv.emplace_back(
        "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')");
  }
  argv.insert(argv.end(), command.begin(), command.end());
  return argv;
}

// The names worker_environment sets itself; a worker_env entry may not take them over.
bool torchrun_variable(const std::string& name) {
  static const char* const kNames[] = {"RANK",       "LOCAL_RANK",       "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                                       "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK",  "ROLE_WORLD_SIZE",
                                       "ROLE_NAME",  "MASTER_ADDR",      "MASTER_PORT"};
  for (const char* n : kNames) {
    if (name == n) return true;
  }
  return name.rfind("TORCHELASTIC_", 0) == 0;
}

}  // namespace

NodeWorld LaunchConfig::static_world(int restart_count) const {
  NodeWorld w;
  w.node_rank = node_rank;
  w.nnodes = nnodes;
  w.rank_offset = rank_of(0);
  w.world_size = world_size();
  w.role_rank_offset = w.rank_offset;
  w.role_world_size = w.world_size;
  w.master_addr = master_addr;
  w.master_port = master_port;
  w.restart_count = restart_count;
  return w;
}

namespace {

std::string range_text(const NodeRange& nodes) {
  return nodes.fixed() ? std::to_string(nodes.min)
                       : std::to_string(nodes.min) + ":" + std::to_string(nodes.max);
}

// The nodes of the job and this node's place among them (static: node_rank; c10d: a wish).
void resolve_nodes(const LaunchOptions& options, LaunchConfig& config) {
  const NodeRange nodes = options.nnodes();
  const std::string nnodes_text = range_text(nodes);
  check(
      nodes.min >= 1 && nodes.max >= nodes.min,
      "nnodes=" + nnodes_text + " is not valid (expected an integer >= 1, or MIN:MAX with 1 <= MIN <= MAX)");
  config.rdzv_backend = options.rdzv_backend();
  const bool c10d = config.rdzv_backend == RdzvBackend::kC10d;
  check(c10d || nodes.fixed(), "nnodes=" + nnodes_text +
                                   " is an elastic range, which needs rdzv_backend=c10d (the static "
                                   "rendezvous has a fixed node count)");
  config.min_nodes = nodes.min;
  config.max_nodes = nodes.max;
  config.nnodes = nodes.max;

  // world_size() and rank_of() compute in int: every rank must fit.
  const long long world = static_cast<long long>(config.nnodes) * config.nproc_per_node;
  check(world <= INT_MAX, "nnodes=" + std::to_string(config.nnodes) + " * nproc_per_node=" +
                              std::to_string(config.nproc_per_node) + " = " + std::to_string(world) +
                              " workers is too many (at most " + std::to_string(INT_MAX) + ")");

  const int node_rank = options.node_rank().value_or(0);
  check(node_rank >= 0 && node_rank < config.nnodes,
        "node_rank=" + std::to_string(node_rank) + " is out of range for nnodes=" + nnodes_text +
            " (must be in [0, " + std::to_string(config.nnodes - 1) + "])");
  if (c10d) {
    config.asked_node_rank = options.node_rank();
  } else {
    config.node_rank = node_rank;
  }
}

// How this node's workers run and are watched: role, extra variables, restarts, timeouts.
void resolve_workers(const LaunchOptions& options, LaunchConfig& config) {
  const std::string& role = options.role();
  check(!role.empty() &&
            role.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.") ==
                std::string::npos,
        "role='" + role + "' is not valid (expected letters, digits, '_', '-' and '.')");
  config.role = role;
  for (const auto& [name, value] : options.worker_env()) {
    check(!name.empty() && name.find('=') == std::string::npos,
          "worker_env: '" + name + "' is not a variable name");
    check(!torchrun_variable(name),
          "worker_env: " + name + " is one of torchrun's variables, which the launcher sets");
  }
  config.worker_env = options.worker_env();
  check(options.monitor_interval().count() > 0,
        "monitor_interval=" + std::to_string(options.monitor_interval().count() / 1000.0) +
            " is not valid (expected a positive number of seconds)");
  config.monitor_interval = options.monitor_interval();

  check(options.max_restarts() >= 0, "max_restarts=" + std::to_string(options.max_restarts()) +
                                         " is not valid (expected an integer >= 0)");
  config.max_restarts = options.max_restarts();
  config.in_place = options.in_place();
  check(!config.in_place || config.max_restarts == 0,
        "max_restarts=" + std::to_string(config.max_restarts) +
            " with in_place: choose one way to recover (in place, or restarts from a checkpoint)");
  check(!config.in_place || (config.rdzv_backend == RdzvBackend::kStatic && config.nnodes == 1),
        "in_place with " + std::to_string(config.nnodes) + " node(s) and the " +
            (config.rdzv_backend == RdzvBackend::kStatic ? "static" : "c10d") +
            " rendezvous is not supported yet: in-place recovery works on one node (--nnodes 1, "
            "--rdzv-backend static); multi-node jobs recover with --max-restarts");
  check(options.heartbeat_timeout().count() > 0,
        "heartbeat_timeout=" + std::to_string(options.heartbeat_timeout().count() / 1000.0) +
            " is not valid (expected a positive number of seconds)");
  config.heartbeat_timeout = options.heartbeat_timeout();

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
}

// Where the job meets: the master of a static job (given, from the endpoint, or a free local port) or the
// c10d endpoint. Returns whether this launcher runs the job on its own (standalone, or one node on a port
// of its choosing).
bool resolve_master(const LaunchOptions& options, LaunchConfig& config) {
  if (options.master_port()) {
    const int port = *options.master_port();
    check(port >= 1 && port <= 65535,
          "master_port=" + std::to_string(port) + " is out of range (expected 1..65535)");
  }
  if (options.master_addr()) {
    check(!options.master_addr()->empty(), "master_addr='' is not valid (expected a host name or IP)");
  }
  const bool c10d = config.rdzv_backend == RdzvBackend::kC10d;
  if (options.standalone()) {
    check(options.nnodes() == NodeRange(1), "standalone runs a single-node job, but nnodes=" +
                                                range_text(options.nnodes()) + " (drop one of them)");
    check(!c10d && !options.rdzv_endpoint(),
          "standalone runs its own single-node rendezvous; it cannot be combined with rdzv_backend=c10d or "
          "rdzv_endpoint (drop one of them)");
    check(!options.master_addr(),
          "standalone picks 127.0.0.1 itself; it cannot be combined with master_addr=" +
              options.master_addr().value_or(""));
    check(!options.master_port(),
          "standalone picks a free port itself; it cannot be combined with master_port=" +
              std::to_string(options.master_port().value_or(0)));
    config.master_addr = "127.0.0.1";
    config.master_port = detail::find_free_port();
    return true;
  }
  if (c10d) {
    check(!options.master_addr() && !options.master_port(),
          "master_addr and master_port belong to the static rendezvous; under rdzv_backend=c10d the node "
          "that becomes node 0 of a round picks them (pass the meeting point as rdzv_endpoint)");
    const std::string endpoint = options.rdzv_endpoint().value_or("localhost:29400");
    config.rdzv_endpoint = parse_endpoint(endpoint);
    // (The message is built before the check: it must not read an endpoint that was not given.)
    check(config.rdzv_endpoint.port != 0 || config.max_nodes == 1,
          "rdzv_endpoint='" + endpoint +
              "' has port 0 (any free port), which only a single-node job can use: give the port every node "
              "will meet at");
    config.rdzv_conf = options.rdzv_conf();
    config.local_addr = options.local_addr().value_or("");
    return false;
  }
  if (options.rdzv_endpoint()) {
    // torchrun's static rendezvous takes the master from the endpoint when one is given.
    check(!options.master_addr() && !options.master_port(),
          "rdzv_endpoint='" + *options.rdzv_endpoint() +
              "' names the master of the static rendezvous, as master_addr/master_port do: give one of them");
    const Endpoint master = parse_endpoint(*options.rdzv_endpoint());
    check(master.port >= 1, "rdzv_endpoint='" + *options.rdzv_endpoint() + "' needs a port in 1..65535");
    config.master_addr = master.host;
    config.master_port = master.port;
    return false;
  }
  if (config.nnodes == 1 && !options.master_addr() && !options.master_port()) {
    // As torchrun: a single node given no master runs on a free local port, so that two such jobs on
    // one machine do not meet.
    config.master_addr = "127.0.0.1";
    config.master_port = detail::find_free_port();
    return true;
  }
  config.master_addr = options.master_addr().value_or("127.0.0.1");
  config.master_port = options.master_port().value_or(29500);
  return false;
}

// The job secret: given (a file, the environment), made here for a job whose processes are all this
// launcher's, or waived on purpose. A job others may join without one is refused, saying how to give one.
void resolve_secret(const LaunchOptions& options, LaunchConfig& config, bool on_its_own) {
  check(!(options.no_job_secret() && (options.job_secret() || options.job_secret_file())),
        "no_job_secret and a job secret (job_secret_file) were both given: drop one of them");
  try {
    if (options.job_secret()) {
      check(options.job_secret()->size() >= comm::kMinJobSecretBytes,
            "job_secret has " + std::to_string(options.job_secret()->size()) + " bytes; use at least " +
                std::to_string(comm::kMinJobSecretBytes) + " random ones");
      config.job_secret = *options.job_secret();
    } else if (options.job_secret_file()) {
      config.job_secret = comm::read_job_secret_file(*options.job_secret_file());
    } else {
      config.job_secret = comm::job_secret_from_environment();
    }
  } catch (const std::invalid_argument& e) {
    throw LaunchError(e.what());
  }
  config.no_job_secret = options.no_job_secret() || comm::job_secret_waived_by_environment();
  if (!config.job_secret.empty()) return;
  const bool others_may_join = config.max_nodes > 1 || config.nnodes > 1 || (config.in_place && !on_its_own);
  if (!others_may_join) {
    if (!config.no_job_secret) config.job_secret = comm::make_job_secret();
    return;
  }
  check(
      config.no_job_secret,
      "this job " +
          (config.in_place && config.max_nodes == 1
               ? std::string("serves a store other launchers may join (--recovery in-place at a named port)")
               : "spans nodes (nnodes=" + range_text(options.nnodes()) + ")") +
          " and has no job secret: " + comm::job_secret_advice());
}

// What is shown and kept of the workers' output, the signals handled, the GPUs each worker sees.
void resolve_output(const LaunchOptions& options, LaunchConfig& config) {
  config.output = options.output();
  if (options.log_dir()) {
    check(!options.log_dir()->empty(), "log_dir='' is not valid (expected a directory)");
    config.log_dir = *options.log_dir();
    if (!config.output.redirects && !config.output.tee) config.output.tee = StdStreams(kBothStreams);
  }
  check(!options.signals_to_handle().empty(), "signals_to_handle is empty (name at least one signal)");
  config.signals_to_handle = options.signals_to_handle();
  config.virtual_local_rank = options.virtual_local_rank();
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
      config.virtual_local_rank && visible != nullptr) {
    const long entries = 1 + std::count(visible, visible + std::strlen(visible), ',');
    check(entries >= config.nproc_per_node,
          std::string("virtual_local_rank gives each local rank one entry of CUDA_VISIBLE_DEVICES='") +
              visible + "', which has " + std::to_string(entries) +
              " for nproc_per_node=" + std::to_string(config.nproc_per_node) + " workers");
  }
}

}  // namespace

LaunchConfig resolve(const LaunchOptions& options) {
  LaunchConfig config;
  check(!options.command().empty() && !options.command().front().empty(),
        "no worker command given (expected: lockstep run [options] [--] CMD [ARGS...])");
  config.command = worker_command(options);

  const NprocPerNode& nproc = options.nproc_per_node();
  check(nproc.is_auto() || nproc.is_gpu() || nproc.is_cpu() || nproc.count() >= 1,
        "nproc_per_node=" + std::to_string(nproc.count()) +
            " is not valid (expected a positive integer, 'auto', 'cpu' or 'gpu')");
  config.nproc_per_node = nproc.resolve(options.device_counter());

  resolve_nodes(options, config);
  resolve_workers(options, config);
  const bool on_its_own = resolve_master(options, config);
  config.master_named = !on_its_own;
  if (options.run_id()) {
    check(!options.run_id()->empty(), "run_id='' is not valid (expected a non-empty job id)");
    config.run_id = *options.run_id();
  } else {
    // Every node must agree on the id: torchrun's "none", unless this launcher runs the job on its own,
    // where torchrun makes a random one too.
    config.run_id = on_its_own ? detail::random_run_id() : "none";
  }
  resolve_secret(options, config, on_its_own);
  resolve_output(options, config);
  config.omp_num_threads = std::max(1, detail::online_cpu_count() / config.nproc_per_node);
  return config;
}

}  // namespace lockstep::launch
