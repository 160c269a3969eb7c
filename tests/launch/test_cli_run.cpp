// End-to-end: the built `lockstep run` ($LOCKSTEP_BIN) with real worker processes.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "launch_test_util.h"
#include "lockstep/launch/detail/host.h"

namespace lockstep::launch {
namespace {

using namespace std::chrono_literals;
using testing::job_log_dir;
using testing::line_set;
using testing::lines_of;
using testing::process_alive;
using testing::read_file;
using testing::Subprocess;
using testing::TempDir;
using testing::wait_until;

constexpr auto kTimeout = 20s;

class LockstepRun : public ::testing::Test {
 protected:
  void SetUp() override {
    bin_ = find_lockstep_bin();
    if (bin_.empty()) GTEST_SKIP() << "the lockstep CLI was not found (set LOCKSTEP_BIN to its path)";
  }

  // $LOCKSTEP_BIN (set by ctest), else $LOCKSTEP_BUILD_DIR/lockstep, else the build tree this test
  // binary sits in (build/tests/launch/test_launch -> build/lockstep).
  static std::string find_lockstep_bin() {
    std::vector<std::filesystem::path> candidates;
    // NOLINTBEGIN(concurrency-mt-unsafe): getenv before any thread exists
    if (const char* bin = std::getenv("LOCKSTEP_BIN")) candidates.emplace_back(bin);
    if (const char* dir = std::getenv("LOCKSTEP_BUILD_DIR")) {
      candidates.push_back(std::filesystem::path(dir) / "lockstep");
    }
    // NOLINTEND(concurrency-mt-unsafe)
    std::error_code ec;
    const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (!ec) candidates.push_back(self.parent_path().parent_path().parent_path() / "lockstep");
    for (const auto& path : candidates) {
      if (std::filesystem::is_regular_file(path) && ::access(path.c_str(), X_OK) == 0) return path.string();
    }
    return "";
  }

  /// argv for `lockstep run ARGS...`, optionally behind `env` to change the environment.
  std::vector<std::string> cmd(std::vector<std::string> args, std::vector<std::string> env = {}) const {
    std::vector<std::string> argv;
    if (!env.empty()) {
      argv.push_back("env");
      argv.insert(argv.end(), env.begin(), env.end());
    }
    argv.push_back(bin_);
    argv.push_back("run");
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }

  /// The same for one node of a job that spans nodes: every node has the same job secret, as a user gives
  /// it (lockstep run refuses such a job without one).
  std::vector<std::string> node_cmd(std::vector<std::string> args) const {
    return cmd(std::move(args), {"LOCKSTEP_JOB_SECRET=the-nodes-shared-secret-0123456789"});
  }

  std::string bin_;
};

TEST_F(LockstepRun, EveryWorkerGetsItsRankAndLinesArePrefixed) {
  Subprocess p(cmd({"--nproc-per-node", "3", "--standalone", "--", "sh", "-c", "echo $RANK/$WORLD_SIZE"}));
  EXPECT_EQ(p.wait(kTimeout), 0) << p.err();
  EXPECT_EQ(line_set(p.out()), (std::multiset<std::string>{"[rank 0] 0/3", "[rank 1] 1/3", "[rank 2] 2/3"}));
}

TEST_F(LockstepRun, StderrLinesGoToStderrAndALastPartialLineIsFlushed) {
  Subprocess p(cmd({"--nproc-per-node", "2", "sh", "-c", "echo to-err >&2; printf no-newline"}));
  EXPECT_EQ(p.wait(kTimeout), 0) << p.err();
  EXPECT_EQ(line_set(p.out()), (std::multiset<std::string>{"[rank 0] no-newline", "[rank 1] no-newline"}));
  EXPECT_EQ(line_set(p.err()), (std::multiset<std::string>{"[rank 0] to-err", "[rank 1] to-err"}));
}

TEST_F(LockstepRun, LinesOfDifferentWorkersNeverInterleave) {
  // awk writes in 4 KiB blocks that cut lines anywhere; every forwarded line must still be whole.
  const std::string script =
      "awk -v r=$RANK 'BEGIN { for (i = 0; i < 3000; i++) "
      "printf \"r%d-%d-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\\n\", r, i }'";
  Subprocess p(cmd({"--nproc-per-node", "3", "sh", "-c", script}));
  ASSERT_EQ(p.wait(kTimeout), 0) << p.err();
  const std::regex line_re(R"(\[rank (\d)\] r(\d)-(\d+)-x{54})");
  std::vector<int> next(3, 0);
  for (const std::string& line : lines_of(p.out())) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, line_re)) << "mangled line: " << line;
    ASSERT_EQ(m[1], m[2]) << line;
    const int rank = std::stoi(m[1]);
    EXPECT_EQ(std::stoi(m[3]), next[rank]++) << "out of order: " << line;
  }
  EXPECT_EQ(next, (std::vector<int>{3000, 3000, 3000}));
}

TEST_F(LockstepRun, FailingWorkerStatusIsTheLauncherStatusAndOthersAreStopped) {
  Subprocess p(cmd({"--nproc-per-node", "3", "sh", "-c",
                    "if [ $RANK = 1 ]; then sleep 0.3; echo 'bad thing' >&2; exit 3; fi; sleep 60"}));
  // The others were stopped, not left to their 60 s sleep: p.wait's kTimeout (20 s, a hang bound) would
  // have killed the launcher first, and its status would not be 3.
  EXPECT_EQ(p.wait(kTimeout), 3) << p.err();
  const std::string err = p.err();
  EXPECT_NE(err.find("rank 1"), std::string::npos) << err;
  EXPECT_NE(err.find("exited with status 3"), std::string::npos) << err;
  EXPECT_NE(err.find("  | bad thing"), std::string::npos) << err;
}

TEST_F(LockstepRun, WorkerIgnoringSigtermIsKilledWithinFiveSeconds) {
  TempDir dir;
  Subprocess p(
      cmd({"--nproc-per-node", "2", "sh", "-c",
           // Rank 1 fails once rank 0 ignores SIGTERM (its pid file): an order of events, not a sleep.
           "if [ $RANK = 1 ]; then while [ ! -s " + (dir / "pid") + " ]; do sleep 0.05; done; exit 3; fi; " +
               "trap '' TERM; echo $$ > " + (dir / "pid") + ".tmp; mv " + (dir / "pid") + ".tmp " +
               (dir / "pid") + "; sleep 60"}));
  // Killed after the 3 s grace, not at the end of its 60 s sleep: p.wait's kTimeout (20 s, a hang bound)
  // would have killed the launcher first, and its status would not be 3.
  EXPECT_EQ(p.wait(kTimeout), 3) << p.err();
  // A lower bound only: the clock started before the launcher, so a busy machine can only lengthen it.
  EXPECT_GE(p.elapsed_s(), 3.0) << "the worker ignoring SIGTERM should only die of the SIGKILL after 3 s";
  const pid_t pid = std::stoi(read_file(dir / "pid"));
  EXPECT_TRUE(wait_until([&] { return !process_alive(pid); }, 30000ms)) << "worker " << pid << " survived";
}

