#pragma once

// The serial executor of lockstep's own backends (shm, MPI). Private to comm/ (header-only and
// torch-free: each backend is its own target, and the unit test needs no process group).

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

namespace lockstep::comm::detail {

/*
 * One thread that runs a process group's collectives one at a time, in the order they were submitted,
 * so that every rank runs them in the same order whatever thread issued them.
 *
 * Jobs are numbered 1, 2, ... in submission order (the order every rank runs them in); the backend builds
 * each from its number, under the executor's lock, with a label ("allreduce #3", for errors) and what to
 * do when it will never run (the executor stopped first). With run_inline_when_idle, a job submitted while
 * nothing is queued or running runs on the caller's thread instead: handing it to the thread costs two
 * context switches, tens of microseconds on a busy core (the shm backend's small all-reduces). Order holds,
 * because the executor counts as busy meanwhile.
 *
 * The thread shares the executor's state, so it may outlive the executor's owner: MPI cannot cancel a
 * collective, and a group whose collective never returns must still be destroyable. stop() abandons the
 * queued jobs and waits a bounded time for the running one; a thread still inside a job then leaves when
 * (if ever) the job returns.
 */
class SerialExecutor {
 public:
  using Job = std::function<void()>;  // must not throw: a job reports its own errors
  struct Entry {
    std::string label;
    Job job;
    Job abandon;  // instead of `job`, when it will never run
  };

  /// `name` ("shm", "mpi") names the group in errors.
  explicit SerialExecutor(std::string name, bool run_inline_when_idle = false)
      : state_(std::make_shared<State>()) {
    state_->name = std::move(name);
    state_->run_inline_when_idle = run_inline_when_idle;
  }
  SerialExecutor(const SerialExecutor&) = delete;
  SerialExecutor& operator=(const SerialExecutor&) = delete;
  /// Stops without waiting: the owner calls stop() with its own bound first (the shm backend waits for
  /// the running collective, which always ends; the MPI backend waits at most its timeout).
  ~SerialExecutor() { stop(std::chrono::milliseconds(0)); }

  /// Starts the thread; it runs `first` (when given) before any job.
  void start(Job first = {}) {
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      state_->started = true;
    }
    std::thread([state = state_, first = std::move(first)] {
      if (first) run_job(first);
      state->loop();
    }).detach();
  }

  /// Builds job number n with `make(n, jobs queued ahead of it)` and runs it after every job submitted
  /// before it. `make` runs under the executor's lock: it must not call the executor. Throws
  /// std::runtime_error once stopped (without calling `make`).
  void submit(const std::function<Entry(std::uint64_t sequence, std::size_t queued_ahead)>& make) {
    State& s = *state_;
    std::unique_lock<std::mutex> lock(s.mutex);
    if (s.stopping) throw std::runtime_error(s.name + " process group is shutting down");
    Entry entry = make(++s.next_sequence, s.queue.size());
    if (s.run_inline_when_idle && s.queue.empty() && !s.busy) {
      s.busy = true;
      s.running = std::move(entry.label);
      lock.unlock();
      run_job(entry.job);
      lock.lock();
      s.busy = false;
      s.running.clear();
      // The thread is the only waiter: wake it only for jobs queued meanwhile.
      const bool queued = !s.queue.empty();
      lock.unlock();
      if (queued) s.cv.notify_all();
      return;
    }
    s.queue.push_back(std::move(entry));
    lock.unlock();
    s.cv.notify_all();
  }

  /// Takes no more jobs, abandons the queued ones (in order), and waits up to `timeout` for the thread to
  /// finish the running job and exit. Returns whether it exited. Idempotent.
  bool stop(std::chrono::milliseconds timeout) {
    State& s = *state_;
    std::deque<Entry> abandoned;
    std::unique_lock<std::mutex> lock(s.mutex);
    s.stopping = true;
    abandoned.swap(s.queue);
    lock.unlock();
    s.cv.notify_all();
    for (auto& entry : abandoned) {
      if (entry.abandon) run_job(entry.abandon);
    }
    lock.lock();
    const auto exited = [&s] { return s.exited || !s.started; };
    if (timeout == std::chrono::milliseconds::max()) {
      s.cv.wait(lock, exited);
      return true;
    }
    return s.cv.wait_for(lock, timeout, exited);
  }

  /// The label of the job running now, "" between jobs.
  std::string running() const {
    std::lock_guard<std::mutex> lock(state_->mutex);
    return state_->running;
  }
  /// Jobs waiting behind the running one.
  std::size_t queued() const {
    std::lock_guard<std::mutex> lock(state_->mutex);
    return state_->queue.size();
  }

 private:
  struct State {
    std::string name;
    std::mutex mutex;
    std::condition_variable cv;
    std::deque<Entry> queue;
    std::uint64_t next_sequence = 0;
    std::string running;
    bool run_inline_when_idle = false;
    bool busy = false;  // a job is running (on the thread or inline)
    bool stopping = false;
    bool started = false;  // start() was called
    bool exited = false;

    void loop() {
      for (;;) {
        Entry entry;
        {
          std::unique_lock<std::mutex> lock(mutex);
          cv.wait(lock, [this] { return stopping || (!queue.empty() && !busy); });
          if (queue.empty()) break;
          entry = std::move(queue.front());
          queue.pop_front();
          busy = true;
          running = entry.label;
        }
        run_job(entry.job);
        {
          std::lock_guard<std::mutex> lock(mutex);
          busy = false;
          running.clear();
        }
        cv.notify_all();
      }
      std::lock_guard<std::mutex> lock(mutex);
      exited = true;
      cv.notify_all();
    }
  };

  static void run_job(const Job& job) {
    try {
      job();
    } catch (...) {
      // A job reports its own errors; nothing may escape onto the executor's thread.
    }
  }

  std::shared_ptr<State> state_;
};

}  // namespace lockstep::comm::detail
