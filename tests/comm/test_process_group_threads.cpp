// Process groups with N ranks as threads over an in-memory c10d::HashStore: collectives, rendezvous
// checks (token, duplicate rank, missing rank) and collective timeouts.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <atomic>
#include <chrono>

#include "../support/wait_until.h"
#include "lockstep/comm/process_group.h"
#include "thread_group.h"

namespace lockstep::comm {
namespace {

using lockstep::testing::expect_all_ok;
using lockstep::testing::run_ranks;
using namespace std::chrono_literals;

ProcessGroupOptions thread_options(int rank, int world, const c10::intrusive_ptr<c10d::Store>& store) {
  return lockstep::testing::thread_group_options(rank, world, store, "test-run");
}

class ProcessGroupWorld : public ::testing::TestWithParam<int> {};

TEST_P(ProcessGroupWorld, AllReduceSumMatchesClosedFormForSizesIncludingZeroAndOdd) {
  const int world = GetParam();
  auto store = c10::make_intrusive<c10d::HashStore>();
  expect_all_ok(run_ranks(world, [&](int rank) {
    auto pg = init_process_group(thread_options(rank, world, store));
    ASSERT_EQ(pg.rank(), rank);
    ASSERT_EQ(pg.size(), world);
    for (int64_t n : {0, 1, 7, 1001, 65537}) {
      // rank r contributes r + i at position i: the sum is world*i + world*(world-1)/2.
      auto t = at::arange(n, at::kFloat) + static_cast<float>(rank);
      pg.all_reduce(t, ReduceOp::kSum).wait();
      auto expected = at::arange(n, at::kFloat) * world + static_cast<float>(world * (world - 1) / 2);
      ASSERT_TRUE(at::equal(t, expected)) << "n=" << n << " rank=" << rank;
    }
    pg.shutdown();
  }));
}

TEST_P(ProcessGroupWorld, AllReduceMinMaxAvgAndIntegers) {
  const int world = GetParam();
  auto store = c10::make_intrusive<c10d::HashStore>();
  expect_all_ok(run_ranks(world, [&](int rank) {
    auto pg = init_process_group(thread_options(rank, world, store));
    auto mn = at::full({5}, static_cast<double>(rank + 3), at::kDouble);
    pg.all_reduce(mn, ReduceOp::kMin).wait();
    ASSERT_TRUE(at::equal(mn, at::full({5}, 3.0, at::kDouble)));
    auto mx = at::full({3}, static_cast<int64_t>(rank * 10), at::kLong);
    pg.all_reduce(mx, ReduceOp::kMax).wait();
    ASSERT_TRUE(at::equal(mx, at::full({3}, static_cast<int64_t>((world - 1) * 10), at::kLong)));
    auto avg = at::full({4}, static_cast<float>(rank), at::kFloat);
    pg.all_reduce(avg, ReduceOp::kAvg).wait();
    ASSERT_TRUE(at::allclose(avg, at::full({4}, (world - 1) / 2.0f, at::kFloat)));
    auto ints = at::full({9}, rank + 1, at::kInt);
    pg.all_reduce(ints, ReduceOp::kSum).wait();
    ASSERT_TRUE(at::equal(ints, at::full({9}, world * (world + 1) / 2, at::kInt)));
    pg.shutdown();
  }));
}

TEST_P(ProcessGroupWorld, BroadcastFromEveryRootAndAllGather) {
  const int world = GetParam();
  auto store = c10::make_intrusive<c10d::HashStore>();
  expect_all_ok(run_ranks(world, [&](int rank) {
    auto pg = init_process_group(thread_options(rank, world, store));
    for (int root = 0; root < world; ++root) {
      auto t = at::full({13}, static_cast<float>(rank == root ? 100 + root : -1), at::kFloat);
      pg.broadcast(t, root).wait();
      ASSERT_TRUE(at::equal(t, at::full({13}, static_cast<float>(100 + root), at::kFloat)))
          << "root " << root;
    }
    std::vector<at::Tensor> outputs;
    for (int r = 0; r < world; ++r) outputs.push_back(at::empty({2}, at::kLong));
    auto in = at::full({2}, static_cast<int64_t>(rank * rank), at::kLong);
    pg.all_gather(outputs, in).wait();
    for (int r = 0; r < world; ++r) {
      ASSERT_TRUE(at::equal(outputs[r], at::full({2}, static_cast<int64_t>(r * r), at::kLong)))
          << "slot " << r;
    }
    // Empty inputs: Gloo's own all-gather would die with SIGFPE; ours synchronises and returns.
    std::vector<at::Tensor> empty_outputs;
    for (int r = 0; r < world; ++r) empty_outputs.push_back(at::empty({0}, at::kFloat));
    auto empty_in = at::empty({0}, at::kFloat);
    pg.all_gather(empty_outputs, empty_in).wait();
    pg.barrier();
    pg.shutdown();
  }));
}

// The flat collectives of sharded training (reduce-scatter, all-gather into one tensor) on Gloo (1.13: an
// all-reduce underneath) and shm, against the closed form: rank r contributes r + 1 + i at position i.
TEST_P(ProcessGroupWorld, FlatReduceScatterAndAllGatherOnGlooAndShm) {
  const int world = GetParam();
  for (Backend backend : {Backend::kGloo, Backend::kShm}) {
    SCOPED_TRACE(to_string(backend));
    auto store = c10::make_intrusive<c10d::HashStore>();
    expect_all_ok(run_ranks(world, [&](int rank) {
      auto pg = init_process_group(thread_options(rank, world, store).backend(backend));
      for (int64_t n : {0, 1, 5, 1000}) {
        at::Tensor in = at::arange(n * world, at::kFloat) + static_cast<float>(rank + 1);
        at::Tensor out = at::full({n}, -7.0f);
        pg.reduce_scatter(out, in, ReduceOp::kSum).wait();
        // sum over ranks of (r + 1 + i) = world * i + world * (world + 1) / 2, for i in this rank's chunk
        const at::Tensor i = at::arange(rank * n, (rank + 1) * n, at::kFloat);
        ASSERT_TRUE(at::equal(out, i * world + static_cast<float>(world * (world + 1) / 2))) << "n=" << n;
        at::Tensor avg = at::empty({n}, at::kFloat);
        pg.reduce_scatter(avg, in, ReduceOp::kAvg).wait();
        ASSERT_TRUE(at::allclose(avg, i + (world + 1) / 2.0f)) << "n=" << n;
        at::Tensor ints_in = at::full({n * world}, rank + 2, at::kLong);
        at::Tensor ints = at::empty({n}, at::kLong);
        pg.reduce_scatter(ints, ints_in, ReduceOp::kMax).wait();
        ASSERT_TRUE(at::equal(ints, at::full({n}, world + 1, at::kLong)));
        at::Tensor mine = at::full({n}, static_cast<double>(rank * rank), at::kDouble);
        at::Tensor all = at::full({n * world}, -1.0, at::kDouble);
        pg.all_gather_into(all, mine).wait();
        for (int r = 0; r < world; ++r)
          ASSERT_TRUE(
              at::equal(all.narrow(0, r * n, n), at::full({n}, static_cast<double>(r * r), at::kDouble)));
      }
      try {
        at::Tensor wrong = at::empty({3}, at::kFloat);
        at::Tensor in = at::empty({3 * world + 1}, at::kFloat);
        pg.reduce_scatter(wrong, in);
        ADD_FAILURE() << "a mismatched reduce_scatter was accepted";
      } catch (const c10::Error& e) {
        EXPECT_NE(std::string(e.what_without_backtrace()).find("input must hold world size"),
                  std::string::npos);
      }
      pg.shutdown();
    }));
  }
}

// Several tensors of different shapes in one all-reduce (a flat copy underneath): each gets its own sum or
// average, on Gloo (whose own list form would reduce them into each other) and shm (which takes one tensor).
TEST_P(ProcessGroupWorld, AllReduceOfSeveralTensorsReducesEachOnGlooAndShm) {
  const int world = GetParam();
  for (Backend backend : {Backend::kGloo, Backend::kShm}) {
    SCOPED_TRACE(to_string(backend));
    auto store = c10::make_intrusive<c10d::HashStore>();
    expect_all_ok(run_ranks(world, [&](int rank) {
      auto pg = init_process_group(thread_options(rank, world, store).backend(backend));
      std::vector<at::Tensor> tensors{at::full({2, 3}, rank + 1.0, at::kDouble),
                                      at::full({5}, 10.0 * rank, at::kDouble),
                                      at::full({1}, 1.0, at::kDouble)};
      pg.all_reduce(tensors, ReduceOp::kSum).wait();
      EXPECT_TRUE(at::equal(tensors[0], at::full({2, 3}, world * (world + 1) / 2.0, at::kDouble)));
      EXPECT_TRUE(at::equal(tensors[1], at::full({5}, 10.0 * world * (world - 1) / 2, at::kDouble)));
      EXPECT_TRUE(at::equal(tensors[2], at::full({1}, 1.0 * world, at::kDouble)));
      std::vector<at::Tensor> averaged{at::full({3}, rank * 2.0, at::kDouble),
                                       at::full({2, 2}, 4.0, at::kDouble)};
      pg.all_reduce(averaged, ReduceOp::kAvg).wait();
      EXPECT_TRUE(at::allclose(averaged[0], at::full({3}, world - 1.0, at::kDouble)));
      EXPECT_TRUE(at::equal(averaged[1], at::full({2, 2}, 4.0, at::kDouble)));
      std::vector<at::Tensor> mixed{at::zeros({1}, at::kDouble), at::zeros({1}, at::kFloat)};
      EXPECT_THROW(pg.all_reduce(mixed), c10::Error);
      pg.shutdown();
    }));
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ProcessGroupWorld, ::testing::Values(1, 2, 3, 8),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "world" + std::to_string(info.param);
                         });

TEST(Rendezvous, ProcessOfAnotherJobIsRefusedNamingBothRunIds) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto outcomes = run_ranks(2, [&](int rank) {
    auto opts = thread_options(rank, 2, store).rendezvous_timeout(3s);
    if (rank == 1) opts.run_id("other-job");
    init_process_group(opts);
  });
  ASSERT_FALSE(outcomes[1].ok);
  EXPECT_NE(outcomes[1].error.find("run id 'test-run'"), std::string::npos) << outcomes[1].error;
  EXPECT_NE(outcomes[1].error.find("'other-job'"), std::string::npos) << outcomes[1].error;
  EXPECT_NE(outcomes[1].error.find("refused"), std::string::npos) << outcomes[1].error;
  // Rank 0 is left waiting for its real rank 1 and says so when the rendezvous times out.
  ASSERT_FALSE(outcomes[0].ok);
  EXPECT_NE(outcomes[0].error.find("rank(s) 1 never arrived"), std::string::npos) << outcomes[0].error;
}

TEST(Rendezvous, WorldSizeDisagreementIsRefused) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto outcomes = run_ranks(2, [&](int rank) {
    auto opts = thread_options(rank, rank == 0 ? 2 : 3, store).rendezvous_timeout(3s);
    init_process_group(opts);
  });
  ASSERT_FALSE(outcomes[1].ok);
  EXPECT_NE(outcomes[1].error.find("WORLD_SIZE=2"), std::string::npos) << outcomes[1].error;
  EXPECT_NE(outcomes[1].error.find("WORLD_SIZE=3"), std::string::npos) << outcomes[1].error;
}

