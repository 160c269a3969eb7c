#include "in_place_store.h"

#include <cerrno>
#include <thread>

#include "lockstep/detail/elastic_contract.h"
#include "lockstep/launch/launch_error.h"

namespace lockstep::launch::detail {
namespace {

std::unique_ptr<comm::StoreClient> connect(const std::string& host, int port, const std::string& run_id,
                                           int world_size, const std::string& server) {
  return std::make_unique<comm::StoreClient>(comm::TcpStoreOptions(host, port, run_id, world_size, 0)
                                                 .connect_timeout(std::chrono::seconds(10))
                                                 .timeout(std::chrono::seconds(10))
                                                 .server_name(server));
}

}  // namespace

InPlaceStore::InPlaceStore(const std::string& run_id, int world_size, const std::string& host, int port)
    : run_id_(run_id), world_size_(world_size) {
  const std::string where = host + ":" + std::to_string(port);
  try {
    server_ = std::make_unique<comm::TcpStoreServer>(
        comm::TcpStoreServerOptions(run_id, world_size).host(host).port(port));
  } catch (const comm::StoreBindError& e) {
    if (port == 0 || e.error_code() != EADDRINUSE)
      throw LaunchError(std::string("in-place recovery: cannot serve the workers' store: ") + e.what());
  } catch (const std::exception& e) {
    throw LaunchError(std::string("in-place recovery: cannot serve the workers' store: ") + e.what());
  }
  try {
    if (server_) {
      endpoint_ = host + ":" + std::to_string(server_->port());
      client_ = connect(host, server_->port(), run_id, world_size, "this launcher");
    } else {
      endpoint_ = where;
      client_ = connect(host, port, run_id, world_size, "the launcher that serves the job (" + where + ")");
      if (client_->add(key(lockstep::detail::kGenerationKey), 0) < 0) throw LaunchError("unreachable");
    }
  } catch (const std::exception& e) {
    throw LaunchError(
        server_
            ? std::string("in-place recovery: cannot reach this launcher's store: ") + e.what()
            : "in-place recovery: " + where + " is in use, and not by a running job with run id '" + run_id +
                  "' and world size " + std::to_string(world_size) + " that this launcher could join (" +
                  e.what() + "): give a free port, or the running job's endpoint, run id and sizes");
  }
}

InPlaceStore::~InPlaceStore() = default;

std::string InPlaceStore::key(const std::string& name) const {
  return lockstep::detail::elastic_prefix(run_id_) + name;
}

int InPlaceStore::reserve_ids(int count) {
  first_id_ = world_size_ + static_cast<int>(client_->add(key(lockstep::detail::kJoinedKey), count)) - count;
  return first_id_;
}

int InPlaceStore::announce_lost(int id, const std::string& reason) {
  // The counter first (elastic_contract.h): whoever sees change n then finds the counter at n or above.
  const int n = static_cast<int>(client_->add(key(lockstep::detail::kGenerationKey), 1));
  const std::string record =
      lockstep::detail::format_membership({id, lockstep::detail::unix_ms_now(), reason});
  client_->set(key(lockstep::detail::change_key(n)), comm::StoreClient::Bytes(record.begin(), record.end()));
  return n;
}

int InPlaceStore::wait_for_joined(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int missing = 0;
  for (;;) {
    const int joined = static_cast<int>(client_->add(key(lockstep::detail::kJoinedKey), 0));
    if (joined == 0) return 0;
    // Every id ends once: finished (its own count) or lost (a "left" change).
    int lost = 0;
    const int changes = static_cast<int>(client_->add(key(lockstep::detail::kGenerationKey), 0));
    for (int n = 1; n <= changes; ++n) {
      const auto value = client_->get(key(lockstep::detail::change_key(n)), std::chrono::seconds(10));
      const auto record = lockstep::detail::parse_membership(std::string(value.begin(), value.end()));
      if (record && !record->joined) ++lost;
    }
    const int finished = static_cast<int>(client_->add(key(lockstep::detail::kFinishedKey), 0));
    missing = world_size_ + joined - finished - lost;
    if (missing <= 0 || std::chrono::steady_clock::now() >= deadline) return std::max(missing, 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace lockstep::launch::detail
