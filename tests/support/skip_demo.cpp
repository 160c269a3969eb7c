// A GoogleTest binary with one passing and one skipped test, run by check_skips_test.sh to prove that
// lockstep's gtest main (gtest_main.cpp) exits 77 and names the skipped test with its reason.
#include <gtest/gtest.h>

TEST(SkipDemo, Passes) {
  EXPECT_EQ(1 + 1, 2);
}

TEST(SkipDemo, Skips) {
  GTEST_SKIP() << "the demo's reason";
}
