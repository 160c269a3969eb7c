#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

namespace lockstep::comm {

namespace detail {
class Progress;
}

/// Handle of an asynchronous collective started by `ProcessGroup`. `wait()` blocks until it is done
/// and rethrows its failure as a CommError naming the rank, the operation and its sequence number.
/// Not thread-safe; wait on it from one thread.
class Work {
 public:
  Work() = default;
  Work(c10::intrusive_ptr<c10d::Work> work, std::string description, int rank,
       std::chrono::milliseconds timeout, std::function<void()> on_success = {});

  /// Blocks until the collective is done (at most the group's collective timeout), then runs its
  /// completion step (e.g. the division of an average). Throws CommError on failure or timeout; for a
  /// collective started by a ProcessGroup the error names the ranks that had not issued it, and when
  /// another rank issued a different collective under the same number, wait() fails at once (within
  /// about a second) with both descriptions instead of waiting for the timeout.
  void wait();

  /// The same collective with another completion step (may be empty), run after this one's (comm hooks:
  /// widen a compressed bucket back). `note` is appended to the description used in errors.
  Work then(std::function<void()> finish, const std::string& note) &&;

  /// Used by ProcessGroup: report this collective's waits to `progress` (number `sequence`); with
  /// `diagnose`, wait in slices and check the other ranks' records between them.
  void track(std::shared_ptr<detail::Progress> progress, std::uint64_t sequence, bool diagnose);

  /// Used by ProcessGroup (ProcessGroupOptions::interrupt): wait in slices of kInterruptSlice and ask
  /// `interrupt` between them; a non-empty answer abandons the collective and throws MembershipChanged.
  /// After a failed collective it is asked once more, so that a failure caused by a lost rank says so.
  void interrupt_with(std::function<std::string()> interrupt) { interrupt_ = std::move(interrupt); }
  static constexpr std::chrono::milliseconds kInterruptSlice{20};

  /// Used by ProcessGroup for collectives of CUDA tensors on NCCL: wait() then makes the calling thread's
  /// current CUDA stream wait for the collective (an event, no host synchronisation), and the timeout is
  /// NCCL's watchdog (the group's collective timeout; with TORCH_NCCL_ASYNC_ERROR_HANDLING, which
  /// lockstep's launcher sets, it aborts the communicator and the process instead of hanging). The
  /// completion step is queued on that stream after the collective.
  void wait_on_stream() { on_stream_ = true; }

  /// True when the collective has finished (successfully or not). Does not run the completion step.
  bool is_completed() const;

  /// The c10d handle, for code that needs the raw LibTorch API.
  const c10::intrusive_ptr<c10d::Work>& native() const { return work_; }

 private:
  /// wait()'s loop when something must be asked between slices (diagnose_, interrupt_); sets `mismatch`
  /// or `interrupted` to why it gave up.
  void wait_in_slices(std::chrono::steady_clock::time_point deadline, std::string& mismatch,
                      std::string& interrupted);

  c10::intrusive_ptr<c10d::Work> work_;
  std::string description_;
  int rank_ = -1;
  std::chrono::milliseconds timeout_{0};
  std::function<void()> on_success_;
  std::function<std::string()> interrupt_;
  std::shared_ptr<detail::Progress> progress_;
  std::uint64_t sequence_ = 0;
  bool diagnose_ = false;
  bool on_stream_ = false;
  bool done_ = false;
};

}  // namespace lockstep::comm
