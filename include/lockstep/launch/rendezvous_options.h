#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace lockstep::launch {

/// How the nodes of a job find each other (torchrun's --rdzv-backend).
///  - kStatic: a fixed number of nodes, each told its --node-rank; worker rank 0 hosts the workers'
///    store at --master-addr:--master-port. One launch per node, no rounds.
///  - kC10d: elastic rounds (`ElasticRendezvous`, detail/elastic_rendezvous.h): the agents meet at
///    --rdzv-endpoint, get node ranks in order of arrival, and meet again whenever a node fails or joins.
enum class RdzvBackend { kStatic, kC10d };

/// "static" or "c10d". Throws LaunchError naming rdzv_backend and the accepted values otherwise (etcd
/// and etcd-v2 are named as not available: they need an etcd server lockstep does not talk to).
RdzvBackend parse_rdzv_backend(const std::string& text);
const char* to_string(RdzvBackend backend);

/// --nnodes: a node count N, or the range MIN:MAX of an elastic job. Implicit from an int, so that
/// `nnodes(2)` reads naturally.
struct NodeRange {
  NodeRange(int n = 1) : min(n), max(n) {}  // NOLINT(google-explicit-constructor)
  NodeRange(int lo, int hi) : min(lo), max(hi) {}
  int min;
  int max;
  bool fixed() const { return min == max; }
  bool operator==(const NodeRange& o) const { return min == o.min && max == o.max; }
};

/// "N" or "MIN:MAX", with 1 <= MIN <= MAX. Throws LaunchError naming nnodes and the value otherwise.
NodeRange parse_nnodes(const std::string& text);

/// The keys of --rdzv-conf (torchrun's names and defaults) that lockstep's c10d rendezvous reads.
struct RdzvConf {
  /// How long a node waits for its round to start (MIN nodes, then the last call): torchrun's 600 s.
  std::chrono::milliseconds join_timeout{600000};
  /// Once MIN nodes have joined, how long the round stays open for more before it starts: 30 s.
  std::chrono::milliseconds last_call_timeout{30000};
  /// How long the rendezvous host keeps serving, once the job is over, for nodes that are still alive
  /// but have not said they are done (a node that stopped answering is not waited for): 30 s.
  std::chrono::milliseconds close_timeout{30000};
  /// The bound on one operation of the rendezvous store, and on connecting to it: 60 s.
  std::chrono::milliseconds read_timeout{60000};
  /// The bound on each keep-alive write and each look at the others' (the watcher's store operations): 5 s.
  std::chrono::milliseconds heartbeat_timeout{5000};
  /// Every node bumps its keep-alive counter this often: 5 s.
  std::chrono::milliseconds keep_alive_interval{5000};
  /// A node whose counter did not move for keep_alive_interval x keep_alive_max_attempt is lost: 3.
  int keep_alive_max_attempt = 3;
  /// Whether this node hosts the rendezvous store. Unset: it does when it can listen on the endpoint's
  /// address (the address is one of this host's and the port is free), as torchrun guesses from the name.
  std::optional<bool> is_host;
  /// Keys accepted only to say they change nothing here, each with the reason (printed once by the CLI).
  std::vector<std::string> notes;

  /// How long a node may go without a keep-alive before the others drop it.
  std::chrono::milliseconds keep_alive_timeout() const {
    return keep_alive_interval * keep_alive_max_attempt;
  }
};

/// Parses "key=value,key=value" (torchrun's --rdzv-conf). Timeouts are whole or fractional seconds; is_host
/// is 1/0, true/false, yes/no, on/off. Accepted besides: store_type=tcp (the only store lockstep serves),
/// cas_backoff_max_seconds (noted: lockstep's rendezvous makes no whole-state compare-and-set retries
/// that a back-off would space out). Throws LaunchError naming the key and the value for an unknown key,
/// a malformed entry or a value out of range.
RdzvConf parse_rdzv_conf(const std::string& text);

/// --rdzv-endpoint "HOST[:PORT]" ("[::1]:29400" for IPv6). Without a port: torchrun's 29400.
struct Endpoint {
  std::string host;
  int port = 29400;
};

/// Throws LaunchError naming rdzv_endpoint for an empty host or a port outside 0..65535.
Endpoint parse_endpoint(const std::string& text);

}  // namespace lockstep::launch
