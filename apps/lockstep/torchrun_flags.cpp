#include "torchrun_flags.h"

#include <climits>
#include <cstdlib>
#include <string>

#include <CLI/CLI.hpp>

#include "lockstep/launch/launch_error.h"

namespace lockstep::cli {

const char* const kTorchrunTable =
    "torchrun's flags (both spellings, --flag=V or --flag V; each defaults to its PET_* variable):\n"
    "  --nnodes N|MIN:MAX            PET_NNODES            yes; MIN:MAX needs --rdzv-backend c10d\n"
    "  --nproc-per-node N|auto|cpu|gpu PET_NPROC_PER_NODE  yes; xpu refused (no XPU support)\n"
    "  --rdzv-backend static|c10d    PET_RDZV_BACKEND      yes; etcd, etcd-v2 refused (need an etcd server)\n"
    "  --rdzv-endpoint HOST[:PORT]   PET_RDZV_ENDPOINT     yes; port 29400 when none is given\n"
    "  --rdzv-id ID                  PET_RDZV_ID           yes (also --run-id)\n"
    "  --rdzv-conf K=V,...           PET_RDZV_CONF         join_timeout, last_call_timeout, close_timeout,\n"
    "                                                      read_timeout, heartbeat_timeout, "
    "keep_alive_interval,\n"
    "                                                      keep_alive_max_attempt, is_host, store_type=tcp;\n"
    "                                                      cas_backoff_max_seconds: a note, nothing to back "
    "off\n"
    "  --standalone                  PET_STANDALONE        yes\n"
    "  --max-restarts K              PET_MAX_RESTARTS      yes; under c10d counted per job, not per node\n"
    "  --monitor-interval S          PET_MONITOR_INTERVAL  yes: how often a c10d node looks at the "
    "rendezvous\n"
    "  --start-method M              PET_START_METHOD      spawn|fork|forkserver accepted, no effect: as in\n"
    "                                                      torchrun, a script always runs as a subprocess\n"
    "  --event-log-handler H         PET_EVENT_LOG_HANDLER null, console: lockstep prints its rendezvous\n"
    "                                                      events on stderr either way; others refused\n"
    "  --role NAME                   PET_ROLE              yes (ROLE_NAME, ROLE_RANK, ROLE_WORLD_SIZE)\n"
    "  -m, --module                  PET_MODULE            yes: python -u -m MODULE\n"
    "  --no-python                   PET_NO_PYTHON         yes: the program is executed as given\n"
    "  --run-path                    PET_RUN_PATH          yes: runpy.run_path, in a fresh interpreter\n"
    "  --log-dir DIR                 PET_LOG_DIR           yes, torchrun's layout (below)\n"
    "  -r, --redirects 0-3|R:S,...   PET_REDIRECTS         yes\n"
    "  -t, --tee 0-3|R:S,...         PET_TEE               yes\n"
    "  --log-line-prefix-template T  PET_LOG_LINE_PREFIX_TEMPLATE  yes, for every console line\n"
    "  --local-ranks-filter R,...    PET_LOCAL_RANKS_FILTER        yes\n"
    "  --duplicate-stdout-filters F  PET_DUPLICATE_STDOUT_FILTERS  yes\n"
    "  --duplicate-stderr-filters F  PET_DUPLICATE_STDERR_FILTERS  yes\n"
    "  --node-rank R                 PET_NODE_RANK         static: yes; c10d: a wish the round honours when\n"
    "                                                      it can (torchrun ignores it there)\n"
    "  --master-addr A               PET_MASTER_ADDR       static: yes; c10d: ignored with a warning, as "
    "torchrun\n"
    "  --master-port P               PET_MASTER_PORT       static: yes; c10d: ignored with a warning, as "
    "torchrun\n"
    "  --local-addr A                PET_LOCAL_ADDR        yes\n"
    "  --signals-to-handle S,...     PET_SIGNALS_TO_HANDLE yes; SIGUSR1/SIGUSR2 are passed on, stop nothing\n"
    "  --shutdown-timeout S          PET_SHUTDOWN_TIMEOUT  yes (also TORCH_ELASTIC_SHUTDOWN_TIMEOUT)\n"
    "  --virtual-local-rank          PET_VIRTUAL_LOCAL_RANK yes\n"
    "  --logs-specs NAME             -                     refused: a Python plug-in (torchrun.logs_specs)\n"
    "  --numa-binding MODE           -                     refused: no GPU topology read here; prefix the\n"
    "                                                      command with numactl instead\n"
    "  --print-completion SHELL      -                     refused: no completion script (torchrun's needs\n"
    "                                                      the shtab package)\n"
    "A program ending in .py runs as `python3 -u SCRIPT ARGS` (the interpreter: PYTHON_EXEC, else python3\n"
    "from PATH; none: an error naming both); -m and --run-path run under Python too, --no-python never.";

int parse_int(const std::string& flag, const std::string& text, const char* expected) {
  const bool digits = !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
  if (digits && text.size() <= 10) {
    const long long value = std::stoll(text);
    if (value <= INT_MAX) return static_cast<int>(value);
  }
  const bool integer = digits || (text.size() > 1 && text[0] == '-' &&
                                  text.find_first_not_of("0123456789", 1) == std::string::npos);
  const std::string shown = integer ? flag + "=" + text : flag + "='" + text + "'";
  throw UsageError{shown + " is not valid (expected " + expected + ")"};
}

std::chrono::milliseconds parse_seconds(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const double seconds = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !(seconds > 0) || seconds > 1e7) {
    throw UsageError{flag + "='" + text + "' is not valid (expected a positive number of seconds)"};
  }
  return std::chrono::milliseconds(static_cast<long long>(seconds * 1000.0));
}

