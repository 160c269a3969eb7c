// The worker contract (lockstep/detail/worker_contract.h): the heartbeat line comm writes and the launcher
// reads, through the same two functions, and the numbers both sides share.
#include <gtest/gtest.h>

#include <string>

#include "lockstep/detail/elastic_contract.h"
#include "lockstep/detail/worker_contract.h"
#include "lockstep/launch/worker_env.h"

namespace lockstep::detail {
namespace {

TEST(WorkerContract, AHeartbeatSurvivesTheLine) {
  Heartbeat beat;
  beat.issued = 18446744073709551615ull;
  beat.finished = 41;
  beat.waiting = true;
  beat.last_op = "allreduce #42 (Float[1024]) sum of DDP's bucket 0 (4.00 KiB)";
  const std::string line = format_heartbeat(beat);
  ASSERT_EQ(line.back(), '\n');
  const auto back = parse_heartbeat(line.substr(0, line.size() - 1));
  ASSERT_TRUE(back.has_value());
  EXPECT_FALSE(back->bye);
  EXPECT_EQ(back->issued, beat.issued);
  EXPECT_EQ(back->finished, 41u);
  EXPECT_TRUE(back->waiting);
  EXPECT_EQ(back->last_op, beat.last_op);
}

TEST(WorkerContract, NoCollectiveYetAndByeAreLinesToo) {
  const std::string none = format_heartbeat(Heartbeat{});
  EXPECT_EQ(none, "0 0 0 -\n");
  const auto back = parse_heartbeat("0 0 0 -");
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->last_op, "");
  Heartbeat bye;
  bye.bye = true;
  EXPECT_EQ(format_heartbeat(bye), "bye\n");
  ASSERT_TRUE(parse_heartbeat("bye").has_value());
  EXPECT_TRUE(parse_heartbeat("bye")->bye);
}

TEST(WorkerContract, ALineIsOneAtomicWriteWithOneNewline) {
  Heartbeat beat;
  beat.last_op = std::string(1000, 'x') + "\nsecond line";
  const std::string line = format_heartbeat(beat);
  EXPECT_LE(line.size(), kMaxHeartbeatLine);
  EXPECT_EQ(line.find('\n'), line.size() - 1);
  Heartbeat newline;
  newline.last_op = "a\nb";
  EXPECT_EQ(format_heartbeat(newline), "0 0 0 a b\n");
}

TEST(WorkerContract, WhatIsNotAHeartbeatIsSkipped) {
  for (const char* text : {"", "hello", "1 2", "1 2 x op", "a 2 0 op", "1 b 1 op", "1 2 0x"}) {
    EXPECT_FALSE(parse_heartbeat(text).has_value()) << "'" << text << "'";
  }
}

// What strtoull would take but a worker never writes (fuzz/regressions/heartbeat has the fuzzer's inputs):
// a sign, a blank before the digits, a hex prefix, a leading zero, a count past 64 bits.
TEST(WorkerContract, ACountIsDigitsThatFit64Bits) {
  for (const char* text : {"-12 0 0 -", "+3 1 1 op", "1 -2 0 -", "\t1 2 0 -", "0x1f 2 0 -", "00 1 0 -",
                           "18446744073709551616 0 0 -", "1 99999999999999999999 1 op", " 1 2 0 -"}) {
    EXPECT_FALSE(parse_heartbeat(text).has_value()) << "'" << text << "'";
  }
}

TEST(WorkerContract, TheLargestCountIsRead) {
  const auto beat = parse_heartbeat("18446744073709551615 7 1 op");
  ASSERT_TRUE(beat.has_value());
  EXPECT_EQ(beat->issued, 18446744073709551615ull);
  EXPECT_EQ(beat->finished, 7u);
  EXPECT_FALSE(parse_heartbeat("18446744073709551615 07 1 op").has_value());  // not what a worker writes
}

TEST(WorkerContract, TheLaunchersWorkersFindThePipeWhereCommLooks) {
  launch::LaunchConfig config;
  const auto env = launch::worker_environment(config, config.static_world(), 0, {});
  bool found = false;
  for (const auto& entry : env) {
    if (entry == std::string(kHeartbeatFdVariable) + "=" + std::to_string(kHeartbeatFd)) found = true;
  }
  EXPECT_TRUE(found);
  EXPECT_EQ(kPreemptedExitStatus, 75);  // EX_TEMPFAIL, which Slurm scripts and schedulers test for
}

TEST(ElasticContract, AMembershipRecordSurvivesTheStore) {
  const MembershipRecord record{7, 1764230000123, "killed by signal 9 (SIGKILL)"};
  const auto back = parse_membership(format_membership(record));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->id, 7);
  EXPECT_EQ(back->seen_ms, 1764230000123);
  EXPECT_EQ(back->reason, record.reason);
  EXPECT_FALSE(back->joined);
  const auto joined = parse_membership(format_membership({4, 5, "asked to join", true}));
  ASSERT_TRUE(joined.has_value());
  EXPECT_TRUE(joined->joined);
  EXPECT_EQ(joined->id, 4);
  EXPECT_EQ(joined->reason, "asked to join");
  EXPECT_FALSE(parse_membership("came 3 0 x").has_value());
  EXPECT_FALSE(parse_membership("left -1 0 x").has_value());
  EXPECT_FALSE(parse_membership("left x").has_value());
  EXPECT_EQ(elastic_prefix("job") + change_key(2), "lockstep/job/elastic/change/2");
}

}  // namespace
}  // namespace lockstep::detail
