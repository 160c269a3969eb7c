#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/launch/nproc_per_node.h"
#include "lockstep/launch/rendezvous_options.h"
#include "lockstep/launch/worker_output.h"

namespace lockstep::launch {

/// SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1.
std::vector<int> default_signals_to_handle();

/// "SIGTERM,SIGINT" (torchrun's --signals-to-handle): each of SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1,
/// SIGUSR2, with or without "SIG". Throws LaunchError naming signals_to_handle and the bad entry otherwise.
std::vector<int> parse_signals(const std::string& text);

/// "SIGTERM,SIGINT,...": the names, as TORCHELASTIC_SIGNALS_TO_HANDLE gives them to the workers.
std::string signal_list_text(const std::vector<int>& signals);

/// Environment variables as (name, value) pairs.
using EnvPairs = std::vector<std::pair<std::string, std::string>>;

/// How the worker command is run (torchrun: a script under Python unless --no-python).
enum class ProgramMode {
  kAuto,        ///< a program whose name ends in ".py" runs under Python (`PYTHON -u SCRIPT ARGS`); any
                ///< other is executed as given
  kExecutable,  ///< --no-python: executed as given, whatever its name
  kModule,      ///< -m / --module: `PYTHON -u -m MODULE ARGS`
  kRunPath,     ///< --run-path: the script run by runpy.run_path in `PYTHON -u -c ...`, as __main__
};

/// What the user asked `lockstep run` for: torchrun's flags, one setter each. Values here are as given;
/// `resolve()` (launch_config.h) checks them and fills in the defaults that depend on other fields
/// (the free port of `standalone`, the run id, the count behind `nproc_per_node(auto)`).
///
/// Example:
///   auto options = LaunchOptions({"python3", "train.py", "--lr", "0.1"})
///                      .nproc_per_node(2)
///                      .nnodes(2)
///                      .node_rank(0)
///                      .master_addr("10.0.0.1")
///                      .master_port(29500);
///   Launcher launcher(options);
class LaunchOptions {
 public:
  /// `command`: the worker program and its arguments (see program_mode; a program without '/' is looked
  /// up in PATH).
  explicit LaunchOptions(std::vector<std::string> command) : command_(std::move(command)) {}

#define LOCKSTEP_LAUNCH_ARG(T, name) \
 public:                             \
  LaunchOptions& name(T value) {     \
    name##_ = std::move(value);      \
    return *this;                    \
  }                                  \
  const T& name() const {            \
    return name##_;                  \
  }                                  \
                                     \
 private:                            \
  T name##_

  /// The worker command (argv of each worker).
  LOCKSTEP_LAUNCH_ARG(std::vector<std::string>, command);

  /// --nproc-per-node: workers started on this node (each gets one LOCAL_RANK).
  LOCKSTEP_LAUNCH_ARG(NprocPerNode, nproc_per_node) = 1;

  /// How `command` runs: under Python or as given (ProgramMode).
  LOCKSTEP_LAUNCH_ARG(ProgramMode, program_mode) = ProgramMode::kAuto;

  /// The Python interpreter for a script or module. Unset: PYTHON_EXEC (torchrun's variable), else
  /// `python3` from PATH.
  LOCKSTEP_LAUNCH_ARG(std::optional<std::string>, python);

  /// --nnodes: nodes in the job, N or MIN:MAX (an elastic range needs the c10d rendezvous); each node
  /// runs one launcher with the same flags (but --node-rank).
  LOCKSTEP_LAUNCH_ARG(NodeRange, nnodes) = 1;

  /// --node-rank: this node's index in [0, nnodes); GROUP_RANK of its workers. Static rendezvous: unset
  /// is 0. c10d: unset takes the next free index in order of arrival; set, the round gives it this one
  /// when it has that many nodes and no other node asked for it (else order of arrival, with a line
  /// saying so).
  LOCKSTEP_LAUNCH_ARG(std::optional<int>, node_rank);

  /// --rdzv-backend: static (fixed nodes, --node-rank) or c10d (elastic rounds at rdzv_endpoint).
  LOCKSTEP_LAUNCH_ARG(RdzvBackend, rdzv_backend) = RdzvBackend::kStatic;