void add_torchrun_flags(CLI::App& app, RunFlags& f) {
  const auto value = [&app](const std::string& names, std::optional<std::string>& into,
                            const std::string& pet, const std::string& help, const std::string& type) {
    CLI::Option* option = app.add_option(names, into, help + (pet.empty() ? "" : " (" + pet + ")"));
    option->type_name(type);
    if (!pet.empty()) option->envname(pet);
  };
  const auto flag = [&app](const std::string& names, bool& into, const std::string& pet,
                           const std::string& help) {
    app.add_flag(names, into, help + " (" + pet + ")")->envname(pet);
  };
  value("--nnodes", f.nnodes, "PET_NNODES",
        "Nodes in the job: N, or MIN:MAX for an elastic job (c10d).\n"
        "Start one launcher per node. Default: 1",
        "N|MIN:MAX");
  value("--nproc-per-node,--nproc_per_node", f.nproc_per_node, "PET_NPROC_PER_NODE",
        "Workers on this node: a count, 'auto' (one per GPU, else\n"
        "per CPU core), 'cpu' (per core) or 'gpu'. Default: 1",
        "N|auto|cpu|gpu");
  value("--rdzv-backend,--rdzv_backend", f.rdzv_backend, "PET_RDZV_BACKEND",
        "static (fixed nodes, --node-rank) or c10d (elastic rounds\n"
        "at --rdzv-endpoint). Default: static",
        "static|c10d");
  value("--rdzv-endpoint,--rdzv_endpoint", f.rdzv_endpoint, "PET_RDZV_ENDPOINT",
        "c10d: where the nodes meet; the node whose address it is\n"
        "hosts the rendezvous (port 29400 when none is given).\n"
        "static: the master, instead of --master-addr/--master-port",
        "HOST[:PORT]");
  value("--rdzv-id,--rdzv_id,--run-id,--run_id", f.rdzv_id, "PET_RDZV_ID",
        "Job id (TORCHELASTIC_RUN_ID), the same on every node.\n"
        "Default: random for a job this launcher runs on its own\n"
        "(--standalone, or one node without --master-port), else 'none'\n"
        "(with a warning: pass the scheduler's job id)",
        "ID");
  value("--rdzv-conf,--rdzv_conf", f.rdzv_conf, "PET_RDZV_CONF",
        "c10d settings: join_timeout=600, last_call_timeout=30,\n"
        "close_timeout=30, read_timeout=60, heartbeat_timeout=5,\n"
        "keep_alive_interval=5, keep_alive_max_attempt=3, is_host",
        "K=V,...");
  flag("--standalone", f.standalone, "PET_STANDALONE",
       "Single-node job on its own: MASTER_ADDR=127.0.0.1, a free\n"
       "port, a random run id");
  value("--max-restarts,--max_restarts", f.max_restarts, "PET_MAX_RESTARTS",
        "Start the workers again after a failure, up to K times\n"
        "(c10d: failed rounds of the job). Default: 0",
        "K");
  value("--monitor-interval,--monitor_interval", f.monitor_interval, "PET_MONITOR_INTERVAL",
        "Seconds between looks at the c10d rendezvous (a round over,\n"
        "a node waiting to join). Default: 0.1",
        "S");
  value("--start-method,--start_method", f.start_method, "PET_START_METHOD",
        "Accepted, no effect: a script runs as a subprocess (as\n"
        "under torchrun)",
        "spawn|fork|forkserver");
  value("--event-log-handler,--event_log_handler", f.event_log_handler, "PET_EVENT_LOG_HANDLER",
        "null or console: the rendezvous events are lines on stderr\n"
        "either way",
        "H");
  value("--role", f.role, "PET_ROLE", "ROLE_NAME of this node's workers. Default: default", "NAME");
  flag("-m,--module", f.module, "PET_MODULE", "Run the program as a Python module: python3 -u -m NAME");
  flag("--no-python,--no_python", f.no_python, "PET_NO_PYTHON",
       "Execute the program as given, even a .py script");
  flag("--run-path,--run_path", f.run_path, "PET_RUN_PATH",
       "Run the script with runpy.run_path (in a fresh interpreter\n"
       "per worker)");
  value("--log-dir,--log_dir", f.log_dir, "PET_LOG_DIR",
        "Write workers' output to DIR/<run id>_<random>/attempt_<K>/\n"
        "<local rank>/{stdout,stderr}.log (both streams unless\n"
        "-r/-t choose) and set TORCHELASTIC_ERROR_FILE",
        "DIR");
  value("-r,--redirects", f.redirects, "PET_REDIRECTS",
        "Streams written to the log files only: 0-3 (1 stdout, 2\n"
        "stderr, 3 both) or LOCAL_RANK:V,...",
        "0-3|R:V,...");
  value("-t,--tee", f.tee, "PET_TEE", "Streams written to the log files and shown too", "0-3|R:V,...");
  value("--log-line-prefix-template,--log_line_prefix_template", f.log_line_prefix_template,
        "PET_LOG_LINE_PREFIX_TEMPLATE",
        "Console line prefix with ${rank}, ${local_rank}, ${role_name},\n"
        "${hostname}. Default: '[rank ${rank}] '",
        "T");
  value("--local-ranks-filter,--local_ranks_filter", f.local_ranks_filter, "PET_LOCAL_RANKS_FILTER",
        "Show only these local ranks on the console", "R,...");
  value("--duplicate-stdout-filters,--duplicate_stdout_filters", f.duplicate_stdout_filters,
        "PET_DUPLICATE_STDOUT_FILTERS",
        "Also write stdout lines containing one of these to\n"
        "attempt_<K>/filtered_stdout.log (',,' for a comma)",
        "F,...");
  value("--duplicate-stderr-filters,--duplicate_stderr_filters", f.duplicate_stderr_filters,
        "PET_DUPLICATE_STDERR_FILTERS", "The same for stderr (filtered_stderr.log)", "F,...");
  value("--node-rank,--node_rank", f.node_rank, "PET_NODE_RANK",
        "This node's index in [0, nnodes). static: RANK =\n"
        "node_rank * nproc + LOCAL_RANK; c10d: a wish. Default: 0\n"
        "(c10d: order of arrival)",
        "R");
  value("--master-addr,--master_addr", f.master_addr, "PET_MASTER_ADDR",
        "static: address of node 0, where rank 0 hosts the workers'\n"
        "store. Default: 127.0.0.1",
        "ADDR");
  value("--master-port,--master_port", f.master_port, "PET_MASTER_PORT",
        "static: port of that store. Default: 29500 (one node: a\n"
        "free port)",
        "PORT");
  value("--local-addr,--local_addr", f.local_addr, "PET_LOCAL_ADDR",
        "c10d: the address the other nodes reach this one at.\n"
        "Default: the one it reaches the rendezvous from",
        "ADDR");
  value("--signals-to-handle,--signals_to_handle", f.signals_to_handle, "PET_SIGNALS_TO_HANDLE",
        "Signals caught: TERM, INT, HUP, QUIT stop the workers;\n"
        "USR1, USR2 are passed on. Default:\n"
        "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1",
        "S,...");
  value("--shutdown-timeout,--shutdown_timeout", f.shutdown_timeout, "PET_SHUTDOWN_TIMEOUT",
        "Seconds stopped workers get before SIGKILL. Default:\n"
        "TORCH_ELASTIC_SHUTDOWN_TIMEOUT, else 3",
        "S");
  flag("--virtual-local-rank,--virtual_local_rank", f.virtual_local_rank, "PET_VIRTUAL_LOCAL_RANK",
       "LOCAL_RANK=0 for every worker, each seeing only its GPU");
  app.add_option("--logs-specs,--logs_specs", f.logs_specs, "Refused (a Python plug-in of torchrun)")
      ->type_name("NAME");
  app.add_option("--numa-binding,--numa_binding", f.numa_binding, "Refused (use numactl in the command)")
      ->type_name("MODE");
  app.add_option("--print-completion,--print_completion", f.print_completion,
                 "Refused (no completion script)")
      ->type_name("SHELL");
  app.add_option("--collective-timeout,--collective_timeout", f.collective_timeout,
                 "lockstep: seconds one collective may take (LOCKSTEP_TIMEOUT\n"
                 "for the workers); a worker of a multi-rank job without\n"
                 "heartbeat or collective for that long is killed and the job\n"
                 "stopped. Default: LOCKSTEP_TIMEOUT, else 1800")
      ->type_name("S");
  app.add_option("--recovery", f.recovery,
                 "lockstep: what a failed worker costs. restart: stop all\n"
                 "and start again (--max-restarts, from a checkpoint).\n"
                 "in-place: the others go on without it in the same\n"
                 "processes (lockstep's ElasticWorld; one node; see\n"
                 "docs/elastic.md). With --rdzv-endpoint or --master-port,\n"
                 "the store is served there, and the same command run\n"
                 "again while the job trains joins it: its workers are\n"
                 "admitted at a step boundary. Default: restart")
      ->type_name("restart|in-place");
  app.add_option("--heartbeat-timeout,--heartbeat_timeout", f.heartbeat_timeout,
                 "lockstep, --recovery in-place: seconds a worker may send\n"
                 "no heartbeat before it is killed and the others go on\n"
                 "without it. Default: 5")
      ->type_name("S");
  app.add_option("--job-secret-file,--job_secret_file", f.job_secret_file,
                 "lockstep: the job secret, in a file of mode 0600 (the\n"
                 "same on every node). Default: LOCKSTEP_JOB_SECRET, else\n"
                 "LOCKSTEP_JOB_SECRET_FILE, else a new one for a job on one\n"
                 "node; a job that spans nodes needs one (or --no-job-secret)")
      ->type_name("PATH");
  app.add_flag("--no-job-secret,--no_job_secret", f.no_job_secret,
               "lockstep: run a job that spans nodes without a job secret:\n"
               "whoever reaches its store's port and knows the run id can\n"
               "join it (also LOCKSTEP_NO_JOB_SECRET=1)");
}

