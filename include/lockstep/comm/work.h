#pragma once

#include <chrono>
#include <functional>
#include <string>

#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

namespace lockstep::comm {

/// Handle of an asynchronous collective started by `ProcessGroup`. `wait()` blocks until it is done
/// and rethrows its failure as a CommError naming the rank, the operation and its sequence number.
/// Not thread-safe; wait on it from one thread.
class Work {
 public:
  Work() = default;
  Work(c10::intrusive_ptr<c10d::Work> work, std::string description, int rank,
       std::chrono::milliseconds timeout, std::function<void()> on_success = {});

  /// Blocks until the collective is done (at most the group's collective timeout), then runs its
  /// completion step (e.g. the division of an average). Throws CommError on failure or timeout.
  void wait();

  /// True when the collective has finished (successfully or not). Does not run the completion step.
  bool is_completed() const;

  /// The c10d handle, for code that needs the raw LibTorch API.
  const c10::intrusive_ptr<c10d::Work>& native() const { return work_; }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  std::string description_;
  int rank_ = -1;
  std::chrono::milliseconds timeout_{0};
  std::function<void()> on_success_;
  bool done_ = false;
};

}  // namespace lockstep::comm
