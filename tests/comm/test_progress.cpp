// Progress records (src/comm/progress.h): how a failed or hung collective names the ranks that were not
// there, and how ranks that called different collectives are told so. Records are read from a real
// in-memory store; the collectives run on real Gloo groups with ranks as threads.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <ATen/ops/ones.h>
#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "../../src/comm/progress.h"
#include "../support/wait_until.h"
#include "lockstep/comm/process_group.h"
#include "lockstep/detail/worker_contract.h"
#include "thread_group.h"

namespace lockstep::comm {
namespace {

using namespace std::chrono_literals;
using detail::Progress;
using detail::ProgressRecord;
using lockstep::testing::run_ranks;

std::int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void put_record(c10d::Store& store, int rank, const ProgressRecord& record) {
  const std::string text = record.to_text();
  store.set("progress/" + std::to_string(rank), std::vector<uint8_t>(text.begin(), text.end()));
}

ProgressRecord record(std::int64_t unix_ms, std::uint64_t issued, std::uint64_t finished, bool waiting,
                      std::vector<std::pair<std::uint64_t, std::string>> recent) {
  ProgressRecord r;
  r.unix_ms = unix_ms;
  r.issued = issued;
  r.finished = finished;
  r.waiting = waiting;
  r.recent.assign(recent.begin(), recent.end());
  return r;
}

TEST(ProgressRecord, RoundTripsThroughText) {
  const ProgressRecord r =
      record(1700000000123, 12, 11, true,
             {{11, "allreduce #11 (Float[4]) sum"}, {12, "broadcast #12 (Long[1]) from rank 0"}});
  const ProgressRecord back = ProgressRecord::parse(r.to_text());
  EXPECT_EQ(back.unix_ms, 1700000000123);
  EXPECT_EQ(back.issued, 12u);
  EXPECT_EQ(back.finished, 11u);
  EXPECT_TRUE(back.waiting);
  EXPECT_EQ(back.description_of(12), "broadcast #12 (Long[1]) from rank 0");
  EXPECT_EQ(back.description_of(11), "allreduce #11 (Float[4]) sum");
  EXPECT_EQ(back.description_of(10), "");
  EXPECT_THROW(ProgressRecord::parse("garbage"), std::invalid_argument);
}

TEST(Progress, ExplainMissingTellsStoppedFromBusyFromNeverSeen) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  Progress mine(store, /*rank=*/0, /*world_size=*/5, 100ms, /*heartbeat_fd=*/-1);
  mine.issued(7, "allreduce #7 (Float[10]) sum");
  const auto now = unix_ms_now();
  // rank 1: at #7 too (arrived); rank 2: finished #6 and its record is fresh (busy elsewhere);
  // rank 3: its record stopped 60 s ago (stopped or hung); rank 4: no record at all.
  put_record(*store, 1, record(now, 7, 6, true, {{7, "allreduce #7 (Float[10]) sum"}}));
  put_record(*store, 2, record(now, 6, 6, false, {{6, "allreduce #6 (Float[10]) sum"}}));
  put_record(*store, 3, record(now - 60000, 5, 4, true, {{5, "barrier #5 ()"}}));
  const std::string why = mine.explain_missing(7);
  EXPECT_EQ(why.find("rank 1"), std::string::npos) << why;
  EXPECT_NE(
      why.find("Not at collective #7: rank 2 (last allreduce #6 (Float[10]) sum, finished; its record is "
               "fresh: the process is alive but busy outside collectives"),
      std::string::npos)
      << why;
  EXPECT_NE(why.find("rank 3 (waiting in barrier #5 (); its record stopped 6"), std::string::npos) << why;
  EXPECT_NE(why.find("the process is stopped (SIGSTOP, a debugger), hung in the kernel, or dead"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("rank 4 (no progress record: it never reached a collective)"), std::string::npos) << why;
}

TEST(Progress, ExplainMissingWhenEveryRankArrivedBlamesTheTransport) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  Progress mine(store, 1, 2, 100ms, -1);
  put_record(*store, 0, record(unix_ms_now(), 3, 2, true, {{3, "allgather #3 (Byte[9])"}}));
  EXPECT_NE(mine.explain_missing(3).find("Every other rank had issued collective #3"), std::string::npos);
}

TEST(Progress, FindMismatchNamesBothCollectivesOfTheSameNumber) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  Progress mine(store, 0, 3, 100ms, -1);
  mine.issued(4, "allreduce #4 (Float[235146]) avg");
  mine.issued(5, "allreduce #5 (Double[1]) max");
  put_record(*store, 1,
             record(unix_ms_now(), 5, 4, true,
                    {{4, "allreduce #4 (Float[235146]) avg"}, {5, "allreduce #5 (Double[1]) max"}}));
  EXPECT_EQ(mine.find_mismatch(), "");  // rank 1 agrees, rank 2 has no record yet
  put_record(*store, 2,
             record(unix_ms_now(), 5, 4, true,
                    {{4, "allreduce #4 (Float[235146]) avg"}, {5, "allreduce #5 (Float[3]) sum"}}));
  const std::string why = mine.find_mismatch();
  EXPECT_NE(why.find("the ranks called different collectives: rank 0 called allreduce #5 (Double[1]) max but "
                     "rank 2 called allreduce #5 (Float[3]) sum"),
            std::string::npos)
      << why;
}

