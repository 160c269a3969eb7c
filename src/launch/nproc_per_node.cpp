#include "lockstep/launch/nproc_per_node.h"

#include <dirent.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <string>
#include <vector>

#include "lockstep/launch/detail/host.h"
#include "lockstep/launch/launch_error.h"

namespace lockstep::launch {

NprocPerNode NprocPerNode::automatic() {
  NprocPerNode n;
  n.auto_ = true;
  return n;
}

NprocPerNode NprocPerNode::gpus() {
  NprocPerNode n;
  n.gpu_ = true;
  return n;
}

NprocPerNode NprocPerNode::cpus() {
  NprocPerNode n;
  n.cpu_ = true;
  return n;
}

NprocPerNode NprocPerNode::parse(const std::string& text) {
  if (text == "auto") return automatic();
  if (text == "gpu") return gpus();
  if (text == "cpu") return cpus();
  // Decimal digits only: no sign, no spaces (strtol would take "+2" and " 2"), at most INT_MAX.
  long long value = 0;
  bool ok = !text.empty() && text.size() <= 10;
  for (const char c : text) {
    if (c < '0' || c > '9') {
      ok = false;
      break;
    }
    value = value * 10 + (c - '0');
  }
  if (!ok || value < 1 || value > INT_MAX) {
    throw LaunchError("nproc_per_node='" + text +
                      "' is not valid (expected a positive integer, 'auto', 'cpu' or 'gpu')");
  }
  return NprocPerNode(static_cast<int>(value));
}

int NprocPerNode::resolve(const DeviceCounter& count_devices) const {
  if (cpu_) return detail::online_cpu_count();
  if (!auto_ && !gpu_) return count_;
  const int devices = count_devices ? count_devices() : 0;
  if (gpu_ && devices == 0) {
    throw LaunchError(
        "nproc_per_node='gpu' starts one worker per GPU, and this node shows none (the NVIDIA driver's "
        "/proc/driver/nvidia/gpus, limited by CUDA_VISIBLE_DEVICES): give a count, or 'auto' (a worker per "
        "CPU core where there is no GPU)");
  }
  return devices > 0 ? devices : detail::online_cpu_count();
}

int visible_cuda_device_count() {
  // The NVIDIA driver lists one directory per GPU (named by PCI address); reading it loads no runtime.
  int physical = 0;
  if (DIR* dir = ::opendir("/proc/driver/nvidia/gpus")) {
    // NOLINTNEXTLINE(concurrency-mt-unsafe): a DIR* of our own
    while (const dirent* entry = ::readdir(dir)) {
      if (entry->d_name[0] != '.') ++physical;
    }
    ::closedir(dir);
  }
  if (physical == 0) return 0;
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");  // NOLINT(concurrency-mt-unsafe)
  if (visible == nullptr) return physical;
  return detail::count_cuda_visible_devices(visible, physical);
}

namespace detail {

int count_cuda_visible_devices(const std::string& list, int physical) {
  // As CUDA reads it: entries are device indices ("0,1") or UUIDs ("GPU-...", "MIG-..."), spaces
  // ignored; the first invalid entry (negative as in "-1", out of range, repeated, empty, other text)
  // ends the list, and only the entries before it are visible. So "-1" and "" hide every GPU.
  std::vector<std::string> seen;
  int listed = 0;
  std::size_t start = 0;
  while (start <= list.size() && listed < physical) {
    std::size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    std::string entry;
    for (std::size_t i = start; i < end; ++i) {
      if (list[i] != ' ' && list[i] != '\t') entry += list[i];
    }
    start = end + 1;
    bool valid = false;
    if (entry.rfind("GPU-", 0) == 0 || entry.rfind("MIG-", 0) == 0) {
      valid = entry.size() > 4;
    } else if (!entry.empty() && entry.size() <= 9 &&
               entry.find_first_not_of("0123456789") == std::string::npos) {
      valid = std::stoi(entry) < physical;
      if (valid) entry = std::to_string(std::stoi(entry));  // "01" is device 1
    }
    if (!valid || std::find(seen.begin(), seen.end(), entry) != seen.end()) break;
    seen.push_back(entry);
    ++listed;
  }
  return listed;
}

}  // namespace detail

}  // namespace lockstep::launch
