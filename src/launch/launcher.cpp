#include "lockstep/launch/launcher.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "in_place_store.h"
#include "lockstep/detail/elastic_contract.h"
#include "lockstep/detail/join.h"
#include "lockstep/detail/shm_names.h"
#include "lockstep/detail/worker_contract.h"
#include "lockstep/launch/detail/elastic_rendezvous.h"
#include "lockstep/launch/detail/host.h"
#include "lockstep/launch/detail/output_forwarder.h"
#include "lockstep/launch/launch_error.h"
#include "lockstep/launch/worker_env.h"
#include "signal_relay.h"
#include "unique_fd.h"
#include "worker_process.h"

// How one attempt runs (torchrun's local agent, reduced to one poll loop):
//
//   spawn every worker ─▶ poll(signal pipe, every worker's stdout/stderr pipe)
//        │                  ├─ pipe data  ─▶ OutputForwarder (prefixed lines, log file, tail)
//        │                  ├─ SIGCHLD    ─▶ waitid(pid, WNOHANG | WNOWAIT) for each of our pids
//        │                  │                 first non-zero exit ─▶ stop: SIGTERM to every group
//        │                  ├─ SIGINT/TERM/HUP ─▶ stop: that signal to every group (twice: SIGKILL)
//        │                  ├─ SIGUSR1    ─▶ forwarded to every group, no stop (preemption notice: the
//        │                  │                 workers checkpoint and exit themselves; no restart after it)
//        │                  ├─ heartbeats ─▶ each worker's progress (comm/progress.h); in a multi-rank
//        │                  │                 job, a worker silent for the collective timeout, or that
//        │                  │                 reaches no collective for that long, is killed and the
//        │                  │                 others stopped, as after a failure (check_stalls)
//        │                  └─ timeout    ─▶ grace period over: SIGKILL to every group
//        └─ all workers exited ─▶ read the pipes to EOF (bounded by kDrainTimeout, for grandchildren
//                                 that escaped their group and keep a pipe open) ─▶ summary
//
// Every worker leads its own process group, so a signal to -pid also reaches the processes it
// started (a shell's children, data-loader processes).
//
// A process group id is a pid, and pids are reused: once a worker is reaped and the last process of its
// group is gone, the same number may name an unrelated process or group, and kill(-pgid) would hit it.
// So the launcher signals a group only while it holds the group's leader unreaped (running, or a
// zombie: a zombie keeps its pid and its place in the group, so the id cannot be reused meanwhile).
// A worker that exits while the job runs normally is reaped at once, and its group is never signalled
// again. Once a stop has begun (a failure, a signal), exited workers are only observed (WNOWAIT) and
// kept as zombies until the attempt ends, so that the grace-period SIGKILL and the final sweep still
// reach the processes they left in their groups; then they are reaped.

namespace lockstep::launch {
namespace {

using Clock = std::chrono::steady_clock;

// After the last worker is reaped, how long to wait for the pipes to reach EOF.
constexpr std::chrono::milliseconds kDrainTimeout{1000};
// poll() never sleeps longer than this, so a lost wake-up cannot stall the loop.
constexpr int kMaxPollMs = 500;
constexpr std::size_t kReadChunk = std::size_t{64} * 1024;

// What a worker's heartbeats said last (lines "<issued> <finished> <waiting 0|1> <last collective>", or
// "bye" when its process group ended; see comm/progress.h).
struct Heartbeat {
  bool started = false;  // a lockstep process group in the worker is reporting
  bool ended = false;    // "bye", or the pipe closed
  Clock::time_point last_beat;
  Clock::time_point last_progress;                   // when issued/finished last changed
  Clock::time_point last_active;                     // the same, or the last beat that said "waiting"
  std::pair<std::uint64_t, std::uint64_t> progress;  // (issued, finished)
  bool waiting = false;
  bool last_finished = false;  // the last collective issued has finished
  std::string last_op;
  std::string partial;  // an incomplete line
};

struct Worker {
  int local_rank = 0;
  int rank = 0;
  pid_t pid = -1;
  detail::UniqueFd out_fd;
  detail::UniqueFd err_fd;
  detail::UniqueFd heartbeat_fd;
  Heartbeat heartbeat;
  std::unique_ptr<detail::OutputForwarder> out;
  std::unique_ptr<detail::OutputForwarder> err;
  std::optional<WorkerExit> exit;  // set once it has exited
  bool held = false;               // not reaped yet (running or a zombie): its pid and group are ours
  bool lost = false;               // in place: announced as lost; the others went on without it
};

// Why an attempt stops its workers.
enum class StopCause { kNone, kWorkerFailed, kSpawnFailed, kSignal, kRoundEnded };

// The shm backend unlinks its segment as soon as every rank has mapped it; a worker killed inside that
// set-up window leaves the name in /dev/shm. Remove the names created by this attempt's workers (the
// name carries the creating process's pid, so another job's segments are never touched).
void remove_shm_leftovers(const std::string& run_id, const std::vector<pid_t>& pids) {
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) return;
  std::vector<std::string> prefixes;
  for (pid_t pid : pids) prefixes.push_back(lockstep::detail::shm_segment_prefix(run_id, pid));
  while (const dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    for (const std::string& prefix : prefixes) {
      if (name.rfind(prefix, 0) == 0) ::unlink(("/dev/shm/" + name).c_str());
    }
  }
  ::closedir(dir);
}

struct AttemptResult {
  StopCause cause = StopCause::kNone;
  std::optional<detail::RoundEnd> round_end;  // kRoundEnded: why
  bool preempted = false;  // SIGUSR1 was forwarded: the workers were asked to checkpoint and leave
  int exit_status = 0;
  std::optional<int> failed_rank;
  std::optional<WorkerExit> failure;
  std::optional<int> signal;
};

// The files of one attempt in torchrun's layout, under JOB_DIR/attempt_<K>/: <local rank>/stdout.log and
// stderr.log for the streams that WorkerOutput keeps, <local rank>/error.json for the worker to write
// (TORCHELASTIC_ERROR_FILE; Python's @record does), filtered_stdout.log / filtered_stderr.log for the
// duplicate filters. Nothing without a JOB_DIR.
struct AttemptLogs {
  AttemptLogs(const std::string& job_dir, int attempt, const LaunchConfig& config) {
    const auto n = static_cast<std::size_t>(config.nproc_per_node);
    out.assign(n, -1);
    err.assign(n, -1);
    error_files.assign(n, "");
    if (job_dir.empty()) return;
    const WorkerOutput& output = config.output;
    const std::filesystem::path attempt_dir =
        std::filesystem::path(job_dir) / ("attempt_" + std::to_string(attempt));
    for (int local_rank = 0; local_rank < config.nproc_per_node; ++local_rank) {
      const std::filesystem::path dir = attempt_dir / std::to_string(local_rank);
      make_dirs(dir);
      const int kept =
          output.redirects.value_or(kNoStream).of(local_rank) | output.tee.value_or(kNoStream).of(local_rank);
      const auto i = static_cast<std::size_t>(local_rank);
      if (kept & kStdout) out[i] = open_log(dir / "stdout.log");
      if (kept & kStderr) err[i] = open_log(dir / "stderr.log");
      error_files[i] = (dir / "error.json").string();
    }
    make_dirs(attempt_dir);
    if (!output.duplicate_stdout_filters.empty())
      filtered_out = open_log(attempt_dir / "filtered_stdout.log");
    if (!output.duplicate_stderr_filters.empty())
      filtered_err = open_log(attempt_dir / "filtered_stderr.log");
  }
  std::vector<int> out;
  std::vector<int> err;
  std::vector<std::string> error_files;  // "" without files
  int filtered_out = -1;
  int filtered_err = -1;