TEST(Rendezvous, MissingRanksAreNamedWithinTheTimeout) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  const auto start = std::chrono::steady_clock::now();
  // World of 4, but only ranks 0 and 2 start.
  auto outcomes = run_ranks(
      2, [&](int i) { init_process_group(thread_options(i * 2, 4, store).rendezvous_timeout(1500ms)); });
  const auto elapsed = std::chrono::steady_clock::now() - start;
  for (const auto& o : outcomes) {
    ASSERT_FALSE(o.ok);
    EXPECT_NE(o.error.find("rank(s) 1, 3 never arrived"), std::string::npos) << o.error;
    EXPECT_NE(o.error.find("rendezvous"), std::string::npos) << o.error;
  }
  EXPECT_LT(elapsed, 30s);  // its 1.5 s timeout: only a hang passes 30 s
}

TEST(Rendezvous, DuplicateRankIsAnError) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto outcomes = run_ranks(
      3, [&](int i) { init_process_group(thread_options(i == 2 ? 1 : i, 3, store).rendezvous_timeout(2s)); });
  int duplicate_errors = 0;
  for (const auto& o : outcomes) {
    if (!o.ok && o.error.find("rank 1 was already claimed") != std::string::npos) ++duplicate_errors;
  }
  EXPECT_EQ(duplicate_errors, 1);
}

