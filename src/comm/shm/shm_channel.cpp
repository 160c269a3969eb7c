#include "shm_channel.h"

#include <linux/futex.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <ctime>
#include <stdexcept>
#include <thread>

#include <c10/core/ScalarType.h>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace lockstep::comm::detail {
namespace {

constexpr std::uint32_t kMagic = 0x4c4b5348;  // "LKSH"
constexpr std::size_t kFailureText = 1024;
// Waiting: pause-spin first (a peer usually arrives within microseconds), then spin with sched_yield
// (lets another thread of this core, e.g. a data-loader worker, run), then sleep on the futex. Waking from
// a futex costs ~50-100 us on this VM, so the spin phases are worth their CPU at collective boundaries.
constexpr auto kPauseSpin = std::chrono::microseconds(50);
constexpr auto kYieldSpin = std::chrono::microseconds(100);
constexpr auto kSleepSlice = std::chrono::milliseconds(50);

using Clock = std::chrono::steady_clock;

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// Process-shared futex (the word lives in a MAP_SHARED mapping, so no FUTEX_PRIVATE_FLAG).
void futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected, std::chrono::nanoseconds timeout) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1000000000);
  ts.tv_nsec = static_cast<long>(timeout.count() % 1000000000);
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake_all(std::atomic<std::uint32_t>* word) {
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

std::string seconds_text(std::chrono::milliseconds ms) {
  std::string s = std::to_string(ms.count() / 1000.0);
  return s.substr(0, s.find('.') + 2) + " s";
}

std::size_t round_up(std::size_t n, std::size_t to) {
  return (n + to - 1) / to * to;
}

}  // namespace

struct alignas(64) ShmChannel::ControlBlock {
  std::uint32_t magic;
  std::int32_t world;
  std::uint64_t slot_bytes;
  alignas(64) std::atomic<std::uint32_t> count;       // ranks arrived at the current barrier
  alignas(64) std::atomic<std::uint32_t> generation;  // bumped when a barrier completes (futex word)
  std::atomic<std::uint32_t> waiters;                 // ranks asleep on `generation`
  alignas(64) std::atomic<std::int32_t> failed_rank;  // -1: none; else the first rank that failed
  std::atomic<std::uint32_t> failure_ready;           // failure text written
  char failure[kFailureText];
};

struct alignas(64) ShmChannel::RankControl {
  std::atomic<std::uint64_t> arrivals;  // barriers this rank has entered
  std::atomic<std::int32_t> pid;        // 0 until the rank has attached
  ShmSignature signature[2];            // by collective sequence parity
};

static_assert(std::atomic<std::uint32_t>::is_always_lock_free &&
                  std::atomic<std::uint64_t>::is_always_lock_free,
              "the shm backend needs address-free atomics");

std::size_t ShmChannel::segment_bytes(int world, std::size_t slot_bytes) {
  const std::size_t control = round_up(sizeof(ControlBlock) + world * sizeof(RankControl), 4096);
  return control + 2 * static_cast<std::size_t>(world) * slot_bytes;
}

ShmChannel::ShmChannel(ShmSegment segment, int rank, int world, std::size_t slot_bytes, bool initialise)
    : segment_(std::move(segment)), rank_(rank), world_(world), slot_bytes_(slot_bytes) {
  if (segment_.size() != segment_bytes(world, slot_bytes)) {
    throw std::runtime_error("shared-memory segment " + segment_.name() + " has the wrong size");
  }
  auto* base = static_cast<char*>(segment_.data());
  block_ = reinterpret_cast<ControlBlock*>(base);
  buffers_ = base + round_up(sizeof(ControlBlock) + world * sizeof(RankControl), 4096);
  if (initialise) {
    // The pages are zero (fresh segment); atomics are constructed in place.
    new (block_) ControlBlock();
    block_->world = world;
    block_->slot_bytes = slot_bytes;
    block_->failed_rank.store(-1);
    for (int r = 0; r < world; ++r) new (&control(r)) RankControl();
    std::atomic_thread_fence(std::memory_order_release);
    block_->magic = kMagic;
  } else if (block_->magic != kMagic || block_->world != world || block_->slot_bytes != slot_bytes) {
    throw std::runtime_error("shared-memory segment " + segment_.name() + " was made for world size " +
                             std::to_string(block_->world) + " and " + std::to_string(block_->slot_bytes) +
                             "-byte slots, but rank " + std::to_string(rank) + " has world size " +
                             std::to_string(world) + " and " + std::to_string(slot_bytes) +
                             "-byte slots: every rank must be started with the same settings");
  }
  control(rank_).pid.store(static_cast<std::int32_t>(::getpid()));
}