TEST(Progress, PublishesThisRanksRecordPeriodically) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  Progress mine(store, 0, 2, 50ms, -1);
  mine.issued(1, "barrier #1 ()");
  mine.wait_started();
  // Refreshed periodically, not only once: the record is rewritten with three different times, each
  // saying barrier #1 was issued and is being waited for. (Counted, not timed: 30 s bounds a hang only.)
  std::set<int64_t> times;
  for (int i = 0; i < 30000 && times.size() < 3; ++i) {
    if (store->check({"progress/0"})) {
      const auto raw = store->get("progress/0");
      const ProgressRecord r = ProgressRecord::parse(std::string(raw.begin(), raw.end()));
      EXPECT_EQ(r.issued, 1u);
      EXPECT_TRUE(r.waiting);
      times.insert(r.unix_ms);
    }
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(times.size(), 3u) << "the record was not refreshed";
  mine.wait_ended(1, true);
  mine.stop();
  const auto last = store->get("progress/0");
  const ProgressRecord after = ProgressRecord::parse(std::string(last.begin(), last.end()));
  EXPECT_EQ(after.finished, 1u);
  EXPECT_FALSE(after.waiting);
}

// The last heartbeat line written to the pipe `fd` (non-blocking), without its newline.
std::string last_heartbeat(int fd) {
  std::string all;
  char buffer[4096];
  for (ssize_t n; (n = ::read(fd, buffer, sizeof buffer)) > 0;) all.append(buffer, static_cast<size_t>(n));
  if (all.empty()) return "";
  all.pop_back();  // the last newline
  const auto start = all.rfind('\n');
  return start == std::string::npos ? all : all.substr(start + 1);
}

