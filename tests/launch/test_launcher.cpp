// The Launcher driven in-process, its output captured through LaunchStreams.
#include "lockstep/launch/launcher.h"

#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <exception>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "launch_test_util.h"
#include "lockstep/launch/launch_error.h"

namespace lockstep::launch {
namespace {

using namespace std::chrono_literals;
using testing::Clock;
using testing::job_log_dir;
using testing::line_set;
using testing::read_file;
using testing::TempDir;
using testing::wait_until;

struct Captured {
  std::ostringstream out, err;
  LaunchStreams streams() {
    LaunchStreams s;
    s.out = &out;
    s.err = &err;
    return s;
  }
};

LaunchOptions sh(const std::string& script) {
  return LaunchOptions({"sh", "-c", script});
}

TEST(Launcher, ForwardsEachWorkersLinesWithItsRank) {
  Captured io;
  Launcher launcher(sh("echo out $RANK; echo err $RANK >&2").nproc_per_node(3), io.streams());
  const LaunchResult r = launcher.run();
  EXPECT_EQ(r.exit_status, 0);
  EXPECT_TRUE(r.success());
  EXPECT_FALSE(r.failed_rank);
  EXPECT_EQ(line_set(io.out.str()),
            (std::multiset<std::string>{"[rank 0] out 0", "[rank 1] out 1", "[rank 2] out 2"}));
  EXPECT_EQ(line_set(io.err.str()),
            (std::multiset<std::string>{"[rank 0] err 0", "[rank 1] err 1", "[rank 2] err 2"}));
}

TEST(Launcher, ReportsTheFirstFailureAndItsStderrTail) {
  TempDir dir;
  const std::string finished = dir / "finished";
  Captured io;
  // Rank 0 would write `finished` after its 30 s sleep: the file's absence shows it was stopped, not
  // waited for (an order of events; the 30 s sleep only bounds a hang).
  Launcher launcher(
      sh("if [ $RANK = 1 ]; then echo first >&2; echo boom >&2; exit 3; fi; sleep 30; touch " + finished)
          .nproc_per_node(2),
      io.streams());
  const LaunchResult r = launcher.run();
  EXPECT_FALSE(std::filesystem::exists(finished)) << "rank 0 was left to finish";
  EXPECT_EQ(r.exit_status, 3);
  ASSERT_TRUE(r.failed_rank);
  EXPECT_EQ(*r.failed_rank, 1);
  ASSERT_TRUE(r.failure);
  EXPECT_EQ(r.failure->describe(), "exited with status 3");
  const std::string err = io.err.str();
  EXPECT_NE(err.find("job failed: rank 1 exited with status 3"), std::string::npos) << err;
  EXPECT_NE(err.find("last 2 stderr line(s) of rank 1:\n  | first\n  | boom"), std::string::npos) << err;
}

TEST(Launcher, GracePeriodBoundsTheStopOfAWorkerIgnoringSigterm) {
  TempDir dir;
  const std::string ready = dir / "ready";
  const std::string finished = dir / "finished";
  Captured io;
  // Rank 0 fails only once rank 1 ignores SIGTERM (its `ready` file): an order of events, not a sleep.
  // Rank 1 would write `finished` after its 30 s sleep: the file's absence shows the SIGKILL ended it.
  Launcher launcher(
      sh("if [ $RANK = 0 ]; then while [ ! -e " + ready + " ]; do sleep 0.05; done; exit 5; fi; " +
         "trap '' TERM; touch " + ready + "; sleep 30; touch " + finished)
          .nproc_per_node(2)
          .grace_period(std::chrono::milliseconds(300)),
      io.streams());
  const auto start = Clock::now();
  const LaunchResult r = launcher.run();
  const auto elapsed = Clock::now() - start;
  EXPECT_EQ(r.exit_status, 5);
  EXPECT_FALSE(std::filesystem::exists(finished)) << "rank 1 ended its sleep: the SIGKILL never came";
  // A lower bound only (the clock started before the workers, so load can only lengthen it): the SIGKILL
  // came no earlier than the 0.3 s grace after the SIGTERM.
  EXPECT_GE(elapsed, std::chrono::milliseconds(300));
}

TEST(Launcher, CommandNotFoundIs127) {
  Captured io;
  Launcher launcher(LaunchOptions({"lockstep-no-such-command-xyz"}).nproc_per_node(2), io.streams());
  const LaunchResult r = launcher.run();
  EXPECT_EQ(r.exit_status, 127);
  EXPECT_NE(io.err.str().find("cannot execute 'lockstep-no-such-command-xyz'"), std::string::npos)
      << io.err.str();
}

TEST(Launcher, CommandNotExecutableIs126) {
  TempDir dir;
  const std::string path = dir / "script";
  { std::ofstream(path) << "echo hi\n"; }
  ::chmod(path.c_str(), 0644);
  Captured io;
  const LaunchResult r = Launcher(LaunchOptions({path}), io.streams()).run();
  EXPECT_EQ(r.exit_status, 126);
  EXPECT_NE(io.err.str().find(path), std::string::npos) << io.err.str();
}

TEST(Launcher, RestartsAllWorkersUpToMaxRestarts) {
  Captured io;
  // Rank 1 fails on the first two attempts; the third one succeeds.
  Launcher launcher(sh("echo try $TORCHELASTIC_RESTART_COUNT; "
                       "[ $RANK = 0 ] || [ $TORCHELASTIC_RESTART_COUNT -ge 2 ]")
                        .nproc_per_node(2)
                        .max_restarts(3),
                    io.streams());
  const LaunchResult r = launcher.run();
  EXPECT_EQ(r.exit_status, 0) << io.err.str();
  EXPECT_EQ(r.restarts, 2);
  const auto lines = line_set(io.out.str());
  EXPECT_EQ(lines.count("[rank 1] try 0"), 1u);
  EXPECT_EQ(lines.count("[rank 1] try 1"), 1u);
  EXPECT_EQ(lines.count("[rank 1] try 2"), 1u);
  EXPECT_EQ(lines.count("[rank 1] try 3"), 0u);
  EXPECT_NE(io.err.str().find("restarting all 2 worker(s) (restart 1 of 3)"), std::string::npos);
}

TEST(Launcher, GivesUpAfterMaxRestarts) {
  Captured io;
  Launcher launcher(sh("echo try $TORCHELASTIC_RESTART_COUNT; exit 4").max_restarts(1), io.streams());
  const LaunchResult r = launcher.run();
  EXPECT_EQ(r.exit_status, 4);
  EXPECT_EQ(r.restarts, 1);
  EXPECT_EQ(line_set(io.out.str()), (std::multiset<std::string>{"[rank 0] try 0", "[rank 0] try 1"}));
}

// Each restart writes its own attempt_<K> directory, as torchrun: nothing of an earlier attempt is lost.
// A command built on the launcher names itself in the launcher's lines (lockstep launch).
TEST(Launcher, ItsLinesCarryTheCallersTag) {
  Captured io;
  LaunchStreams streams = io.streams();
  streams.tag = "lockstep launch: ";
  Launcher(sh("exit 3"), streams).run();
  EXPECT_NE(io.err.str().find("lockstep launch: job failed: rank 0 exited with status 3"), std::string::npos)
      << io.err.str();
  EXPECT_EQ(io.err.str().find("lockstep run: "), std::string::npos) << io.err.str();
}

TEST(Launcher, LogFilesAreKeptPerAttempt) {
  TempDir dir;
  Captured io;
  Launcher(sh("echo attempt $TORCHELASTIC_RESTART_COUNT; exit 1")
               .max_restarts(1)
               .log_dir(dir / "logs")
               .run_id("r"),
           io.streams())
      .run();
  const std::string job = job_log_dir(dir / "logs", "r");
  ASSERT_FALSE(job.empty());
  EXPECT_EQ(read_file(job + "/attempt_0/0/stdout.log"), "attempt 0\n");
  EXPECT_EQ(read_file(job + "/attempt_1/0/stdout.log"), "attempt 1\n");
}

TEST(Launcher, LogDirThatCannotBeCreatedThrowsNamingIt) {
  TempDir dir;
  { std::ofstream(dir / "file") << "x"; }
  Captured io;
  Launcher launcher(sh("true").log_dir(dir / "file/sub"), io.streams());
  try {
    launcher.run();
    FAIL() << "no error";
  } catch (const LaunchError& e) {
    EXPECT_NE(std::string(e.what()).find(dir / "file/sub"), std::string::npos) << e.what();
  }
}

TEST(Launcher, ReapsOnlyItsOwnWorkers) {
  // A child of this process that is not a worker ends while the launcher runs: its status stays ours.
  pid_t other = -1;
  char* argv[] = {const_cast<char*>("sh"), const_cast<char*>("-c"), const_cast<char*>("sleep 0.1; exit 7"),
                  nullptr};
  ASSERT_EQ(::posix_spawnp(&other, "sh", nullptr, nullptr, argv, environ), 0);
  Captured io;
  EXPECT_EQ(Launcher(sh("sleep 0.4"), io.streams()).run().exit_status, 0);
  int status = 0;
  pid_t rc = 0;
  const bool reaped = wait_until([&] { return (rc = ::waitpid(other, &status, WNOHANG)) != 0; }, 10s);
  if (!reaped) {
    ::kill(other, SIGKILL);
    ::waitpid(other, &status, 0);
  }
  ASSERT_TRUE(reaped) << "the other child did not end within 10 s";
  ASSERT_EQ(rc, other) << "the launcher reaped a child that is not its worker";
  EXPECT_EQ(WEXITSTATUS(status), 7);
}

TEST(Launcher, RestoresSignalDispositions) {
  struct sigaction before_chld {
  }, before_pipe{}, before_int{}, after{};
  ::sigaction(SIGCHLD, nullptr, &before_chld);
  ::sigaction(SIGPIPE, nullptr, &before_pipe);
  ::sigaction(SIGINT, nullptr, &before_int);
  Captured io;
  Launcher(sh("true"), io.streams()).run();
  ::sigaction(SIGCHLD, nullptr, &after);
  EXPECT_EQ(after.sa_handler, before_chld.sa_handler);
  ::sigaction(SIGPIPE, nullptr, &after);
  EXPECT_EQ(after.sa_handler, before_pipe.sa_handler);
  ::sigaction(SIGINT, nullptr, &after);
  EXPECT_EQ(after.sa_handler, before_int.sa_handler);
}

TEST(Launcher, WorkersGetDefaultSigpipeAndAnEmptySignalMask) {
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &block, &old);
  Captured io;
  // SigBlk and SigIgn of the worker itself, grep started by the launcher with no shell between: nothing
  // blocked, SIGPIPE (bit 13) not ignored. (Through `sh -c`, dash's own signal handling around its forks
  // and execs showed up here now and then as every signal blocked: the test measured dash, not the
  // launcher.)
  Launcher(LaunchOptions({"grep", "-E", "^Sig(Blk|Ign)", "/proc/self/status"}), io.streams()).run();
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  const std::string out = io.out.str();
  EXPECT_NE(out.find("SigBlk:\t0000000000000000"), std::string::npos) << out;
  const auto ign = out.find("SigIgn:\t");
  ASSERT_NE(ign, std::string::npos) << out;
  const unsigned long long ignored = std::stoull(out.substr(ign + 8, 16), nullptr, 16);
  EXPECT_EQ(ignored & (1ull << (SIGPIPE - 1)), 0u) << out;
}

TEST(Launcher, SecondConcurrentRunIsRefused) {
  TempDir dir;
  const std::string started = dir / "started";
  const std::string release = dir / "release";
  Captured io1;
  // The worker says it runs, then waits (60 s at most: a hang bound) until the test lets it go.
  Launcher first(sh("touch " + started + "; i=0; while [ ! -e " + release +
                    " ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i + 1)); done"),
                 io1.streams());
  // Nothing may escape the thread (an exception there would terminate the whole test binary).
  std::atomic<bool> done{false};
  int first_status = -1;
  std::string first_error;
  std::thread runner([&] {
    try {
      first_status = first.run().exit_status;
    } catch (const std::exception& e) {
      first_error = e.what();
    } catch (...) {
      first_error = "unknown exception";
    }
    done = true;
  });
  // A positive sign that the first run() is inside its loop: its worker is running.
  const bool running =
      wait_until([&] { return std::filesystem::exists(started) || done.load(); }, 30s) && !done.load();
  if (running) {
    Captured io2;
    Launcher second(sh("true"), io2.streams());
    EXPECT_THROW(second.run(), LaunchError);
  }
  { std::ofstream(release) << "go"; }
  runner.join();
  EXPECT_TRUE(running) << "the first run did not start its worker within 30 s: " << first_error
                       << io1.err.str();
  EXPECT_EQ(first_error, "");
  EXPECT_EQ(first_status, 0) << io1.err.str();
}

TEST(Launcher, LeavesTheGroupOfAWorkerReapedBeforeTheStopAlone) {
  // Rank 0 exits 0 at once, leaving a background process in its group; it is reaped then, and its
  // group id may be reused by anyone: the stop caused by rank 1 later must not signal that group.
  TempDir dir;
  const std::string child = dir / "child";
  Captured io;
  // Rank 1 fails only once rank 0 has been reaped (`kill -0` still finds a zombie): an order of events.
  const std::string leader = dir / "leader";
  Launcher launcher(sh("if [ $RANK = 0 ]; then sleep 30 </dev/null >/dev/null 2>&1 & echo $! > " + child +
                       ".tmp; mv " + child + ".tmp " + child + "; echo $$ > " + leader + ".tmp; mv " +
                       leader + ".tmp " + leader + "; exit 0; fi; i=0; while [ ! -e " + leader +
                       " ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done; while kill -0 $(cat " +
                       leader + ") 2>/dev/null && [ $i -lt 1200 ]; do sleep 0.05; i=$((i + 1)); done; exit 1")
                        .nproc_per_node(2)
                        .grace_period(std::chrono::milliseconds(300)),
                    io.streams());
  EXPECT_EQ(launcher.run().exit_status, 1) << io.err.str();
  const std::string text = read_file(child);
  ASSERT_FALSE(text.empty()) << io.err.str();
  const pid_t pid = std::stoi(text);
  // A signal takes a moment to act: give it one second (a busy machine can only make this check weaker).
  EXPECT_FALSE(wait_until([&] { return !testing::process_alive(pid); }, 1000ms))
      << "the stop signalled the group of a reaped worker";
  ::kill(pid, SIGKILL);
}

TEST(Launcher, StopReachesWhatAFailedWorkerLeftInItsGroup) {
  // The failing worker's leftover (still in its group) is stopped with the others.
  TempDir dir;
  const std::string child = dir / "child";
  Captured io;
  Launcher launcher(sh("sleep 30 </dev/null >/dev/null 2>&1 & echo $! > " + child + "; exit 3"),
                    io.streams());
  EXPECT_EQ(launcher.run().exit_status, 3) << io.err.str();
  const pid_t pid = std::stoi(read_file(child));
  const bool gone = wait_until([&] { return !testing::process_alive(pid); }, 30s);  // a hang bound
  if (!gone) ::kill(pid, SIGKILL);
  EXPECT_TRUE(gone) << "orphan left: pid " << pid;
}

TEST(Launcher, GracePeriodKillReachesTheGroupOfAWorkerThatExitedDuringTheStop) {
  // Rank 0 exits on SIGTERM, but leaves a process ignoring SIGTERM in its group: the SIGKILL at the
  // end of the stop must still reach it, although its leader has exited meanwhile.
  TempDir dir;
  const std::string child = dir / "child";
  Captured io;
  Launcher launcher(
      sh("if [ $RANK = 0 ]; then trap 'exit 0' TERM; (trap '' TERM; sleep 30) </dev/null "
         ">/dev/null 2>&1 & echo $! > " +
         child + ".tmp; mv " + child + ".tmp " + child + "; wait; exit 0; fi; i=0; while [ ! -e " + child +
         " ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done; exit 4")
          .nproc_per_node(2)
          .grace_period(std::chrono::milliseconds(300)),
      io.streams());
  EXPECT_EQ(launcher.run().exit_status, 4) << io.err.str();
  const std::string text = read_file(child);
  ASSERT_FALSE(text.empty()) << io.err.str();
  const pid_t pid = std::stoi(text);
  const bool gone = wait_until([&] { return !testing::process_alive(pid); }, 30s);  // a hang bound
  if (!gone) ::kill(pid, SIGKILL);
  EXPECT_TRUE(gone) << "orphan left: pid " << pid;
}

// Heartbeats (comm/progress.h writes them from lockstep's process groups; here a shell writes the same
// lines to descriptor 3): in a job of several ranks, a worker that goes silent, or stops reaching
// collectives, for the collective timeout is killed and the job stopped, naming it.
namespace heartbeats {

// A worker of rank 1 that beats for `beats` times 0.1 s with the given lines, then does `then`.
LaunchOptions beating(const std::string& rank1_beat, int beats, const std::string& then) {
  const std::string script = "if [ $RANK = 1 ]; then i=0; while [ $i -lt " + std::to_string(beats) +
                             " ]; do echo \"" + rank1_beat + "\" >&3; i=$((i+1)); sleep 0.1; done; " + then +
                             "; fi; sleep 30";
  return sh(script)
      .nproc_per_node(2)
      .collective_timeout(std::chrono::milliseconds(1000))
      .grace_period(std::chrono::milliseconds(300));
}

TEST(LauncherHeartbeats, ASilentWorkerIsKilledAndNamedWithinTheTimeout) {
  Captured io;
  // Progress at every beat (a new "issued" number each time), then silence: a stopped process.
  Launcher launcher(sh("if [ $RANK = 1 ]; then i=1; while [ $i -le 5 ]; do echo \"$i $i 0 allreduce #$i "
                       "(Float[4]) sum\" >&3;"
                       " i=$((i+1)); sleep 0.1; done; kill -STOP $$; fi; sleep 30")
                        .nproc_per_node(2)
                        .collective_timeout(std::chrono::milliseconds(1000))
                        .grace_period(std::chrono::milliseconds(300)),
                    io.streams());
  // Rank 1 never resumes (SIGSTOP), so only the launcher's kill ends this job; that it came after the
  // silence, not before it, shows in the message: it names the 5th, last beat's collective.
  const LaunchResult r = launcher.run();
  EXPECT_EQ(r.exit_status, 128 + SIGKILL);
  ASSERT_TRUE(r.failed_rank);
  EXPECT_EQ(*r.failed_rank, 1);
  const std::string err = io.err.str();
  EXPECT_NE(err.find("rank 1 (local rank 1, pid "), std::string::npos) << err;
  EXPECT_NE(err.find(") sent no heartbeat for 1."), std::string::npos) << err;
  EXPECT_NE(err.find("its last collective: allreduce #5 (Float[4]) sum"), std::string::npos) << err;
  EXPECT_NE(err.find("job failed: rank 1 stalled and was killed"), std::string::npos) << err;
}

TEST(LauncherHeartbeats, AWorkerThatBeatsButReachesNoCollectiveIsKilled) {
  Captured io;
  // The same line again and again: alive (the beats go on) but no collective issued or finished.
  // Rank 1 beats 300 times (30 s: a hang bound), rank 0 sleeps 30 s: the job ends by the kill, while rank 1
  // still beats (else rank 1 would have ended by itself and the job with status 0, no kill).
  Launcher launcher(beating("7 7 0 broadcast #7 (Long[1]) from rank 0", 300, "true"), io.streams());
  const LaunchResult r = launcher.run();
  EXPECT_EQ(r.exit_status, 128 + SIGKILL);
  const std::string err = io.err.str();
  EXPECT_NE(err.find(") reached no collective for 1."), std::string::npos) << err;
  EXPECT_NE(
      err.find("its last collective: broadcast #7 (Long[1]) from rank 0 (finished): it is stuck outside"),
      std::string::npos)
      << err;
}

TEST(LauncherHeartbeats, WaitingInACollectiveIsLeftToTheCollectiveTimeoutFirst) {
  Captured io;
  // Waiting in a collective: the worker's own timeout ends it; the launcher steps in only 5 s later.
  Launcher launcher(
      sh("if [ $RANK = 1 ]; then i=0; while [ $i -lt 25 ]; do echo '3 2 1 allreduce #3 (Float[4]) sum' >&3;"
         " i=$((i+1)); sleep 0.1; done; exit 0; fi; sleep 3")
          .nproc_per_node(2)
          .collective_timeout(std::chrono::milliseconds(1000)),
      io.streams());
  const LaunchResult r = launcher.run();
  // Rank 1 beat "waiting" for 2.5 s, more than the 1 s timeout, and then ended by itself: not killed.
  EXPECT_EQ(r.exit_status, 0) << io.err.str();
  EXPECT_EQ(io.err.str().find("stalled"), std::string::npos) << io.err.str();
}

TEST(LauncherHeartbeats, ByeEndsTheWatchAndOneRankJobsAreNotWatched) {
  Captured io;
  // "bye": the process group ended (the rest of the program may take long without collectives).
  Launcher bye(sh("echo '1 1 0 barrier #1 ()' >&3; echo bye >&3; sleep 2")
                   .nproc_per_node(2)
                   .collective_timeout(std::chrono::milliseconds(500)),
               io.streams());
  EXPECT_EQ(bye.run().exit_status, 0) << io.err.str();
  Captured one;
  // A single rank holds nobody up: no watch.
  Launcher single(sh("echo '1 1 0 barrier #1 ()' >&3; sleep 1.5")
                      .nproc_per_node(1)
                      .collective_timeout(std::chrono::milliseconds(500)),
                  one.streams());
  EXPECT_EQ(single.run().exit_status, 0) << one.err.str();
}

TEST(LauncherHeartbeats, WorkersGetTheDescriptorAndTheTimeout) {
  Captured io;
  Launcher launcher(sh("echo \"$LOCKSTEP_HEARTBEAT_FD $LOCKSTEP_TIMEOUT\"; [ -p /dev/fd/3 ] && echo pipe")
                        .collective_timeout(std::chrono::milliseconds(2500)),
                    io.streams());
  EXPECT_EQ(launcher.run().exit_status, 0);
  EXPECT_EQ(line_set(io.out.str()), (std::multiset<std::string>{"[rank 0] 3 2.500000", "[rank 0] pipe"}));
}

}  // namespace heartbeats

}  // namespace
}  // namespace lockstep::launch
