#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "lockstep/comm/store_client.h"
#include "lockstep/comm/tcp_store_server.h"

namespace lockstep::launch::detail {

/// The store a launcher serves under in-place recovery (LaunchOptions::in_place): the workers' rendezvous
/// and votes live here rather than in rank 0, which may be the rank that is lost, and the launcher
/// announces each lost worker here (lockstep/detail/elastic_contract.h). Lives as long as the launch.
///
/// A launcher that finds the endpoint already served by its job's store joins that job instead: its
/// workers take new ids (reserve_ids) and are admitted by the running ranks at a step boundary.
class InPlaceStore {
 public:
  /// Listens on `host`:`port` (port 0: one the kernel picks). When `port` is given and already served by
  /// a store of this run id and world size, connects to it as a joining launcher (joining()). Throws
  /// LaunchError when it can do neither.
  InPlaceStore(const std::string& run_id, int world_size, const std::string& host = "127.0.0.1",
               int port = 0);
  ~InPlaceStore();
  InPlaceStore(const InPlaceStore&) = delete;
  InPlaceStore& operator=(const InPlaceStore&) = delete;

  /// "HOST:PORT", for the workers' LOCKSTEP_ELASTIC_STORE.
  std::string endpoint() const { return endpoint_; }
  /// This launcher joins a job another launcher serves.
  bool joining() const { return !server_; }
  /// Joining: reserves `count` ids for this launcher's workers; returns the first.
  int reserve_ids(int count);
  /// The id under which the worker of rank `rank` (local rank `local_rank`) is known: its rank, or for a
  /// joining launcher's worker its reserved id.
  int id_of(int rank, int local_rank) const { return joining() ? first_id_ + local_rank : rank; }
  /// Announces that the rank with id `id` is gone, for `reason`; returns the new generation's number. Call
  /// it only once the process can do nothing more (reaped, or killed and waited for): a vote it might still
  /// cast must not follow the announcement.
  int announce_lost(int id, const std::string& reason);
  /// Serving launcher, its own workers done: waits (at most `timeout`) until every rank that joined has
  /// finished or was lost, so that none loses the store in its last step. Returns how many did not.
  int wait_for_joined(std::chrono::milliseconds timeout);

 private:
  std::string key(const std::string& name) const;

  std::string run_id_;
  int world_size_;
  std::string endpoint_;
  std::unique_ptr<comm::TcpStoreServer> server_;  // null when joining
  std::unique_ptr<comm::StoreClient> client_;
  int first_id_ = 0;
};

}  // namespace lockstep::launch::detail