TEST(Rendezvous, BadOptionsNameTheField) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  try {
    init_process_group(ProcessGroupOptions(4, 4).store(store));
    FAIL() << "rank 4 of 4 was accepted";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("rank must be in [0, 3]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("got 4"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ProcessGroupOptions(0, 1).gloo_threads(0).validate(), std::invalid_argument);
  EXPECT_THROW(ProcessGroupOptions(0, 2).master_port(70000).validate(), std::invalid_argument);
  EXPECT_THROW(parse_backend("nccl2"), std::invalid_argument);
  EXPECT_EQ(parse_backend("gloo"), Backend::kGloo);
}

// Without CUDA in LibTorch (Debian's 1.13), without nccl.h at build time, or without a GPU (PyPI's torch on
// a CPU machine): a CommError that says why and what to use.
TEST(Backends, NcclWithoutAGpuSaysWhatToUse) {
  if (at::getNumGPUs() > 0) GTEST_SKIP() << "this machine has a GPU: the GPU tests cover nccl";
  auto store = c10::make_intrusive<c10d::HashStore>();
  try {
    init_process_group(thread_options(0, 1, store).backend(Backend::kNccl));
    FAIL() << "nccl accepted without a GPU";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("backend 'gloo'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("CUDA"), std::string::npos) << e.what();
  }
}

TEST(Collectives, APeerThatNeverCallsMakesTheOtherFailWithinTheTimeout) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::chrono::steady_clock::duration elapsed{};
  std::atomic<bool> rank0_failed{false};
  auto outcomes = run_ranks(2, [&](int rank) {
    auto pg = init_process_group(thread_options(rank, 2, store).collective_timeout(1s));
    if (rank == 0) {
      auto t = at::ones({8});
      const auto start = std::chrono::steady_clock::now();
      try {
        pg.all_reduce(t).wait();
      } catch (...) {
        elapsed = std::chrono::steady_clock::now() - start;
        rank0_failed = true;
        throw;
      }
    } else {
      // Rank 1 is "stuck" outside the collective until rank 0 has failed: rank 0 can only have failed by
      // its own timeout (60 s bounds a hang, not a speed).
      lockstep::testing::wait_until([&] { return rank0_failed.load(); }, 60s);
    }
  });
  ASSERT_FALSE(outcomes[0].ok);
  EXPECT_NE(outcomes[0].error.find("rank 0: allreduce #1 (Float[8]) sum"), std::string::npos)
      << outcomes[0].error;
  EXPECT_NE(outcomes[0].error.find("LOCKSTEP_TIMEOUT"), std::string::npos) << outcomes[0].error;
  EXPECT_GE(elapsed, 900ms);  // it waited its 1 s timeout (a lower bound: no busy machine shortens it)
  EXPECT_TRUE(outcomes[1].ok) << outcomes[1].error;
}

}  // namespace
}  // namespace lockstep::comm