 private:
  static void make_dirs(const std::filesystem::path& dir) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) throw LaunchError("log_dir: cannot create " + dir.string() + ": " + ec.message());
  }
  int open_log(const std::filesystem::path& path) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) throw LaunchError("log_dir: cannot open " + path.string() + ": " + detail::error_text(errno));
    return files_.emplace_back(fd).get();
  }
  std::vector<detail::UniqueFd> files_;
};

// The command as a shell would need it typed: arguments with special characters in single quotes.
std::string join_command(const std::vector<std::string>& command) {
  std::string s;
  for (const std::string& arg : command) {
    if (!s.empty()) s += ' ';
    const bool plain =
        !arg.empty() &&
        arg.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=/.,:@%") ==
            std::string::npos;
    if (plain) {
      s += arg;
      continue;
    }
    s += '\'';
    for (char c : arg) s += c == '\'' ? std::string("'\\''") : std::string(1, c);
    s += '\'';
  }
  return s;
}

// One start of all local workers, until they have all ended. `watch`, in a c10d round, says when the
// round ended elsewhere: then the workers are stopped.
class Attempt {
 public:
  Attempt(const LaunchConfig& config, const NodeWorld& world, const LaunchStreams& streams,
          detail::SignalRelay& relay, const AttemptLogs& logs, detail::RoundWatch* watch = nullptr,
          detail::InPlaceStore* in_place = nullptr)
      : config_(config),
        world_(world),
        streams_(streams),
        relay_(relay),
        logs_(logs),
        watch_(watch),
        in_place_(in_place) {}

  // Normally every worker is reaped by run(). When an exception cut it short (no fds left for a pipe,
  // poll failed), no worker may outlive the launcher: kill and reap what is left.
  ~Attempt() {
    for (Worker& w : workers_) {
      if (!w.held) continue;
      ::kill(-w.pid, SIGKILL);
      ::kill(w.pid, SIGKILL);
      release(w);
    }
  }
  Attempt(const Attempt&) = delete;
  Attempt& operator=(const Attempt&) = delete;

  AttemptResult run() {
    spawn_all();
    loop();
    finish_output();
    if (cause_ != StopCause::kNone) kill_all(SIGKILL);  // leftovers in the groups, if any
    std::vector<pid_t> pids;
    for (Worker& w : workers_) pids.push_back(w.pid);
    for (Worker& w : workers_) release(w);
    remove_shm_leftovers(config_.run_id, pids);
    print_summary();
    return result();
  }

