// `lockstep slurm`: writes an sbatch script for one of the seed's three job shapes (see SlurmStyle), with
// the preemption notice and the requeue wired to lockstep fit's checkpoint-and-exit-75.
//
// Why the step runs with `srun --kill-on-bad-exit=0 --wait=60`: after a preemption notice every rank
// writes its part and exits 75 within milliseconds of the others, and the script requeues on exactly that
// status. With --kill-on-bad-exit=1 (some clusters make it the default) srun kills the tasks still
// finishing as soon as the first one exits non-zero and then reports 143, not 75. A failing rank still
// ends the job: lockstep's ranks fail when a peer disappears (and `lockstep run` stops its node's
// workers), and --wait=60 ends whatever is left 60 s after the first task exited.
#include "slurm_script.h"

#include "lockstep/comm/job_secret.h"

#include "cli_parse.h"
#include "lockstep/detail/enum_names.h"
#include "lockstep/detail/worker_contract.h"

#include <algorithm>
#include <iostream>
#include <memory>
#include <regex>
#include <sstream>
#include <stdexcept>

#include <CLI/CLI.hpp>

namespace lockstep::cli {
namespace {

using lockstep::detail::kPreemptedExitStatus;  // lockstep/detail/worker_contract.h

constexpr lockstep::detail::EnumNames<SlurmStyle, 3> kStyleNames{
    {{SlurmStyle::kTorchrun, "torchrun"}, {SlurmStyle::kDdp, "ddp"}, {SlurmStyle::kLightning, "lightning"}}};

[[noreturn]] void bad(const std::string& message) {
  throw std::invalid_argument(message);
}

// Values that land in an `#SBATCH --flag=VALUE` line: sbatch splits those lines at blanks and knows
// no quoting, and a newline would end the line.
void check_sbatch_value(const std::string& flag, const std::string& value, const std::regex& accepted,
                        const std::string& expected) {
  if (!std::regex_match(value, accepted))
    bad(flag + "='" + value + "' is not valid (expected " + expected + ")");
}

bool is_lockstep_fit(const std::vector<std::string>& command) {
  if (command.size() < 2 || command[1] != "fit") return false;
  const std::string& program = command[0];
  const std::size_t slash = program.rfind('/');
  return (slash == std::string::npos ? program : program.substr(slash + 1)) == "lockstep";
}

bool has_flag(const std::vector<std::string>& command, std::initializer_list<const char*> names) {
  for (const std::string& arg : command) {
    for (const char* name : names) {
      const std::string flag = name;
      if (arg == flag || arg.rfind(flag + "=", 0) == 0) return true;
    }
  }
  return false;
}

// `words` quoted and joined, broken into lines of about 100 characters with " \" continuations; a line
// breaks only before a flag, so that a flag and its value stay together.
std::string command_line(const std::vector<std::string>& words) {
  std::string text, line;
  for (const std::string& word : words) {
    const std::string quoted = shell_quote(word);
    if (!line.empty() && line != "  " && word.size() > 1 && word[0] == '-' &&
        line.size() + 1 + quoted.size() > 100) {
      text += line + " \\\n";
      line = "  ";
    }
    if (!line.empty() && line != "  ") line += ' ';
    line += quoted;
  }
  return text + line;
}

}  // namespace

const char* to_string(SlurmStyle style) {
  return lockstep::detail::enum_to_string(kStyleNames, style);
}

// --gres gpu:N / gpu:TYPE:N: N, or -1 when the text is not such a request.
int gres_gpus(const std::string& gres) {
  static const std::regex gres_re("gpu(:[A-Za-z0-9_.-]+)?:([1-9][0-9]{0,3})");
  std::smatch m;
  return std::regex_match(gres, m, gres_re) ? std::stoi(m[2].str()) : -1;
}

int SlurmScriptOptions::gpus() const {
  if (gpus_per_node > 0 || gres.empty()) return gpus_per_node;
  return std::max(0, gres_gpus(gres));
}

int SlurmScriptOptions::ranks_per_node() const {
  if (ntasks_per_node) return *ntasks_per_node;
  return gpus() > 0 ? gpus() : 1;
}

void SlurmScriptOptions::validate() const {
  if (nodes < 1) bad("--nodes=" + std::to_string(nodes) + " is not valid (expected an integer >= 1)");
  if (ntasks_per_node && *ntasks_per_node < 1) {
    bad("--ntasks-per-node=" + std::to_string(*ntasks_per_node) +
        " is not valid (expected an integer >= 1: ranks per node)");
  }
  if (gpus_per_node < 0) {
    bad("--gpus-per-node=" + std::to_string(gpus_per_node) +
        " is not valid (expected an integer >= 0; 0 = no GPUs)");
  }
  if (!gres.empty()) {
    if (gres_gpus(gres) < 0)
      bad("--gres='" + gres +
          "' is not a GPU request (expected gpu:N or gpu:TYPE:N, e.g. gpu:4 or gpu:a100:4)");
    if (gpus_per_node > 0 && gpus_per_node != gres_gpus(gres)) {
      bad("--gres=" + gres + " and --gpus-per-node=" + std::to_string(gpus_per_node) +
          " ask for different GPU counts: give one of them");
    }
  }
  if (cpus_per_task && *cpus_per_task < 1) {
    bad("--cpus-per-task=" + std::to_string(*cpus_per_task) + " is not valid (expected an integer >= 1)");
  }
  if (style == SlurmStyle::kDdp && ntasks_per_node && gpus() > 0 && *ntasks_per_node != gpus()) {
    bad("--style ddp runs one task per device, but --ntasks-per-node=" + std::to_string(*ntasks_per_node) +
        " differs from the GPUs per node (" + std::to_string(gpus()) + ")" +
        ": make them equal (or drop --ntasks-per-node), or use --style torchrun");
  }
  static const std::regex time_re("([0-9]+-)?[0-9]+(:[0-9]+){0,2}|UNLIMITED|INFINITE");
  static const std::regex name_re("[A-Za-z0-9._,-]+");
  static const std::regex job_name_re("[A-Za-z0-9._+-]+");
  static const std::regex output_re("[A-Za-z0-9._%/+-]+");
  static const std::regex signal_re("(R:)?(SIG)?([A-Z][A-Z0-9]*|[0-9]+)(@[0-9]+)?");
  if (!time.empty()) {
    check_sbatch_value("--time", time, time_re, "Slurm's time limit: MINUTES, H:MM:SS or D-HH:MM:SS");
  }
  if (!partition.empty()) check_sbatch_value("--partition", partition, name_re, "a partition name, e.g. gpu");
  if (!account.empty()) check_sbatch_value("--account", account, name_re, "an account name, e.g. proj42");
  check_sbatch_value("--job-name", job_name, job_name_re, "letters, digits and ._+- only, e.g. mnist-ddp");
  check_sbatch_value("--output", output, output_re,
                     "a file pattern without blanks or quotes, e.g. logs/train_%j.out");
  if (signal.rfind("B:", 0) == 0) {
    bad("--signal='" + signal +
        "' sends the notice to the batch script only, which would die of it while "
        "the ranks never hear of it: drop 'B:' (e.g. --signal=USR1@90)");
  }
  check_sbatch_value("--signal", signal, signal_re, "sbatch's [R:]SIG[@SECONDS], e.g. USR1@90");
  if (lockstep.empty() || lockstep.find_first_of(" \t\n'\"") != std::string::npos) {
    bad("--lockstep='" + lockstep +
        "' is not valid (expected the path of the lockstep program, without blanks)");
  }
  if (command.empty() || command.front().empty()) {
    bad("no training command given (usage: lockstep slurm [flags] -- CMD [ARGS...], e.g. -- lockstep fit "
        "--ckpt-dir ckpt)");
  }
}

std::string shell_quote(const std::string& word) {
  static const std::regex plain("[A-Za-z0-9_./:=@%+,-]+");
  if (std::regex_match(word, plain)) return word;
  std::string quoted = "'";
  for (const char c : word) {
    if (c == '\'') {
      quoted += "'\\''";
    } else {
      quoted += c;
    }
  }
  return quoted + "'";
}

std::string slurm_script(const SlurmScriptOptions& options) {
  options.validate();
  const int ranks = options.ranks_per_node();
  const int world = options.nodes * ranks;
  const bool ddp = options.style == SlurmStyle::kDdp;

  std::vector<std::string> command = options.command;
  const bool fit = is_lockstep_fit(command);
  const bool resume_auto = fit && options.requeue && has_flag(command, {"--ckpt-dir", "--ckpt_dir"}) &&
                           !has_flag(command, {"--resume"});
  if (resume_auto) {
    command.emplace_back("--resume");
    command.emplace_back("auto");
  }

  std::ostringstream s;
  s << "#!/bin/bash\n";
  s << "# Written by `lockstep slurm --style " << to_string(options.style) << "`: " << options.nodes
    << " node(s) x " << ranks << " rank(s) = " << world << " rank(s)";
  switch (options.style) {
    case SlurmStyle::kLightning:
      s << ";\n# one task per node runs the command, which starts its node's " << ranks
        << " rank(s) itself\n# (lockstep fit --devices " << ranks << " --num-nodes " << options.nodes
        << " reads its node, the master and the job id from Slurm).\n";
      break;
    case SlurmStyle::kTorchrun:
      s << ";\n# one `lockstep run --nproc-per-node " << ranks
        << "` per node, which takes the node count, its node rank,\n# the master and the job id from "
           "Slurm.\n";
      break;
    case SlurmStyle::kDdp:
      s << ";\n# one task per rank (per device), no launcher: each rank reads SLURM_PROCID, SLURM_NTASKS,\n"
           "# SLURM_LOCALID and the master (first host of the nodelist, port 10000 + job id % 10000).\n";
      break;
  }
  s << "#SBATCH --job-name=" << options.job_name << "\n";
  s << "#SBATCH --nodes=" << options.nodes << "\n";
  s << "#SBATCH --ntasks-per-node=" << (ddp ? ranks : 1) << "\n";
  if (!options.gres.empty()) {
    s << "#SBATCH --gres=" << options.gres << "\n";
  } else if (options.gpus_per_node > 0) {
    s << "#SBATCH --gpus-per-node=" << options.gpus_per_node << "\n";
  }
  if (options.cpus_per_task) s << "#SBATCH --cpus-per-task=" << *options.cpus_per_task << "\n";
  if (!options.time.empty()) s << "#SBATCH --time=" << options.time << "\n";
  if (!options.partition.empty()) s << "#SBATCH --partition=" << options.partition << "\n";
  if (!options.account.empty()) s << "#SBATCH --account=" << options.account << "\n";
  s << "#SBATCH --output=" << options.output << "\n";
  s << "#SBATCH --open-mode=append\n";
  s << "#SBATCH --signal=" << options.signal << "\n";
  s << (options.requeue ? "#SBATCH --requeue\n" : "#SBATCH --no-requeue\n");
  s << "\n";
  s << "# Preemption: the notice (--signal " << options.signal
    << ", or `scancel --signal=USR1 $SLURM_JOB_ID`) reaches every task\n"
       "# of the step; lockstep fit with --ckpt-dir writes last.ckpt at the next step and every rank exits "
    << kPreemptedExitStatus << ".\n";
  if (options.requeue) {
    s << "# Exit status " << kPreemptedExitStatus
      << " requeues the job (below); the requeued run resumes from last.ckpt"
      << (resume_auto ? " (--resume auto,\n# added by lockstep slurm: resume when last.ckpt exists).\n"
                      : ".\n");
  }
  s << "# --kill-on-bad-exit=0: a rank exiting " << kPreemptedExitStatus
    << " must not get the others killed (srun would report 143);\n"
       "# a failing rank still ends the job, and --wait=60 ends what is left 60 s after the first task "
       "exits.\n";

  s << "\n# The job secret: its tasks prove it to the job's rendezvous store, so that a process that knows "
       "only\n"
       "# the job id cannot join. A new one for each run of this script; srun hands it to every task.\n"
       "export "
    << comm::kJobSecretVariable << "=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n')\n\n";

  std::vector<std::string> step{"srun", "--kill-on-bad-exit=0", "--wait=60"};
  switch (options.style) {
    case SlurmStyle::kLightning:
      step.emplace_back("--ntasks-per-node=1");
      break;
    case SlurmStyle::kTorchrun:
      step.insert(step.end(), {"--ntasks-per-node=1", options.lockstep, "run", "--nproc-per-node",
                               std::to_string(ranks), "--"});
      break;
    case SlurmStyle::kDdp:
      step.emplace_back("--ntasks-per-node=" + std::to_string(ranks));
      break;
  }
  step.insert(step.end(), command.begin(), command.end());
  s << command_line(step) << "\n";
  s << "status=$?\n";
  s << "if [ \"$status\" -eq " << kPreemptedExitStatus << " ]; then\n";
  if (options.requeue) {
    s << "  echo \"lockstep slurm: job $SLURM_JOB_ID was preempted (checkpoint written, exit status "
      << kPreemptedExitStatus << "): requeueing it\" >&2\n";
    s << "  scontrol requeue \"$SLURM_JOB_ID\"\n";
  } else {
    s << "  echo \"lockstep slurm: job $SLURM_JOB_ID was preempted (checkpoint written, exit status "
      << kPreemptedExitStatus << "): submit it again to resume\" >&2\n";
  }
  s << "fi\n";
  s << "exit \"$status\"\n";
  return s.str();
}

int parse_slurm_flags(int argc, char** argv, SlurmScriptOptions& options, std::string& output_file) {
  CLI::App app(
      "Write an sbatch script that runs CMD on a Slurm cluster in one of three shapes:\n"
      "  torchrun   one `lockstep run --nproc-per-node N` per node (default)\n"
      "  ddp        one task per rank (per device), CMD started by srun directly\n"
      "  lightning  one task per node; CMD starts its node's ranks (lockstep fit --devices N --num-nodes M)\n"
      "With the preemption notice (--signal) lockstep fit --ckpt-dir writes last.ckpt and exits 75;\n"
      "the script then requeues the job (scontrol requeue), and the requeued run resumes.",
      "lockstep slurm");
  app.prefix_command();
  auto formatter = std::make_shared<CommandFormatter>("-- CMD [ARGS...]");
  formatter->column_width(30);
  app.formatter(formatter);
  app.footer(
      "Examples:\n"
      "  lockstep slurm --nodes 2 --gpus-per-node 4 --cpus-per-task 32 --time 4:00:00 \\\n"
      "      -o train.sbatch -- lockstep fit --model resnet18 --data cifar10 --data-dir data --ckpt-dir "
      "ckpt\n"
      "  lockstep slurm --style ddp --nodes 2 --ntasks-per-node 4 -- ./train_ddp --epochs 10\n"
      "  sbatch train.sbatch");
  std::string style = "torchrun";
  app.add_option("--style", style, "Job shape: " + lockstep::detail::enum_names_text(kStyleNames, " | "))
      ->capture_default_str();
  app.add_option("--nodes,-N", options.nodes, "Nodes of the job")->capture_default_str();
  app.add_option("--ntasks-per-node", options.ntasks_per_node,
                 "Ranks per node (tasks per node for --style ddp). Default: --gpus-per-node, else 1")
      ->type_name("N");
  app.add_option("--gpus-per-node", options.gpus_per_node, "GPUs to request per node (0 = none)")
      ->capture_default_str();
  app.add_option("--gres", options.gres,
                 "GPUs as a generic resource, gpu:N or gpu:TYPE:N (instead of --gpus-per-node;\n"
                 "N sets the GPUs per node)")
      ->type_name("gpu:[TYPE:]N");
  app.add_option("--cpus-per-task", options.cpus_per_task,
                 "CPUs per task (Slurm's meaning: with torchrun and lightning one task holds\n"
                 "all ranks of its node)")
      ->type_name("N");
  app.add_option("--time,-t", options.time,
                 "Time limit (MINUTES, H:MM:SS, D-HH:MM:SS). Default: the partition's");
  app.add_option("--partition,-p", options.partition, "Partition. Default: the cluster's");
  app.add_option("--account,-A", options.account, "Account to charge. Default: yours");
  app.add_option("--job-name,-J", options.job_name, "Job name")->capture_default_str();
  app.add_option("--output", options.output, "sbatch's output file (%j = job id); requeued runs append")
      ->capture_default_str();
  app.add_option("--signal", options.signal, "Preemption notice to every rank, sbatch's [R:]SIG[@SECONDS]")
      ->capture_default_str();
  app.add_flag("--requeue,!--no-requeue", options.requeue,
               "Requeue the job after a preemption (exit 75); default on");
  app.add_option("--lockstep", options.lockstep, "The lockstep program the torchrun style runs")
      ->capture_default_str();
  app.add_option("-o,--script", output_file, "Write the script to FILE (made executable). Default: stdout")
      ->type_name("FILE");

  auto usage_error = [](const std::string& message) {
    std::cerr << "lockstep slurm: " << message << "\nRun 'lockstep slurm --help' for the flags.\n";
    return 2;
  };
  if (const int status = parse_or_status(app, argc, argv, usage_error); status >= 0) return status;
  std::vector<std::string> command;
  if (const auto unknown = take_command(app, command)) {
    return usage_error("unknown option '" + *unknown + "' (put the training command after --)");
  }
  options.command = command;
  try {
    options.style = lockstep::detail::parse_enum(kStyleNames, style, "--style");
  } catch (const std::invalid_argument& e) {
    return usage_error(e.what());
  }
  try {
    options.validate();
  } catch (const std::invalid_argument& e) {
    return usage_error(e.what());
  }
  return -1;
}

}  // namespace lockstep::cli
