#include "lockstep/comm/work.h"

#include <algorithm>
#include <exception>
#include <thread>

#include <c10/util/Exception.h>

#include "lockstep/comm/comm_error.h"
#include "progress.h"

namespace lockstep::comm {
namespace {

using Clock = std::chrono::steady_clock;

std::string timeout_text(std::chrono::milliseconds timeout) {
  return std::to_string(timeout.count() / 1000.0).substr(0, 6) + " s";
}

}  // namespace

Work::Work(c10::intrusive_ptr<c10d::Work> work, std::string description, int rank,
           std::chrono::milliseconds timeout, std::function<void()> on_success)
    : work_(std::move(work)),
      description_(std::move(description)),
      rank_(rank),
      timeout_(timeout),
      on_success_(std::move(on_success)) {}

void Work::track(std::shared_ptr<detail::Progress> progress, std::uint64_t sequence, bool diagnose) {
  progress_ = std::move(progress);
  sequence_ = sequence;
  diagnose_ = diagnose && progress_ != nullptr;
}

Work Work::then(std::function<void()> finish, const std::string& note) && {
  Work out = std::move(*this);
  out.description_ += note;
  if (!finish) return out;
  if (out.on_success_) {
    out.on_success_ = [first = std::move(out.on_success_), second = std::move(finish)]() {
      first();
      second();
    };
  } else {
    out.on_success_ = std::move(finish);
  }
  return out;
}

void Work::wait() {
  if (done_) return;
  TORCH_CHECK(work_, "wait() on an empty lockstep::comm::Work");
  if (progress_) progress_->wait_started();
  const auto deadline = Clock::now() + timeout_;
  std::string mismatch;
  std::string interrupted;
  try {
    if (on_stream_) {
      work_->wait();  // no timeout: the stream waits on an event, the host goes on (see work.h)
    } else if (!diagnose_ && !interrupt_) {
      work_->wait(timeout_);
    } else {
      wait_in_slices(deadline, mismatch, interrupted);
    }
  } catch (const std::exception& e) {
    done_ = true;
    const bool abandoned = !work_->isCompleted();
    // A collective that failed because a rank was lost says so, when the world has changed already.
    if (interrupt_ && interrupted.empty()) interrupted = interrupt_();
    std::string explanation;
    if (progress_) {
      progress_->wait_ended(sequence_, /*succeeded=*/false);
      if (abandoned) progress_->mark_abandoned();
      // Not in an elastic world: there the launcher says who was lost, and every second counts.
      if (diagnose_ && mismatch.empty() && !interrupt_) {
        // Let every rank's record catch up with the moment of the failure, then read them.
        progress_->publish_now();
        std::this_thread::sleep_for(progress_->interval() + std::chrono::milliseconds(200));
        mismatch = progress_->find_mismatch();
        if (mismatch.empty()) explanation = progress_->explain_missing(sequence_);
      }
    }
    if (!mismatch.empty()) throw CommError(rank_, description_, mismatch);
    // c10::Error's what() carries a C++ backtrace of LibTorch's frames: not for users.
    const auto* torch_error = dynamic_cast<const c10::Error*>(&e);
    std::string what = torch_error != nullptr ? torch_error->what_without_backtrace() : e.what();
    if (!interrupted.empty()) {
      throw MembershipChanged(rank_, description_,
                              "given up: " + interrupted + (abandoned ? std::string() : " (" + what + ")"));
    }
    throw CommError(rank_, description_,
                    "failed: " + what +
                        " — a peer may have exited or be stuck, or the ranks called different collectives "
                        "(every rank must call the same ones in the same order). Collective timeout: " +
                        timeout_text(timeout_) + " (collective_timeout, LOCKSTEP_TIMEOUT)." + explanation);
  }
  done_ = true;
  if (progress_) progress_->wait_ended(sequence_, /*succeeded=*/true);
  if (on_success_) on_success_();
}

void Work::wait_in_slices(Clock::time_point deadline, std::string& mismatch, std::string& interrupted) {
  // Between slices: the world may have changed (interrupt_), or another rank's record may show a different
  // collective under this number (diagnose_, once per progress interval); then waiting longer is pointless.
  const auto interval = progress_ ? progress_->interval() : std::chrono::milliseconds(1000);
  const auto slice = interrupt_ ? std::min<std::chrono::milliseconds>(kInterruptSlice, interval) : interval;
  auto next_diagnosis = Clock::now() + interval;
  for (;;) {
    const auto now = Clock::now();
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
    if (left <= slice) {
      work_->wait(std::max(left, std::chrono::milliseconds(1)));
      return;
    }
    try {
      work_->wait(slice);
      return;
    } catch (const std::exception&) {
      if (work_->isCompleted()) {
        // It ended: failed, or finished just after the slice ran out. Its own outcome decides.
        work_->wait(slice);
        return;
      }
      if (interrupt_) {
        interrupted = interrupt_();
        if (!interrupted.empty()) throw;
      }
      if (diagnose_ && Clock::now() >= next_diagnosis) {
        next_diagnosis = Clock::now() + interval;
        mismatch = progress_->find_mismatch();
        if (!mismatch.empty()) throw;
      }
    }
  }
}

bool Work::is_completed() const {
  return done_ || (work_ && work_->isCompleted());
}

}  // namespace lockstep::comm
