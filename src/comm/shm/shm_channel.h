#pragma once

// The shared control block and data buffers of the shm backend, and the barrier every step of a
// collective synchronises on. Private to the shm backend.
//
// Segment layout (one segment per process group, created by rank 0, mapped by every rank):
//
//   ControlBlock | RankControl[world] | buffer 0: slot[0..world) | buffer 1: slot[0..world)
//
// Each slot holds `slot_bytes`. A collective is a series of steps; step s uses buffer s % 2, so a rank
// may fill one buffer while slower ranks still read the other (see process_group_shm.cpp).
//
// The barrier is a central counter plus a generation word: the last rank to arrive resets the counter
// and bumps the generation; the others spin for a few microseconds, then sleep on a futex on the
// generation word (no core burnt while a rank waits). Every wait is bounded by the collective's
// deadline; while it sleeps a waiter also checks every ~50 ms that the ranks it waits for are still
// alive, and whether another rank recorded a failure (a timeout, a mismatch), so one failure stops
// every rank instead of leaving them to time out one by one.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "shm_segment.h"

namespace lockstep::comm::detail {

/// What a rank is about to do, published before a collective's first barrier and compared after it
/// (ranks that call different collectives get an error naming both, never a hang or garbage).
struct ShmSignature {
  std::uint64_t sequence = 0;       // 1-based collective number in this group
  std::int32_t op = 0;              // c10d::OpType
  std::int32_t dtype = -1;          // c10::ScalarType, -1 when none (barrier)
  std::int64_t numel = 0;           // elements per rank
  std::int32_t detail = 0;          // reduce op, or broadcast root
  std::int32_t chunks = 0;          // how many steps the collective takes
  std::int64_t shared_offset = -1;  // allreduce of a shared buffer: the tensor's byte offset in it; else -1
};

/// ShmSignature::op of ProcessGroupShm::new_shared_tensor (not a c10d::OpType).
constexpr std::int32_t kShmNewSharedTensorOp = 1000;

/// One collective in flight on this rank, for error messages and deadlines.
struct ShmOpContext {
  const char* op = "";  // "allreduce", ...
  std::uint64_t sequence = 0;
  std::chrono::steady_clock::time_point deadline;
  std::chrono::milliseconds timeout{0};
};

class ShmChannel {
 public:
  /// Bytes of a segment for `world` ranks with `slot_bytes` per slot.
  static std::size_t segment_bytes(int world, std::size_t slot_bytes);

  /// Rank 0 passes the segment it created with `initialise` = true (writes the control block);
  /// the others pass the segment they opened and have the control block checked against
  /// (world, slot_bytes). Registers this rank's pid for the liveness checks.
  ShmChannel(ShmSegment segment, int rank, int world, std::size_t slot_bytes, bool initialise);
  ShmChannel(const ShmChannel&) = delete;
  ShmChannel& operator=(const ShmChannel&) = delete;

  /// Slot `rank` of buffer `buffer` (0 or 1).
  char* slot(int buffer, int rank) const {
    return buffers_ + (static_cast<std::size_t>(buffer) * world_ + rank) * slot_bytes_;
  }
  /// The buffer of the next step (alternates 0, 1, 0, ...; every rank takes the same steps).
  int next_buffer() { return (step_++) & 1; }

  std::size_t slot_bytes() const { return slot_bytes_; }
  int rank() const { return rank_; }
  int world() const { return world_; }
  /// Messages name rank r as world_ranks[r] (ShmOptions::world_ranks); empty: as r.
  void name_ranks(std::vector<int> world_ranks) { world_ranks_ = std::move(world_ranks); }
  ShmSegment& segment() { return segment_; }

  /// Publishes this rank's signature of the collective about to start.
  void publish(const ShmSignature& signature);

  /// Waits until every rank has arrived, at most until ctx.deadline. With `check_signatures`, then
  /// compares every rank's published signature with this rank's. Throws std::runtime_error naming
  /// the operation, its number and the ranks that did not arrive / died / failed / disagreed; the
  /// failure is also recorded in the segment so every other rank stops too.
  void barrier(const ShmOpContext& ctx, bool check_signatures);

  /// Throws the failure another rank (or this one) recorded, if any.
  void throw_if_failed() const;

  /// Records a failure of this rank so the others stop waiting (first failure wins). Never throws.
  void record_failure(const std::string& message) noexcept;

 private:
  struct ControlBlock;
  struct RankControl;

  RankControl& control(int rank) const;
  [[noreturn]] void fail(const std::string& message);
  void wait_for_generation(std::uint32_t seen, std::uint64_t target, const ShmOpContext& ctx);
  std::string missing_ranks(std::uint64_t target) const;
  std::string dead_ranks(std::uint64_t target) const;
  void check_signatures(const ShmOpContext& ctx);

  ShmSegment segment_;
  ControlBlock* block_ = nullptr;
  char* buffers_ = nullptr;
  int rank_ = 0;
  int world_ = 1;
  std::vector<int> world_ranks_;  // for messages (name_ranks)
  /// "rank N", N the world rank of the group's rank r.
  std::string rank_name(int r) const;
  std::size_t slot_bytes_ = 0;
  std::uint64_t step_ = 0;      // steps taken (selects the buffer)
  std::uint64_t arrivals_ = 0;  // barriers entered by this rank
};

/// Text of a signature: "allreduce #12 (Float[1024], sum, 1 step)".
std::string describe(const ShmSignature& signature);

}  // namespace lockstep::comm::detail
