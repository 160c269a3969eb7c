// Gloo: the CPU backend. Its TCP device binds to the interface that reaches the master (loopback when
// the job is local), or to GLOO_SOCKET_IFNAME / the `interface` option when given.
#include <cstdlib>

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "backend.h"
#include "lockstep/comm/comm_error.h"
#include "lockstep/comm/network.h"

namespace lockstep::comm::detail {

c10::intrusive_ptr<c10d::ProcessGroup> make_gloo(const c10::intrusive_ptr<c10d::Store>& store,
                                                 const ProcessGroupOptions& options) {
  auto gloo = c10d::ProcessGroupGloo::Options::create(options.collective_timeout());
  gloo->threads = options.gloo_threads();
  std::string interface = options.interface();
  if (interface.empty()) {
    const char* from_env = std::getenv("GLOO_SOCKET_IFNAME");
    if (from_env != nullptr) interface = from_env;
  }
  try {
    if (!interface.empty()) {
      gloo->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(interface));
    } else {
      gloo->devices.push_back(
          c10d::ProcessGroupGloo::createDeviceForHostname(local_address_for(options.master_addr())));
    }
  } catch (const std::exception& e) {
    throw CommError(options.rank(), "init_process_group",
                    std::string("cannot create the Gloo network device") +
                        (interface.empty() ? "" : " on interface '" + interface + "'") + ": " + e.what());
  }
  try {
    return c10::make_intrusive<c10d::ProcessGroupGloo>(store, options.rank(), options.world_size(), gloo);
  } catch (const std::exception& e) {
    throw CommError(options.rank(), "init_process_group",
                    "Gloo could not connect to every other rank (full mesh): " + std::string(e.what()) +
                        ". Each rank must reach the others' addresses (set GLOO_SOCKET_IFNAME to the "
                        "interface that connects the nodes).");
  }
}

}  // namespace lockstep::comm::detail
