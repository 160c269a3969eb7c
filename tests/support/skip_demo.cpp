// A GoogleTest binary on lockstep's gtest main, run by check_skips_test.sh to prove what that main
// (gtest_main.cpp) and each case's ctest entry (gtest_case.sh) report: a pass, a skip with its reason, and,
// when asked through the environment, a failure and a crash.
#include <cstdlib>

#include <csignal>

#include <gtest/gtest.h>

TEST(SkipDemo, Passes) {
  EXPECT_EQ(1 + 1, 2);
}

TEST(SkipDemo, Skips) {
  GTEST_SKIP() << "the demo's reason";
}

TEST(SkipDemo, FailsWhenAsked) {
  EXPECT_EQ(std::getenv("LOCKSTEP_DEMO_FAIL"), nullptr) << "asked to fail";
}

TEST(SkipDemo, CrashesWhenAsked) {
  if (std::getenv("LOCKSTEP_DEMO_CRASH") != nullptr) std::raise(SIGSEGV);
}

TEST(SkipDemo, PassesLast) {
  EXPECT_TRUE(true);
}