TEST_F(LockstepRun, WorkerKilledBySignalGives128PlusSignal) {
  Subprocess p(cmd({"--nproc-per-node", "2", "sh", "-c",
                    "if [ $RANK = 1 ]; then sleep 0.2; kill -KILL $$; fi; sleep 60"}));
  // The other was stopped, not left to its 60 s sleep (else kTimeout, a hang bound, would have ended it).
  EXPECT_EQ(p.wait(kTimeout), 128 + 9) << p.err();
  EXPECT_NE(p.err().find("rank 1"), std::string::npos) << p.err();
  EXPECT_NE(p.err().find("killed by signal 9 (SIGKILL)"), std::string::npos) << p.err();
}

TEST_F(LockstepRun, WorkerSegfaultGives139) {
  Subprocess p(cmd({"sh", "-c", "kill -SEGV $$"}));
  EXPECT_EQ(p.wait(kTimeout), 128 + 11) << p.err();
  EXPECT_NE(p.err().find("rank 0 killed by signal 11 (SIGSEGV)"), std::string::npos) << p.err();
}

// Starts a launcher whose workers record their pids (and a child's), waits until all are written.
struct RunningJob {
  std::vector<pid_t> pids;
};

RunningJob wait_for_pids(const TempDir& dir, int files) {
  RunningJob job;
  const bool ready = wait_until(
      [&] {
        for (int i = 0; i < files; ++i) {
          const std::string text = read_file(dir / ("pid" + std::to_string(i)));
          if (text.empty() || text.back() != '\n') return false;
        }
        return true;
      },
      30000ms);  // a hang bound
  EXPECT_TRUE(ready) << "workers did not start";
  for (int i = 0; i < files && ready; ++i)
    job.pids.push_back(std::stoi(read_file(dir / ("pid" + std::to_string(i)))));
  return job;
}

TEST_F(LockstepRun, SigtermToTheLauncherStopsEveryWorkerAndTheirChildren) {
  TempDir dir;
  // Each worker: a shell that ignores SIGTERM, with a background child that does not. Files pid0..pid3.
  const std::string d = dir.path().string();
  Subprocess p(cmd({"--nproc-per-node", "2", "sh", "-c",
                    "trap '' TERM; sleep 60 & echo $! > " + d +
                        "/pid$((RANK * 2 + 1)).tmp; "
                        "mv " +
                        d + "/pid$((RANK * 2 + 1)).tmp " + d +
                        "/pid$((RANK * 2 + 1)); "
                        "echo $$ > " +
                        d + "/pid$((RANK * 2)).tmp; mv " + d + "/pid$((RANK * 2)).tmp " + d +
                        "/pid$((RANK * 2)); wait"}));
  const RunningJob job = wait_for_pids(dir, 4);
  ASSERT_EQ(job.pids.size(), 4u);
  for (pid_t pid : job.pids) EXPECT_TRUE(process_alive(pid)) << pid;
  p.signal(SIGTERM);
  // The workers ignore SIGTERM and wait for their 60 s sleeps: only the SIGKILL after the grace ends them
  // before kTimeout (20 s from the signal, a hang bound) would kill the launcher (status 137, not 143).
  EXPECT_EQ(p.wait(kTimeout), 128 + SIGTERM) << p.err();
  EXPECT_NE(p.err().find("received SIGTERM"), std::string::npos) << p.err();
  for (pid_t pid : job.pids) {
    EXPECT_TRUE(wait_until([&] { return !process_alive(pid); }, 30000ms)) << "orphan left: pid " << pid;
  }
}

TEST_F(LockstepRun, SigintIsForwardedToTheWorkers) {
  TempDir dir;
  const std::string d = dir.path().string();
  Subprocess p(cmd({"--nproc-per-node", "2", "sh", "-c",
                    "trap 'echo got-int; exit 0' INT; echo $$ > " + d + "/pid$RANK.tmp; mv " + d +
                        "/pid$RANK.tmp " + d + "/pid$RANK; while :; do sleep 0.05; done"}));
  const RunningJob job = wait_for_pids(dir, 2);
  ASSERT_EQ(job.pids.size(), 2u);
  p.signal(SIGINT);
  EXPECT_EQ(p.wait(kTimeout), 128 + SIGINT) << p.err();
  // Both workers ran their INT trap: the signal reached them (a SIGTERM or SIGKILL after a grace period
  // would have ended them without it).
  EXPECT_EQ(line_set(p.out()), (std::multiset<std::string>{"[rank 0] got-int", "[rank 1] got-int"}));
}

// torchrun's layout: LOG_DIR/<run id>_<random>/attempt_<K>/<local rank>/{stdout,stderr}.log.
TEST_F(LockstepRun, LogDirGetsEachRanksOutput) {
  TempDir dir;
  const std::string logs = dir / "nested/logs";
  Subprocess p(cmd({"--nproc-per-node", "2", "--log-dir", logs, "--rdzv-id", "j1", "sh", "-c",
                    "echo out $RANK; echo err $RANK >&2; printf tail"}));
  ASSERT_EQ(p.wait(kTimeout), 0) << p.err();
  const std::string job = job_log_dir(logs, "j1");
  ASSERT_FALSE(job.empty()) << "no single j1_* directory in " << logs;
  EXPECT_EQ(read_file(job + "/attempt_0/0/stdout.log"), "out 0\ntail");
  EXPECT_EQ(read_file(job + "/attempt_0/1/stdout.log"), "out 1\ntail");
  EXPECT_EQ(read_file(job + "/attempt_0/0/stderr.log"), "err 0\n");
  EXPECT_EQ(read_file(job + "/attempt_0/1/stderr.log"), "err 1\n");
  EXPECT_EQ(line_set(p.out()).count("[rank 1] out 1"), 1u);  // still forwarded
}

TEST_F(LockstepRun, LogDirThatCannotBeCreatedIsNamed) {
  TempDir dir;
  { std::ofstream(dir / "file") << "x"; }
  const std::string logs = dir / "file/logs";
  Subprocess p(cmd({"--log-dir", logs, "true"}));
  EXPECT_EQ(p.wait(kTimeout), 1);
  EXPECT_NE(p.err().find(logs), std::string::npos) << p.err();
}

TEST_F(LockstepRun, OmpNumThreadsIsCoresPerWorker) {
  const int cores = std::max(1, static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN)));
  Subprocess p(
      cmd({"--nproc-per-node", "2", "sh", "-c", "echo $OMP_NUM_THREADS"}, {"-u", "OMP_NUM_THREADS"}));
  ASSERT_EQ(p.wait(kTimeout), 0) << p.err();
  const std::string n = std::to_string(std::max(1, cores / 2));
  EXPECT_EQ(line_set(p.out()), (std::multiset<std::string>{"[rank 0] " + n, "[rank 1] " + n}));
}