 private:
  void spawn_all() {
    detail::SpawnSettings settings;
    settings.null_stdin = ::isatty(STDIN_FILENO) == 1;
    settings.default_sigpipe = !relay_.sigpipe_was_ignored();
    settings.heartbeat_fd = lockstep::detail::kHeartbeatFd;
    const EnvEntries base = current_environment();
    const WorkerOutput& output = config_.output;
    const std::string hostname = output.line_prefix_template ? detail::host_name() : "";
    workers_.reserve(static_cast<std::size_t>(config_.nproc_per_node));
    for (int local_rank = 0; local_rank < config_.nproc_per_node; ++local_rank) {
      const auto index = static_cast<std::size_t>(local_rank);
      // A joining launcher's worker is known by its id (its RANK is a placeholder until it is admitted).
      const int rank = in_place_ != nullptr ? in_place_->id_of(world_.rank_of(local_rank), local_rank)
                                            : world_.rank_of(local_rank);
      settings.inherit_stdout = local_rank == config_.direct_stdout_local_rank;
      EnvEntries env = worker_environment(config_, world_, local_rank, base);
      if (in_place_ != nullptr && in_place_->joining())
        env.push_back(std::string(lockstep::detail::kElasticJoinVariable) + "=" + std::to_string(rank));
      if (!logs_.error_files[index].empty())
        env.push_back("TORCHELASTIC_ERROR_FILE=" + logs_.error_files[index]);
      detail::SpawnedWorker spawned = detail::spawn_worker(config_.command, env, settings);
      if (spawned.error != 0) {
        spawn_error_ = spawned.error;
        failed_rank_ = rank;
        begin_stop(StopCause::kSpawnFailed, SIGTERM);
        return;
      }
      Worker& w = workers_.emplace_back();
      w.local_rank = local_rank;
      w.rank = rank;
      w.pid = spawned.pid;
      w.held = true;
      w.out_fd = std::move(spawned.out);
      w.err_fd = std::move(spawned.err);
      w.heartbeat_fd = std::move(spawned.heartbeat);
      // The console shows a stream unless it is redirected (and not tee'd) or the rank is filtered out.
      const bool shown = !output.local_ranks_filter || output.local_ranks_filter->count(local_rank) > 0;
      const int redirected = output.redirects.value_or(kNoStream).of(local_rank) &
                             ~output.tee.value_or(kNoStream).of(local_rank);
      const std::string prefix =
          output.line_prefix_template
              ? render_line_prefix(*output.line_prefix_template, rank, local_rank, config_.role, hostname)
              : detail::rank_prefix(rank);
      w.out = std::make_unique<detail::OutputForwarder>(
          prefix, shown && !(redirected & kStdout) ? streams_.out : nullptr, logs_.out[index]);
      w.err = std::make_unique<detail::OutputForwarder>(
          prefix, shown && !(redirected & kStderr) ? streams_.err : nullptr, logs_.err[index]);
      if (logs_.filtered_out >= 0) w.out->duplicate_to(logs_.filtered_out, &output.duplicate_stdout_filters);
      if (logs_.filtered_err >= 0) w.err->duplicate_to(logs_.filtered_err, &output.duplicate_stderr_filters);
    }
  }

  enum class Pipe { kOut, kErr, kHeartbeat, kWatch };

  void loop() {
    std::vector<pollfd> fds;
    std::vector<std::pair<Worker*, Pipe>> owners;
    for (;;) {
      handle_signals();
      reap();
      const auto now = Clock::now();
      check_stalls(now);
      if (kill_deadline_ && !killed_ && now >= *kill_deadline_) {
        kill_all(SIGKILL);
        killed_ = true;
      }
      if (all_exited()) {
        if (!drain_deadline_) drain_deadline_ = now + kDrainTimeout;
        if (!any_pipe_open() || now >= *drain_deadline_) return;
      }

      fds.clear();
      owners.clear();
      fds.push_back({relay_.fd(), POLLIN, 0});
      owners.emplace_back(nullptr, Pipe::kOut);
      if (watch_ != nullptr && cause_ == StopCause::kNone) {
        fds.push_back({watch_->fd(), POLLIN, 0});
        owners.emplace_back(nullptr, Pipe::kWatch);
      }
      for (Worker& w : workers_) {
        if (w.out_fd.valid()) {
          fds.push_back({w.out_fd.get(), POLLIN, 0});
          owners.emplace_back(&w, Pipe::kOut);
        }
        if (w.err_fd.valid()) {
          fds.push_back({w.err_fd.get(), POLLIN, 0});
          owners.emplace_back(&w, Pipe::kErr);
        }
        if (w.heartbeat_fd.valid()) {
          fds.push_back({w.heartbeat_fd.get(), POLLIN, 0});
          owners.emplace_back(&w, Pipe::kHeartbeat);
        }
      }
      const int rc = ::poll(fds.data(), fds.size(), poll_timeout_ms(now));
      if (rc < 0) {
        if (errno == EINTR) continue;
        throw LaunchError(std::string("poll() failed while watching the workers: ") +
                          detail::error_text(errno));
      }
      bool wrote = false;
      for (std::size_t i = 1; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        if (owners[i].second == Pipe::kWatch) {
          round_ended();
        } else if (owners[i].second == Pipe::kHeartbeat) {
          read_heartbeat(*owners[i].first);
        } else {
          wrote = read_pipe(*owners[i].first, owners[i].second == Pipe::kErr) || wrote;
        }
      }
      if (wrote) flush();
    }
  }