namespace {

// Runs `parse`, turning the launch layer's LaunchError (which names the option) into a UsageError.
template <typename F>
auto checked(F&& parse) {
  try {
    return parse();
  } catch (const launch::LaunchError& e) {
    throw UsageError{e.what()};
  }
}

std::optional<std::string> env(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

}  // namespace

launch::LaunchOptions launch_options(RunFlags f, const std::vector<std::string>& command,
                                     std::vector<std::string>& warnings) {
  if (f.logs_specs) {
    throw UsageError{
        "--logs-specs='" + *f.logs_specs +
        "' cannot be honoured: it loads a Python plug-in (a torchrun.logs_specs entry point) into "
        "torchrun's agent, and lockstep run has no Python inside; --log-dir, -r, -t and "
        "--local-ranks-filter choose where output goes"};
  }
  if (f.numa_binding) {
    throw UsageError{
        "--numa-binding='" + *f.numa_binding +
        "' cannot be honoured: lockstep run reads no GPU topology to bind by; prefix the command "
        "with numactl (lockstep run ... -- numactl --cpunodebind=N --membind=N PROGRAM ...)"};
  }
  if (f.print_completion) {
    throw UsageError{"--print-completion='" + *f.print_completion +
                     "' is not provided: lockstep run prints no shell completion script"};
  }
  if (f.event_log_handler && *f.event_log_handler != "null" && *f.event_log_handler != "console") {
    throw UsageError{"--event-log-handler='" + *f.event_log_handler +
                     "' is not available: torchelastic's event handlers are Python plug-ins; lockstep run "
                     "prints its rendezvous events on stderr ('null' and 'console' are accepted)"};
  }
  if (f.start_method && *f.start_method != "spawn" && *f.start_method != "fork" &&
      *f.start_method != "forkserver") {
    throw UsageError{"--start-method='" + *f.start_method +
                     "' is not valid (expected spawn, fork or forkserver)"};
  }
  if (f.module && f.no_python) {
    throw UsageError{"--module and --no-python contradict each other (a module runs under Python): drop one"};
  }
  if (f.nproc_per_node && *f.nproc_per_node == "xpu") {
    throw UsageError{
        "--nproc-per-node='xpu' is not available: lockstep has no XPU support (give a count, "
        "'auto', 'cpu' or 'gpu')"};
  }

  launch::LaunchOptions options(command);
  if (f.nproc_per_node)
    options.nproc_per_node(checked([&] { return launch::NprocPerNode::parse(*f.nproc_per_node); }));
  if (f.nnodes) options.nnodes(checked([&] { return launch::parse_nnodes(*f.nnodes); }));
  if (f.rdzv_backend)
    options.rdzv_backend(checked([&] { return launch::parse_rdzv_backend(*f.rdzv_backend); }));
  const bool c10d = options.rdzv_backend() == launch::RdzvBackend::kC10d;
  if (f.rdzv_endpoint) options.rdzv_endpoint(*f.rdzv_endpoint);
  if (f.rdzv_conf) {
    options.rdzv_conf(checked([&] { return launch::parse_rdzv_conf(*f.rdzv_conf); }));
    for (const std::string& note : options.rdzv_conf().notes) warnings.push_back("--rdzv-conf: " + note);
  }
  if (f.node_rank) options.node_rank(parse_int("--node-rank", *f.node_rank, "an integer >= 0"));
  if (c10d && (f.master_addr || f.master_port)) {
    warnings.push_back(
        "--master-addr and --master-port are for the static rendezvous; under --rdzv-backend c10d they are "
        "ignored (node 0 of each round gives MASTER_ADDR and MASTER_PORT), as torchrun ignores them");
  } else {
    if (f.master_addr) options.master_addr(*f.master_addr);
    if (f.master_port) options.master_port(parse_int("--master-port", *f.master_port, "a port in 1..65535"));
  }
  if (f.local_addr) options.local_addr(*f.local_addr);
  if (f.max_restarts) options.max_restarts(parse_int("--max-restarts", *f.max_restarts, "an integer >= 0"));
  if (f.monitor_interval) options.monitor_interval(parse_seconds("--monitor-interval", *f.monitor_interval));
  if (f.role) options.role(*f.role);
  if (f.rdzv_id) options.run_id(*f.rdzv_id);
  options.standalone(f.standalone);
  options.virtual_local_rank(f.virtual_local_rank);
  if (f.module) options.program_mode(launch::ProgramMode::kModule);
  if (f.run_path) options.program_mode(launch::ProgramMode::kRunPath);  // torchrun: wins over --no-python
  if (f.no_python && !f.run_path) options.program_mode(launch::ProgramMode::kExecutable);

  if (f.log_dir) options.log_dir(*f.log_dir);
  launch::WorkerOutput output;
  if (f.redirects)
    output.redirects = checked([&] { return launch::StdStreams::parse(*f.redirects, "--redirects"); });
  if (f.tee) output.tee = checked([&] { return launch::StdStreams::parse(*f.tee, "--tee"); });
  if (f.local_ranks_filter && !f.local_ranks_filter->empty()) {
    output.local_ranks_filter =
        checked([&] { return launch::parse_local_ranks_filter(*f.local_ranks_filter); });
  }
  if (!f.log_line_prefix_template) f.log_line_prefix_template = env("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE");
  if (f.log_line_prefix_template && !f.log_line_prefix_template->empty()) {
    output.line_prefix_template = *f.log_line_prefix_template;
  }
  if (f.duplicate_stdout_filters)
    output.duplicate_stdout_filters = launch::parse_filter_list(*f.duplicate_stdout_filters);
  if (f.duplicate_stderr_filters)
    output.duplicate_stderr_filters = launch::parse_filter_list(*f.duplicate_stderr_filters);
  options.output(output);

  if (f.signals_to_handle)
    options.signals_to_handle(checked([&] { return launch::parse_signals(*f.signals_to_handle); }));
  if (!f.shutdown_timeout) f.shutdown_timeout = env("TORCH_ELASTIC_SHUTDOWN_TIMEOUT");
  if (f.shutdown_timeout) options.grace_period(parse_seconds("--shutdown-timeout", *f.shutdown_timeout));
  if (f.collective_timeout)
    options.collective_timeout(parse_seconds("--collective-timeout", *f.collective_timeout));
  if (f.recovery) {
    if (*f.recovery != "restart" && *f.recovery != "in-place")
      throw UsageError{"--recovery '" + *f.recovery + "' is not valid: expected restart or in-place"};
    options.in_place(*f.recovery == "in-place");
  }
  if (f.heartbeat_timeout)
    options.heartbeat_timeout(parse_seconds("--heartbeat-timeout", *f.heartbeat_timeout));
  if (f.job_secret_file) options.job_secret_file(*f.job_secret_file);
  options.no_job_secret(f.no_job_secret);
  return options;
}

}  // namespace lockstep::cli
