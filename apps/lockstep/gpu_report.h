#pragma once

#include <string>
#include <vector>

namespace lockstep::cli {

/*
 * `lockstep env`'s GPU part: the GPUs, the CUDA and NCCL versions, the topology between the GPUs
 * (`nvidia-smi topo -m`) and the advice the seeds give for it. Torch-free: the CLI reads nvidia-smi's
 * output, and what lockstep was built with comes from CMake.
 */

/// The GPU-to-GPU part of `nvidia-smi topo -m`: links[i][j] is how GPU i reaches GPU j ("X" for itself,
/// "NV12", "PIX", "PXB", "PHB", "NODE", "SYS", ...). Rows and columns other than GPUs (NICs, affinities)
/// are left out.
struct GpuTopology {
  std::vector<std::string> gpus;  ///< "GPU0", "GPU1", ...
  std::vector<std::vector<std::string>> links;
};

/// Parses `nvidia-smi topo -m`'s matrix (its legend, if present, is ignored). Throws std::invalid_argument
/// naming the line when a GPU row has fewer link columns than the header has GPUs.
GpuTopology parse_topology(const std::string& text);

/// The advice for a node with this topology, one line each: NCCL_P2P_DISABLE=1 when some pair of GPUs
/// reaches each other only over SYS (the CPUs' interconnect: NCCL's peer-to-peer transfers there can hang),
/// naming the pair; and, on any node with GPUs, NCCL_DEBUG=INFO for a job that hangs or fails at init.
std::vector<std::string> topology_advice(const GpuTopology& topology);

/// The report `lockstep env` prints under "gpu": nvidia-smi's GPU list and topology when nvidia-smi is on
/// PATH, CUDA_VISIBLE_DEVICES, what lockstep was built with, and the advice. Lines "key=value" (advice as
/// "advice=...").
std::vector<std::string> gpu_report_lines();

}  // namespace lockstep::cli
