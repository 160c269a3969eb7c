#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "lockstep/launch/launch_config.h"
#include "lockstep/launch/launch_error.h"

namespace lockstep::comm {
class StoreClient;
class StoreError;
class TcpStoreServer;
}  // namespace lockstep::comm

namespace lockstep::launch::detail {

/// One node of a round, as it announced itself.
struct RdzvNode {
  int ticket = 0;  ///< its place in the order of arrival (1-based)
  std::string addr;
  int nproc = 1;
  std::string role = "default";
  int asked_rank = -1;  ///< --node-rank, or -1
  std::string host;     ///< its host name (for messages)
  std::string agent;    ///< a random id of its launcher, the same in every round it takes part in

  /// "10.0.0.2 (host gpu7)".
  std::string describe() const;
};

/// Why a round ended.
struct RoundEnd {
  bool failure = false;  ///< a worker failed or a node was lost (counts against max_restarts)
  int status = 0;        ///< for a failure: the exit status the failed node's launcher reports
  std::string reason;    ///< "rank 3 exited with status 1 on node 1 (10.0.0.2)", "1 node waiting to join"
};

/// A round that started: its nodes in node-rank order, and this node's place.
struct Round {
  int number = 0;
  int ticket = 0;  ///< this node's
  int node_rank = 0;
  std::vector<RdzvNode> nodes;  ///< index = node rank
  std::string began_because;
  std::vector<std::string> left;    ///< the nodes of the round before that are not in this one
  std::vector<std::string> joined;  ///< the nodes of this round that were not in the round before
  std::vector<std::string> notes;   ///< e.g. a --node-rank the round could not honour
  NodeWorld world;                  ///< this node's place (worker_environment's input)

  /// "round 2: 2 node(s): node 0 = ..., node 1 = ... (left: ...; joined: ...)".
  std::string describe() const;
  /// "node 1 (10.0.0.2, host gpu7)".
  std::string node(int node_rank) const;
};

/// The other nodes' keep-alive counters as last read, and when each last moved: a node whose counter stood
/// still for the keep-alive timeout is silent (stopped, killed, or its host gone). Measured on this node's
/// clock only, so the nodes' clocks need not agree.
class KeepAlives {
 public:
  /// Records `beats`, node `ticket`'s counter read at `now`; returns how long it has stood still (zero when
  /// it moved or is seen for the first time).
  std::chrono::milliseconds still_for(int ticket, int64_t beats, std::chrono::steady_clock::time_point now);

 private:
  std::map<int, std::pair<int64_t, std::chrono::steady_clock::time_point>> seen_;
};

/// Thrown by `join` when the job is over (a node finished it) before this node got a round: nothing is
/// left to do, which is not a failure.
struct JobOver {
  std::string why;
};

/*
 * torchrun's c10d rendezvous (DynamicRendezvousHandler) for lockstep's launcher: the agents of a job, one
 * per node, meet at rdzv_endpoint, where one of them hosts a TcpStoreServer, and agree on rounds there.
 *
 * A round is a generation of the job with its own keys ("r<N>/..."), so that nothing of an old round is
 * read in a new one:
 *   - join: a node takes a ticket (its place in the order of arrival) and announces itself; the round
 *     starts (closes) when max_nodes have joined, or when min_nodes have and last_call_timeout has passed
 *     since; the first ticket holders up to that count are its nodes. Node ranks follow the tickets, but
 *     for --node-rank wishes the round can honour. The node of node rank 0 picks a free port on its
 *     address for the workers' store (MASTER_ADDR, MASTER_PORT), as torchrun does with its store sharing
 *     turned off (TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1).
 *   - run: every node bumps a keep-alive counter; a RoundWatch on each node ends the round when a node's
 *     counter stands still for keep_alive_timeout (a node lost or stopped), or when a node is waiting to
 *     join (a node that arrives at a running round asks for the next one, as under torchrun; at
 *     max_nodes it waits for a round to end).
 *   - end: one node records why (compare-and-set: the first reason stands), counts a failure job-wide
 *     when it was one, and moves the job to round N+1; every node stops its workers and joins again.
 *   - finish: a node whose workers all succeeded says so and closes the job to new rounds; the host keeps
 *     the store up until every other node of the round is done, gone, or silent for keep_alive_timeout
 *     (bounded by close_timeout), and never waits for a dead one.
 * The host is a single point, as under torchrun: when it is lost, the others stop with an error saying so.
 *
 * Not thread-safe: one thread calls join/end_round/finish; RoundWatch has a connection of its own.
 */
class ElasticRendezvous {
 public:
  using Say = std::function<void(const std::string&)>;