TEST_F(LockstepRun, OmpNumThreadsSetByTheUserIsKept) {
  Subprocess p(cmd({"--nproc-per-node", "2", "sh", "-c", "echo $OMP_NUM_THREADS"}, {"OMP_NUM_THREADS=7"}));
  ASSERT_EQ(p.wait(kTimeout), 0) << p.err();
  EXPECT_EQ(line_set(p.out()), (std::multiset<std::string>{"[rank 0] 7", "[rank 1] 7"}));
}

TEST_F(LockstepRun, TwoNodesOnLoopbackGiveRanksZeroToThree) {
  const std::string script =
      "echo $RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $GROUP_RANK $GROUP_WORLD_SIZE "
      "$MASTER_ADDR:$MASTER_PORT $TORCHELASTIC_RUN_ID";
  Subprocess node0(node_cmd({"--nnodes", "2", "--node-rank", "0", "--nproc-per-node", "2", "--master-addr",
                             "127.0.0.1", "--master-port", "29631", "--", "sh", "-c", script}));
  Subprocess node1(node_cmd({"--nnodes", "2", "--node-rank", "1", "--nproc-per-node", "2", "--master-addr",
                             "127.0.0.1", "--master-port", "29631", "--", "sh", "-c", script}));
  ASSERT_EQ(node0.wait(kTimeout), 0) << node0.err();
  ASSERT_EQ(node1.wait(kTimeout), 0) << node1.err();
  EXPECT_EQ(line_set(node0.out()), (std::multiset<std::string>{"[rank 0] 0 0 4 2 0 2 127.0.0.1:29631 none",
                                                               "[rank 1] 1 1 4 2 0 2 127.0.0.1:29631 none"}));
  EXPECT_EQ(line_set(node1.out()), (std::multiset<std::string>{"[rank 2] 2 0 4 2 1 2 127.0.0.1:29631 none",
                                                               "[rank 3] 3 1 4 2 1 2 127.0.0.1:29631 none"}));
}

TEST_F(LockstepRun, UnderscoreSpellingsWork) {
  TempDir dir;
  Subprocess p(
      node_cmd({"--nproc_per_node=2", "--nnodes=2", "--node_rank=1", "--master_addr=127.0.0.2",
                "--master_port=29999", "--max_restarts=0", "--log_dir=" + (dir / "l"), "--rdzv_id=abc", "sh",
                "-c", "echo $RANK $WORLD_SIZE $MASTER_ADDR $MASTER_PORT $TORCHELASTIC_RUN_ID"}));
  ASSERT_EQ(p.wait(kTimeout), 0) << p.err();
  EXPECT_EQ(line_set(p.out()), (std::multiset<std::string>{"[rank 2] 2 4 127.0.0.2 29999 abc",
                                                           "[rank 3] 3 4 127.0.0.2 29999 abc"}));
  const std::string job = job_log_dir(dir / "l", "abc");
  ASSERT_FALSE(job.empty());
  EXPECT_TRUE(std::filesystem::exists(job + "/attempt_0/1/stdout.log"));
}

TEST_F(LockstepRun, RunIdSpellings) {
  for (const std::string flag : {"--rdzv-id", "--rdzv_id", "--run-id", "--run_id"}) {
    Subprocess p(cmd({flag, "job-" + flag, "sh", "-c", "echo $TORCHELASTIC_RUN_ID"}));
    ASSERT_EQ(p.wait(kTimeout), 0) << flag << ": " << p.err();
    EXPECT_EQ(p.out(), "[rank 0] job-" + flag + "\n");
  }
}

// As torchrun: one node and no master given run on a free local port (torchrun then turns standalone), so
// that two such jobs on one machine never meet; several nodes meet at 29500.
TEST_F(LockstepRun, DefaultsAreTorchrunsDefaults) {
  Subprocess p(cmd({"sh", "-c", "echo $RANK $WORLD_SIZE $MASTER_ADDR $MASTER_PORT $TORCHELASTIC_RUN_ID"}));
  ASSERT_EQ(p.wait(kTimeout), 0) << p.err();
  std::smatch m;
  const std::string out = p.out();
  ASSERT_TRUE(std::regex_match(out, m, std::regex(R"(\[rank 0\] 0 1 127\.0\.0\.1 (\d+) [0-9a-f]{16}\n)")))
      << out;
  const int port = std::stoi(m[1]);
  EXPECT_TRUE(port >= 1 && port <= 65535) << port;
  Subprocess node(
      node_cmd({"--nnodes", "2", "--node-rank", "1", "--", "sh", "-c", "echo $MASTER_ADDR $MASTER_PORT"}));
  ASSERT_EQ(node.wait(kTimeout), 0) << node.err();
  EXPECT_EQ(node.out(), "[rank 1] 127.0.0.1 29500\n");
}

TEST_F(LockstepRun, StandaloneUsesAFreePortAndARandomRunId) {
  Subprocess p(cmd({"--standalone", "sh", "-c", "echo $MASTER_ADDR $MASTER_PORT $TORCHELASTIC_RUN_ID"}));
  ASSERT_EQ(p.wait(kTimeout), 0) << p.err();
  std::smatch m;
  const std::string out = p.out();
  ASSERT_TRUE(std::regex_match(out, m, std::regex(R"(\[rank 0\] 127\.0\.0\.1 (\d+) [0-9a-f]{16}\n)"))) << out;
  const int port = std::stoi(m[1]);
  EXPECT_GT(port, 0);
  EXPECT_LT(port, 65536);
}

TEST_F(LockstepRun, NprocAutoStartsOneWorkerPerCore) {
  const int cores = std::max(1, static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN)));
  if (std::filesystem::exists("/proc/driver/nvidia/gpus")) GTEST_SKIP() << "GPUs present: auto counts them";
  Subprocess p(cmd({"--nproc-per-node", "auto", "sh", "-c", "echo $LOCAL_WORLD_SIZE"}));
  ASSERT_EQ(p.wait(kTimeout), 0) << p.err();
  EXPECT_EQ(lines_of(p.out()).size(), static_cast<std::size_t>(cores));
  EXPECT_EQ(line_set(p.out()).count("[rank 0] " + std::to_string(cores)), 1u);
}

TEST_F(LockstepRun, WorkerCommandKeepsItsOwnFlags) {
  Subprocess p(cmd({"--nproc-per-node", "1", "sh", "-c", "echo \"$@\"", "sh", "--lr", "0.1",
                    "--nproc-per-node", "5", "--", "x"}));
  ASSERT_EQ(p.wait(kTimeout), 0) << p.err();
  EXPECT_EQ(p.out(), "[rank 0] --lr 0.1 --nproc-per-node 5 -- x\n");
}

