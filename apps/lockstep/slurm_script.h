#pragma once

#include <optional>
#include <string>
#include <vector>

namespace lockstep::cli {

/// How a Slurm job starts its ranks (the seed's three shapes).
enum class SlurmStyle {
  /// One task per node runs the command, which starts that node's ranks itself (Lightning's
  /// `--ntasks-per-node=1` with `Trainer(devices=N, num_nodes=M)`; here `lockstep fit --devices N
  /// --num-nodes M`, which reads its node from Slurm).
  kLightning,
  /// One task per node runs `lockstep run --nproc-per-node N -- CMD`, which takes the node count, node
  /// rank, master and job id from Slurm (torchrun under srun).
  kTorchrun,
  /// One task per rank (per device) runs CMD directly; each reads its rank from SLURM_PROCID (native DDP
  /// under srun, no launcher).
  kDdp,
};

/// "lightning", "torchrun", "ddp".
const char* to_string(SlurmStyle style);

/// What `lockstep slurm` writes: an sbatch script for one job shape. Fields mirror the flags.
struct SlurmScriptOptions {
  SlurmStyle style = SlurmStyle::kTorchrun;
  int nodes = 1;                       ///< --nodes: nodes of the job (>= 1)
  std::optional<int> ntasks_per_node;  ///< --ntasks-per-node: ranks per node; unset: gpus_per_node, else 1
  int gpus_per_node = 0;               ///< --gpus-per-node: GPUs requested per node; 0 = none requested
  /// --gres: Slurm's generic resource request instead ("gpu:4", "gpu:a100:4"); its count sets gpus_per_node,
  /// and the script asks with `#SBATCH --gres=` (clusters that predate --gpus-per-node).
  std::string gres;
  std::optional<int>
      cpus_per_task;      ///< --cpus-per-task: Slurm's meaning (one launcher task holds a node's ranks)
  std::string time;       ///< --time: Slurm's time limit ("2:00:00", "1-00:00:00"); "" = the partition's
  std::string partition;  ///< --partition; "" = the cluster's default
  std::string account;    ///< --account; "" = the user's default
  std::string job_name = "lockstep";  ///< --job-name
  std::string output =
      "lockstep_%j.out";           ///< --output: sbatch's output file pattern (appended across requeues)
  std::string signal = "USR1@90";  ///< --signal: the preemption notice, sbatch's [R:]SIG[@SECONDS]
  bool requeue = true;             ///< --requeue / --no-requeue: requeue the job after a preemption (exit 75)
  std::string lockstep = "lockstep";  ///< --lockstep: the program the torchrun style runs as `lockstep run`
  std::vector<std::string> command;   ///< the training command, one argument per element

  /// GPUs per node: gpus_per_node, or the count of gres.
  int gpus() const;
  /// Ranks started on each node: ntasks_per_node, else gpus() when > 0, else 1.
  int ranks_per_node() const;

  /// Throws std::invalid_argument naming the flag, the bad value and what is accepted: nodes,
  /// ntasks_per_node or cpus_per_task < 1, gpus_per_node < 0, a ddp job whose ntasks_per_node differs from
  /// gpus_per_node (one task per device), a time, partition, account, job name, output or signal that sbatch
  /// would not take (or that would break the script: newlines, quotes), an empty command.
  void validate() const;
};

/// The sbatch script for `options` (validated first; throws std::invalid_argument like validate()).
///
/// Every style: `#SBATCH` lines for the shape, `--signal` (the notice goes to every task of the step,
/// where lockstep fit with --ckpt-dir writes last.ckpt at the next step and exits 75 =
/// kPreemptedExitStatus), `--open-mode=append`, and with `requeue` `--requeue` plus a check after the step:
/// exit status 75 runs `scontrol requeue $SLURM_JOB_ID`, so the job starts again from its checkpoint. A
/// `lockstep fit` command with --ckpt-dir and no --resume gets `--resume auto` (resume when last.ckpt
/// exists), so that the requeued run resumes and the first one starts fresh. Arguments are quoted for
/// bash where needed.
///
/// Example:
///   SlurmScriptOptions o;
///   o.nodes = 2;
///   o.ntasks_per_node = 4;
///   o.command = {"lockstep", "fit", "--ckpt-dir", "ckpt"};
///   std::string script = slurm_script(o);  // srun --ntasks-per-node=1 lockstep run --nproc-per-node 4 ...
std::string slurm_script(const SlurmScriptOptions& options);

/// `word` quoted for bash when it needs it (single quotes; a quote inside becomes '\''); as is otherwise.
std::string shell_quote(const std::string& word);

/// Parses `lockstep slurm`'s arguments (argv[0] is the command name) into `options`.
/// Returns -1 with `options` filled, or the exit status to return at once: 0 after --help, 2 after a
/// usage error (printed to stderr, naming the flag and the fix). `output_file` gets -o FILE ("" = stdout).
int parse_slurm_flags(int argc, char** argv, SlurmScriptOptions& options, std::string& output_file);

}  // namespace lockstep::cli
