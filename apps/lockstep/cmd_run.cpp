// `lockstep run`: torchrun's command line in front of lockstep::launch::Launcher.
#include <chrono>
#include <climits>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli_parse.h"
#include "commands.h"
#include "flag_words.h"
#include "lockstep/env/slurm.h"
#include "lockstep/launch/launch.h"

namespace lockstep::cli {
namespace {

namespace launch = lockstep::launch;

constexpr const char* kRunDescription =
    "Start N copies of CMD on this node, each with torchrun's environment:\n"
    "  RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, ROLE_RANK,\n"
    "  ROLE_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT,\n"
    "  TORCHELASTIC_MAX_RESTARTS, TORCHELASTIC_RUN_ID, TORCHELASTIC_SIGNALS_TO_HANDLE (the signals\n"
    "  lockstep run forwards); OMP_NUM_THREADS = max(1, cores / N),\n"
    "  TORCH_NCCL_ASYNC_ERROR_HANDLING=1 (as torchrun) and PYTHONUNBUFFERED=1 (Python writes each\n"
    "  line at once into the launcher's pipe), each only when not already set.\n"
    "Each worker's output lines are printed prefixed with \"[rank R] \" (stdout to stdout, stderr to\n"
    "stderr). When one worker fails, the others are stopped (SIGTERM, SIGKILL 3 s later).\n"
    "Everything after the first non-option argument (or after --) is the worker command, passed\n"
    "untouched.\n"
    "Started by srun, one task per node (srun --ntasks-per-node=1 lockstep run ...), it takes\n"
    "--nnodes (SLURM_NNODES), --node-rank (SLURM_NODEID), --master-addr (first host of the\n"
    "step's nodelist), --master-port (10000 + SLURM_JOB_ID % 10000) and --rdzv-id (the job and\n"
    "step id) from Slurm when they are not given; MASTER_ADDR / MASTER_PORT win.";

constexpr const char* kRunFooter =
    "Exit status:\n"
    "  0        every worker exited with status 0\n"
    "  S        the first worker that failed exited with status S (the others were stopped)\n"
    "  128+N    the first worker that failed was killed by signal N, or the launcher itself\n"
    "           received signal N (SIGINT, SIGTERM, SIGHUP are forwarded to every worker)\n"
    "  127/126  CMD was not found / could not be executed\n"
    "  2        bad flags\n"
    "\n"
    "Examples:\n"
    "  lockstep run --nproc-per-node 4 --standalone ./train --epochs 3\n"
    "  lockstep run --nproc-per-node 2 python3 train.py --lr 0.1\n"
    "  # two nodes (run one on each):\n"
    "  lockstep run --nnodes 2 --node-rank 0 --nproc-per-node 4 --master-addr 10.0.0.1 \\\n"
    "               --master-port 29500 --rdzv-id job42 ./train\n"
    "  lockstep run --nnodes 2 --node-rank 1 --nproc-per-node 4 --master-addr 10.0.0.1 \\\n"
    "               --master-port 29500 --rdzv-id job42 ./train";

// CLI11's help with our usage line (the worker command is not a CLI11 positional).
class RunFormatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string name) const override {
    return "Usage: " + name + " [OPTIONS] [--] CMD [ARGS...]\n";
  }
  std::string make_help(const CLI::App* app, std::string name, CLI::AppFormatMode mode) const override {
    return make_usage(app, name) + "\n" + make_description(app) + make_groups(app, mode) + "\n" +
           make_footer(app);
  }
};

// A usage mistake: printed as "lockstep run: <message>", exit status 2.
struct UsageError {
  std::string message;
};

// A flag's integer value, strictly: decimal digits only (no sign, no spaces: strtol would take "+2" and
// " 2"), at most INT_MAX. The message shows a well-formed integer as is ("--node-rank=-1"), anything
// else quoted ("--nnodes='+2'").
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

// A positive number of seconds ("30", "0.5") as a duration.
std::chrono::milliseconds parse_seconds(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const double seconds = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !(seconds > 0) || seconds > 1e7) {
    throw UsageError{flag + "='" + text + "' is not valid (expected a positive number of seconds)"};
  }
  return std::chrono::milliseconds(static_cast<long long>(seconds * 1000.0));
}

// Started by srun as one launcher per node: fills the flags not given from the job step (see the
// description). Throws UsageError when the step runs several tasks on this node, as each would start its
// own copy of the node's workers, or when a SLURM_* variable is garbled.
void apply_slurm_defaults(std::optional<std::string>& nnodes, std::optional<std::string>& node_rank,
                          std::optional<std::string>& master_addr, std::optional<std::string>& master_port,
                          std::optional<std::string>& run_id) {
  if (nnodes && node_rank && master_addr && master_port && run_id) return;
  std::optional<env::SlurmNode> node;
  try {
    node = env::slurm_node();
  } catch (const env::EnvError& e) {
    throw UsageError{std::string(e.what()) +
                     " (read because srun started this launcher; pass --nnodes, "
                     "--node-rank, --master-addr, --master-port and --rdzv-id to ignore Slurm)"};
  }
  if (!node) return;
  if (node->tasks_on_node > 1 && !(nnodes && node_rank)) {
    throw UsageError{
        "srun started " + std::to_string(node->tasks_on_node) +
        " tasks on this node (SLURM_STEP_TASKS_PER_NODE), so each would start its own workers: "
        "run one launcher per node (srun --ntasks-per-node=1 lockstep run --nproc-per-node N ...), "
        "or srun one task per rank and drop lockstep run"};
  }
  if (!nnodes) nnodes = std::to_string(node->num_nodes);
  if (!node_rank) node_rank = std::to_string(node->node_rank);
  if (!master_addr) master_addr = node->master_addr;
  if (!master_port) master_port = std::to_string(node->master_port);
  if (!run_id) run_id = node->run_id;
}