TEST_F(LockstepRun, MaxRestartsRestartsTheWorkers) {
  Subprocess p(
      cmd({"--nproc-per-node", "2", "--max-restarts", "2", "sh", "-c",
           "echo try $TORCHELASTIC_RESTART_COUNT; [ $RANK = 0 ] || [ $TORCHELASTIC_RESTART_COUNT = 2 ]"}));
  EXPECT_EQ(p.wait(kTimeout), 0) << p.err();
  const auto lines = line_set(p.out());
  EXPECT_EQ(lines.count("[rank 1] try 0") + lines.count("[rank 1] try 1") + lines.count("[rank 1] try 2"), 3u)
      << p.out();
}

TEST_F(LockstepRun, UnknownCommandExits127NamingIt) {
  Subprocess p(cmd({"--nproc-per-node", "2", "lockstep-no-such-command-xyz", "--flag"}));
  EXPECT_EQ(p.wait(kTimeout), 127);
  EXPECT_NE(p.err().find("lockstep-no-such-command-xyz"), std::string::npos) << p.err();
}

TEST_F(LockstepRun, HelpExplainsFlagsAndExitStatus) {
  Subprocess p(cmd({"--help"}));
  EXPECT_EQ(p.wait(kTimeout), 0);
  const std::string help = p.out();
  for (const char* flag :
       {"--nproc-per-node", "--nproc_per_node", "--nnodes", "--node-rank", "--master-addr", "--master-port",
        "--standalone", "--max-restarts", "--log-dir", "--rdzv-id", "Exit status", "128+N", "127"}) {
    EXPECT_NE(help.find(flag), std::string::npos) << flag;
  }
}

constexpr const char* kNoRdzvIdWarning =
    "lockstep run: warning: no --rdzv-id for a multi-node job; using run id 'none', so a process of "
    "another job started the same way could join this one — pass --rdzv-id <job id> on every node";

TEST_F(LockstepRun, MultiNodeJobWithoutRdzvIdWarnsOnce) {
  Subprocess p(node_cmd({"--nnodes", "2", "--node-rank", "1", "--master-addr", "127.0.0.1", "--master-port",
                         "29633", "sh", "-c", "echo $TORCHELASTIC_RUN_ID"}));
  ASSERT_EQ(p.wait(kTimeout), 0) << p.err();
  EXPECT_EQ(p.out(), "[rank 1] none\n");
  const auto lines = lines_of(p.err());
  EXPECT_EQ(std::count(lines.begin(), lines.end(), kNoRdzvIdWarning), 1) << p.err();
}

TEST_F(LockstepRun, NoRdzvIdWarningWithAnIdOrOnOneNode) {
  Subprocess with_id(node_cmd(
      {"--nnodes", "2", "--node-rank", "1", "--master-addr", "127.0.0.1", "--rdzv-id", "job7", "true"}));
  ASSERT_EQ(with_id.wait(kTimeout), 0) << with_id.err();
  EXPECT_EQ(with_id.err().find("warning"), std::string::npos) << with_id.err();
  Subprocess one_node(cmd({"true"}));
  ASSERT_EQ(one_node.wait(kTimeout), 0) << one_node.err();
  EXPECT_EQ(one_node.err().find("warning"), std::string::npos) << one_node.err();
}

// The job secret: a job on one node gets a new one for its workers (another each run); a job that spans
// nodes without one is refused before any worker starts, saying how to give one, and runs with
// --no-job-secret; a given secret reaches the workers, a secret file others can read is refused.
TEST_F(LockstepRun, AJobOnOneNodeGetsANewSecretForItsWorkers) {
  const std::string script = "echo ${#LOCKSTEP_JOB_SECRET} $LOCKSTEP_JOB_SECRET";
  Subprocess a(cmd({"--nproc-per-node", "2", "sh", "-c", script}, {"-u", "LOCKSTEP_JOB_SECRET"}));
  Subprocess b(cmd({"sh", "-c", script}, {"-u", "LOCKSTEP_JOB_SECRET"}));
  ASSERT_EQ(a.wait(kTimeout), 0) << a.err();
  ASSERT_EQ(b.wait(kTimeout), 0) << b.err();
  const auto lines = lines_of(a.out());
  ASSERT_EQ(lines.size(), 2u) << a.out();
  EXPECT_EQ(lines[0].substr(lines[0].find(']') + 1), lines[1].substr(lines[1].find(']') + 1)) << a.out();
  EXPECT_TRUE(std::regex_match(lines[0], std::regex(R"(\[rank \d\] 64 [0-9a-f]{64})"))) << a.out();
  const auto other = lines_of(b.out());
  ASSERT_EQ(other.size(), 1u) << b.out();
  EXPECT_EQ(other[0].size(), lines[0].size()) << b.out();
  EXPECT_NE(other[0].substr(other[0].size() - 64), lines[0].substr(lines[0].size() - 64))
      << "the same secret twice";
}

TEST_F(LockstepRun, AJobThatSpansNodesNeedsASecretOrTheOptOut) {
  TempDir dir;
  const std::vector<std::string> two_nodes = {"--nnodes",      "2",        "--node-rank", "1",
                                              "--master-addr", "127.0.0.1"};
  auto args = two_nodes;
  args.insert(args.end(), {"sh", "-c", "touch " + (dir / "started")});
  Subprocess refused(cmd(args, {"-u", "LOCKSTEP_JOB_SECRET", "-u", "LOCKSTEP_JOB_SECRET_FILE"}));
  EXPECT_EQ(refused.wait(kTimeout), 2) << refused.err();
  EXPECT_NE(refused.err().find("this job spans nodes (--nnodes=2) and has no job secret"), std::string::npos)
      << refused.err();
  EXPECT_NE(refused.err().find("--no-job-secret"), std::string::npos) << refused.err();
  EXPECT_FALSE(std::filesystem::exists(dir / "started")) << "a worker started";

  args = two_nodes;
  args.insert(args.end(),
              {"--no-job-secret", "sh", "-c", "echo [$LOCKSTEP_JOB_SECRET] $LOCKSTEP_NO_JOB_SECRET"});
  Subprocess waived(cmd(args, {"-u", "LOCKSTEP_JOB_SECRET"}));
  ASSERT_EQ(waived.wait(kTimeout), 0) << waived.err();
  EXPECT_EQ(waived.out(), "[rank 1] [] 1\n");

  args = two_nodes;
  args.insert(args.end(), {"sh", "-c", "echo $LOCKSTEP_JOB_SECRET"});
  Subprocess given(node_cmd(args));
  ASSERT_EQ(given.wait(kTimeout), 0) << given.err();
  EXPECT_EQ(given.out(), "[rank 1] the-nodes-shared-secret-0123456789\n");
}

