#include "in_place_store.h"

#include "lockstep/detail/elastic_contract.h"
#include "lockstep/launch/launch_error.h"

namespace lockstep::launch::detail {

InPlaceStore::InPlaceStore(const std::string& run_id, int world_size) : run_id_(run_id) {
  try {
    server_ = std::make_unique<comm::TcpStoreServer>(
        comm::TcpStoreServerOptions(run_id, world_size).host("127.0.0.1").port(0));
    client_ = std::make_unique<comm::StoreClient>(
        comm::TcpStoreOptions("127.0.0.1", server_->port(), run_id, world_size, 0)
            .connect_timeout(std::chrono::seconds(10))
            .timeout(std::chrono::seconds(10))
            .server_name("this launcher"));
  } catch (const std::exception& e) {
    throw LaunchError(std::string("in-place recovery: cannot serve the workers' store on 127.0.0.1: ") +
                      e.what());
  }
}

InPlaceStore::~InPlaceStore() = default;

std::string InPlaceStore::endpoint() const {
  return "127.0.0.1:" + std::to_string(server_->port());
}

int InPlaceStore::announce_lost(int rank, const std::string& reason) {
  const std::string prefix = lockstep::detail::elastic_prefix(run_id_);
  ++generation_;
  // The counter first (elastic_contract.h): whoever sees change n then finds the counter at n or above.
  client_->add(prefix + lockstep::detail::kGenerationKey, 1);
  client_->set(prefix + lockstep::detail::change_key(generation_),
               lockstep::detail::format_membership({rank, lockstep::detail::unix_ms_now(), reason}));
  return generation_;
}

}  // namespace lockstep::launch::detail