  int poll_timeout_ms(Clock::time_point now) const {
    auto timeout = std::chrono::milliseconds(kMaxPollMs);
    auto until = [&](Clock::time_point t) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(t - now);
      timeout = std::min(timeout, std::max(left, std::chrono::milliseconds(0)));
    };
    if (kill_deadline_ && !killed_) until(*kill_deadline_);
    if (drain_deadline_) until(*drain_deadline_);
    return static_cast<int>(timeout.count());
  }

  // Returns whether something was forwarded.
  bool read_pipe(Worker& w, bool is_stderr) {
    detail::UniqueFd& fd = is_stderr ? w.err_fd : w.out_fd;
    detail::OutputForwarder& forwarder = is_stderr ? *w.err : *w.out;
    ssize_t n;
    do {
      n = ::read(fd.get(), buffer_, sizeof(buffer_));
    } while (n < 0 && errno == EINTR);
    if (n > 0) {
      forwarder.feed(std::string_view(buffer_, static_cast<std::size_t>(n)));
      return true;
    }
    if (n < 0 && errno == EAGAIN) return false;
    forwarder.finish();  // EOF (or a read error): the last line without newline, then close
    fd.reset();
    return true;
  }

  void read_heartbeat(Worker& w) {
    ssize_t n;
    do {
      n = ::read(w.heartbeat_fd.get(), buffer_, sizeof(buffer_));
    } while (n < 0 && errno == EINTR);
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0) {  // EOF: the worker (and every process that inherited the pipe) is gone
      w.heartbeat.ended = true;
      w.heartbeat_fd.reset();
      return;
    }
    Heartbeat& beat = w.heartbeat;
    beat.partial.append(buffer_, static_cast<std::size_t>(n));
    const auto now = Clock::now();
    std::size_t start = 0;
    for (std::size_t end; (end = beat.partial.find('\n', start)) != std::string::npos; start = end + 1) {
      const std::optional<lockstep::detail::Heartbeat> line =
          lockstep::detail::parse_heartbeat(beat.partial.substr(start, end - start));
      if (!line) continue;
      if (line->bye) {
        beat.ended = true;
        continue;
      }
      const std::pair<std::uint64_t, std::uint64_t> progress{line->issued, line->finished};
      beat.waiting = line->waiting;
      // Progress: a collective issued or finished, or still waiting in one (a wait that ends with an
      // error leaves the numbers as they were, and the rank must get the time to report it).
      if (!beat.started || progress != beat.progress) beat.last_progress = now;
      if (!beat.started || progress != beat.progress || beat.waiting) beat.last_active = now;
      beat.started = true;
      beat.ended = false;
      beat.progress = progress;
      beat.last_finished = line->issued == line->finished;
      beat.last_op = line->last_op;
      beat.last_beat = now;
    }
    beat.partial.erase(0, start);
    if (beat.partial.size() > 4096) beat.partial.clear();  // not heartbeats: ignore
  }

  // The round ended on another node (a failure there, a lost node, a node joining): stop this node's
  // workers, which cannot go on in the old world.
  void round_ended() {
    if (cause_ != StopCause::kNone) return;
    round_end_ = watch_->end();
    if (!round_end_) return;
    message("round " + std::to_string(world_.restart_count) + " ended: " + round_end_->reason +
            "; stopping " + std::to_string(live_count()) + " worker(s) (SIGTERM, SIGKILL in " + grace_text() +
            ")");
    begin_stop(StopCause::kRoundEnded, SIGTERM);
  }

  // In a job of several ranks, a worker that reports through heartbeats but went silent, or reached no
  // collective, for the collective timeout holds every other rank up: kill it and stop the job, as
  // after a failure (so --max-restarts applies). In place, it is killed and announced as lost instead.
  void check_stalls(Clock::time_point now) {
    if (cause_ != StopCause::kNone || world_.world_size <= 1) return;
    const auto timeout = config_.collective_timeout;
    // In place, a silent worker is lost sooner: the others wait for it in every collective.
    const auto silence = in_place_ != nullptr ? std::min(timeout, config_.heartbeat_timeout) : timeout;
    const std::string silence_name = in_place_ != nullptr ? "heartbeat timeout " : "collective timeout ";
    for (Worker& w : workers_) {
      const Heartbeat& beat = w.heartbeat;
      if (w.exit || w.lost || !beat.started || beat.ended) continue;
      const std::string last = beat.last_op.empty() ? std::string("none yet") : beat.last_op;
      if (now - beat.last_beat > silence) {
        stall(w, "sent no heartbeat for " + seconds_text(now - beat.last_beat) + " (" + silence_name +
                     seconds_text(silence) +
                     "): the process is stopped (SIGSTOP, a "
                     "debugger) or hung in the kernel; its last collective: " +
                     last);
      } else if (!beat.waiting && now - beat.last_active > timeout) {
        stall(w, "reached no collective for " + seconds_text(now - beat.last_active) +
                     " (collective timeout " + seconds_text(timeout) + "); its last collective: " + last +
                     (beat.last_finished ? " (finished)" : " (not finished)") +
                     ": it is stuck outside collectives (a data loader that never returns, a deadlock or an "
                     "endless loop in its own code?)");
      } else if (beat.waiting && now - beat.last_progress > timeout + std::chrono::seconds(5)) {
        stall(w, "has been waiting in " + last + " for " + seconds_text(now - beat.last_progress) +
                     ", longer than its collective timeout (" + seconds_text(timeout) + ")");
      }
      if (cause_ != StopCause::kNone) return;
    }
  }

  void stall(Worker& w, const std::string& why) {
    if (in_place_ != nullptr && (live_count() > 1 || others_go_on())) {
      // Dead before it is announced: a vote it might still cast must not follow the announcement.
      ::kill(-w.pid, SIGKILL);
      siginfo_t info{};
      while (::waitid(P_PID, static_cast<id_t>(w.pid), &info, WEXITED | WNOWAIT) < 0 && errno == EINTR) {
      }
      lose(w, "was killed: it " + why);
      return;
    }
    failed_rank_ = w.rank;
    failure_ = WorkerExit::signaled(SIGKILL);
    stall_reason_ = why;
    message("rank " + std::to_string(w.rank) + " (local rank " + std::to_string(w.local_rank) + ", pid " +
            std::to_string(w.pid) + ") " + why + "; killing it" +
            (live_count() > 1 ? " and stopping the other " + std::to_string(live_count() - 1) +
                                    " worker(s) (SIGTERM, SIGKILL in " + grace_text() + ")"
                              : ""));
    ::kill(-w.pid, SIGKILL);  // held (it has not exited): its group is still ours
    begin_stop(StopCause::kWorkerFailed, SIGTERM);
  }

  static std::string seconds_text(Clock::duration d) {
    const auto tenths = std::chrono::duration_cast<std::chrono::milliseconds>(d).count() / 100;
    return std::to_string(tenths / 10) + "." + std::to_string(tenths % 10) + " s";
  }

  void handle_signals() {
    for (int signal : relay_.take()) {
      if (signal == SIGCHLD) continue;  // reap() runs on every turn of the loop
      if (signal == SIGUSR1 || signal == SIGUSR2) {
        // Slurm's --signal=USR1@90: a warning before the job is stopped. The workers decide what to do
        // (lockstep's Trainer checkpoints at the next step and exits 75); the launcher only passes it on
        // and, afterwards, does not restart them.
        if (cause_ == StopCause::kNone) {
          message("received " + signal_name(signal) + "; forwarding it to " + std::to_string(live_count()) +
                  " worker(s)");
          kill_all(signal);
          preempted_ = true;
        }
        continue;
      }
      if (cause_ == StopCause::kNone) {
        message("received " + signal_name(signal) + "; forwarding it to " + std::to_string(live_count()) +
                " worker(s), SIGKILL in " + grace_text());
        stop_signal_ = signal;
        begin_stop(StopCause::kSignal, signal);
      } else if (!killed_) {
        message("received " + signal_name(signal) + " while stopping; killing the workers now");
        if (!stop_signal_) stop_signal_ = signal;
        kill_all(SIGKILL);
        killed_ = true;
      }
    }
  }

  // Notes every worker that has exited. Reaps it at once while no stop is under way; otherwise leaves
  // it a zombie (see the file comment) until run() ends.
  void reap() {
    for (Worker& w : workers_) {
      if (w.exit) continue;
      siginfo_t info{};
      int rc;
      do {
        rc = ::waitid(P_PID, static_cast<id_t>(w.pid), &info, WEXITED | WNOHANG | WNOWAIT);
      } while (rc < 0 && errno == EINTR);
      if (rc == 0 && info.si_pid == 0) continue;  // still running
      if (rc == 0) {
        w.exit = info.si_code == CLD_EXITED ? WorkerExit::exited(info.si_status)
                                            : WorkerExit::signaled(info.si_status);
      } else {
        // ECHILD: someone else in this process reaped our worker; its status is lost, and its pid is
        // no longer ours to signal.
        w.exit = WorkerExit::exited(255);
        w.held = false;
      }
      const bool failed = !w.exit->success() && cause_ == StopCause::kNone && !w.lost;
      if (failed && in_place_ != nullptr && (live_count() > 0 || others_go_on())) {
        lose(w, w.exit->describe());  // in place: the others go on (a joined worker's others are elsewhere)
      } else if (failed) {
        failed_rank_ = w.rank;
        failure_ = w.exit;
        message("rank " + std::to_string(w.rank) + " (local rank " + std::to_string(w.local_rank) + ", pid " +
                std::to_string(w.pid) + ") " + w.exit->describe() +
                (live_count() > 0 ? "; stopping the other " + std::to_string(live_count()) +
                                        " worker(s) (SIGTERM, SIGKILL in " + grace_text() + ")"
                                  : ""));
        begin_stop(StopCause::kWorkerFailed, SIGTERM);
      }
      if (cause_ == StopCause::kNone) release(w);
    }
  }

  // Reaps an exited (or SIGKILLed) worker; from then on its pid and group are never signalled.
  static void release(Worker& w) {
    if (!w.held) return;
    int status;
    while (::waitpid(w.pid, &status, 0) < 0 && errno == EINTR) {
    }
    w.held = false;
  }

  // In place, this launcher's last worker gone: ranks of other launchers go on without it (this one joined
  // a job, or others joined the job it serves).
  bool others_go_on() const { return in_place_->joining() || in_place_->unfinished_joined() > 0; }

  // In place: the others go on without `w` (announced through the launcher's store).
  void lose(Worker& w, const std::string& why) {
    w.lost = true;
    const int generation = in_place_->announce_lost(w.rank, why);
    lost_.push_back(w.rank);
    const int others = live_count() - (w.exit ? 0 : 1);
    if (others == 0) {  // this launcher has no worker left: it failed, the job goes on elsewhere
      failed_rank_ = w.rank;
      failure_ = w.exit ? *w.exit : WorkerExit::signaled(SIGKILL);  // a stalled worker was killed
      cause_ = StopCause::kWorkerFailed;
    }
    message(
        "rank " + std::to_string(w.rank) + " (local rank " + std::to_string(w.local_rank) + ", pid " +
        std::to_string(w.pid) + ") " + why + "; in place: " +
        (others > 0 ? "the other " + std::to_string(others) + " worker(s)" : "the other launchers' ranks") +
        " go on without it (generation " + std::to_string(generation) + ")");
  }

  void begin_stop(StopCause cause, int signal) {
    cause_ = cause;
    kill_deadline_ = Clock::now() + config_.grace_period;
    kill_all(signal);
  }

  // Sends `signal` to the process group of every worker still held (running, or a zombie kept during
  // a stop: processes it started may still be in its group). Never to a reaped worker's group: its id
  // may belong to someone else by now.
  void kill_all(int signal) {
    for (const Worker& w : workers_) {
      if (!w.held) continue;
      if (::kill(-w.pid, signal) != 0 && errno == ESRCH && !w.exit) ::kill(w.pid, signal);
    }
  }

  void finish_output() {
    for (Worker& w : workers_) {
      if (w.out_fd.valid()) {
        w.out->finish();
        w.out_fd.reset();
      }
      if (w.err_fd.valid()) {
        w.err->finish();
        w.err_fd.reset();
      }
      w.heartbeat_fd.reset();
    }
    flush();
  }

  void print_summary() {
    if (cause_ == StopCause::kSpawnFailed) {
      message("cannot execute '" + config_.command.front() + "' for rank " + std::to_string(*failed_rank_) +
              ": " + detail::error_text(spawn_error_) +
              (spawn_error_ == ENOENT ? " (not found in PATH)" : ""));
    } else if (cause_ == StopCause::kWorkerFailed && preempted_ && stall_reason_.empty() &&
               failure_->shell_status() == lockstep::detail::kPreemptedExitStatus) {
      // The workers were asked to leave (SIGUSR1) and did so with the status lockstep's Trainer uses
      // after writing its checkpoint: a preemption, not a failure.
      message("preempted: rank " + std::to_string(*failed_rank_) + " exited with status " +
              std::to_string(lockstep::detail::kPreemptedExitStatus) +
              " after the SIGUSR1 notice (lockstep fit checkpoints first); " +
              "requeue the job and resume it from last.ckpt (`lockstep fit --resume last`, or auto)");
    } else if (cause_ == StopCause::kWorkerFailed) {
      const Worker* failed = nullptr;
      for (const Worker& w : workers_) {
        if (w.rank == *failed_rank_) failed = &w;
      }
      std::string text =
          "job failed: rank " + std::to_string(*failed_rank_) + " " +
          (stall_reason_.empty() ? failure_->describe() : "stalled and was killed: it " + stall_reason_) +
          " (command: " + join_command(config_.command) + ")";
      const auto& tail = failed->err->tail();
      if (tail.empty()) {
        text += "\n" + streams_.tag + "rank " + std::to_string(*failed_rank_) + " wrote nothing to stderr";
      } else {
        text += "\n" + streams_.tag + "last " + std::to_string(tail.size()) + " stderr line(s) of rank " +
                std::to_string(*failed_rank_) + ":";
        for (const std::string& line : tail) text += "\n  | " + line;
      }
      message(text);
    } else if (cause_ == StopCause::kSignal) {
      message("workers stopped after " + signal_name(*stop_signal_));
    } else if (!lost_.empty()) {
      message("in place: lost rank(s) " +
              lockstep::detail::join_first(lost_, 16, ", ", [](int r) { return std::to_string(r); }) +
              " on the way; the other " + std::to_string(workers_.size() - lost_.size()) +
              " worker(s) finished");
    }
  }

  AttemptResult result() const {
    AttemptResult r;
    r.cause = cause_;
    r.round_end = round_end_;
    r.preempted = preempted_;
    r.failed_rank = failed_rank_;
    r.failure = failure_;
    r.signal = stop_signal_;
    switch (cause_) {
      case StopCause::kNone:
        r.exit_status = 0;
        break;
      case StopCause::kWorkerFailed:
        r.exit_status = failure_->shell_status();
        break;
      case StopCause::kSpawnFailed:
        r.exit_status = spawn_error_ == ENOENT ? 127 : 126;
        break;
      case StopCause::kSignal:
        r.exit_status = 128 + *stop_signal_;
        break;
      case StopCause::kRoundEnded:
        r.exit_status = round_end_->failure ? round_end_->status : 0;
        break;
    }
    return r;
  }

  bool all_exited() const {
    return std::all_of(workers_.begin(), workers_.end(), [](const Worker& w) { return w.exit.has_value(); });
  }
  bool any_pipe_open() const {
    return std::any_of(workers_.begin(), workers_.end(),
                       [](const Worker& w) { return w.out_fd.valid() || w.err_fd.valid(); });
  }
  int live_count() const {
    return static_cast<int>(
        std::count_if(workers_.begin(), workers_.end(), [](const Worker& w) { return !w.exit; }));
  }
  std::string grace_text() const {
    const auto ms = config_.grace_period.count();
    return ms % 1000 == 0 ? std::to_string(ms / 1000) + " s" : std::to_string(ms) + " ms";
  }

  void message(const std::string& text) {
    streams_.err->flush();
    *streams_.err << streams_.tag << text << '\n';
    streams_.err->flush();
  }
  void flush() {
    streams_.out->flush();
    streams_.err->flush();
  }

  const LaunchConfig& config_;
  const NodeWorld& world_;
  const LaunchStreams& streams_;
  detail::SignalRelay& relay_;
  const AttemptLogs& logs_;
  detail::RoundWatch* watch_;
  detail::InPlaceStore* in_place_;
  std::vector<int> lost_;  // in place: ranks announced as lost, in order
  std::optional<detail::RoundEnd> round_end_;

  std::vector<Worker> workers_;
  StopCause cause_ = StopCause::kNone;
  std::optional<Clock::time_point> kill_deadline_;
  std::optional<Clock::time_point> drain_deadline_;
  bool killed_ = false;
  bool preempted_ = false;
  std::optional<int> failed_rank_;
  std::optional<WorkerExit> failure_;
  std::string stall_reason_;  // why check_stalls() killed the failed rank, if it did
  std::optional<int> stop_signal_;
  int spawn_error_ = 0;
  char buffer_[kReadChunk];
};