int usage_error(const std::string& message) {
  std::cerr << "lockstep run: " << message << "\nRun 'lockstep run --help' for the flags.\n";
  return 2;
}

}  // namespace

int run_main(int argc, char** argv) {
  CLI::App app(kRunDescription, "lockstep run");
  app.footer(kRunFooter);
  app.prefix_command();  // the first positional and all after it are the worker command
  auto formatter = std::make_shared<RunFormatter>();
  formatter->column_width(34);
  app.formatter(formatter);

  std::optional<std::string> nproc, nnodes, node_rank, master_addr, master_port, max_restarts, log_dir,
      run_id, collective_timeout;
  bool standalone = false;
  app.add_option("--nproc-per-node,--nproc_per_node", nproc,
                 "Workers to start on this node: a count, 'auto' (one per\n"
                 "GPU when there are GPUs, else one per online CPU core), or\n"
                 "'gpu' (one per visible GPU; an error without one). Default: 1")
      ->type_name("N|auto|gpu");
  app.add_option("--nnodes", nnodes,
                 "Nodes in the job; start one launcher per node with the same\n"
                 "flags except --node-rank. Default: 1")
      ->type_name("N");
  app.add_option("--node-rank,--node_rank", node_rank,
                 "This node's index in [0, nnodes); a worker's RANK is\n"
                 "node_rank * nproc_per_node + LOCAL_RANK. Default: 0")
      ->type_name("R");
  app.add_option("--master-addr,--master_addr", master_addr,
                 "Address of node 0, where rank 0 hosts the rendezvous store\n"
                 "(MASTER_ADDR). Default: 127.0.0.1")
      ->type_name("ADDR");
  app.add_option("--master-port,--master_port", master_port,
                 "Port of the rendezvous store on node 0 (MASTER_PORT), 1..65535.\n"
                 "Default: 29500")
      ->type_name("PORT");
  app.add_flag("--standalone", standalone,
               "Single-node job on its own: MASTER_ADDR=127.0.0.1, a free\n"
               "port, a random run id (not with --master-addr, --master-port\n"
               "or --nnodes > 1)");
  app.add_option("--max-restarts,--max_restarts", max_restarts,
                 "After a worker fails, stop all and start them again, up to K\n"
                 "times (TORCHELASTIC_RESTART_COUNT counts them). Default: 0")
      ->type_name("K");
  app.add_option("--collective-timeout,--collective_timeout", collective_timeout,
                 "Seconds one collective may take (LOCKSTEP_TIMEOUT for the\n"
                 "workers); in a job of several ranks, a worker that sends no\n"
                 "heartbeat or reaches no collective for that long is killed\n"
                 "and the job stopped. Default: LOCKSTEP_TIMEOUT, else 1800")
      ->type_name("S");
  app.add_option("--log-dir,--log_dir", log_dir,
                 "Also write each rank's output, unprefixed, to\n"
                 "DIR/rank_N.stdout.log and DIR/rank_N.stderr.log (DIR is\n"
                 "created)")
      ->type_name("DIR");
  app.add_option("--rdzv-id,--rdzv_id,--run-id,--run_id", run_id,
                 "Job id (TORCHELASTIC_RUN_ID), the same on every node.\n"
                 "Default: random for a single-node job, 'none' with --nnodes > 1\n"
                 "(with a warning: pass the scheduler's job id)")
      ->type_name("ID");

  if (const int status = parse_or_status(app, argc, argv, usage_error); status >= 0) return status;
  std::vector<std::string> command;
  if (const auto unknown = take_command(app, command)) {
    return usage_error("unknown option '" + *unknown +
                       "' (put the worker command after the flags, or after --)");
  }
  if (command.empty())
    return usage_error("no worker command given (usage: lockstep run [flags] [--] CMD [ARGS...])");

  std::optional<launch::Launcher> launcher;
  try {
    if (!standalone) apply_slurm_defaults(nnodes, node_rank, master_addr, master_port, run_id);
    launch::LaunchOptions options(command);
    if (nproc) options.nproc_per_node(launch::NprocPerNode::parse(*nproc));
    if (nnodes) options.nnodes(parse_int("--nnodes", *nnodes, "an integer >= 1"));
    if (node_rank) options.node_rank(parse_int("--node-rank", *node_rank, "an integer >= 0"));
    if (master_addr) options.master_addr(*master_addr);
    if (master_port) options.master_port(parse_int("--master-port", *master_port, "a port in 1..65535"));
    if (max_restarts) options.max_restarts(parse_int("--max-restarts", *max_restarts, "an integer >= 0"));
    if (log_dir) options.log_dir(*log_dir);
    if (collective_timeout)
      options.collective_timeout(parse_seconds("--collective-timeout", *collective_timeout));
    if (run_id) options.run_id(*run_id);
    options.standalone(standalone);
    launcher.emplace(options);
    if (launcher->config().nnodes > 1 && !run_id) {
      std::cerr << "lockstep run: warning: no --rdzv-id for a multi-node job; using run id 'none', so a "
                   "process of another job started the same way could join this one — pass --rdzv-id "
                   "<job id> on every node\n";
    }
  } catch (const UsageError& e) {
    return usage_error(e.message);
  } catch (const launch::LaunchError& e) {
    return usage_error(in_flag_words(e.what(), option_flags(app)));
  }

  try {
    return launcher->run().exit_status;
  } catch (const launch::LaunchError& e) {
    std::cerr << "lockstep run: " << in_flag_words(e.what(), option_flags(app)) << '\n';
    return 1;
  }
}

}  // namespace lockstep::cli
