#include "progress.h"

#include "lockstep/detail/worker_contract.h"
#include "store_bytes.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace lockstep::comm::detail {
namespace {

constexpr std::size_t kRecent = 8;      // descriptions kept in a record
constexpr std::size_t kMaxListed = 16;  // ranks named in one message

std::int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string seconds_text(double seconds) {
  std::ostringstream out;
  out.precision(seconds < 10 ? 2 : 3);
  out << seconds << " s";
  return out.str();
}

// The live Progress objects of this process, for the terminate handler below.
std::mutex& registry_mutex() {
  static std::mutex mutex;
  return mutex;
}
std::vector<Progress*>& registry() {
  static std::vector<Progress*> live;
  return live;
}
std::terminate_handler previous_terminate = nullptr;

// Gloo's transport thread throws, and so terminates the process, when a peer sends more bytes than the
// collective expects ("op.preamble.length <= op.nbytes"): what ranks that called different collectives
// of different sizes do. Before the process dies, say so in lockstep's words, with both ranks'
// collectives from the progress records.
[[noreturn]] void on_terminate() {
  std::string what;
  if (const std::exception_ptr error = std::current_exception()) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
  }
  if (what.find("gloo") != std::string::npos) {
    std::vector<Progress*> live;
    {
      std::lock_guard<std::mutex> lock(registry_mutex());
      live = registry();
    }
    for (Progress* progress : live) {
      progress->publish_now();
      // Let the other ranks' records catch up with this moment.
      std::this_thread::sleep_for(progress->interval() + std::chrono::milliseconds(200));
      std::string why = progress->find_mismatch();
      if (why.empty()) why = "a peer may have called a different collective, or sent corrupt data.";
      std::fprintf(stderr, "lockstep: %s: the collective backend failed inside a collective (%s): %s\n",
                   progress->rank_name(progress->rank()).c_str(), what.substr(0, what.find('\n')).c_str(),
                   why.c_str());
      std::fflush(stderr);
    }
  }
  if (previous_terminate != nullptr) previous_terminate();
  std::abort();
}

}  // namespace

std::string ProgressRecord::description_of(std::uint64_t sequence) const {
  for (const auto& [number, description] : recent) {
    if (number == sequence) return description;
  }
  return "";
}

std::string ProgressRecord::to_text() const {
  std::ostringstream out;
  out << unix_ms << ' ' << issued << ' ' << finished << ' ' << (waiting ? 1 : 0) << '\n';
  for (const auto& [number, description] : recent) out << number << '\t' << description << '\n';
  return out.str();
}

ProgressRecord ProgressRecord::parse(const std::string& text) {
  std::istringstream in(text);
  ProgressRecord record;
  int waiting = 0;
  if (!(in >> record.unix_ms >> record.issued >> record.finished >> waiting)) {
    throw std::invalid_argument("not a progress record: '" + text.substr(0, 60) + "'");
  }
  record.waiting = waiting != 0;
  std::string line;
  std::getline(in, line);  // rest of the first line
  while (std::getline(in, line)) {
    const auto tab = line.find('\t');
    if (tab == std::string::npos) continue;
    record.recent.emplace_back(std::strtoull(line.substr(0, tab).c_str(), nullptr, 10), line.substr(tab + 1));
  }
  return record;
}

Progress::Progress(c10::intrusive_ptr<c10d::Store> store, int rank, int world_size,
                   std::chrono::milliseconds interval, int heartbeat_fd,
                   std::shared_ptr<ProcessActivity> activity, std::vector<int> world_ranks)
    : store_(std::move(store)),
      rank_(rank),
      world_size_(world_size),
      interval_(interval),
      heartbeat_fd_(heartbeat_fd),
      activity_(activity ? std::move(activity) : std::make_shared<ProcessActivity>()),
      world_ranks_(std::move(world_ranks)) {
  mine_.unix_ms = unix_ms_now();
  {
    std::lock_guard<std::mutex> lock(registry_mutex());
    registry().push_back(this);
    static bool installed = false;
    if (!installed) {
      previous_terminate = std::set_terminate(on_terminate);
      installed = true;
    }
  }
  thread_ = std::thread([this] { run(); });
}

