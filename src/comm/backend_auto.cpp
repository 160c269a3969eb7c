// Backend::kAuto: what a torchrun user would pick by hand. nccl when LibTorch has CUDA; for CPU ranks,
// shm when every rank shares this host's /dev/shm (each rank publishes its host identity in the store
// and reads everyone's: an assumption from the environment could be wrong under containers), else gloo.
#include <unistd.h>

#include <array>
#include <fstream>
#include <string>

#include "backend.h"

namespace lockstep::comm::detail {
namespace {

std::string read_link(const char* path) {
  std::array<char, 256> buffer{};
  const ssize_t n = ::readlink(path, buffer.data(), buffer.size() - 1);
  return n > 0 ? std::string(buffer.data(), static_cast<size_t>(n)) : std::string("?");
}

// Ranks with equal identities can map one POSIX shared-memory segment: same kernel boot, same host
// name, same IPC and mount namespaces (/dev/shm is a mount).
std::string host_identity() {
  std::array<char, 256> host{};
  ::gethostname(host.data(), host.size() - 1);
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  return std::string(host.data()) + "|" + boot + "|" + read_link("/proc/self/ns/ipc") + "|" +
         read_link("/proc/self/ns/mnt");
}

}  // namespace

Backend resolve_backend(const c10::intrusive_ptr<c10d::Store>& store, const ProcessGroupOptions& options) {
  if (options.backend() != Backend::kAuto) return options.backend();
#ifdef LOCKSTEP_WITH_NCCL
  return Backend::kNccl;
#else
  if (options.num_nodes() > 1) return Backend::kGloo;
  const std::string mine = host_identity();
  store->set("host/" + std::to_string(options.rank()), std::vector<uint8_t>(mine.begin(), mine.end()));
  for (int r = 0; r < options.world_size(); ++r) {
    const auto theirs = store->get("host/" + std::to_string(r));
    if (std::string(theirs.begin(), theirs.end()) != mine) return Backend::kGloo;
  }
  return Backend::kShm;
#endif
}

}  // namespace lockstep::comm::detail
