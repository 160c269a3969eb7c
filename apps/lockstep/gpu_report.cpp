// `lockstep env`'s GPU part (gpu_report.h).
#include "gpu_report.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <regex>
#include <sstream>
#include <stdexcept>

#include "lockstep/launch/nproc_per_node.h"

#ifndef LOCKSTEP_TORCH_VERSION_TEXT
#define LOCKSTEP_TORCH_VERSION_TEXT "?"
#endif
#ifndef LOCKSTEP_CUDA_VERSION_TEXT
#define LOCKSTEP_CUDA_VERSION_TEXT "none"
#endif
#ifndef LOCKSTEP_NCCL_VERSION_TEXT
#define LOCKSTEP_NCCL_VERSION_TEXT "none"
#endif

namespace lockstep::cli {
namespace {

std::vector<std::string> words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

bool is_gpu(const std::string& word) {
  static const std::regex gpu("GPU[0-9]+");
  return std::regex_match(word, gpu);
}

// stdout of `command` (empty when it cannot run or fails).
std::string output_of(const std::string& command) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(::popen((command + " 2>/dev/null").c_str(), "r"), ::pclose);
  if (!pipe) return "";
  std::string out;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe.get())) > 0;) out.append(buffer, n);
  return out;
}

}  // namespace

GpuTopology parse_topology(const std::string& text) {
  GpuTopology topology;
  std::istringstream in(text);
  size_t columns = 0;  // GPU columns of the header
  for (std::string line; std::getline(in, line);) {
    // nvidia-smi colours the matrix on a terminal: drop the escape sequences.
    line = std::regex_replace(line, std::regex("\x1b\\[[0-9;]*m"), "");
    const std::vector<std::string> w = words(line);
    if (w.empty()) continue;
    if (columns == 0) {
      if (!is_gpu(w[0])) continue;
      while (columns < w.size() && is_gpu(w[columns])) ++columns;  // the header: GPU0 GPU1 ... NIC0 CPU ...
      continue;
    }
    if (!is_gpu(w[0])) continue;  // NIC rows, the legend
    if (w.size() < columns + 1) {
      throw std::invalid_argument("nvidia-smi topo -m: the row '" + line + "' has fewer than the " +
                                  std::to_string(columns) + " GPU columns of its header");
    }
    topology.gpus.push_back(w[0]);
    topology.links.emplace_back(w.begin() + 1, w.begin() + 1 + static_cast<std::ptrdiff_t>(columns));
  }
  return topology;
}

std::vector<std::string> topology_advice(const GpuTopology& topology) {
  std::vector<std::string> advice;
  for (size_t i = 0; i < topology.links.size(); ++i) {
    for (size_t j = i + 1; j < topology.links[i].size(); ++j) {
      if (topology.links[i][j] != "SYS") continue;
      advice.push_back(topology.gpus[i] + " and GPU" + std::to_string(j) +
                       " reach each other only over SYS (the CPUs' interconnect, another NUMA node): if "
                       "multi-GPU training hangs, set NCCL_P2P_DISABLE=1 (NCCL's peer-to-peer transfers "
                       "over SYS can hang; they then go through host memory)");
      i = topology.links.size();  // one line is enough
      break;
    }
  }
  if (!topology.gpus.empty()) {
    advice.push_back(
        "a job that hangs or fails at init: run it with NCCL_DEBUG=INFO to see what NCCL does "
        "(NCCL_SOCKET_IFNAME=IFACE names the network interface between nodes)");
  }
  return advice;
}

std::vector<std::string> gpu_report_lines() {
  std::vector<std::string> lines;
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");  // NOLINT(concurrency-mt-unsafe)
  lines.push_back("gpu_count=" + std::to_string(launch::visible_cuda_device_count()));
  lines.push_back(std::string("cuda_visible_devices=") + (visible ? visible : "(unset)"));
  lines.push_back("built_with_libtorch=" LOCKSTEP_TORCH_VERSION_TEXT);
  lines.push_back("built_with_cuda=" LOCKSTEP_CUDA_VERSION_TEXT);
  lines.push_back("built_with_nccl=" LOCKSTEP_NCCL_VERSION_TEXT);
  const std::string list =
      output_of("nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader");
  if (list.empty()) {
    lines.push_back("nvidia_smi=not found (no NVIDIA driver here, or not on PATH)");
    return lines;
  }
  std::istringstream in(list);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back("gpu=" + line);
  const std::string matrix = output_of("nvidia-smi topo -m");
  std::istringstream topo(matrix);
  for (std::string line; std::getline(topo, line);)
    if (!line.empty()) lines.push_back("topology=" + line);
  try {
    for (const std::string& advice : topology_advice(parse_topology(matrix)))
      lines.push_back("advice=" + advice);
  } catch (const std::invalid_argument& e) {
    lines.push_back(std::string("advice=(topology not understood: ") + e.what() + ")");
  }
  return lines;
}

}  // namespace lockstep::cli
