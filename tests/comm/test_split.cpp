// Subgroups (ProcessGroup::split) and the data × tensor parallel mesh (DeviceMesh), with ranks as threads
// over an in-memory store: who is in which group, collectives inside subgroups beside the world's, the
// backend each subgroup gets, and the errors.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <chrono>
#include <numeric>
#include <string>
#include <vector>

#include "lockstep/comm/device_mesh.h"
#include "lockstep/comm/process_group.h"
#include "thread_group.h"

namespace lockstep::comm {
namespace {

using lockstep::testing::expect_all_ok;
using lockstep::testing::run_ranks;
using namespace std::chrono_literals;

ProcessGroupOptions split_options(int rank, int world, const c10::intrusive_ptr<c10d::Store>& store) {
  return lockstep::testing::thread_group_options(rank, world, store, "split-test");
}

// The sum of `values` (world ranks) as a double, for the all-reduce checks.
double sum_of(const std::vector<int>& values) {
  return std::accumulate(values.begin(), values.end(), 0.0);
}

// The world ranks in [0, world) with `pick` true, in order.
template <typename Pick>
std::vector<int> ranks_where(int world, Pick pick) {
  std::vector<int> out;
  for (int r = 0; r < world; ++r) {
    if (pick(r)) out.push_back(r);
  }
  return out;
}

class SplitWorld : public ::testing::TestWithParam<int> {};

// Even and odd ranks: each subgroup reduces, broadcasts and gathers among its own members, interleaved with
// the world's collectives; a subgroup split again maps its ranks back to the world's.
TEST_P(SplitWorld, SubgroupsCollectAmongTheirMembersBesideTheWorldOnGlooAndShm) {
  const int world = GetParam();
  for (Backend backend : {Backend::kGloo, Backend::kShm}) {
    SCOPED_TRACE(to_string(backend));
    auto store = c10::make_intrusive<c10d::HashStore>();
    expect_all_ok(run_ranks(world, [&](int rank) {
      auto pg = init_process_group(split_options(rank, world, store).backend(backend));
      ProcessGroup parity = pg.split(rank % 2, "parity");
      const std::vector<int> members = ranks_where(world, [&](int r) { return r % 2 == rank % 2; });
      ASSERT_EQ(parity.size(), static_cast<int>(members.size()));
      ASSERT_EQ(parity.rank(), rank / 2);
      ASSERT_EQ(parity.world_rank(), rank);
      ASSERT_EQ(parity.world_ranks(), members);
      ASSERT_EQ(parity.name(), "parity");
      ASSERT_EQ(parity.backend(), backend);
      for (int round = 0; round < 3; ++round) {
        at::Tensor t = at::full({5}, static_cast<double>(rank), at::kDouble);
        parity.all_reduce(t).wait();
        ASSERT_TRUE(at::equal(t, at::full({5}, sum_of(members), at::kDouble))) << "round " << round;
        at::Tensor all = at::full({1}, 1.0);
        pg.all_reduce(all).wait();
        ASSERT_EQ(all.item<float>(), static_cast<float>(world));
      }
      at::Tensor b = at::full({3}, static_cast<float>(rank));
      parity.broadcast(b, parity.size() - 1).wait();
      ASSERT_TRUE(at::equal(b, at::full({3}, static_cast<float>(members.back()))));
      std::vector<std::string> names = parity.all_gather_strings("w" + std::to_string(rank));
      for (size_t i = 0; i < members.size(); ++i) ASSERT_EQ(names[i], "w" + std::to_string(members[i]));

      // The parity group's first half and second half: a subgroup of a subgroup.
      const int half = parity.rank() < (parity.size() + 1) / 2 ? 0 : 1;
      ProcessGroup quarter = parity.split(half, "half");
      std::vector<int> expected;
      for (int i = 0; i < parity.size(); ++i) {
        if ((i < (parity.size() + 1) / 2 ? 0 : 1) == half)
          expected.push_back(members[static_cast<size_t>(i)]);
      }
      ASSERT_EQ(quarter.world_ranks(), expected);
      ASSERT_EQ(quarter.world_rank(), rank);
      at::Tensor q = at::full({2}, static_cast<double>(rank), at::kDouble);
      quarter.all_reduce(q).wait();
      ASSERT_TRUE(at::equal(q, at::full({2}, sum_of(expected), at::kDouble)));
      quarter.shutdown();
      parity.shutdown();
      pg.shutdown();
    }));
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, SplitWorld, ::testing::Values(1, 2, 3, 8),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "world" + std::to_string(info.param);
                         });

// hier (2 "nodes" x 2 ranks): a subgroup inside a node is shm, one rank per node is Gloo, the whole world
// again is hier; each reduces among its members.
TEST(Split, HierSubgroupsGetTheBackendThatFitsTheirNodes) {
  const int world = 4;
  auto store = c10::make_intrusive<c10d::HashStore>();
  expect_all_ok(run_ranks(world, [&](int rank) {
    auto pg = init_process_group(split_options(rank, world, store)
                                     .num_nodes(2)
                                     .local_world_size(2)
                                     .interface("lo")
                                     .backend(Backend::kHier));
    ProcessGroup node = pg.split(rank / 2, "node");
    ProcessGroup across = pg.split(rank % 2, "across");
    ProcessGroup everyone = pg.split(0, "everyone");
    EXPECT_EQ(node.native()->getBackendName(), "shm");
    EXPECT_EQ(across.native()->getBackendName(), "gloo");
    EXPECT_EQ(everyone.native()->getBackendName(), "hier");
    for (ProcessGroup* group : {&node, &across, &everyone}) {
      at::Tensor t = at::full({7}, static_cast<double>(rank), at::kDouble);
      group->all_reduce(t).wait();
      ASSERT_TRUE(at::equal(t, at::full({7}, sum_of(group->world_ranks()), at::kDouble))) << group->name();
    }
    everyone.shutdown();
    across.shutdown();
    node.shutdown();
    pg.shutdown();
  }));
}

TEST(Split, ANegativeColorOrAMissingOrDifferentNameFailsOnEveryRankNamingIt) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto outcomes = run_ranks(3, [&](int rank) {
    auto pg = init_process_group(split_options(rank, 3, store));
    try {
      (void)pg.split(rank == 1 ? -4 : 0, "tp");
      ADD_FAILURE() << "a negative color was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("ranks 1 (-4) gave a negative one"), std::string::npos)
          << e.what();
    }
    try {
      (void)pg.split(0, rank == 2 ? "" : "tp");  // one rank without a name: every rank fails, none waits
      ADD_FAILURE() << "a subgroup without a name was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("rank 2 gave no name: give the subgroup a name"),
                std::string::npos)
          << e.what();
    }
    try {
      (void)pg.split(0, rank == 1 ? "dp" : "tp");
      ADD_FAILURE() << "subgroups named differently were accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("rank 0 named the subgroup 'tp' but rank 1 'dp'"),
                std::string::npos)
          << e.what();
    }
    pg.shutdown();
  });
  expect_all_ok(outcomes);
}