ShmChannel::RankControl& ShmChannel::control(int rank) const {
  return reinterpret_cast<RankControl*>(reinterpret_cast<char*>(block_) + sizeof(ControlBlock))[rank];
}

void ShmChannel::publish(const ShmSignature& signature) {
  control(rank_).signature[signature.sequence & 1] = signature;
}

void ShmChannel::record_failure(const std::string& message) noexcept {
  std::int32_t none = -1;
  if (block_->failed_rank.compare_exchange_strong(none, rank_)) {
    const std::size_t n = std::min(message.size(), kFailureText - 1);
    std::memcpy(block_->failure, message.data(), n);
    block_->failure[n] = '\0';
    block_->failure_ready.store(1, std::memory_order_release);
  }
  // Wake every sleeper so it sees the failure now rather than at its deadline.
  block_->generation.fetch_add(1);
  futex_wake_all(&block_->generation);
}

void ShmChannel::throw_if_failed() const {
  const std::int32_t failed = block_->failed_rank.load(std::memory_order_acquire);
  if (failed < 0) return;
  // The failing rank writes its text right after claiming; wait briefly for it.
  for (int i = 0; i < 1000 && block_->failure_ready.load(std::memory_order_acquire) == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  const std::string text =
      block_->failure_ready.load(std::memory_order_acquire) ? block_->failure : "(no detail)";
  if (failed == rank_) throw std::runtime_error(text);
  throw std::runtime_error(rank_name(failed) + " failed, so this group is unusable: " + text);
}

void ShmChannel::fail(const std::string& message) {
  record_failure(message);
  throw std::runtime_error(message);
}

std::string ShmChannel::rank_name(int r) const {
  const bool mapped = r >= 0 && static_cast<std::size_t>(r) < world_ranks_.size();
  return "rank " + std::to_string(mapped ? world_ranks_[static_cast<std::size_t>(r)] : r);
}

std::string ShmChannel::missing_ranks(std::uint64_t target) const {
  std::string list;
  for (int r = 0; r < world_; ++r) {
    if (control(r).arrivals.load() < target) list += (list.empty() ? "" : ", ") + rank_name(r).substr(5);
  }
  return list;
}

std::string ShmChannel::dead_ranks(std::uint64_t target) const {
  std::string list;
  for (int r = 0; r < world_; ++r) {
    const std::int32_t pid = control(r).pid.load();
    if (r == rank_ || pid <= 0 || control(r).arrivals.load() >= target) continue;
    if (::kill(pid, 0) != 0 && errno == ESRCH) {
      list += (list.empty() ? "" : ", ") + (rank_name(r) + " (pid " + std::to_string(pid) + ")");
    }
  }
  return list;
}

void ShmChannel::barrier(const ShmOpContext& ctx, bool check) {
  throw_if_failed();
  const std::uint64_t target = ++arrivals_;
  control(rank_).arrivals.store(target);
  if (world_ > 1) {
    const std::uint32_t seen = block_->generation.load(std::memory_order_acquire);
    if (block_->count.fetch_add(1, std::memory_order_acq_rel) + 1 == static_cast<std::uint32_t>(world_)) {
      block_->count.store(0, std::memory_order_relaxed);
      block_->generation.store(seen + 1);  // seq_cst: pairs with the waiters' increment below
      if (block_->waiters.load() > 0) futex_wake_all(&block_->generation);
    } else {
      wait_for_generation(seen, target, ctx);
    }
  }
  throw_if_failed();
  if (check) check_signatures(ctx);
}

void ShmChannel::wait_for_generation(std::uint32_t seen, std::uint64_t target, const ShmOpContext& ctx) {
  const auto start = Clock::now();
  for (int i = 0;; ++i) {
    if (block_->generation.load(std::memory_order_acquire) != seen) return;
    cpu_relax();
    if ((i & 63) == 63 && Clock::now() - start >= kPauseSpin) break;
  }
  while (Clock::now() - start < kYieldSpin) {
    if (block_->generation.load(std::memory_order_acquire) != seen) return;
    std::this_thread::yield();
  }
  block_->waiters.fetch_add(1);
  struct Leave {
    std::atomic<std::uint32_t>& waiters;
    ~Leave() { waiters.fetch_sub(1); }
  } leave{block_->waiters};
  while (block_->generation.load() == seen) {
    throw_if_failed();
    const auto now = Clock::now();
    const std::string dead = dead_ranks(target);
    if (!dead.empty()) {
      fail(rank_name(rank_) + ": shm " + ctx.op + " #" + std::to_string(ctx.sequence) + ": " + dead +
           " exited while this rank waited for it (it died or was killed inside or before this collective)");
    }
    if (now >= ctx.deadline) {
      fail(rank_name(rank_) + ": shm " + ctx.op + " #" + std::to_string(ctx.sequence) + " timed out after " +
           seconds_text(ctx.timeout) + " waiting for rank(s) " + missing_ranks(target) +
           " (alive, but not at this collective: stuck, or on a different code path). Collective timeout: "
           "LOCKSTEP_TIMEOUT / collective_timeout.");
    }
    const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(ctx.deadline - now);
    futex_wait(&block_->generation, seen, std::min<std::chrono::nanoseconds>(left, kSleepSlice));
  }
}

void ShmChannel::check_signatures(const ShmOpContext& ctx) {
  const ShmSignature& mine = control(rank_).signature[ctx.sequence & 1];
  for (int r = 0; r < world_; ++r) {
    if (r == rank_) continue;
    const ShmSignature& theirs = control(r).signature[ctx.sequence & 1];
    if (theirs.sequence != mine.sequence || theirs.op != mine.op || theirs.dtype != mine.dtype ||
        theirs.numel != mine.numel || theirs.detail != mine.detail || theirs.chunks != mine.chunks ||
        theirs.shared_offset != mine.shared_offset) {
      fail("collective mismatch: " + rank_name(rank_) + " called " + describe(mine) + " but " + rank_name(r) +
           " called " + describe(theirs) +
           ". Every rank must call the same collectives, with the same sizes, in the same order.");
    }
  }
}

std::string describe(const ShmSignature& s) {
  const auto type = static_cast<c10d::OpType>(s.op);
  std::string text = s.op == kShmNewSharedTensorOp ? "new_shared_tensor" : c10d::opTypeToString(type);
  for (auto& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  text += " #" + std::to_string(s.sequence) + " (";
  if (s.dtype >= 0) {
    text += std::string(c10::toString(static_cast<c10::ScalarType>(s.dtype))) + "[" +
            std::to_string(s.numel) + "]";
  } else {
    text += "no tensor";
  }
  if (type == c10d::OpType::ALLREDUCE || type == c10d::OpType::REDUCE_SCATTER) {
    static const char* kOps[] = {"sum", "avg", "product", "min", "max"};
    text += std::string(", ") + (s.detail >= 0 && s.detail < 5 ? kOps[s.detail] : "?");
  } else if (type == c10d::OpType::BROADCAST) {
    text += ", root " + std::to_string(s.detail);
  }
  if (s.shared_offset >= 0) text += ", in a shared tensor at byte " + std::to_string(s.shared_offset);
  return text + ")";
}

}  // namespace lockstep::comm::detail