  /// --rdzv-endpoint HOST[:PORT]: c10d: where the nodes meet (the node whose address it is hosts the
  /// rendezvous store; port 29400 when none is given; unset: localhost:29400). static: the master's
  /// address and port (instead of master_addr/master_port).
  LOCKSTEP_LAUNCH_ARG(std::optional<std::string>, rdzv_endpoint);

  /// --rdzv-conf: the c10d rendezvous' timeouts and keep-alive (rendezvous_options.h).
  LOCKSTEP_LAUNCH_ARG(RdzvConf, rdzv_conf);

  /// --local-addr: the address the other nodes reach this one at (MASTER_ADDR when this node is node 0
  /// of a c10d round). Unset: the address this node reaches the rendezvous store from.
  LOCKSTEP_LAUNCH_ARG(std::optional<std::string>, local_addr);

  /// --role: ROLE_NAME of this node's workers (ROLE_RANK and ROLE_WORLD_SIZE count the workers of the
  /// same role across the nodes of a c10d round). Letters, digits, '_', '-' and '.'.
  LOCKSTEP_LAUNCH_ARG(std::string, role) = "default";

  /// --monitor-interval: how often a c10d node looks at the rendezvous (the round over, a node waiting
  /// to join). Worker exits are seen at once, whatever this is.
  LOCKSTEP_LAUNCH_ARG(std::chrono::milliseconds, monitor_interval) = std::chrono::milliseconds(100);

  /// Variables set for every worker, after torchrun's (a launcher built on this one sets its own:
  /// `lockstep launch` sets Accelerate's). A name torchrun's variables use is refused.
  LOCKSTEP_LAUNCH_ARG(EnvPairs, worker_env);

  /// --master-addr: static rendezvous: where rank 0 hosts the workers' store (MASTER_ADDR). Unset:
  /// 127.0.0.1.
  LOCKSTEP_LAUNCH_ARG(std::optional<std::string>, master_addr);

  /// --master-port: static rendezvous: the workers' store's TCP port (MASTER_PORT), 1..65535. Unset:
  /// 29500, or for a single-node job without master_addr a free port (as torchrun, which then runs
  /// standalone).
  LOCKSTEP_LAUNCH_ARG(std::optional<int>, master_port);

  /// --standalone: a single-node job on a free local port: MASTER_ADDR=127.0.0.1, MASTER_PORT picked
  /// by the OS, a random run id. Requires nnodes == 1 and no master_addr/master_port.
  LOCKSTEP_LAUNCH_ARG(bool, standalone) = false;

  /// --max-restarts: how many times the workers are started again after a failure. static: per node,
  /// all local workers after one of them fails (with nnodes > 1 they line up only when every node's
  /// workers fail together, as they do when a peer of a collective disappears). c10d: per job, each
  /// round that ended in a failure (a worker, a lost node) counts once on every node; rounds that
  /// begin for a joining node do not count.
  LOCKSTEP_LAUNCH_ARG(int, max_restarts) = 0;

  /// --recovery in-place: a worker that exits with a failure, or goes silent for heartbeat_timeout, is
  /// announced as lost to the others (through a store this launcher serves, LOCKSTEP_ELASTIC_STORE), which
  /// go on in the same processes (comm::ElasticWorld; docs/elastic.md, "In place"). The job succeeds when
  /// the workers left succeed. One node (static rendezvous) so far; excludes max_restarts.
  LOCKSTEP_LAUNCH_ARG(bool, in_place) = false;
  /// --heartbeat-timeout: under in_place, how long a worker's heartbeat may stand still before it is killed
  /// and announced as lost (stopped with SIGSTOP, hung in the kernel). Default 5 s.
  LOCKSTEP_LAUNCH_ARG(std::chrono::milliseconds, heartbeat_timeout) = std::chrono::seconds(5);

  /// --log-dir: where workers' output files go, in torchrun's layout:
  /// DIR/<run id>_<random>/attempt_<K>/<local rank>/{stdout,stderr}.log (which streams: `output`), and
  /// TORCHELASTIC_ERROR_FILE=.../error.json for each worker. Unset: no files, unless `output` asks for
  /// some (then a fresh directory under $TMPDIR, named on stderr, as torchrun's torchelastic_*).
  LOCKSTEP_LAUNCH_ARG(std::optional<std::string>, log_dir);