// A subgroup's collective that one member never joins fails on the other within the timeout, naming the
// subgroup and the missing rank by its world rank (3), not its rank in the subgroup (1): in Gloo's case
// from the progress records, in shm's from the backend itself.
TEST(Split, ATimeoutInASubgroupNamesTheWorldRankThatNeverCame) {
  for (Backend backend : {Backend::kGloo, Backend::kShm}) {
    SCOPED_TRACE(to_string(backend));
    const std::string missing =
        backend == Backend::kGloo ? "Not at collective #1: rank 3 (" : "waiting for rank(s) 3 (";
    auto store = c10::make_intrusive<c10d::HashStore>();
    expect_all_ok(run_ranks(4, [&](int rank) {
      auto pg = init_process_group(
          split_options(rank, 4, store).backend(backend).collective_timeout(3s).progress_interval(200ms));
      ProcessGroup odd = pg.split(rank % 2, "odd");
      if (rank == 1) {
        at::Tensor t = at::ones({4});
        try {
          odd.all_reduce(t).wait();
          ADD_FAILURE() << "the all-reduce without rank 3 finished";
        } catch (const CommError& e) {
          const std::string what = e.what();
          EXPECT_NE(what.find("odd allreduce #1"), std::string::npos) << what;
          EXPECT_NE(what.find(missing), std::string::npos) << what;
          EXPECT_EQ(what.find("rank 0"), std::string::npos) << what;
        }
      }
      odd.shutdown();
      pg.shutdown();
    }));
  }
}

class MeshWorld : public ::testing::TestWithParam<int> {};

// Every T dividing the world: tensor-parallel groups are runs of T consecutive ranks, data-parallel groups
// take every T-th rank; each reduces among exactly those ranks.
TEST_P(MeshWorld, TensorParallelGroupsAreConsecutiveRanksAndDataParallelGroupsStrideByT) {
  const int world = GetParam();
  for (int tp = 1; tp <= world; ++tp) {
    if (world % tp != 0) continue;
    SCOPED_TRACE("T=" + std::to_string(tp));
    auto store = c10::make_intrusive<c10d::HashStore>();
    expect_all_ok(run_ranks(world, [&](int rank) {
      auto pg = init_process_group(split_options(rank, world, store));
      DeviceMesh mesh(pg, tp);
      ASSERT_EQ(mesh.tensor_parallel(), tp);
      ASSERT_EQ(mesh.data_parallel(), world / tp);
      ASSERT_EQ(mesh.tp_rank(), rank % tp);
      ASSERT_EQ(mesh.dp_rank(), rank / tp);
      ASSERT_EQ(mesh.tp().world_ranks(), ranks_where(world, [&](int r) { return r / tp == rank / tp; }));
      ASSERT_EQ(mesh.dp().world_ranks(), ranks_where(world, [&](int r) { return r % tp == rank % tp; }));
      at::Tensor in_tp = at::full({3}, static_cast<double>(rank), at::kDouble);
      mesh.tp().all_reduce(in_tp).wait();
      ASSERT_TRUE(at::equal(in_tp, at::full({3}, sum_of(mesh.tp().world_ranks()), at::kDouble)));
      at::Tensor in_dp = at::full({3}, static_cast<double>(rank), at::kDouble);
      mesh.dp().all_reduce(in_dp).wait();
      ASSERT_TRUE(at::equal(in_dp, at::full({3}, sum_of(mesh.dp().world_ranks()), at::kDouble)));
      mesh.shutdown();
      pg.shutdown();
    }));
  }
}

