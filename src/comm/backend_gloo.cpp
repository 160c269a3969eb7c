// Gloo: the CPU backend. Its TCP device binds to the interface that reaches the master (loopback when
// the job is local), or to GLOO_SOCKET_IFNAME / the `interface` option when given.
// With LibTorch 2.x this file is compiled against gloo headers that are not the gloo inside libtorch
// (docs/libtorch.md): it calls only c10d's own functions (ProcessGroupGloo's constructor, Options,
// createDeviceFor*), and must never name a gloo class (GlooStore, gloo::...) whose layout or vtable it
// would then take from the wrong headers. gloo_ops_worker proves the result at run time.
#include <cstdlib>
#include <stdexcept>
#include <string>

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "backend.h"
#include "lockstep/comm/comm_error.h"
#include "lockstep/comm/network.h"

namespace lockstep::comm::detail {

c10::intrusive_ptr<NativeBackend> make_gloo(const c10::intrusive_ptr<c10d::Store>& store,
                                            const ProcessGroupOptions& options) {
  // The options' timeout bounds the full-mesh connect in the constructor, so it is the rendezvous
  // timeout; every collective passes the collective timeout itself (process_group.cpp).
  auto gloo = c10d::ProcessGroupGloo::Options::create(options.rendezvous_timeout());
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
      std::string address = local_address_for(options.master_addr());
      if (is_loopback_address(address) && options.num_nodes() > 1) {
        // MASTER_ADDR names this host (often mapped to 127.0.1.1 in /etc/hosts) but other nodes must
        // reach us: bind to a real interface instead.
        address = first_non_loopback_address();
        if (address.empty()) {
          throw std::runtime_error("this is a " + std::to_string(options.num_nodes()) +
                                   "-node job but MASTER_ADDR '" + options.master_addr() +
                                   "' routes over loopback and no other interface is up; set "
                                   "GLOO_SOCKET_IFNAME to the interface that connects the nodes");
        }
      }
      gloo->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(address));
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