// A subgroup's Progress shares the world's activity: the world's heartbeat counts the subgroup's
// collectives (a rank busy in its tensor-parallel group is not stuck), and the subgroup names ranks by
// their world rank.
TEST(Progress, TheWorldsHeartbeatCountsASubgroupsCollectivesAndItNamesWorldRanks) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  ::fcntl(fds[0], F_SETFL, O_NONBLOCK);
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto sub_store = c10::make_intrusive<c10d::HashStore>();
  {
    Progress world(store, /*rank=*/5, /*world_size=*/8, 1h, fds[1]);
    Progress sub(sub_store, /*rank=*/0, /*world_size=*/2, 1h, /*heartbeat_fd=*/-1, world.activity(), {5, 7});
    world.issued(1, "all_reduce #1 (Float[1])");
    world.wait_ended(1, true);
    sub.issued(1, "tp all_reduce #1 (Float[8])");
    sub.wait_started();
    world.publish_now();
    auto beat = lockstep::detail::parse_heartbeat(last_heartbeat(fds[0]));
    ASSERT_TRUE(beat.has_value());
    EXPECT_EQ(beat->issued, 2u);
    EXPECT_EQ(beat->finished, 1u);
    EXPECT_TRUE(beat->waiting);
    EXPECT_EQ(beat->last_op, "tp all_reduce #1 (Float[8])");
    sub.wait_ended(1, true);
    world.publish_now();
    beat = lockstep::detail::parse_heartbeat(last_heartbeat(fds[0]));
    ASSERT_TRUE(beat.has_value());
    EXPECT_EQ(beat->finished, 2u);
    EXPECT_FALSE(beat->waiting);
    sub.issued(2, "tp all_reduce #2 (Float[8])");
    const std::string why = sub.explain_missing(2);
    EXPECT_NE(why.find("Not at collective #2: rank 7 (no progress record"), std::string::npos) << why;
    sub.stop();  // a subgroup's end says no "bye" for the process
    world.publish_now();
    beat = lockstep::detail::parse_heartbeat(last_heartbeat(fds[0]));
    ASSERT_TRUE(beat.has_value());
    EXPECT_FALSE(beat->bye);
    EXPECT_EQ(beat->issued, 3u);
  }
  ::close(fds[0]);
  ::close(fds[1]);
}

// A collective whose wait does not block the host (NCCL on CUDA tensors), as the progress thread sees it.
class FakeDeviceWork : public c10d::Work {
 public:
  explicit FakeDeviceWork(bool done) : done_(done) {}
  bool isCompleted() override { return done_; }

 private:
  bool done_;
};

TEST(Progress, WatchedCollectivePastItsTimeoutIsReportedOnceNamingTheMissingRank) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  Progress mine(store, /*rank=*/0, /*world_size=*/3, 20ms, -1);
  const auto now = unix_ms_now();
  put_record(*store, 1, record(now, 5, 4, true, {{5, "allreduce #5 (Float[8]) avg"}}));   // arrived
  put_record(*store, 2, record(now, 4, 4, false, {{4, "allreduce #4 (Float[8]) avg"}}));  // busy elsewhere
  std::mutex mutex;
  std::vector<std::string> reports;
  auto report = [&](const std::string& text) {
    std::lock_guard<std::mutex> lock(mutex);
    reports.push_back(text);
  };
  // #4 finished on the device (dropped, never reported although its deadline passes first); #5 never does.
  mine.issued(4, "allreduce #4 (Float[8]) avg");
  mine.watch(4, "allreduce #4 (Float[8]) avg", c10::make_intrusive<FakeDeviceWork>(true), 1ms, report);
  mine.issued(5, "allreduce #5 (Float[8]) avg");
  mine.watch(5, "allreduce #5 (Float[8]) avg", c10::make_intrusive<FakeDeviceWork>(false), 50ms);
  // Counted, not timed: 30 s bounds a hang only.
  size_t seen = 0;
  for (int i = 0; i < 30000 && seen == 0; ++i) {
    std::this_thread::sleep_for(1ms);
    std::lock_guard<std::mutex> lock(mutex);
    seen = reports.size();
  }
  ASSERT_EQ(seen, 1u) << "the late collective was not reported";
  std::this_thread::sleep_for(100ms);  // five more intervals of the thread: still once
  mine.stop();
  ASSERT_EQ(reports.size(), 1u);
  const std::string& text = reports.front();
  EXPECT_EQ(text.rfind("lockstep: rank 0: allreduce #5 (Float[8]) avg has not finished on the GPU within the "
                       "collective timeout",
                       0),
            0u)
      << text;
  EXPECT_NE(text.find("rank 2 (last allreduce #4 (Float[8]) avg, finished; its record is fresh"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("rank 1 ("), std::string::npos) << text;
}