// Every T × P dividing the world: rank = d·(P·T) + p·T + t; a pipeline is the ranks of one d and t in
// stage order, a data-parallel group those of one p and t; each reduces among exactly those ranks.
TEST_P(MeshWorld, PipelinesSitBetweenTensorAndDataParallelGroups) {
  const int world = GetParam();
  for (int tp = 1; tp <= world; ++tp) {
    for (int pp = 2; tp * pp <= world; ++pp) {
      if (world % (tp * pp) != 0) continue;
      SCOPED_TRACE("T=" + std::to_string(tp) + " P=" + std::to_string(pp));
      const int block = tp * pp;
      auto store = c10::make_intrusive<c10d::HashStore>();
      expect_all_ok(run_ranks(world, [&](int rank) {
        auto pg = init_process_group(split_options(rank, world, store));
        DeviceMesh mesh(pg, tp, pp);
        ASSERT_EQ(mesh.pipeline_parallel(), pp);
        ASSERT_EQ(mesh.data_parallel(), world / block);
        ASSERT_EQ(mesh.tp_rank(), rank % tp);
        ASSERT_EQ(mesh.pp_rank(), (rank % block) / tp);
        ASSERT_EQ(mesh.dp_rank(), rank / block);
        ASSERT_EQ(mesh.tp().world_ranks(), ranks_where(world, [&](int r) { return r / tp == rank / tp; }));
        ASSERT_EQ(mesh.pp().world_ranks(), ranks_where(world, [&](int r) {
                    return r / block == rank / block && r % tp == rank % tp;
                  }));
        ASSERT_EQ(mesh.dp().world_ranks(),
                  ranks_where(world, [&](int r) { return r % block == rank % block; }));
        at::Tensor in_pp = at::full({2}, static_cast<double>(rank), at::kDouble);
        mesh.pp().all_reduce(in_pp).wait();
        ASSERT_TRUE(at::equal(in_pp, at::full({2}, sum_of(mesh.pp().world_ranks()), at::kDouble)));
        mesh.shutdown();
        pg.shutdown();
      }));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, MeshWorld, ::testing::Values(1, 2, 3, 4, 8),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "world" + std::to_string(info.param);
                         });

// Each case fails on every rank with the same message (`expected` in it).
void expect_mesh_refused(int world, const std::function<ProcessGroupOptions(ProcessGroupOptions)>& adjust,
                         const std::function<int(int)>& tp_of, const std::string& expected) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  expect_all_ok(run_ranks(world, [&](int rank) {
    auto pg = init_process_group(adjust(split_options(rank, world, store)));
    try {
      DeviceMesh mesh(pg, tp_of(rank));
      ADD_FAILURE() << "the mesh was made";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
    pg.shutdown();
  }));
}

TEST(DeviceMesh, ABadTensorParallelSizeIsRefusedOnEveryRankNamingIt) {
  const auto same = [](ProcessGroupOptions o) { return o; };
  expect_mesh_refused(
      3, same, [](int) { return 2; },
      "tensor_parallel 2 does not divide the world of 3 ranks: choose a divisor of it");
  expect_mesh_refused(
      2, same, [](int) { return 0; }, "tensor_parallel 0 does not divide the world of 2");
  expect_mesh_refused(
      2, same, [](int rank) { return rank == 0 ? 2 : 1; }, "every rank must pass the same value");
  auto store = c10::make_intrusive<c10d::HashStore>();
  expect_all_ok(run_ranks(4, [&](int rank) {
    auto pg = init_process_group(split_options(rank, 4, store));
    for (int pp : {0, 3}) {
      try {
        DeviceMesh mesh(pg, 2, pp);
        ADD_FAILURE() << "the mesh was made with P " << pp;
      } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("pipeline_parallel " + std::to_string(pp) + ": T x P = " +
                                             std::to_string(2 * pp) + " does not divide the world of 4"),
                  std::string::npos)
            << e.what();
      }
    }
    pg.shutdown();
  }));
  // 2 nodes x 2 ranks: T = 4 would all-reduce between the nodes in every layer.
  expect_mesh_refused(
      4, [](ProcessGroupOptions o) { return o.num_nodes(2).local_world_size(2).interface("lo"); },
      [](int) { return 4; }, "tensor_parallel 4 does not divide the 2 ranks per node");
}

}  // namespace
}  // namespace lockstep::comm