void say(const LaunchStreams& streams, const std::string& text) {
  streams.err->flush();
  *streams.err << streams.tag << text << '\n';
  streams.err->flush();
}

// The job's directory under log_dir, as torchrun makes it: <run_id>_<random> (mkdtemp), so that runs
// sharing a log_dir never mix. Empty without log_dir.
std::string make_job_log_dir(const LaunchConfig& config, const LaunchStreams& streams) {
  std::string base = config.log_dir;
  if (base.empty()) {
    if (!config.output.needs_files()) return "";
    // Files asked for (redirects, tee, filters) but no log_dir: as torchrun's torchelastic_* directory.
    base = (std::filesystem::temp_directory_path() / "lockstep_run_XXXXXX").string();
    if (::mkdtemp(base.data()) == nullptr) {
      throw LaunchError("cannot create a log directory under " +
                        std::filesystem::temp_directory_path().string() +
                        " (give log_dir): " + detail::error_text(errno));
    }
    say(streams, "no log_dir given: writing the workers' log files under " + base);
  }
  std::error_code ec;
  std::filesystem::create_directories(base, ec);
  if (ec) throw LaunchError("log_dir='" + base + "': cannot create the directory: " + ec.message());
  std::string id = config.run_id;
  std::replace(id.begin(), id.end(), '/', '_');
  std::string pattern = (std::filesystem::path(base) / (id + "_XXXXXX")).string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    throw LaunchError("log_dir='" + base +
                      "': cannot create a directory for this job: " + detail::error_text(errno));
  }
  return pattern;
}

