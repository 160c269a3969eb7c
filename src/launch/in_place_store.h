#pragma once

#include <memory>
#include <string>

#include "lockstep/comm/store_client.h"
#include "lockstep/comm/tcp_store_server.h"

namespace lockstep::launch::detail {

/// The store a launcher serves under in-place recovery (LaunchOptions::in_place): the workers' rendezvous
/// and votes live here rather than in rank 0, which may be the rank that is lost, and the launcher
/// announces each lost worker here (lockstep/detail/elastic_contract.h). Lives as long as the launch.
class InPlaceStore {
 public:
  /// Listens on 127.0.0.1, on a port the kernel picks. Throws LaunchError when it cannot.
  InPlaceStore(const std::string& run_id, int world_size);
  ~InPlaceStore();
  InPlaceStore(const InPlaceStore&) = delete;
  InPlaceStore& operator=(const InPlaceStore&) = delete;

  /// "127.0.0.1:PORT", for the workers' LOCKSTEP_ELASTIC_STORE.
  std::string endpoint() const;
  /// Announces that rank `rank` is gone, for `reason`; returns the new generation's number. Call it only
  /// once the process can do nothing more (reaped, or killed and waited for): a vote it might still cast
  /// must not follow the announcement.
  int announce_lost(int rank, const std::string& reason);

 private:
  std::string run_id_;
  std::unique_ptr<comm::TcpStoreServer> server_;
  std::unique_ptr<comm::StoreClient> client_;
  int generation_ = 0;
};

}  // namespace lockstep::launch::detail
