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
#include "torchrun_flags.h"

namespace lockstep::cli {
namespace {

namespace launch = lockstep::launch;

constexpr const char* kRunDescription =
    "Start N copies of CMD on this node, each with torchrun's environment:\n"
    "  RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, ROLE_RANK,\n"
    "  ROLE_WORLD_SIZE, ROLE_NAME, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT,\n"
    "  TORCHELASTIC_MAX_RESTARTS, TORCHELASTIC_RUN_ID, TORCHELASTIC_USE_AGENT_STORE=False,\n"
    "  TORCHELASTIC_SIGNALS_TO_HANDLE, TORCHELASTIC_ERROR_FILE (with a log dir); OMP_NUM_THREADS =\n"
    "  max(1, cores / N), TORCH_NCCL_ASYNC_ERROR_HANDLING=1 (as torchrun) and PYTHONUNBUFFERED=1 (Python\n"
    "  writes each line at once into the launcher's pipe), each only when not already set.\n"
    "Each worker's output lines are printed prefixed with \"[rank R] \" (stdout to stdout, stderr to\n"
    "stderr). When one worker fails, the others are stopped (SIGTERM, SIGKILL 3 s later). A worker\n"
    "never outlives its launcher: it is killed when the launcher dies, even by SIGKILL.\n"
    "Everything after the first non-option argument (or after --) is the worker command, passed\n"
    "untouched.\n"
    "--rdzv-backend c10d: one `lockstep run` per node, all with the same --rdzv-endpoint, --rdzv-id and\n"
    "--nnodes MIN:MAX. The node whose address the endpoint names hosts the rendezvous; node ranks follow\n"
    "the order of arrival; a round starts with MAX nodes, or with MIN once last_call_timeout has passed.\n"
    "A node that fails or stops answering ends the round: the others (at least MIN) start their workers\n"
    "again in a smaller world; a node that arrives later joins at the next round (docs/elastic.md).\n"
    "Started by srun, one task per node (srun --ntasks-per-node=1 lockstep run ...), it takes\n"
    "--nnodes (SLURM_NNODES), --node-rank (SLURM_NODEID), --master-addr (first host of the\n"
    "step's nodelist), --master-port (10000 + SLURM_JOB_ID % 10000) and --rdzv-id (the job and\n"
    "step id) from Slurm when they are not given (c10d: only --nnodes and --rdzv-id).";

constexpr const char* kRunFooter =
    "Exit status:\n"
    "  0        every worker exited with status 0 (--recovery in-place: every worker not lost)\n"
    "  S        the first worker that failed exited with status S (the others were stopped;\n"
    "           in place: the last one, when none was left to go on)\n"
    "  128+N    the first worker that failed was killed by signal N, or the launcher itself\n"
    "           received signal N (the stop signals are forwarded to every worker)\n"
    "  127/126  CMD was not found / could not be executed\n"
    "  2        bad flags\n"
    "  1        the launch could not start, or a c10d rendezvous failed (timeout, host lost)\n"
    "\n"
    "Examples:\n"
    "  lockstep run --nproc-per-node 4 --standalone ./train --epochs 3\n"
    "  lockstep run --nproc_per_node=2 train.py --lr 0.1           # python3 -u train.py --lr 0.1\n"
    "  # two nodes, static (run one on each):\n"
    "  lockstep run --nnodes 2 --node-rank 0 --nproc-per-node 4 --master-addr 10.0.0.1 \\\n"
    "               --master-port 29500 --rdzv-id job42 ./train\n"
    "  lockstep run --nnodes 2 --node-rank 1 --nproc-per-node 4 --master-addr 10.0.0.1 \\\n"
    "               --master-port 29500 --rdzv-id job42 ./train\n"
    "  # an elastic job of 2 to 4 nodes (the same line on every node, any order):\n"
    "  lockstep run --nnodes 2:4 --nproc-per-node 4 --rdzv-backend c10d --rdzv-endpoint 10.0.0.1:29400 \\\n"
    "               --rdzv-id job42 --max-restarts 3 ./train\n"
    "\n";

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
  app.footer(std::string(kRunFooter) + kTorchrunTable);
  app.prefix_command();  // the first positional and all after it are the worker command
  auto formatter = std::make_shared<CommandFormatter>("[--] CMD [ARGS...]");
  formatter->column_width(34);
  app.formatter(formatter);
  RunFlags flags;
  add_torchrun_flags(app, flags);

  if (const int status = parse_or_status(app, argc, argv, usage_error); status >= 0) return status;
  std::vector<std::string> command;
  if (const auto unknown = take_command(app, command)) {
    return usage_error("unknown option '" + *unknown +
                       "' (put the worker command after the flags, or after --; `lockstep run --help` lists "
                       "torchrun's flags)");
  }
  if (command.empty())
    return usage_error("no worker command given (usage: lockstep run [flags] [--] CMD [ARGS...])");

  std::optional<launch::Launcher> launcher;
  try {
    const bool c10d = flags.rdzv_backend && *flags.rdzv_backend == "c10d";
    if (!flags.standalone) {
      // Under c10d the rendezvous gives node ranks and the master; Slurm gives only the count and the id.
      std::optional<std::string> unused_rank, unused_addr, unused_port;
      apply_slurm_defaults(flags.nnodes, c10d ? unused_rank : flags.node_rank,
                           c10d ? unused_addr : flags.master_addr, c10d ? unused_port : flags.master_port,
                           flags.rdzv_id);
    }
    std::vector<std::string> warnings;
    const launch::LaunchOptions options = launch_options(flags, command, warnings);
    for (const std::string& warning : warnings) std::cerr << "lockstep run: warning: " << warning << '\n';
    launcher.emplace(options);
    if (launcher->config().max_nodes > 1 && !flags.rdzv_id) {
      std::cerr << "lockstep run: warning: no --rdzv-id for a multi-node job; using run id 'none', so a "
                   "process of another job started the same way could join this one — pass --rdzv-id "
                   "<job id> on every node\n";
    }
  } catch (const UsageError& e) {
    return usage_error(in_flag_words(e.message, option_flags(app)));
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