Progress::~Progress() {
  {
    std::lock_guard<std::mutex> lock(registry_mutex());
    auto& live = registry();
    live.erase(std::remove(live.begin(), live.end(), this), live.end());
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

int Progress::heartbeat_fd_from_env() {
  const char* raw = std::getenv(lockstep::detail::kHeartbeatFdVariable);
  if (raw == nullptr || *raw == '\0') return -1;
  char* end = nullptr;
  const long fd = std::strtol(raw, &end, 10);
  if (end == raw || *end != '\0' || fd < 0 || fd > 1 << 20) return -1;
  struct stat st {};
  if (::fstat(static_cast<int>(fd), &st) != 0 || !S_ISFIFO(st.st_mode)) return -1;
  ::fcntl(static_cast<int>(fd), F_SETFD, FD_CLOEXEC);
  ::fcntl(static_cast<int>(fd), F_SETFL, ::fcntl(static_cast<int>(fd), F_GETFL) | O_NONBLOCK);
  return static_cast<int>(fd);
}

void Progress::issued(std::uint64_t sequence, const std::string& description) {
  std::lock_guard<std::mutex> lock(mutex_);
  mine_.issued = sequence;
  mine_.recent.emplace_back(sequence, description);
  while (mine_.recent.size() > kRecent) mine_.recent.pop_front();
  std::lock_guard<std::mutex> process(activity_->mutex);
  ++activity_->issued;
  activity_->last_op = description;
}

void Progress::wait_started() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::lock_guard<std::mutex> process(activity_->mutex);
  if (!mine_.waiting) ++activity_->waiting;
  mine_.waiting = true;
}

void Progress::wait_ended(std::uint64_t sequence, bool succeeded) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::lock_guard<std::mutex> process(activity_->mutex);
  if (mine_.waiting) --activity_->waiting;
  mine_.waiting = false;
  if (succeeded && sequence > mine_.finished) {
    activity_->finished += sequence - mine_.finished;
    mine_.finished = sequence;
  }
}

ProgressRecord Progress::snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  ProgressRecord record = mine_;
  record.unix_ms = unix_ms_now();
  return record;
}

void Progress::run() {
  // A write to a pipe whose reader is gone raises SIGPIPE in the writing thread: keep it pending here
  // (write() then fails with EPIPE) instead of killing the process.
  sigset_t pipe_only;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_only, nullptr);
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    lock.unlock();
    publish();
    check_watched();
    lock.lock();
    wake_.wait_for(lock, interval_, [this] { return stopping_; });
  }
}

void Progress::watch(std::uint64_t sequence, const std::string& description,
                     c10::intrusive_ptr<c10d::Work> work, std::chrono::milliseconds timeout,
                     std::function<void(const std::string&)> report) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (report) report_ = std::move(report);
  watched_.push_back({sequence, description, std::move(work), std::chrono::steady_clock::now() + timeout});
}

void Progress::check_watched() {
  Watched late;
  std::function<void(const std::string&)> report;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    while (!watched_.empty() && watched_.front().work->isCompleted()) watched_.pop_front();
    if (watched_.empty() || std::chrono::steady_clock::now() < watched_.front().deadline) return;
    late = std::move(watched_.front());
    watched_.clear();  // reported once: the group is broken from here on
    report = report_;
  }
  const std::string sentence =
      "lockstep: " + rank_name(rank_) + ": " + late.description +
      " has not finished on the GPU within the collective timeout (collective_timeout, "
      "LOCKSTEP_TIMEOUT)." +
      explain_missing(late.sequence);
  if (report) {
    report(sentence);
  } else {
    std::fprintf(stderr, "%s\n", sentence.c_str());
    std::fflush(stderr);
  }
}

void Progress::publish() {
  const ProgressRecord record = snapshot();
  bool use_store = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    use_store = store_ && !store_failed_;
  }
  if (use_store) {
    try {
      store_->set(key_of(rank_), bytes(record.to_text()));
    } catch (const std::exception&) {
      // The store is gone (rank 0 exited): the heartbeats go on; readers say the records are missing.
      std::lock_guard<std::mutex> lock(mutex_);
      store_failed_ = true;
    }
  }
  if (heartbeat_fd_ >= 0) {
    lockstep::detail::Heartbeat beat;
    {
      std::lock_guard<std::mutex> process(activity_->mutex);
      beat.issued = activity_->issued;
      beat.finished = activity_->finished;
      beat.waiting = activity_->waiting > 0;
      beat.last_op = activity_->last_op;
    }
    const std::string line = format_heartbeat(beat);
    // Non-blocking: a launcher that reads slowly loses a beat (EAGAIN), never stalls this thread.
    if (::write(heartbeat_fd_, line.data(), line.size()) < 0 && errno == EPIPE) heartbeat_fd_ = -1;
  }
}