TEST_F(LockstepRun, ASecretFileMustBePrivate) {
  TempDir dir;
  const std::string path = dir / "secret";
  std::ofstream(path) << "from-a-file-0123456789abcdef\n";
  ::chmod(path.c_str(), 0644);
  Subprocess open(cmd({"--job-secret-file", path, "true"}));
  EXPECT_EQ(open.wait(kTimeout), 2) << open.err();
  EXPECT_NE(open.err().find("mode 0644 lets others read or change it: chmod 600"), std::string::npos)
      << open.err();
  EXPECT_EQ(open.err().find("from-a-file"), std::string::npos)
      << "the secret is in the message: " << open.err();
  ::chmod(path.c_str(), 0600);
  Subprocess ok(cmd({"--job-secret-file", path, "sh", "-c", "echo $LOCKSTEP_JOB_SECRET"}));
  ASSERT_EQ(ok.wait(kTimeout), 0) << ok.err();
  EXPECT_EQ(ok.out(), "[rank 0] from-a-file-0123456789abcdef\n");
}

TEST_F(LockstepRun, HelpListsPythonUnbufferedInTheWorkerEnvironment) {
  Subprocess p(cmd({"--help"}));
  EXPECT_EQ(p.wait(kTimeout), 0);
  EXPECT_NE(p.out().find("PYTHONUNBUFFERED=1"), std::string::npos) << p.out();
}

TEST_F(LockstepRun, WorkersGetPythonUnbufferedUnlessTheUserSetsIt) {
  Subprocess p(cmd({"sh", "-c", "echo \"[$PYTHONUNBUFFERED]\""}, {"-u", "PYTHONUNBUFFERED"}));
  ASSERT_EQ(p.wait(kTimeout), 0) << p.err();
  EXPECT_EQ(p.out(), "[rank 0] [1]\n");
  Subprocess q(cmd({"sh", "-c", "echo \"[$PYTHONUNBUFFERED]\""}, {"PYTHONUNBUFFERED="}));
  ASSERT_EQ(q.wait(kTimeout), 0) << q.err();
  EXPECT_EQ(q.out(), "[rank 0] []\n");
}

// `lockstep env --json` (run from this suite, which has the CLI): strings with quotes, backslashes and
// control characters must come out as valid JSON.
TEST_F(LockstepRun, EnvJsonIsValidJsonWithEscapedStrings) {
  const std::string path = std::getenv("PATH") != nullptr ? std::getenv("PATH") : "/usr/bin:/bin";
  Subprocess p({"env", "-i", "PATH=" + path, "RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=host\\1",
                "TORCHELASTIC_RUN_ID=a\"b\\c\td", bin_, "env", "--json"});
  ASSERT_EQ(p.wait(kTimeout), 0) << p.err();
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(p.out())) << p.out();
  ASSERT_TRUE(j.is_object()) << p.out();
  EXPECT_EQ(j.at("run_id"), "a\"b\\c\td");
  EXPECT_EQ(j.at("master_addr"), "host\\1");
  EXPECT_EQ(j.at("source"), "torchrun");
  EXPECT_EQ(j.at("rank"), 1);
  EXPECT_EQ(j.at("local_rank"), 1);
  EXPECT_EQ(j.at("world_size"), 2);
  EXPECT_EQ(j.at("local_world_size"), 2);
  EXPECT_EQ(j.at("node_rank"), 0);
  EXPECT_EQ(j.at("num_nodes"), 1);
  EXPECT_EQ(j.at("master_port"), 29500);
  EXPECT_EQ(j.at("restart_count"), 0);
  EXPECT_EQ(j.at("job_secret"), "none");
  EXPECT_EQ(j.size(), 12u) << p.out();
}

// `lockstep env` says whether a process has a job secret and where from, never the value: a worker of
// lockstep run has the one its launcher made.
TEST_F(LockstepRun, EnvSaysWhereTheJobSecretComesFromNotWhatItIs) {
  Subprocess given({"env", "LOCKSTEP_JOB_SECRET=not-to-be-printed-0123456789", bin_, "env"});
  ASSERT_EQ(given.wait(kTimeout), 0) << given.err();
  EXPECT_NE(given.out().find("\njob_secret=given (LOCKSTEP_JOB_SECRET, 28 bytes)\n"), std::string::npos)
      << given.out();
  EXPECT_EQ(given.out().find("not-to-be-printed"), std::string::npos) << given.out();
  Subprocess weak({"env", "LOCKSTEP_JOB_SECRET=weak", bin_, "env"});
  ASSERT_EQ(weak.wait(kTimeout), 0) << weak.err();
  EXPECT_NE(weak.out().find("job_secret=unusable: LOCKSTEP_JOB_SECRET holds a job secret of 4 bytes"),
            std::string::npos)
      << weak.out();
  Subprocess worker(cmd({bin_, "env"}, {"-u", "LOCKSTEP_JOB_SECRET", "-u", "LOCKSTEP_JOB_SECRET_FILE"}));
  ASSERT_EQ(worker.wait(kTimeout), 0) << worker.err();
  EXPECT_NE(worker.out().find("[rank 0] job_secret=given (LOCKSTEP_JOB_SECRET, 64 bytes)"), std::string::npos)
      << worker.out();
}

// A worker never outlives its launcher: SIGKILL to the launcher (which can handle nothing) kills the workers
// too (PR_SET_PDEATHSIG), where torchrun leaves them running as orphans.
TEST_F(LockstepRun, WorkersDieWithTheirLauncherEvenWhenItIsKilled) {
  TempDir dir;
  const std::string d = dir.path().string();
  Subprocess p(cmd(
      {"--nproc-per-node", "2", "sh", "-c",
       "echo $$ > " + d + "/pid$RANK.tmp; mv " + d + "/pid$RANK.tmp " + d + "/pid$RANK; exec sleep 600"}));
  const RunningJob job = wait_for_pids(dir, 2);
  ASSERT_EQ(job.pids.size(), 2u);
  p.signal(SIGKILL);
  EXPECT_EQ(p.wait(kTimeout), 128 + SIGKILL);
  for (pid_t pid : job.pids) {
    EXPECT_TRUE(wait_until([&] { return !process_alive(pid); }, 20000ms))
        << "worker outlived its launcher: " << pid;
  }
}

