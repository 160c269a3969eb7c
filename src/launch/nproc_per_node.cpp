#include "lockstep/launch/nproc_per_node.h"

#include <dirent.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <string>

#include "lockstep/launch/detail/host.h"
#include "lockstep/launch/launch_error.h"

namespace lockstep::launch {

NprocPerNode NprocPerNode::automatic() {
  NprocPerNode n;
  n.auto_ = true;
  return n;
}

NprocPerNode NprocPerNode::parse(const std::string& text) {
  if (text == "auto") return automatic();
  errno = 0;
  char* end = nullptr;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE || value < 1 || value > INT_MAX) {
    throw LaunchError("--nproc-per-node='" + text + "' is not valid (expected a positive integer or 'auto')");
  }
  return NprocPerNode(static_cast<int>(value));
}

int NprocPerNode::resolve(const DeviceCounter& count_devices) const {
  if (!auto_) return count_;
  const int devices = count_devices ? count_devices() : 0;
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
  // CUDA_VISIBLE_DEVICES="0,1" or "GPU-uuid,...": count the comma-separated entries (an empty value
  // hides every GPU), never more than the driver has.
  int listed = 0;
  std::string entry;
  const std::string list = visible;
  for (std::size_t i = 0; i <= list.size(); ++i) {
    if (i == list.size() || list[i] == ',') {
      if (!entry.empty()) ++listed;
      entry.clear();
    } else if (list[i] != ' ') {
      entry += list[i];
    }
  }
  return listed < physical ? listed : physical;
}

}  // namespace lockstep::launch
