// shm: ranks on one host exchange tensors through shared memory (src/comm/shm, its own target).
#include <string>
#include <vector>

#include "backend.h"
#include "lockstep/comm/comm_error.h"
#include "lockstep/comm/process_group_shm.h"

namespace lockstep::comm::detail {

c10::intrusive_ptr<NativeBackend> make_shm(const c10::intrusive_ptr<c10d::Store>& store,
                                           const ProcessGroupOptions& options,
                                           const std::vector<int>& world_ranks) {
  try {
    ShmOptions shm =
        ShmOptions().run_id(options.run_id()).timeout(options.collective_timeout()).world_ranks(world_ranks);
    if (options.asynchronous()) shm.inline_when_idle(false);
    return c10::make_intrusive<ProcessGroupShm>(store, options.rank(), options.world_size(), shm);
  } catch (const std::exception& e) {
    throw CommError(options.rank(), "init_process_group", std::string("shm backend: ") + e.what());
  }
}

}  // namespace lockstep::comm::detail