// A program ending in .py runs as `PYTHON -u SCRIPT ARGS` (torchrun's way), -m as a module, --run-path
// through runpy, --no-python as given. PYTHON_EXEC names the interpreter; here a stand-in that prints its
// argv.
TEST_F(LockstepRun, ScriptsRunUnderPythonAsTorchrunRunsThem) {
  TempDir dir;
  const std::string fake = dir / "fakepython";
  { std::ofstream(fake) << "#!/bin/sh\necho python \"$@\"\n"; }
  const std::string script = dir / "train.py";
  { std::ofstream(script) << "#!/bin/sh\necho executed \"$@\"\n"; }
  std::filesystem::permissions(fake, std::filesystem::perms::owner_all);
  std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  const std::vector<std::string> env = {"PYTHON_EXEC=" + fake};
  const auto out = [&](std::vector<std::string> args) {
    Subprocess p(cmd(std::move(args), env));
    EXPECT_EQ(p.wait(kTimeout), 0) << p.err();
    return p.out();
  };
  EXPECT_EQ(out({script, "--lr", "1"}), "[rank 0] python -u " + script + " --lr 1\n");
  EXPECT_EQ(out({"-m", "pkg.train", "x"}), "[rank 0] python -u -m pkg.train x\n");
  EXPECT_EQ(out({"--no-python", script, "x"}), "[rank 0] executed x\n");
  const std::string run_path = out({"--run-path", script, "x"});
  EXPECT_EQ(run_path.rfind("[rank 0] python -u -c import runpy, sys; ", 0), 0u) << run_path;
  EXPECT_NE(run_path.find("run_name='__main__') " + script + " x\n"), std::string::npos) << run_path;
  // No interpreter: the error names the ways out.
  Subprocess none(cmd({script}, {"PYTHON_EXEC=" + dir / "nothing"}));
  EXPECT_EQ(none.wait(kTimeout), 2);
  EXPECT_NE(none.err().find("PYTHON_EXEC='" + dir / "nothing" + "' is not an executable"), std::string::npos)
      << none.err();
  EXPECT_NE(none.err().find("--no-python"), std::string::npos) << none.err();
}

// torchrun's PET_* variables are the flags' defaults (Kubeflow's PyTorchJob passes its settings that way);
// a flag on the command line wins.
TEST_F(LockstepRun, PetVariablesAreTheFlagsDefaults) {
  const std::vector<std::string> env = {"PET_NPROC_PER_NODE=2", "PET_RDZV_ID=pet-job", "PET_ROLE=trainer"};
  Subprocess p(cmd({"sh", "-c", "echo $RANK $TORCHELASTIC_RUN_ID $ROLE_NAME"}, env));
  ASSERT_EQ(p.wait(kTimeout), 0) << p.err();
  EXPECT_EQ(line_set(p.out()),
            (std::multiset<std::string>{"[rank 0] 0 pet-job trainer", "[rank 1] 1 pet-job trainer"}));
  Subprocess flag(cmd({"--nproc-per-node", "1", "sh", "-c", "echo $WORLD_SIZE"}, env));
  ASSERT_EQ(flag.wait(kTimeout), 0) << flag.err();
  EXPECT_EQ(flag.out(), "[rank 0] 1\n");
  Subprocess bad(cmd({"true"}, {"PET_NNODES=zero"}));
  EXPECT_EQ(bad.wait(kTimeout), 2);
  EXPECT_NE(bad.err().find("--nnodes='zero'"), std::string::npos) << bad.err();
}

// torchrun's logging flags: -r keeps a stream in the files only, -t in the files and on the console,
// --local-ranks-filter hides the other ranks from the console (not from the files), the prefix template
// and the duplicate filters; each worker is told its error file.
TEST_F(LockstepRun, RedirectsTeeFiltersAndPrefixesAsTorchrun) {
  TempDir dir;
  const std::string logs = dir / "logs";
  Subprocess p(cmd({"--nproc-per-node", "2", "--rdzv-id", "j", "--log-dir", logs, "-r", "0:1", "-t", "1:3",
                    "--local-ranks-filter", "1", "--log-line-prefix-template",
                    "${role_name}${local_rank}:", "--duplicate-stdout-filters", "hit", "sh", "-c",
                    "echo out$LOCAL_RANK hit; echo miss$LOCAL_RANK; echo err$LOCAL_RANK >&2; "
                    "echo $TORCHELASTIC_ERROR_FILE >&2"}));
  ASSERT_EQ(p.wait(kTimeout), 0) << p.err();
  const std::string job = job_log_dir(logs, "j");
  ASSERT_FALSE(job.empty());
  EXPECT_EQ(line_set(p.out()), (std::multiset<std::string>{"default1:out1 hit", "default1:miss1"}));
  EXPECT_EQ(line_set(p.err()),
            (std::multiset<std::string>{"default1:err1", "default1:" + job + "/attempt_0/1/error.json"}));
  EXPECT_EQ(read_file(job + "/attempt_0/0/stdout.log"), "out0 hit\nmiss0\n");
  EXPECT_FALSE(std::filesystem::exists(job + "/attempt_0/0/stderr.log"));  // neither redirected nor tee'd
  EXPECT_EQ(read_file(job + "/attempt_0/1/stdout.log"), "out1 hit\nmiss1\n");
  EXPECT_EQ(read_file(job + "/attempt_0/1/stderr.log"), "err1\n" + job + "/attempt_0/1/error.json\n");
  EXPECT_EQ(line_set(read_file(job + "/attempt_0/filtered_stdout.log")),
            (std::multiset<std::string>{"default0:out0 hit", "default1:out1 hit"}));
}

// Files asked for without --log-dir go to a fresh directory under $TMPDIR, named on stderr (torchrun's
// torchelastic_*).
TEST_F(LockstepRun, TeeWithoutALogDirNamesWhereTheFilesWent) {
  TempDir dir;
  Subprocess p(
      cmd({"--tee", "1", "--rdzv-id", "t", "sh", "-c", "echo hello"}, {"TMPDIR=" + dir.path().string()}));
  ASSERT_EQ(p.wait(kTimeout), 0) << p.err();
  std::smatch m;
  const std::string err = p.err();
  ASSERT_TRUE(std::regex_search(err, m, std::regex("writing the workers' log files under (\\S+)"))) << err;
  EXPECT_EQ(read_file(job_log_dir(m[1], "t") + "/attempt_0/0/stdout.log"), "hello\n");
  EXPECT_EQ(p.out(), "[rank 0] hello\n");
}

// --signals-to-handle: SIGUSR2 is passed on and stops nothing (the workers decide); the variable tells the
// workers which signals the launcher handles.
TEST_F(LockstepRun, SignalsToHandleArePassedOn) {
  TempDir dir;
  const std::string d = dir.path().string();
  Subprocess p(cmd({"--signals-to-handle", "SIGTERM,SIGUSR2", "sh", "-c",
                    "trap 'echo got-usr2 $TORCHELASTIC_SIGNALS_TO_HANDLE; exit 0' USR2; echo $$ > " + d +
                        "/pid0.tmp; mv " + d + "/pid0.tmp " + d + "/pid0; while :; do sleep 0.05; done"}));
  ASSERT_EQ(wait_for_pids(dir, 1).pids.size(), 1u);
  p.signal(SIGUSR2);
  EXPECT_EQ(p.wait(kTimeout), 0) << p.err();
  EXPECT_EQ(p.out(), "[rank 0] got-usr2 SIGTERM,SIGUSR2\n");
}

