// ElasticWorld with ranks as threads over one in-memory store; the test plays the launcher, announcing each
// lost rank the way `lockstep run --recovery in-place` does (detail/elastic_contract.h).

#include <gtest/gtest.h>

#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <atomic>
#include <future>
#include <string>
#include <vector>

#include "lockstep/comm/elastic_world.h"
#include "lockstep/detail/elastic_contract.h"
#include "thread_group.h"

namespace lockstep::comm {
namespace {

using lockstep::testing::run_ranks;
using lockstep::testing::thread_group_options;

constexpr const char* kRun = "elastic";

// What the launcher does when it loses rank `id`: the counter, then the record (elastic_contract.h).
void announce_lost(c10d::Store& store, int id, const std::string& reason) {
  const std::string prefix = lockstep::detail::elastic_prefix(kRun);
  const int64_t n = store.add(prefix + lockstep::detail::kGenerationKey, 1);
  const std::string record =
      lockstep::detail::format_membership({id, lockstep::detail::unix_ms_now(), reason});
  store.set(prefix + lockstep::detail::change_key(n), std::vector<uint8_t>(record.begin(), record.end()));
}

ProcessGroupOptions options(int rank, int world, const c10::intrusive_ptr<c10d::Store>& store) {
  return thread_group_options(rank, world, store, kRun);
}

double sum_of_ones(ProcessGroup& group) {
  auto t = torch::ones({3});
  group.all_reduce(t).wait();
  return t[0].item<double>();
}

class ElasticWorldSize : public ::testing::TestWithParam<int> {};

TEST_P(ElasticWorldSize, GenerationZeroReducesAndEveryVoteCommits) {
  const int world = GetParam();
  auto store = c10::make_intrusive<c10d::HashStore>();
  const auto outcomes = run_ranks(world, [&](int rank) {
    ElasticWorld elastic(options(rank, world, store));
    EXPECT_EQ(elastic.generation(), 0);
    EXPECT_EQ(elastic.id(), rank);
    EXPECT_EQ(elastic.group().rank(), rank);
    EXPECT_EQ(sum_of_ones(elastic.group()), world);
    // A wait much longer than one 20 ms slice (rank 0 joins late) still completes with its result.
    if (rank == 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    auto big = torch::full({1 << 20}, static_cast<double>(rank), torch::kDouble);
    elastic.group().broadcast(big, 0).wait();
    EXPECT_EQ(big.sum().item<double>(), 0.0);
    for (int step = 0; step < 5; ++step) EXPECT_TRUE(elastic.should_commit()) << "step " << step;
    elastic.shutdown();
  });
  lockstep::testing::expect_all_ok(outcomes);
}

class ElasticLoss : public ::testing::TestWithParam<int> {};  // worlds with someone to lose

// A rank that stops answering (its group alive, as under SIGSTOP): the others' all-reduce gives up once the
// loss is announced, and they reform without it.

TEST_P(ElasticLoss, ASilentRankIsLeftBehindAndTheOthersReform) {
  const int world = GetParam();
  const int lost = world / 2;
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::promise<void> survivors_done;
  auto done = survivors_done.get_future().share();
  std::atomic<int> finished{0};
  const auto outcomes = run_ranks(world, [&](int rank) {
    ElasticWorld elastic(options(rank, world, store));
    if (rank == lost) {
      announce_lost(*store, lost, "stopped (test)");
      done.wait();  // keeps its group open, answering nothing
      return;
    }
    try {
      sum_of_ones(elastic.group());
      ADD_FAILURE() << "rank " << rank << ": an all-reduce without rank " << lost << " completed";
    } catch (const MembershipChanged& e) {
      EXPECT_NE(std::string(e.what()).find("lost rank " + std::to_string(lost)), std::string::npos)
          << e.what();
    }
    const MembershipChange change = elastic.reform();
    EXPECT_EQ(change.left, std::vector<int>{lost});
    EXPECT_EQ(change.old_size, world);
    EXPECT_EQ(change.new_size, world - 1);
    EXPECT_EQ(change.new_rank, rank < lost ? rank : rank - 1);
    EXPECT_NE(change.describe().find("stopped (test)"), std::string::npos) << change.describe();
    EXPECT_EQ(elastic.generation(), 1);
    EXPECT_EQ(sum_of_ones(elastic.group()), world - 1);
    EXPECT_TRUE(elastic.should_commit());
    elastic.shutdown();
    if (++finished == world - 1) survivors_done.set_value();
  });
  lockstep::testing::expect_all_ok(outcomes);
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ElasticWorldSize, ::testing::Values(1, 2, 3, 8),
                         [](const auto& info) { return "world" + std::to_string(info.param); });
INSTANTIATE_TEST_SUITE_P(WorldSizes, ElasticLoss, ::testing::Values(2, 3, 8),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

// A rank whose process ends (its sockets close): a peer's collective fails at once rather than waiting, and
// reform() waits for the announcement that follows.
TEST(ElasticWorld, ARankThatEndsFailsTheCollectiveAndReformWaitsForTheAnnouncement) {
  constexpr int kWorld = 3;
  auto store = c10::make_intrusive<c10d::HashStore>();
  const auto outcomes = run_ranks(kWorld, [&](int rank) {
    auto elastic = std::make_unique<ElasticWorld>(options(rank, kWorld, store));
    if (rank == 2) {
      elastic.reset();  // its group is destroyed without a word, as by kill -9
      announce_lost(*store, 2, "killed (test)");
      return;
    }
    EXPECT_THROW(sum_of_ones(elastic->group()), CommError);
    const MembershipChange change = elastic->reform();
    EXPECT_EQ(change.new_size, 2);
    EXPECT_EQ(sum_of_ones(elastic->group()), 2);
    elastic->shutdown();
  });
  lockstep::testing::expect_all_ok(outcomes);
}

// Every survivor reads the same decision: votes missing from a rank that was lost abort the step everywhere,
// and a lost rank's vote that completed the count (it died before deciding) cannot commit it.
TEST(ElasticWorld, TheVoteAbortsEverywhereWhenARankIsLostBeforeDeciding) {
  constexpr int kWorld = 3;
  for (const bool lost_rank_voted : {false, true}) {
    SCOPED_TRACE(lost_rank_voted ? "the lost rank voted" : "the lost rank did not vote");
    auto store = c10::make_intrusive<c10d::HashStore>();
    const std::string count = lockstep::detail::elastic_prefix(kRun) + "g0/vote/1";
    const auto outcomes = run_ranks(kWorld, [&](int rank) {
      ElasticWorld elastic(options(rank, kWorld, store));
      if (rank == 0) {
        // Rank 0 is lost once both others voted; its own vote, if any, comes last and is only the count (it
        // died before its compare-and-set).
        while (store->add(count, 0) < kWorld - 1) std::this_thread::yield();
        if (lost_rank_voted) store->add(count, 1);
        announce_lost(*store, 0, "killed (test)");
        return;
      }
      EXPECT_FALSE(elastic.should_commit());
      const MembershipChange change = elastic.reform();
      EXPECT_EQ(change.left, std::vector<int>{0});
      EXPECT_TRUE(elastic.should_commit());
      elastic.shutdown();
    });
    lockstep::testing::expect_all_ok(outcomes);
  }
}

// Two losses announced before the survivors reform: they go straight to the newest generation. Then a third
// survivor is lost while the others form that generation: they move on to the next one.
TEST(ElasticWorld, LossesInARowAndDuringTheReformation) {
  constexpr int kWorld = 8;
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::atomic<int> waiting{0};
  const auto outcomes = run_ranks(kWorld, [&](int rank) {
    ElasticWorld elastic(options(rank, kWorld, store));
    if (rank == 3 || rank == 5) {
      if (rank == 3) {
        announce_lost(*store, 3, "first (test)");
        announce_lost(*store, 5, "second (test)");
      }
      return;  // the destructor closes its group
    }
    EXPECT_THROW(sum_of_ones(elastic.group()), CommError);
    if (rank == 6) {
      // Lost before it checks in to generation 2: the others are waiting there for it.
      while (waiting.load() < kWorld - 3) std::this_thread::yield();
      announce_lost(*store, 6, "third (test)");
      return;
    }
    ++waiting;
    const MembershipChange change = elastic.reform();
    EXPECT_EQ(change.generation, 3);
    EXPECT_EQ(change.left, (std::vector<int>{3, 5, 6}));
    EXPECT_EQ(elastic.members(), (std::vector<int>{0, 1, 2, 4, 7}));
    EXPECT_EQ(sum_of_ones(elastic.group()), 5);
    EXPECT_TRUE(elastic.should_commit());
    elastic.shutdown();
  });
  lockstep::testing::expect_all_ok(outcomes);
}

// A rank joins: the members go on until a vote decides after its announcement; they apply that step, then
// form the generation with the joiner, which takes the last rank. The vote, not a clock, picks the step:
// the members wait at step 1 until the joiner has announced itself.
class ElasticJoin : public ::testing::TestWithParam<int> {};

TEST_P(ElasticJoin, AJoinerIsAdmittedAfterTheNextCommittedVote) {
  const int world = GetParam();
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::promise<void> formed;
  auto generation_zero = formed.get_future().share();
  std::atomic<int> members_ready{0};
  const auto outcomes = run_ranks(world + 1, [&](int rank) {
    if (rank == world) {  // the joiner, id `world`, once the members decided step 0
      generation_zero.wait();
      ElasticWorld joiner(options(0, world, store), /*join_as=*/world);
      EXPECT_TRUE(joiner.joined());
      EXPECT_EQ(joiner.id(), world);
      EXPECT_EQ(joiner.generation(), 1);
      EXPECT_EQ(joiner.group().rank(), world);
      EXPECT_EQ(joiner.group().size(), world + 1);
      EXPECT_EQ(sum_of_ones(joiner.group()), world + 1);
      EXPECT_TRUE(joiner.should_commit());
      EXPECT_FALSE(joiner.admitting());
      joiner.shutdown();
      return;
    }
    ElasticWorld elastic(options(rank, world, store));
    EXPECT_FALSE(elastic.joined());
    EXPECT_EQ(sum_of_ones(elastic.group()), world);  // step 0: nothing announced yet
    EXPECT_TRUE(elastic.should_commit());
    EXPECT_FALSE(elastic.admitting());
    if (++members_ready == world) formed.set_value();
    while (elastic.announced_generation() < 1) std::this_thread::yield();
    EXPECT_EQ(sum_of_ones(elastic.group()), world);  // step 1: a join interrupts nothing
    EXPECT_TRUE(elastic.should_commit());
    ASSERT_TRUE(elastic.admitting());
    const MembershipChange change = elastic.reform();
    EXPECT_TRUE(change.left.empty());
    EXPECT_EQ(change.joined, std::vector<int>{world});
    EXPECT_EQ(change.new_size, world + 1);
    EXPECT_EQ(change.new_rank, rank);
    EXPECT_NE(change.describe().find("joined"), std::string::npos) << change.describe();
    EXPECT_EQ(sum_of_ones(elastic.group()), world + 1);
    EXPECT_TRUE(elastic.should_commit());
    elastic.shutdown();
  });
  lockstep::testing::expect_all_ok(outcomes);
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ElasticJoin, ::testing::Values(1, 2, 3, 8),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

// A join and then a loss before the members vote: the loss interrupts their step, and they reform straight
// to the newest generation, which has the joiner and not the lost rank.
TEST(ElasticWorld, AJoinAndALossTogetherMakeOneReformation) {
  constexpr int kWorld = 3;
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::promise<void> formed;
  auto generation_zero = formed.get_future().share();
  std::atomic<int> members_ready{0};
  std::promise<void> survivors_done;
  auto done = survivors_done.get_future().share();
  std::atomic<int> finished{0};
  const auto outcomes = run_ranks(kWorld + 1, [&](int rank) {
    if (rank == kWorld) {
      generation_zero.wait();
      ElasticWorld joiner(options(0, kWorld, store), /*join_as=*/kWorld);
      EXPECT_EQ(joiner.generation(), 2);
      EXPECT_EQ(joiner.members(), (std::vector<int>{0, 1, 3}));
      EXPECT_EQ(sum_of_ones(joiner.group()), 3);
      joiner.shutdown();
      if (++finished == kWorld) survivors_done.set_value();
      return;
    }
    ElasticWorld elastic(options(rank, kWorld, store));
    if (++members_ready == kWorld) formed.set_value();
    if (rank == 2) {  // silent; lost once the join is announced
      while (elastic.announced_generation() < 1) std::this_thread::yield();
      announce_lost(*store, 2, "stopped (test)");
      done.wait();
      return;
    }
    EXPECT_THROW(sum_of_ones(elastic.group()), MembershipChanged);
    const MembershipChange change = elastic.reform();
    EXPECT_EQ(change.left, std::vector<int>{2});
    EXPECT_EQ(change.joined, std::vector<int>{3});
    EXPECT_EQ(sum_of_ones(elastic.group()), 3);
    elastic.shutdown();
    if (++finished == kWorld) survivors_done.set_value();
  });
  lockstep::testing::expect_all_ok(outcomes);
}

// A job that cannot send its state refuses joiners: they are told why before they announce themselves.
TEST(ElasticWorld, AJobThatRefusesJoinsSaysWhy) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  ElasticWorld elastic(options(0, 1, store));
  elastic.refuse_joins("no state to send (test)");
  try {
    ElasticWorld joiner(options(0, 1, store), /*join_as=*/1);
    FAIL() << "a joiner was admitted into a job that refuses them";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("no state to send (test)"), std::string::npos) << e.what();
  }
  EXPECT_EQ(elastic.announced_generation(), 0);
  EXPECT_TRUE(elastic.should_commit());
  EXPECT_FALSE(elastic.admitting());
  elastic.shutdown();
}

// A joiner that asks after the job finished training is told so rather than waiting out its timeout.
TEST(ElasticWorld, AJoinerAfterTheEndIsTold) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  {
    ElasticWorld elastic(options(0, 1, store));
    elastic.shutdown();
  }
  try {
    ElasticWorld joiner(options(0, 1, store), /*join_as=*/1);
    FAIL() << "a joiner was admitted after the end";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("finished training before admitting it"), std::string::npos)
        << e.what();
  }
}

TEST(ElasticWorld, AFailureThatLostNoRankIsNotAMembershipChange) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  ElasticWorld elastic(options(0, 1, store).collective_timeout(std::chrono::milliseconds(300)));
  try {
    elastic.reform();
    FAIL() << "reform() without an announced loss returned";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("announced no lost rank"), std::string::npos) << e.what();
  }
}

TEST(ElasticWorld, ARankDeclaredLostCannotRejoin) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  const auto outcomes = run_ranks(2, [&](int rank) {
    ElasticWorld elastic(options(rank, 2, store));
    // Both ranks formed generation 0 before the announcement: announced earlier, rank 0's constructor
    // would start at generation 1 already without rank 1 and wait for a second change (seen under ASan).
    EXPECT_EQ(sum_of_ones(elastic.group()), 2.0);
    if (rank == 1) announce_lost(*store, 1, "silent for 5 s (test)");
    if (rank == 0) {
      elastic.reform();
      EXPECT_EQ(elastic.group().size(), 1);
      return;
    }
    try {
      elastic.reform();
      ADD_FAILURE() << "a rank declared lost formed a group";
    } catch (const CommError& e) {
      EXPECT_NE(std::string(e.what()).find("declared lost"), std::string::npos) << e.what();
    }
  });
  lockstep::testing::expect_all_ok(outcomes);
}

TEST(ElasticWorld, OnlyGlooIsAccepted) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  try {
    ElasticWorld elastic(options(0, 1, store).backend(Backend::kShm));
    FAIL() << "shm was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("shm"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lockstep::comm