// "rank 3 exited with status 1 on node 1 (10.0.0.2)": why this node's attempt failed, for the others.
std::string failure_text(const AttemptResult& attempt, const detail::Round& round,
                         const LaunchConfig& config) {
  const std::string where = " on " + round.node(round.node_rank);
  if (attempt.cause == StopCause::kSpawnFailed)
    return "'" + config.command.front() + "' could not be started" + where;
  std::string what = attempt.failure ? attempt.failure->describe() : "failed";
  return "rank " + std::to_string(attempt.failed_rank.value_or(-1)) + " " + what + where;
}

}  // namespace

Launcher::Launcher(const LaunchOptions& options, LaunchStreams streams)
    : Launcher(resolve(options), std::move(streams)) {}

Launcher::Launcher(LaunchConfig config, LaunchStreams streams)
    : config_(std::move(config)), streams_(std::move(streams)) {
  if (streams_.out == nullptr) streams_.out = &std::cout;
  if (streams_.err == nullptr) streams_.err = &std::cerr;
}

LaunchResult Launcher::run() {
  const std::string job_log_dir = make_job_log_dir(config_, streams_);
  detail::SignalRelay relay(config_.signals_to_handle);
  if (config_.rdzv_backend == RdzvBackend::kC10d) return run_rounds(relay, job_log_dir);
  if (config_.in_place) return run_in_place(relay, job_log_dir);
  LaunchResult result;
  for (int restart = 0;; ++restart) {
    const AttemptLogs logs(job_log_dir, restart, config_);
    const NodeWorld world = config_.static_world(restart);
    const AttemptResult attempt = Attempt(config_, world, streams_, relay, logs).run();
    result.exit_status = attempt.exit_status;
    result.failed_rank = attempt.failed_rank;
    result.failure = attempt.failure;
    result.signal = attempt.signal;
    result.restarts = restart;
    // Restart only after a worker failure, and not when the user also asked to stop meanwhile, nor after
    // a preemption notice (the workers left on purpose; the job is to be requeued, not retried here).
    if (attempt.cause != StopCause::kWorkerFailed || attempt.signal || attempt.preempted ||
        restart >= config_.max_restarts) {
      break;
    }
    say(streams_, "restarting all " + std::to_string(config_.nproc_per_node) + " worker(s) (restart " +
                      std::to_string(restart + 1) + " of " + std::to_string(config_.max_restarts) + ")");
  }
  return result;
}