  /// Hosts the store when this node can listen on the endpoint (or rdzv_conf.is_host says so), then
  /// connects. Throws LaunchError naming the endpoint when it can do neither within join_timeout.
  ElasticRendezvous(const LaunchConfig& config, Say say);
  ~ElasticRendezvous();
  ElasticRendezvous(const ElasticRendezvous&) = delete;
  ElasticRendezvous& operator=(const ElasticRendezvous&) = delete;

  bool is_host() const { return server_ != nullptr; }
  /// "host:port" of the store.
  std::string endpoint() const;

  /// Waits for the next round this node is part of (join_timeout). Throws LaunchError on a timeout or a
  /// lost store, JobOver when the job finished meanwhile.
  Round join();

  /// Ends `round` with `end`, unless it has ended already; returns the end that stands.
  RoundEnd end_round(const Round& round, const RoundEnd& end);

  /// Rounds of this job that ended in a failure so far.
  int failures();

  /// This node's workers of `round` all succeeded: closes the job to new rounds; on the host, then waits
  /// for the other nodes (see above).
  void finish(const Round& round);

  /// This node leaves the job for good (stopped, preempted, out of restarts, or failed after the job
  /// finished elsewhere): says so in `round`, ends the round with `reason` (a failure of status `status`)
  /// unless it has ended, and, on the host, serves the others as finish does, until they have left too.
  void leave(const Round& round, int status, const std::string& reason);

  const LaunchConfig& config() const { return config_; }

 private:
  friend class RoundWatch;
  int current_round();
  std::optional<int> wait_for_close(int number, int ticket, std::chrono::steady_clock::time_point deadline);
  void wait_for_next(int number, int members, std::chrono::steady_clock::time_point deadline);
  Round build_round(int number, int ticket, int members);
  std::vector<RdzvNode> members_of(int number, int members);
  void compare_with_previous(Round& round);
  std::string my_address(const std::vector<RdzvNode>& nodes, int node_rank) const;
  std::optional<RoundEnd> read_end(int number);
  void check_deadline(std::chrono::steady_clock::time_point deadline, const std::string& waiting_for);
  void beat(int number, int ticket);
  LaunchError lost(const comm::StoreError& e) const;
  // On the host: keeps the store up until every other node of `round` is done, has left, or went silent
  // (bounded by close_timeout), saying `why` first.
  void serve_others(const Round& round, const std::string& why);
  void wait_for_others(const Round& round);

  const LaunchConfig& config_;
  Say say_;
  std::unique_ptr<comm::TcpStoreServer> server_;
  std::unique_ptr<comm::StoreClient> store_;
  std::string address_;  ///< where the others reach this node
  std::string hostname_;
  std::string agent_;  ///< this launcher's random id
  std::chrono::steady_clock::time_point next_beat_;
};

/// Watches a running round from a thread of its own (its own connection to the store): bumps this
/// node's keep-alive every keep_alive_interval and looks, every monitor_interval, whether the round has
/// ended and whether a node is waiting to join (then ends it: no failure), and, every keep_alive_interval,
/// whether another node's keep-alive stood still for keep_alive_timeout (then ends it: a failure naming
/// the node). `fd()`
/// becomes readable once the round has ended, for whatever reason; `end()` says why.
///
/// A lost store ends the watch with a failure, unless the job was already finishing (a node finished):
/// then the workers are left to finish too.
class RoundWatch {
 public:
  RoundWatch(ElasticRendezvous& rendezvous, const Round& round);
  ~RoundWatch();
  RoundWatch(const RoundWatch&) = delete;
  RoundWatch& operator=(const RoundWatch&) = delete;

  /// Readable (POLLIN) once the round has ended.
  int fd() const { return pipe_[0]; }
  /// Why the round ended, once it has.
  std::optional<RoundEnd> end() const;

 private:
  void run();
  void ended(RoundEnd end);
  bool look(std::chrono::steady_clock::time_point now);

  ElasticRendezvous& rendezvous_;
  const Round round_;
  std::unique_ptr<comm::StoreClient> store_;
  int pipe_[2] = {-1, -1};
  mutable std::mutex mutex_;
  std::optional<RoundEnd> end_;
  std::atomic<bool> stop_{false};
  bool closing_ = false;
  KeepAlives keep_alives_;
  std::chrono::steady_clock::time_point next_scan_;  // when to read the others' keep-alives next
  std::thread thread_;
};

/// The local address a packet to `peer` leaves from (a UDP socket connected to it, never sent on), or ""
/// when there is no route.
std::string address_towards(const std::string& peer);

/// Whether `address` is a loopback address (127.0.0.0/8, ::1).
bool is_loopback(const std::string& address);

}  // namespace lockstep::launch::detail
