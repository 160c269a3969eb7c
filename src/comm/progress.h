#pragma once

// Progress records: how a hang becomes an error that names ranks (private to comm/).
//
// Each ProcessGroup numbers its collectives (ProcessGroup::describe). A Progress object notes every
// one this rank issues, finishes and waits on, and a background thread publishes that, once per
// `interval`, in two places:
//   - the job's store, under "progress/<rank>": the time, the last issued and finished numbers, whether
//     the rank is blocked in a wait, and the descriptions of the last few collectives it issued;
//   - the launcher's heartbeat pipe, when the launcher passed one (LOCKSTEP_HEARTBEAT_FD): one line per
//     interval, "<issued> <finished> <waiting 0|1> <description>", and "bye" when the group ends.
//
// A rank whose collective takes long reads the others' records (Work::wait does, every interval):
//   - a rank whose record holds the same number with another description called a different collective
//     (a model that differs, a branch taken on one rank only): find_mismatch() names both. (When the
//     sizes differ, Gloo's transport thread may instead throw in the receiving process, which then
//     terminates: a terminate handler installed here prints the same sentence first.)
//   - when the collective fails or times out, explain_missing() names the ranks that never issued it,
//     with what each did last and whether its record is still fresh (alive but busy elsewhere) or stale
//     (stopped, hung in the kernel, dead).
// The launcher reads the heartbeats to find a rank stuck outside collectives (launcher.cpp).
//
// Collectives whose wait does not block the host (NCCL on CUDA tensors: Work::wait_on_stream) are watched
// by the same thread instead: each interval it drops the finished ones (a CUDA event query, no
// synchronisation) and, once the oldest has run past the collective timeout, reports it once through
// `report` with explain_missing()'s sentence — before NCCL's own watchdog, whose timeout lockstep sets a
// little later (backend_nccl.cpp), aborts the communicator.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include <functional>
#include <memory>
#include <vector>

#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

namespace lockstep::comm::detail {

/// One rank's record as read back from the store.
struct ProgressRecord {
  std::int64_t unix_ms = 0;    // when it was written (the writer's clock)
  std::uint64_t issued = 0;    // number of the last collective issued (0: none yet)
  std::uint64_t finished = 0;  // number of the last collective whose wait returned
  bool waiting = false;        // blocked in a wait when written
  std::deque<std::pair<std::uint64_t, std::string>> recent;  // (number, description), oldest first

  /// The description of collective `sequence`, or "" when it is not among the recent ones.
  std::string description_of(std::uint64_t sequence) const;
  std::string to_text() const;
  /// Throws std::invalid_argument on text that is not a record.
  static ProgressRecord parse(const std::string& text);
};

/// What the launcher's heartbeat reports: the collectives of every group of the process (the world and its
/// subgroups, ProcessGroup::split), so that a rank busy in a subgroup is not taken for one stuck outside
/// collectives. Shared by a group's Progress and its subgroups'; only the world's writes the heartbeat.
struct ProcessActivity {
  std::mutex mutex;
  std::uint64_t issued = 0;    // collectives issued, all groups
  std::uint64_t finished = 0;  // collectives whose wait returned, all groups
  int waiting = 0;             // groups blocked in a wait now
  std::string last_op;         // the last collective issued, any group
};

class Progress {
 public:
  /// `store`: the group's namespace (may be null: then only heartbeats). `heartbeat_fd` < 0: none.
  /// `activity`: the process's, shared with the parent group (null: a new one, for the world).
  /// `world_ranks`: the world rank of each of the group's ranks, for messages (empty: the same numbers).
  Progress(c10::intrusive_ptr<c10d::Store> store, int rank, int world_size,
           std::chrono::milliseconds interval, int heartbeat_fd,
           std::shared_ptr<ProcessActivity> activity = nullptr, std::vector<int> world_ranks = {});
  /// Stops the thread (without the "bye" of stop()).
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  /// The heartbeat descriptor passed by a launcher in LOCKSTEP_HEARTBEAT_FD, or -1 when there is none
  /// or it is not an open pipe. Marks it close-on-exec and non-blocking.
  static int heartbeat_fd_from_env();

  void issued(std::uint64_t sequence, const std::string& description);
  void wait_started();
  void wait_ended(std::uint64_t sequence, bool succeeded);
  /// Publishes one last record, tells the launcher "bye" and stops the thread. Idempotent.
  void stop();

  /// A wait gave up on a collective that is still in flight in the backend (timeout, mismatch): the
  /// backend's threads are stuck in it, so the group must not wait for them when it is destroyed.
  void mark_abandoned() { abandoned_ = true; }
  bool abandoned() const { return abandoned_; }

  std::chrono::milliseconds interval() const { return interval_; }
  /// "rank N" with N the world rank of the group's rank `rank`.
  std::string rank_name(int rank) const;
  const std::shared_ptr<ProcessActivity>& activity() const { return activity_; }
  int rank() const { return rank_; }

  /// Writes this rank's record now (not waiting for the thread).
  void publish_now();
  /// "" when no other rank's record shows one of this rank's recent collectives' numbers with another
  /// description; otherwise a sentence naming this rank's and the first differing rank's collective.
  std::string find_mismatch();
  /// The ranks that had not issued collective `sequence`, each with what it did last and how old its
  /// record is; or a sentence saying every rank had issued it. Never throws.
  std::string explain_missing(std::uint64_t sequence);

  /// Watches collective `sequence` (`description`), whose wait did not block the host, until `work`
  /// completes; past `timeout` the thread calls `report` once with a sentence naming this rank, the
  /// collective and the ranks missing from it (see above). `report` is shared by all watched collectives:
  /// the last one given is used (default: a line on stderr).
  void watch(std::uint64_t sequence, const std::string& description, c10::intrusive_ptr<c10d::Work> work,
             std::chrono::milliseconds timeout, std::function<void(const std::string&)> report = {});

 private:
  void run();
  void publish();
  /// The watched collectives' check, once an interval (see above).
  void check_watched();

  struct Watched {
    std::uint64_t sequence;
    std::string description;
    c10::intrusive_ptr<c10d::Work> work;
    std::chrono::steady_clock::time_point deadline;
  };
  ProgressRecord snapshot() const;
  std::string key_of(int rank) const { return "progress/" + std::to_string(rank); }

  bool read_record(int rank, ProgressRecord& out, std::string& problem);

  c10::intrusive_ptr<c10d::Store> store_;
  const int rank_;
  const int world_size_;
  const std::chrono::milliseconds interval_;
  int heartbeat_fd_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  bool store_failed_ = false;
  std::atomic<bool> abandoned_{false};
  ProgressRecord mine_;
  std::deque<Watched> watched_;  // oldest first; guarded by mutex_
  std::function<void(const std::string&)> report_;
  std::shared_ptr<ProcessActivity> activity_;
  const std::vector<int> world_ranks_;
  std::thread thread_;
};

}  // namespace lockstep::comm::detail
