#include "lockstep/launch/worker_exit.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

namespace lockstep::launch {
namespace {

WorkerExit run_and_wait(void (*body)()) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    body();
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
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
