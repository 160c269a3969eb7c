#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "lockstep/comm/store_client.h"
#include "lockstep/comm/tcp_store_server.h"

namespace lockstep::launch::detail {

/// The store a launcher serves under in-place recovery (LaunchOptions::in_place): the workers' rendezvous
/// and votes live here rather than in rank 0, which may be the rank that is lost, and the launcher
/// announces each lost worker here (lockstep/detail/elastic_contract.h). Lives as long as the launch.
///
/// A launcher that finds the endpoint already served by its job's store (or that endpoint on another host)
/// joins that job instead: its workers take new ids (reserve_ids) and are admitted by the running ranks at
/// a step boundary. A joining launcher beats in the store every second; the serving one announces the
/// unfinished workers of a joining launcher silent for the heartbeat timeout as lost (its host is gone or
/// cut off: no one else can announce them).
class InPlaceStore {
 public:
  /// Listens on `host`:`port` (port 0: one the kernel picks). When `port` is given and in use, or `host`
  /// is not this machine's, connects to the store there as a joining launcher (joining()). Throws
  /// LaunchError when it can do neither.
  /// `secret`: the job secret its server asks for and its client proves (comm/job_secret.h); "": none.
  InPlaceStore(const std::string& run_id, int world_size, const std::string& host = "127.0.0.1", int port = 0,
               std::chrono::milliseconds heartbeat_timeout = std::chrono::seconds(5),
               const std::string& secret = "");
  ~InPlaceStore();
  InPlaceStore(const InPlaceStore&) = delete;
  InPlaceStore& operator=(const InPlaceStore&) = delete;

  /// "HOST:PORT", for the workers' LOCKSTEP_ELASTIC_STORE.
  std::string endpoint() const { return endpoint_; }
  /// This launcher joins a job another launcher serves.
  bool joining() const { return !server_; }
  /// Joining: reserves `count` ids for this launcher's workers, registers this launcher with the serving
  /// one and starts beating; returns the first id.
  int reserve_ids(int count);
  /// The id under which the worker of rank `rank` (local rank `local_rank`) is known: its rank, or for a
  /// joining launcher's worker its reserved id.
  int id_of(int rank, int local_rank) const { return joining() ? first_id_ + local_rank : rank; }
  /// Announces that the rank with id `id` is gone, for `reason`; returns the new generation's number. Call
  /// it only once the process can do nothing more (reaped, or killed and waited for): a vote it might still
  /// cast must not follow the announcement.
  int announce_lost(int id, const std::string& reason);
  /// Serving: how many ranks that joined from other launchers have neither finished nor been lost.
  int unfinished_joined();
  /// Serving launcher, its own workers done: waits (at most `timeout`) until every rank that joined has
  /// finished or was lost, so that none loses the store in its last step. Returns how many did not.
  /// Without a timeout it waits for as long as they train: each ends finished, or lost (its launcher
  /// announces it when it fails or stalls, this launcher's watch when that launcher is gone or silent).
  /// `stop` is asked every 50 ms: true ends the wait at once (a signal to the launcher).
  int wait_for_joined(std::optional<std::chrono::milliseconds> timeout,
                      const std::function<bool()>& stop = nullptr);

 private:
  std::string key(const std::string& name) const;
  /// Ids announced as lost so far.
  std::vector<int> lost_ids();
  /// Announces each rank id in [first, first + count) that neither finished nor was announced already as
  /// lost, with `reason`.
  void announce_unfinished(int first, int count, const std::string& reason);
  /// Serving: the joining launchers' watch (a thread); joining: the beat (a thread).
  void watch_joined();
  void beat();
  void stop_thread();

  std::string run_id_;
  int world_size_;
  std::string endpoint_;
  std::unique_ptr<comm::TcpStoreServer> server_;  // null when joining
  std::unique_ptr<comm::StoreClient> client_;
  std::chrono::milliseconds heartbeat_timeout_;
  int first_id_ = 0;
  int count_ = 0;
  std::mutex mutex_;
  std::condition_variable stop_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace lockstep::launch::detail
