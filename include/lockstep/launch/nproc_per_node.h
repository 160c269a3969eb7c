#pragma once

#include <functional>
#include <string>

namespace lockstep::launch {

/// Counts the accelerators (GPUs) this node offers its workers; 0 when there are none.
using DeviceCounter = std::function<int()>;

/// The value of `--nproc-per-node`: a count of workers, `auto`, `cpu` or `gpu` (torchrun's spellings).
///
/// `auto` means one worker per accelerator when the node has any (as torchrun does for CUDA), else one
/// per online CPU core; `gpu` one worker per visible GPU, and an error on a node without one.
///
/// Example:
///   LaunchOptions(cmd).nproc_per_node(4);
///   LaunchOptions(cmd).nproc_per_node(NprocPerNode::automatic());
///   NprocPerNode::parse("auto");  // from a command line
class NprocPerNode {
 public:
  /// A fixed count (validated when the options are resolved: must be >= 1). Implicit, so that
  /// `nproc_per_node(4)` reads naturally.
  NprocPerNode(int count) : count_(count) {}  // NOLINT(google-explicit-constructor)

  /// `auto`: accelerators if any, else online CPU cores.
  static NprocPerNode automatic();
  /// `gpu`: one worker per accelerator; resolve() throws when there is none.
  static NprocPerNode gpus();
  /// `cpu`: one worker per online CPU core (torchrun's spelling).
  static NprocPerNode cpus();

  /// Parses a command-line value: "auto", "cpu", "gpu" or a positive integer. Throws `LaunchError` naming
  /// --nproc-per-node and the value otherwise.
  static NprocPerNode parse(const std::string& text);

  bool is_auto() const { return auto_; }
  bool is_gpu() const { return gpu_; }
  bool is_cpu() const { return cpu_; }
  /// The fixed count; meaningless when `is_auto()`.
  int count() const { return count_; }

  /// The number of workers: the fixed count, or for `auto` `count_devices()` when that is > 0, else
  /// the online CPU cores (at least 1); for `gpu` `count_devices()`, or LaunchError when it is 0.
  int resolve(const DeviceCounter& count_devices) const;

 private:
  NprocPerNode() = default;
  int count_ = 1;
  bool auto_ = false;
  bool gpu_ = false;
  bool cpu_ = false;
};

/// The accelerators visible to this process without loading any GPU runtime: NVIDIA GPUs listed by the
/// driver under /proc/driver/nvidia/gpus, limited by CUDA_VISIBLE_DEVICES when that is set (read as
/// CUDA reads it, see `detail::count_cuda_visible_devices`: "-1" or "" hide every GPU, so `auto` falls
/// back to CPU cores). 0 on machines without the NVIDIA driver. The default `DeviceCounter` of
/// `LaunchOptions`.
int visible_cuda_device_count();

namespace detail {

/// How many of `physical` GPUs CUDA_VISIBLE_DEVICES=`list` leaves visible, as CUDA reads the list:
/// comma-separated device indices or "GPU-"/"MIG-" UUIDs (spaces ignored); the first invalid entry
/// (negative, out of range, repeated, empty or other text) ends it, only the entries before it count.
/// "0,1" -> 2, "1,-1,0" -> 1, "-1" -> 0, "" -> 0.
int count_cuda_visible_devices(const std::string& list, int physical);

}  // namespace detail

}  // namespace lockstep::launch