LaunchResult Launcher::run_in_place(detail::SignalRelay& relay, const std::string& job_log_dir) {
  // A named master is served (or, served already, joined); else a port only this launch knows.
  detail::InPlaceStore store(
      config_.run_id, config_.world_size(), config_.master_named ? config_.master_addr : "127.0.0.1",
      config_.master_named ? config_.master_port : 0, config_.heartbeat_timeout, config_.job_secret);
  if (store.joining()) {
    const int first = store.reserve_ids(config_.nproc_per_node);
    say(streams_, "in place: " + store.endpoint() + " serves a running job: its " +
                      std::to_string(config_.nproc_per_node) + " worker(s) join it as rank id(s) " +
                      std::to_string(first) + ".." + std::to_string(first + config_.nproc_per_node - 1) +
                      ", admitted at a step boundary");
  }
  LaunchConfig config = config_;
  config.worker_env.emplace_back(lockstep::detail::kElasticStoreVariable, store.endpoint());
  const AttemptLogs logs(job_log_dir, 0, config);
  const NodeWorld world = config.static_world(0);
  const AttemptResult attempt = Attempt(config, world, streams_, relay, logs, nullptr, &store).run();
  if (!store.joining() && attempt.cause == StopCause::kNone) {
    // Ranks that joined from other launchers use this store until they end.
    const int missing = store.wait_for_joined(config_.collective_timeout);
    if (missing > 0) {
      say(streams_, "in place: " + std::to_string(missing) +
                        " joined rank(s) had neither finished nor been lost after the collective timeout; "
                        "closing the store");
    }
  }
  std::optional<int> stopped_by;  // a signal that ended the serving of joined ranks
  if (!store.joining() && attempt.cause == StopCause::kWorkerFailed) {
    // Every worker of this launcher was lost in place while joined ranks train on: they need the store
    // until they end (this launcher's watch announces those whose launcher goes).
    if (const int left = store.unfinished_joined(); left > 0) {
      say(streams_, "in place: this launcher's workers are all lost; serving the store until the " +
                        std::to_string(left) + " joined rank(s) finish");
      std::optional<int> signal;  // SIGINT or SIGTERM meanwhile: stop serving (the joined ranks lose it)
      store.wait_for_joined(std::nullopt, [&] {
        for (const int s : relay.take()) {
          if (s == SIGINT || s == SIGTERM) signal = s;
        }
        return signal.has_value();
      });
      if (signal) {
        say(streams_, "received " + signal_name(*signal) + "; closing the store under the " +
                          std::to_string(store.unfinished_joined()) + " joined rank(s) still training");
        stopped_by = signal;
      }
    }
  }
  LaunchResult result;
  result.exit_status = stopped_by ? 128 + *stopped_by : attempt.exit_status;
  result.failed_rank = attempt.failed_rank;
  result.failure = attempt.failure;
  result.signal = stopped_by ? stopped_by : attempt.signal;
  return result;
}

