#include "lockstep/launch/worker_exit.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>

#include "launch_test_util.h"

namespace lockstep::launch {
namespace {

// Runs `body` in a child and decodes how it ended; a child still running after 10 s is killed (and the
// test fails) instead of hanging the test.
WorkerExit run_and_wait(void (*body)()) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    body();
    ::_exit(0);
  }
  EXPECT_GT(pid, 0) << "fork failed";
  if (pid < 0) return WorkerExit::exited(-1);
  int status = 0;
  const bool ended =
      testing::wait_until([&] { return ::waitpid(pid, &status, WNOHANG) == pid; }, std::chrono::seconds(10));
  if (!ended) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    ADD_FAILURE() << "the child did not end within 10 s";
  }
  return WorkerExit::from_wait_status(status);
}

TEST(WorkerExit, DescribesAnExitStatus) {
  const WorkerExit e = WorkerExit::exited(3);
  EXPECT_EQ(e.describe(), "exited with status 3");
  EXPECT_EQ(e.shell_status(), 3);
  EXPECT_FALSE(e.success());
  EXPECT_FALSE(e.is_signal());
  EXPECT_TRUE(WorkerExit::exited(0).success());
}

TEST(WorkerExit, DescribesASignalLikeAShell) {
  const WorkerExit e = WorkerExit::signaled(SIGKILL);
  EXPECT_EQ(e.describe(), "killed by signal 9 (SIGKILL)");
  EXPECT_EQ(e.shell_status(), 137);
  EXPECT_FALSE(e.success());
  EXPECT_EQ(WorkerExit::signaled(SIGSEGV).describe(), "killed by signal 11 (SIGSEGV)");
}

TEST(WorkerExit, DecodesWaitStatuses) {
  const WorkerExit exited = run_and_wait([] { ::_exit(42); });
  EXPECT_FALSE(exited.is_signal());
  EXPECT_EQ(exited.code(), 42);
  const WorkerExit killed = run_and_wait([] {
    std::signal(SIGTERM, SIG_DFL);
    ::raise(SIGTERM);
  });
  EXPECT_TRUE(killed.is_signal());
  EXPECT_EQ(killed.code(), SIGTERM);
  EXPECT_EQ(killed.shell_status(), 143);
}

TEST(SignalName, NamesCommonSignalsAndNumbersOthers) {
  EXPECT_EQ(signal_name(SIGINT), "SIGINT");
  EXPECT_EQ(signal_name(SIGTERM), "SIGTERM");
  EXPECT_EQ(signal_name(SIGABRT), "SIGABRT");
  EXPECT_EQ(signal_name(SIGRTMIN + 1), "SIG" + std::to_string(SIGRTMIN + 1));
}

}  // namespace
}  // namespace lockstep::launch