ProcessGroupOptions gloo_options(int rank, int world, const c10::intrusive_ptr<c10d::Store>& store,
                                 std::chrono::milliseconds timeout) {
  return lockstep::testing::thread_group_options(rank, world, store, "progress-run")
      .backend(Backend::kGloo)
      .collective_timeout(timeout)
      .progress_interval(100ms);
}

// Rank 1 stays busy outside collectives until rank 0's collective has failed: an order of events, not a
// sleep that a busy machine could outlast (120 s only bounds a hang).
TEST(ProcessGroupProgress, ATimedOutCollectiveNamesTheRankThatNeverCameAndWhatItDidLast) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::string error;
  std::atomic<bool> rank0_failed{false};
  const auto outcomes = run_ranks(2, [&](int rank) {
    auto pg = init_process_group(gloo_options(rank, 2, store, 1500ms));
    auto t = at::ones({8});
    pg.all_reduce(t).wait();  // #1, together
    if (rank == 1) {
      // Busy outside collectives (its progress thread goes on writing fresh records) until rank 0 failed.
      EXPECT_TRUE(lockstep::testing::wait_until([&] { return rank0_failed.load(); }, 120s));
      return;
    }
    try {
      pg.all_reduce(t).wait();  // #2: rank 1 never comes
    } catch (const CommError& e) {
      error = e.what();
    }
    rank0_failed = true;
  });
  EXPECT_NE(error.find("rank 0: allreduce #2 (Float[8]) sum: failed:"), std::string::npos) << error;
  EXPECT_NE(
      error.find("Not at collective #2: rank 1 (last allreduce #1 (Float[8]) sum, finished; its record is "
                 "fresh: the process is alive but busy outside collectives"),
      std::string::npos)
      << error;
  EXPECT_NE(error.find("(collective_timeout, LOCKSTEP_TIMEOUT)"), std::string::npos) << error;
  EXPECT_TRUE(outcomes[1].ok) << outcomes[1].error;
}

TEST(ProcessGroupProgress, SuccessfulCollectivesAreUnaffected) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  lockstep::testing::expect_all_ok(run_ranks(2, [&](int rank) {
    auto pg = init_process_group(gloo_options(rank, 2, store, 20s));
    for (int i = 0; i < 20; ++i) {
      auto t = at::ones({1000}) * (rank + 1);
      pg.all_reduce(t).wait();
      ASSERT_TRUE(at::equal(t, at::ones({1000}) * 3));
    }
    if (rank == 1) std::this_thread::sleep_for(500ms);  // a slow rank: waits span several slices
    pg.barrier();
    pg.shutdown();
  }));
}

// When sizes differ, Gloo's transport thread may throw gloo::EnforceNotMet ("op.preamble.length <=
// op.nbytes", seen in e2e_hang_extra under load), which terminates the process. The terminate handler
// then names both collectives from the records. Here a thread throws the same text (the handler keys on
// an exception from gloo), with a peer's record that differs.
TEST(ProgressDeathTest, AnExceptionFromGlooTerminatesNamingBothCollectives) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        auto store = c10::make_intrusive<c10d::HashStore>();
        Progress mine(store, 1, 2, 100ms, -1);
        mine.issued(8, "allreduce #8 (Float[3]) sum");
        put_record(*store, 0, record(unix_ms_now(), 8, 7, true, {{8, "allreduce #8 (Float[235146]) avg"}}));
        std::thread([] {
          throw std::runtime_error(
              "[enforce fail at ./gloo/transport/tcp/pair.cc:510] op.preamble.length <= "
              "op.nbytes. 235148 vs 4");
        }).join();
      },
      "lockstep: rank 1: the collective backend failed inside a collective \\(\\[enforce fail at "
      "./gloo/transport/tcp/pair.cc:510\\] op.preamble.length <= op.nbytes. 235148 vs 4\\): the ranks called "
      "different collectives: rank 1 called allreduce #8 \\(Float\\[3\\]\\) sum but rank 0 called allreduce "
      "#8 "
      "\\(Float\\[235146\\]\\) avg");
}

}  // namespace
}  // namespace lockstep::comm
