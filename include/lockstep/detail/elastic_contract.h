#pragma once

// In-place recovery: what the launcher and its workers say to each other through the launcher's store, in
// one place (the protocol is docs/elastic.md, "In place"). Header-only and torch-free: launch writes
// membership changes, comm (ElasticWorld) reads them.
//
//  - kElasticStoreVariable: "HOST:PORT" of the store the launcher serves for the job's lifetime (a worker's
//    store would die with it). Its presence asks the workers for in-place recovery.
//  - Under "lockstep/<run id>/elastic/": the launcher raises the counter "generation" to n, then writes
//    change n (1, 2, ...) to "change/<n>". Generation g's members are generation 0's ranks (their ids) less
//    those that changes 1..g removed; a reader that sees the counter at n reads changes 1..n, waiting for
//    any not written yet, so the counter never lags a change a reader has seen. A worker waits for
//    "change/<g+1>" to learn of the next one.

#include <chrono>
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>

namespace lockstep::detail {

inline constexpr const char* kElasticStoreVariable = "LOCKSTEP_ELASTIC_STORE";

/// The elastic keys' prefix in the launcher's store.
inline std::string elastic_prefix(const std::string& run_id) {
  return "lockstep/" + run_id + "/elastic/";
}
inline constexpr const char* kGenerationKey = "generation";
inline std::string change_key(int64_t n) {
  return "change/" + std::to_string(n);
}

/// One membership change: rank `id` (its generation-0 rank) left, seen by the launcher at `seen_ms`
/// (milliseconds since the Unix epoch), for `reason` (the launcher's words).
struct MembershipRecord {
  int id = -1;
  int64_t seen_ms = 0;
  std::string reason;
};

inline int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

/// "left <id> <seen_ms> <reason>".
inline std::string format_membership(const MembershipRecord& record) {
  return "left " + std::to_string(record.id) + " " + std::to_string(record.seen_ms) + " " + record.reason;
}

/// std::nullopt when `text` is not a record.
inline std::optional<MembershipRecord> parse_membership(const std::string& text) {
  std::istringstream in(text);
  std::string word;
  MembershipRecord record;
  if (!(in >> word) || word != "left" || !(in >> record.id >> record.seen_ms) || record.id < 0)
    return std::nullopt;
  std::getline(in >> std::ws, record.reason);
  return record;
}

}  // namespace lockstep::detail