  /// How workers' output is shown and kept: --redirects, --tee, --local-ranks-filter,
  /// --log-line-prefix-template, --duplicate-std{out,err}-filters (worker_output.h).
  LOCKSTEP_LAUNCH_ARG(WorkerOutput, output);

  /// --signals-to-handle: the signals the launcher catches. SIGTERM, SIGINT, SIGHUP and SIGQUIT stop the
  /// workers (that signal to each, SIGKILL after grace_period; a second one kills at once); SIGUSR1 and
  /// SIGUSR2 are passed on to every worker and stop nothing (a preemption notice: the workers decide).
  /// Default: torchrun's SIGTERM, SIGINT, SIGHUP, SIGQUIT, plus SIGUSR1 (Slurm's --signal=USR1@90).
  LOCKSTEP_LAUNCH_ARG(std::vector<int>, signals_to_handle) = default_signals_to_handle();

  /// --virtual-local-rank: every worker sees LOCAL_RANK=0 and, as its only GPU, the one of its local
  /// rank (CUDA_VISIBLE_DEVICES narrowed to that entry of the launcher's list, or to the index).
  LOCKSTEP_LAUNCH_ARG(bool, virtual_local_rank) = false;
  /// --no-job-secret (or LOCKSTEP_NO_JOB_SECRET=1): run a job that spans nodes without a secret, on
  /// purpose; its workers get LOCKSTEP_NO_JOB_SECRET=1.
  LOCKSTEP_LAUNCH_ARG(bool, no_job_secret) = false;

  /// --rdzv-id / --run-id: the job id (TORCHELASTIC_RUN_ID), the same on every node. Unset: random hex
  /// for a job this launcher runs on its own (standalone, or one node without a master_port), else
  /// "none" (as torchrun), so that all nodes agree.
  LOCKSTEP_LAUNCH_ARG(std::optional<std::string>, run_id);

  /// The local rank whose stdout is the launcher's own stdout, unprefixed and unbuffered by the
  /// launcher (so the worker sees the terminal: isatty, progress bars with carriage returns). Its stderr
  /// is still prefixed. Unset: every rank's stdout goes through a pipe, prefixed "[rank N] ".
  /// `lockstep fit` uses it for rank 0, which alone prints.
  LOCKSTEP_LAUNCH_ARG(std::optional<int>, direct_stdout_local_rank);

  /// --collective-timeout: seconds one collective may take (LOCKSTEP_TIMEOUT, given to the workers),
  /// and how long a worker of a multi-rank job may go without progress before the launcher stops the
  /// job: no heartbeat at all (stopped, hung in the kernel), or no collective reached (stuck outside
  /// them). Unset: LOCKSTEP_TIMEOUT from the environment, else 1800 s (PyTorch's default).
  LOCKSTEP_LAUNCH_ARG(std::optional<std::chrono::milliseconds>, collective_timeout);

  /// --job-secret-file: the job secret (comm/job_secret.h) in a file of mode 0600, instead of
  /// LOCKSTEP_JOB_SECRET / LOCKSTEP_JOB_SECRET_FILE. The launcher's stores ask for it and its workers get
  /// it in LOCKSTEP_JOB_SECRET. Without any: a job that stays on this node gets a new one; one that spans
  /// nodes (nnodes > 1, c10d with more than one node, an in-place store others may join) is refused,
  /// unless no_job_secret.
  LOCKSTEP_LAUNCH_ARG(std::optional<std::string>, job_secret_file);
  /// The job secret itself, for a program that holds it; wins over job_secret_file and the environment.
  LOCKSTEP_LAUNCH_ARG(std::optional<std::string>, job_secret);

  /// How long stopped workers get between SIGTERM and SIGKILL.
  LOCKSTEP_LAUNCH_ARG(std::chrono::milliseconds, grace_period) = std::chrono::seconds(3);

  /// Counts accelerators for `nproc_per_node(auto)`. Default: `visible_cuda_device_count`. Plug in
  /// torch::cuda::device_count from a layer that links LibTorch; the launcher itself never loads it.
  LOCKSTEP_LAUNCH_ARG(DeviceCounter, device_counter) = visible_cuda_device_count;

#undef LOCKSTEP_LAUNCH_ARG
};

}  // namespace lockstep::launch