// --virtual-local-rank: every worker is local rank 0 and sees only its own GPU.
TEST_F(LockstepRun, VirtualLocalRankNarrowsTheVisibleGpus) {
  Subprocess p(cmd({"--nproc-per-node", "2", "--virtual-local-rank", "sh", "-c",
                    "echo $RANK $LOCAL_RANK $CUDA_VISIBLE_DEVICES"},
                   {"CUDA_VISIBLE_DEVICES=4,5"}));
  ASSERT_EQ(p.wait(kTimeout), 0) << p.err();
  EXPECT_EQ(line_set(p.out()), (std::multiset<std::string>{"[rank 0] 0 0 4", "[rank 1] 1 0 5"}));
  Subprocess few(
      cmd({"--nproc-per-node", "3", "--virtual-local-rank", "true"}, {"CUDA_VISIBLE_DEVICES=4,5"}));
  EXPECT_EQ(few.wait(kTimeout), 2);
  EXPECT_NE(few.err().find("CUDA_VISIBLE_DEVICES='4,5', which has 2"), std::string::npos) << few.err();
}

// Two nodes of a c10d rendezvous on loopback, with 2 and 1 workers: ranks follow the order of arrival and
// the nodes' worker counts; a failure on one node ends the round on both, and both start again (counted
// once against --max-restarts, TORCHELASTIC_RESTART_COUNT 1 everywhere).
TEST_F(LockstepRun, C10dNodesMeetAndRestartTogether) {
  TempDir dir;
  const int port = detail::find_free_port();
  const std::string script =
      "echo $RANK/$WORLD_SIZE node $GROUP_RANK/$GROUP_WORLD_SIZE local $LOCAL_RANK/$LOCAL_WORLD_SIZE "
      "restart $TORCHELASTIC_RESTART_COUNT; "
      "if [ $TORCHELASTIC_RESTART_COUNT = 0 ]; then if [ $RANK = 2 ]; then exit 3; fi; exec sleep 600; fi";
  const auto node = [&](const std::string& nproc) {
    return node_cmd({"--nnodes", "2", "--nproc-per-node", nproc, "--rdzv-backend", "c10d", "--rdzv-endpoint",
                     "127.0.0.1:" + std::to_string(port), "--rdzv-id", "loop", "--max-restarts", "1",
                     "--rdzv-conf", "last_call_timeout=1", "--", "sh", "-c", script});
  };
  Subprocess first(node("2"));
  ASSERT_TRUE(wait_until([&] { return first.err().find("joined round 0") != std::string::npos; }, 20000ms))
      << first.err();
  Subprocess second(node("1"));
  EXPECT_EQ(first.wait(60s), 0) << first.err();
  EXPECT_EQ(second.wait(60s), 0) << second.err();
  // Round 0 in order of arrival; round 1 in its own order of arrival, every rank once, all restarted once.
  EXPECT_EQ(line_set(first.out()).count("[rank 0] 0/3 node 0/2 local 0/2 restart 0"), 1u) << first.out();
  EXPECT_EQ(line_set(first.out()).count("[rank 1] 1/3 node 0/2 local 1/2 restart 0"), 1u) << first.out();
  std::multiset<std::string> restarted;
  for (const std::string& line : lines_of(first.out() + second.out())) {
    if (line.find(" restart 1") != std::string::npos) restarted.insert(line.substr(0, line.find(']') + 1));
  }
  EXPECT_EQ(restarted, (std::multiset<std::string>{"[rank 0]", "[rank 1]", "[rank 2]"}));
  EXPECT_NE(second.out().find("[rank 2] 2/3 node 1/2 local 0/1 restart 0"), std::string::npos)
      << second.out();
  EXPECT_NE(first.err().find("round 0 ended in a failure (1 of 1 restart(s) used)"), std::string::npos)
      << first.err();
  EXPECT_NE(second.err().find("round 1: 2 node(s)"), std::string::npos) << second.err();
}

// The restarts are the job's: when they are used up, every node stops with the failed worker's status.
TEST_F(LockstepRun, C10dNodesStopTogetherWhenTheRestartsAreUsedUp) {
  const int port = detail::find_free_port();
  const auto node = [&] {
    return node_cmd({"--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                     "127.0.0.1:" + std::to_string(port), "--rdzv-id", "used-up", "--rdzv-conf",
                     "last_call_timeout=1", "--", "sh", "-c",
                     "if [ $RANK = 1 ]; then exit 7; fi; sleep 600"});
  };
  Subprocess a(node()), b(node());
  EXPECT_EQ(a.wait(60s), 7) << a.err();
  EXPECT_EQ(b.wait(60s), 7) << b.err();
  for (Subprocess* p : {&a, &b}) {
    EXPECT_NE(p->err().find("1 round(s) ended in a failure, more than max_restarts=0"), std::string::npos)
        << p->err();
  }
}

// A node whose workers fail after the others finished the job (nothing to restart with) reports the failure,
// and the host, which keeps the rendezvous up for it, then leaves too.
TEST_F(LockstepRun, C10dFailureAfterTheOthersFinishedIsReported) {
  TempDir dir;
  const int port = detail::find_free_port();
  const std::string done = dir / "done";
  const auto node = [&](const std::string& script) {
    return node_cmd({"--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                     "127.0.0.1:" + std::to_string(port), "--rdzv-id", "late-fail", "--max-restarts", "2",
                     "--rdzv-conf", "last_call_timeout=1", "--", "sh", "-c", script});
  };
  Subprocess host(node("exit 0"));
  ASSERT_TRUE(wait_until([&] { return host.err().find("joined round 0") != std::string::npos; }, 20000ms));
  Subprocess late(node("while [ ! -e " + done + " ]; do sleep 0.05; done; exit 4"));
  ASSERT_TRUE(wait_until([&] { return host.err().find("workers finished") != std::string::npos; }, 20000ms))
      << host.err();
  { std::ofstream(done) << "x"; }
  EXPECT_EQ(late.wait(60s), 4) << late.err();
  EXPECT_NE(late.err().find("the job cannot go on"), std::string::npos) << late.err();
  EXPECT_EQ(host.wait(60s), 0) << host.err();
}

// Under c10d the master comes from the round: --master-addr/--master-port are ignored with a warning, as
// torchrun ignores them.
TEST_F(LockstepRun, C10dWarnsThatTheMasterFlagsAreIgnored) {
  Subprocess p(cmd({"--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:0", "--master-addr", "10.9.9.9",
                    "sh", "-c", "echo $MASTER_ADDR"}));
  ASSERT_EQ(p.wait(kTimeout), 0) << p.err();
  EXPECT_EQ(p.out(), "[rank 0] 127.0.0.1\n");
  EXPECT_NE(p.err().find("warning: --master-addr and --master-port are for the static rendezvous"),
            std::string::npos)
      << p.err();
}

