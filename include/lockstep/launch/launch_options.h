#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/launch/nproc_per_node.h"

namespace lockstep::launch {

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
  /// `command`: the worker program and its arguments, passed to execvp untouched (looked up in PATH).
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

  /// --nnodes: nodes in the job; each runs one launcher with the same flags except --node-rank.
  LOCKSTEP_LAUNCH_ARG(int, nnodes) = 1;

  /// --node-rank: this node's index in [0, nnodes); GROUP_RANK of its workers.
  LOCKSTEP_LAUNCH_ARG(int, node_rank) = 0;

  /// --master-addr: where rank 0 hosts the rendezvous store (MASTER_ADDR). Unset: 127.0.0.1.
  LOCKSTEP_LAUNCH_ARG(std::optional<std::string>, master_addr);

  /// --master-port: the rendezvous store's TCP port (MASTER_PORT), 1..65535. Unset: 29500.
  LOCKSTEP_LAUNCH_ARG(std::optional<int>, master_port);

  /// --standalone: a single-node job on a free local port: MASTER_ADDR=127.0.0.1, MASTER_PORT picked
  /// by the OS, a random run id. Requires nnodes == 1 and no master_addr/master_port.
  LOCKSTEP_LAUNCH_ARG(bool, standalone) = false;

  /// --max-restarts: how many times all local workers are restarted after one of them fails
  /// (TORCHELASTIC_RESTART_COUNT counts them). Restarts are per node: with nnodes > 1 they line up only
  /// when every node's workers fail together (as they do when a peer of a collective disappears).
  LOCKSTEP_LAUNCH_ARG(int, max_restarts) = 0;

  /// --log-dir: also write each rank's raw output to DIR/rank_N.stdout.log and DIR/rank_N.stderr.log
  /// (DIR is created). Unset: no files.
  LOCKSTEP_LAUNCH_ARG(std::optional<std::string>, log_dir);

  /// --rdzv-id / --run-id: the job id (TORCHELASTIC_RUN_ID), the same on every node. Unset: random
  /// hex for a single-node job, "none" for nnodes > 1 (as torchrun) so that all nodes agree.
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

  /// How long stopped workers get between SIGTERM and SIGKILL.
  LOCKSTEP_LAUNCH_ARG(std::chrono::milliseconds, grace_period) = std::chrono::seconds(3);

  /// Counts accelerators for `nproc_per_node(auto)`. Default: `visible_cuda_device_count`. Plug in
  /// torch::cuda::device_count from a layer that links LibTorch; the launcher itself never loads it.
  LOCKSTEP_LAUNCH_ARG(DeviceCounter, device_counter) = visible_cuda_device_count;

#undef LOCKSTEP_LAUNCH_ARG
};

}  // namespace lockstep::launch