void Progress::publish_now() {
  publish();
}

void Progress::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  publish();
  if (heartbeat_fd_ >= 0) {
    lockstep::detail::Heartbeat bye;
    bye.bye = true;
    const std::string line = format_heartbeat(bye);
    (void)!::write(heartbeat_fd_, line.data(), line.size());
    heartbeat_fd_ = -1;
  }
}

std::string Progress::rank_name(int rank) const {
  const bool mapped = rank >= 0 && static_cast<std::size_t>(rank) < world_ranks_.size();
  return "rank " + std::to_string(mapped ? world_ranks_[static_cast<std::size_t>(rank)] : rank);
}

bool Progress::read_record(int rank, ProgressRecord& out, std::string& problem) {
  if (!store_) {
    problem = "no store";
    return false;
  }
  try {
    if (!store_->check({key_of(rank)})) {
      problem = "no progress record";
      return false;
    }
    const auto raw = store_->get(key_of(rank));
    out = ProgressRecord::parse(std::string(raw.begin(), raw.end()));
    return true;
  } catch (const std::exception& e) {
    problem = std::string("its progress record cannot be read (") + e.what() + ")";
    return false;
  }
}

std::string Progress::find_mismatch() {
  const ProgressRecord mine = snapshot();
  for (int r = 0; r < world_size_; ++r) {
    if (r == rank_) continue;
    ProgressRecord theirs;
    std::string problem;
    if (!read_record(r, theirs, problem)) continue;
    for (const auto& [sequence, description] : mine.recent) {
      const std::string other = theirs.description_of(sequence);
      if (other.empty() || other == description) continue;
      return "the ranks called different collectives: " + rank_name(rank_) + " called " + description +
             " but " + rank_name(r) + " called " + other +
             ". Every rank must issue the same collectives in the same order: check for a model that differs "
             "between ranks, or a branch (an extra all-reduce, a skipped step, a log call) taken on some "
             "ranks "
             "only.";
    }
  }
  return "";
}

std::string Progress::explain_missing(std::uint64_t sequence) {
  const std::int64_t now = unix_ms_now();
  const double stale_after = 3.0 * static_cast<double>(interval_.count()) / 1000.0 + 1.0;
  std::vector<std::string> missing;
  bool store_lost = false;
  for (int r = 0; r < world_size_; ++r) {
    if (r == rank_) continue;
    ProgressRecord theirs;
    std::string problem;
    if (!read_record(r, theirs, problem)) {
      if (problem.rfind("its progress record cannot", 0) == 0) {
        store_lost = true;
        break;
      }
      missing.push_back(rank_name(r) + " (" + problem + ": it never reached a collective)");
      continue;
    }
    if (theirs.issued >= sequence) continue;
    const double age = static_cast<double>(now - theirs.unix_ms) / 1000.0;
    std::string last = theirs.issued == 0 ? std::string("no collective yet")
                                          : (theirs.waiting ? "waiting in " : "last ") +
                                                theirs.description_of(theirs.issued) +
                                                (theirs.waiting                     ? ""
                                                 : theirs.finished >= theirs.issued ? ", finished"
                                                                                    : ", in flight");
    std::string state =
        age > stale_after
            ? "its record stopped " + seconds_text(age) +
                  " ago: the process is stopped (SIGSTOP, a debugger), hung in the kernel, or dead"
            : std::string(
                  "its record is fresh: the process is alive but busy outside "
                  "collectives (data loading? user code? a branch only it takes?)");
    missing.push_back(rank_name(r) + " (" + last + "; " + state + ")");
  }
  if (store_lost) {
    return " The other ranks' progress records cannot be read: the store (served by rank 0) is gone, so rank "
           "0 "
           "has probably exited.";
  }
  if (missing.empty()) {
    return " Every other rank had issued collective #" + std::to_string(sequence) +
           ": the transport failed (a peer's connection dropped or a peer died inside it).";
  }
  std::string text = " Not at collective #" + std::to_string(sequence) + ": ";
  for (std::size_t i = 0; i < missing.size() && i < kMaxListed; ++i) text += (i ? "; " : "") + missing[i];
  if (missing.size() > kMaxListed) text += "; ... (" + std::to_string(missing.size()) + " ranks in all)";
  return text + ".";
}

}  // namespace lockstep::comm::detail