// The help carries torchrun's whole table.
TEST_F(LockstepRun, HelpShowsTorchrunsFlagTable) {
  Subprocess p(cmd({"--help"}));
  ASSERT_EQ(p.wait(kTimeout), 0);
  for (const char* flag : {"--rdzv-conf K=V", "PET_NNODES", "--logs-specs NAME", "--numa-binding MODE",
                           "--virtual-local-rank", "--signals-to-handle", "--start-method M"}) {
    EXPECT_NE(p.out().find(flag), std::string::npos) << flag;
  }
}

struct BadFlags {
  std::string name;
  std::vector<std::string> args;
  std::string message_part;
};
// NOLINTNEXTLINE(readability-identifier-naming): the name GoogleTest looks for
void PrintTo(const BadFlags& flags, std::ostream* os) {
  *os << flags.name;
}

class LockstepRunRejects : public LockstepRun, public ::testing::WithParamInterface<BadFlags> {};

TEST_P(LockstepRunRejects, WithStatus2NamingTheFlag) {
  Subprocess p(cmd(GetParam().args));
  EXPECT_EQ(p.wait(kTimeout), 2) << p.err();
  EXPECT_NE(p.err().find(GetParam().message_part), std::string::npos) << p.err();
  EXPECT_EQ(p.out(), "");
}

INSTANTIATE_TEST_SUITE_P(
    Flags, LockstepRunRejects,
    ::testing::Values(
        BadFlags{"NprocZero", {"--nproc-per-node", "0", "true"}, "--nproc-per-node='0'"},
        BadFlags{"NprocText", {"--nproc-per-node", "many", "true"}, "--nproc-per-node='many'"},
        BadFlags{"NnodesZero", {"--nnodes", "0", "true"}, "--nnodes='0'"},
        BadFlags{"NnodesText", {"--nnodes", "two", "true"}, "--nnodes='two'"},
        BadFlags{
            "NnodesRangeBackwards", {"--nnodes", "3:2", "--rdzv-backend", "c10d", "true"}, "--nnodes='3:2'"},
        BadFlags{"ElasticRangeNeedsC10d", {"--nnodes", "1:2", "true"}, "needs --rdzv-backend=c10d"},
        BadFlags{"EtcdIsNamed", {"--rdzv-backend", "etcd", "true"}, "needs an etcd server"},
        BadFlags{"UnknownRdzvConfKey",
                 {"--rdzv-backend", "c10d", "--rdzv-conf", "join_timeout=5,bogus=1", "true"},
                 "unknown key 'bogus'"},
        BadFlags{"BadRdzvConfTimeout", {"--rdzv-conf", "join_timeout=-1", "true"}, "join_timeout='-1'"},
        BadFlags{"StoreTypeFile", {"--rdzv-conf", "store_type=file", "true"}, "store_type='file'"},
        BadFlags{
            "LogsSpecsIsRefused", {"--logs-specs", "mine", "true"}, "--logs-specs='mine' cannot be honoured"},
        BadFlags{"NumaBindingIsRefused", {"--numa-binding=node", "true"}, "prefix the command with numactl"},
        BadFlags{
            "PrintCompletionIsRefused", {"--print-completion", "bash", "true"}, "--print-completion='bash'"},
        BadFlags{
            "EventLogHandlerPlugin", {"--event-log-handler", "scuba", "true"}, "--event-log-handler='scuba'"},
        BadFlags{"StartMethodBad", {"--start-method", "thread", "true"}, "--start-method='thread'"},
        BadFlags{"ModuleAndNoPython", {"-m", "--no-python", "pkg"}, "--module and --no-python"},
        BadFlags{"Xpu", {"--nproc-per-node", "xpu", "true"}, "no XPU support"},
        BadFlags{"RedirectsBad", {"-r", "4", "true"}, "--redirects='4'"},
        BadFlags{"TeeBad", {"--tee", "0:x", "true"}, "--tee='0:x'"},
        BadFlags{
            "LocalRanksFilterBad", {"--local-ranks-filter", "0,a", "true"}, "--local-ranks-filter='0,a'"},
        BadFlags{
            "SignalUnknown", {"--signals-to-handle", "SIGTERM,SIGKILL", "true"}, "'SIGKILL' is not a signal"},
        BadFlags{"RoleWithSpace", {"--role", "a b", "true"}, "--role='a b'"},
        BadFlags{"EndpointBadPort",
                 {"--rdzv-backend", "c10d", "--rdzv-endpoint", "h:99999", "true"},
                 "--rdzv-endpoint='h:99999'"},
        BadFlags{"NodeRankOutOfRange",
                 {"--nnodes", "2", "--node-rank", "2", "true"},
                 "--node-rank=2 is out of range for --nnodes=2"},
        BadFlags{"NodeRankNegative", {"--node_rank=-1", "true"}, "--node-rank=-1"},
        BadFlags{"PortTooBig", {"--master-port", "70000", "true"}, "--master-port=70000"},
        BadFlags{"PortText", {"--master-port", "http", "true"}, "--master-port='http'"},
        BadFlags{"RestartsNegative", {"--max-restarts=-2", "true"}, "--max-restarts=-2"},
        BadFlags{"StandaloneTwoNodes", {"--standalone", "--nnodes", "2", "true"}, "--standalone"},
        BadFlags{
            "StandaloneWithPort", {"--standalone", "--master-port", "1234", "true"}, "--master-port=1234"},
        BadFlags{"UnknownFlag", {"--bogus", "1", "true"}, "unknown option '--bogus'"},
        BadFlags{"MissingValue", {"--nnodes"}, "--nnodes"},
        BadFlags{"NnodesPlusSign", {"--nnodes", "+2", "true"}, "--nnodes='+2' is not valid"},
        BadFlags{"NodeRankLeadingSpace", {"--nnodes", "2", "--node-rank", " 1", "true"}, "--node-rank=' 1'"},
        BadFlags{"PortOverflow",
                 {"--master-port", "99999999999999999999", "true"},
                 "--master-port=99999999999999999999 is not valid"},
        BadFlags{"RestartsTooLarge", {"--max-restarts", "2147483648", "true"}, "--max-restarts=2147483648"},
        BadFlags{"NprocPlusSign", {"--nproc-per-node", "+2", "true"}, "--nproc-per-node='+2'"},
        BadFlags{"NprocLeadingSpace", {"--nproc-per-node", " 2", "true"}, "--nproc-per-node=' 2'"},
        BadFlags{"NoCommand", {"--nproc-per-node", "2"}, "no worker command"},
        BadFlags{"OnlyDashDash", {"--"}, "no worker command"}),
    [](const ::testing::TestParamInfo<BadFlags>& info) { return info.param.name; });

}  // namespace
}  // namespace lockstep::launch