LaunchResult Launcher::run_rounds(detail::SignalRelay& relay, const std::string& job_log_dir) {
  const auto tell = [this](const std::string& text) { say(streams_, text); };
  detail::ElasticRendezvous rendezvous(config_, tell);
  for (const std::string& note : config_.rdzv_conf.notes) tell("rdzv_conf: " + note);
  LaunchResult result;
  std::optional<detail::Round> failed;  // the last round, when it ended in a failure
  for (;;) {
    detail::Round round;
    try {
      round = rendezvous.join();
    } catch (const detail::JobOver& over) {
      if (!failed) {
        tell("the job is over (" + over.why + "): nothing left for this node to do");
        return result;
      }
      // Another node finished while this one failed: no round can follow, the failure stands.
      tell("the job cannot go on (" + over.why + "), and this node's last round ended in a failure");
      rendezvous.leave(*failed, result.exit_status, "gave up after the job finished elsewhere");
      if (result.exit_status == 0) result.exit_status = 1;
      return result;
    }
    failed.reset();
    const NodeWorld& w = round.world;
    tell(round.describe() + "; this node is node " + std::to_string(round.node_rank) + ", ranks " +
         std::to_string(w.rank_offset) + ".." + std::to_string(w.rank_offset + config_.nproc_per_node - 1) +
         " of " + std::to_string(w.world_size) + "; began because " + round.began_because);
    for (const std::string& note : round.notes) tell(note);

    // attempt_<K>: K = TORCHELASTIC_RESTART_COUNT, the round's number.
    const AttemptLogs logs(job_log_dir, round.number, config_);
    AttemptResult attempt;
    {
      detail::RoundWatch watch(rendezvous, round);
      attempt = Attempt(config_, w, streams_, relay, logs, &watch).run();
    }
    result.exit_status = attempt.exit_status;
    result.failed_rank = attempt.failed_rank;
    result.failure = attempt.failure;
    result.signal = attempt.signal;
    result.restarts = round.number;
    if (attempt.cause == StopCause::kNone) {
      rendezvous.finish(round);
      return result;
    }
    if (attempt.signal || attempt.preempted) {  // this node leaves the job for good
      rendezvous.leave(round, attempt.exit_status,
                       round.node(round.node_rank) +
                           " left: " + (attempt.preempted ? "preempted" : "its launcher was stopped"));
      return result;
    }
    const detail::RoundEnd end =
        attempt.cause == StopCause::kRoundEnded
            ? *attempt.round_end
            : rendezvous.end_round(
                  round, detail::RoundEnd{true, attempt.exit_status, failure_text(attempt, round, config_)});
    if (end.failure) {
      failed = round;
      const int failures = rendezvous.failures();
      if (failures > config_.max_restarts) {
        tell("the job failed: " + end.reason + "; " + std::to_string(failures) +
             " round(s) ended in a failure, more than max_restarts=" + std::to_string(config_.max_restarts));
        result.exit_status = attempt.cause == StopCause::kRoundEnded ? end.status : attempt.exit_status;
        if (result.exit_status == 0) result.exit_status = 1;
        rendezvous.leave(round, result.exit_status, "out of restarts");
        return result;
      }
      tell("round " + std::to_string(round.number) + " ended in a failure (" + std::to_string(failures) +
           " of " + std::to_string(config_.max_restarts) + " restart(s) used)" +
           (attempt.cause == StopCause::kRoundEnded ? "" : ": " + end.reason) + "; meeting again");
    } else if (attempt.cause != StopCause::kRoundEnded) {
      tell("round " + std::to_string(round.number) + " ended: " + end.reason + "; meeting again");
    } else {
      tell("meeting again for the next round");
    }
  }
}

}  // namespace lockstep::launch
