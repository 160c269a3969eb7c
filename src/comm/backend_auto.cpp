// Backend::kAuto: what a torchrun user would pick by hand. Ranks on CUDA devices (ProcessGroupOptions::cuda):
// nccl (gloo when lockstep was built without it). On the CPU — also a CUDA build of LibTorch, such as
// PyPI's torch, on a machine without a GPU, and the host backend beside nccl — multi-node
// jobs with the same ranks on every node: hier; for single-node ranks,
// shm when every rank shares this host's /dev/shm (each rank publishes its host identity in the store and
// rank 0 compares them: an assumption from the environment could be wrong under containers) and
// /dev/shm has room for the segment, else gloo.
#include <unistd.h>

#include <array>
#include <fstream>
#include <string>

#include "backend.h"
#include "lockstep/comm/process_group_shm.h"

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

// Room in this host's /dev/shm for a `world`-rank segment twice over (containers often give /dev/shm
// only 64 MiB).
bool shm_has_room(int world) {
  return ProcessGroupShm::dev_shm_has_room(2 *
                                           ProcessGroupShm::segment_bytes(world, ShmOptions().slot_bytes()));
}

}  // namespace

Backend resolve_backend(const c10::intrusive_ptr<c10d::Store>& store, const ProcessGroupOptions& options) {
  if (options.backend() != Backend::kAuto) return options.backend();
  if (options.cuda()) return nccl_available() ? Backend::kNccl : Backend::kGloo;
  if (options.num_nodes() > 1) {
    // Uniform nodes (every rank computes the same answer from the same validated numbers), and room in
    // every node's /dev/shm: each rank reports its own, rank 0 decides for everyone.
    const int local = hier_local_world_size(options);
    if (local * options.num_nodes() != options.world_size()) return Backend::kGloo;
    store->set("shm_room/" + std::to_string(options.rank()),
               std::vector<uint8_t>{static_cast<uint8_t>(shm_has_room(local) ? '1' : '0')});
    if (options.rank() == 0) {
      bool room = true;
      for (int r = 0; r < options.world_size() && room; ++r)
        room = store->get("shm_room/" + std::to_string(r)).at(0) == '1';
      store->set("auto_backend", std::vector<uint8_t>{static_cast<uint8_t>(room ? 'h' : 'g')});
    }
    return store->get("auto_backend").at(0) == 'h' ? Backend::kHier : Backend::kGloo;
  }
  // Rank 0 decides for everyone (ranks must agree): all on this host, and room in /dev/shm.
  const std::string mine = host_identity();
  store->set("host/" + std::to_string(options.rank()), std::vector<uint8_t>(mine.begin(), mine.end()));
  if (options.rank() == 0) {
    bool shm = true;
    for (int r = 0; r < options.world_size() && shm; ++r) {
      const auto theirs = store->get("host/" + std::to_string(r));
      shm = std::string(theirs.begin(), theirs.end()) == mine;
    }
    shm = shm && shm_has_room(options.world_size());
    store->set("auto_backend", std::vector<uint8_t>{static_cast<uint8_t>(shm ? 's' : 'g')});
  }
  return store->get("auto_backend").at(0) == 's' ? Backend::kShm : Backend::kGloo;
}

}  // namespace lockstep::comm::detail
