#pragma once

// In-place recovery: what the launcher and its workers say to each other through the launcher's store, in
// one place (the protocol is docs/elastic.md, "In place"). Header-only and torch-free: launch writes
// membership changes, comm (ElasticWorld) reads them.
//
//  - kElasticStoreVariable: "HOST:PORT" of the store the launcher serves for the job's lifetime (a worker's
//    store would die with it). Its presence asks the workers for in-place recovery.
//  - Under "lockstep/<run id>/elastic/": whoever announces a change (the launcher for a lost rank, a joining
//    rank for itself) raises the counter "generation" by one, to n, then writes change n (1, 2, ...) to
//    "change/<n>". Generation g's members are generation 0's ranks (their ids) less those that changes 1..g
//    removed, plus those they added; a reader that sees the counter at n reads changes 1..n, waiting for
//    any not written yet, so the counter never lags a change a reader has seen. A worker waits for
//    "change/<g+1>" to learn of the next one.
//  - A joining rank's id: the job's first size plus its place among the joiners, from the counter "joined"
//    (a joining launcher adds its worker count and takes the ids below the result). The launcher names it
//    in kElasticJoinVariable; the worker's RANK and WORLD_SIZE are its local rank and the job's first size,
//    placeholders until it is admitted.
//  - "finished": each rank adds 1 when it ends training (ElasticWorld::shutdown), and sets
//    "finished/<id>"; a joiner still waiting to be admitted then gives up, and the serving launcher waits
//    for every joined rank's count before it closes the store.
//  - A joining launcher registers as "launchers/<n>" = "<first id> <count> <host>" (the counter
//    "launchers" gives n), holds "launcher/<first id>/live" (removed by the store when its connection
//    closes), adds 1 to "launcher/<first id>/beat" every second, and sets "launcher/<first id>/done" when
//    its workers have ended (src/launch/in_place_store.cpp).

#include <chrono>
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>

namespace lockstep::detail {

inline constexpr const char* kElasticStoreVariable = "LOCKSTEP_ELASTIC_STORE";
/// Set (to the rank's id) for a worker that joins a running job.
inline constexpr const char* kElasticJoinVariable = "LOCKSTEP_ELASTIC_JOIN";

/// The elastic keys' prefix in the launcher's store.
inline std::string elastic_prefix(const std::string& run_id) {
  return "lockstep/" + run_id + "/elastic/";
}
inline constexpr const char* kGenerationKey = "generation";
inline constexpr const char* kJoinedKey = "joined";
inline constexpr const char* kFinishedKey = "finished";
inline std::string change_key(int64_t n) {
  return "change/" + std::to_string(n);
}
inline std::string finished_key(int id) {
  return std::string(kFinishedKey) + "/" + std::to_string(id);
}

/// One membership change: rank `id` (its generation-0 rank, or a joiner's id) left, or joined, announced at
/// `seen_ms` (milliseconds since the Unix epoch), for `reason` (the announcer's words).
struct MembershipRecord {
  int id = -1;
  int64_t seen_ms = 0;
  std::string reason;
  bool joined = false;
};

inline int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

/// "left <id> <seen_ms> <reason>" or "joined <id> <seen_ms> <reason>".
inline std::string format_membership(const MembershipRecord& record) {
  return std::string(record.joined ? "joined " : "left ") + std::to_string(record.id) + " " +
         std::to_string(record.seen_ms) + " " + record.reason;
}

/// std::nullopt when `text` is not a record.
inline std::optional<MembershipRecord> parse_membership(const std::string& text) {
  std::istringstream in(text);
  std::string word;
  MembershipRecord record;
  if (!(in >> word) || (word != "left" && word != "joined") || !(in >> record.id >> record.seen_ms) ||
      record.id < 0)
    return std::nullopt;
  record.joined = word == "joined";
  std::getline(in >> std::ws, record.reason);
  return record;
}

}  // namespace lockstep::detail
