// ProcessGroupMpi with real MPI ranks: ctest runs this binary under `mpirun -np 2` and `-np 3`
// (tests/comm/mpirun_test.sh); alone it is one MPI singleton (world 1). Every rank runs every test, so
// each test calls the same collectives in the same order on every rank whatever its assertions find
// (EXPECT, never ASSERT, between collectives). Results are checked against values each rank computes
// itself from every rank's input.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <regex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <mpi.h>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <numeric>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include "../support/wait_until.h"
#include "lockstep/comm/process_group_mpi.h"

namespace lockstep::comm {
namespace {

int env_int(const char* name, int fallback) {
  const char* raw = std::getenv(name);
  return raw != nullptr && *raw != '\0' ? std::atoi(raw) : fallback;
}

// Under mpirun Open MPI tells each rank who it is; alone the process is MPI rank 0 of 1.
int world_rank() {
  return env_int("OMPI_COMM_WORLD_RANK", 0);
}
int world_size() {
  return env_int("OMPI_COMM_WORLD_SIZE", 1);
}

c10::intrusive_ptr<ProcessGroupMpi> make_group() {
  return c10::make_intrusive<ProcessGroupMpi>(world_rank(), world_size(),
                                              MpiOptions().timeout(std::chrono::seconds(60)));
}

// Rank r's input: small integers, exact in every dtype and in every sum, average and product below.
at::Tensor input_of(int rank, int64_t n, at::ScalarType type) {
  return (at::arange(n, at::kLong).remainder(3) + (rank + 1)).to(type);
}

const std::vector<at::ScalarType> kReducible = {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16,
                                                at::kInt,   at::kLong,   at::kByte, at::kChar};

struct Op {
  const char* name;
  c10d::ReduceOp::RedOpType op;
};
const std::vector<Op> kOps = {{"sum", c10d::ReduceOp::SUM},
                              {"avg", c10d::ReduceOp::AVG},
                              {"min", c10d::ReduceOp::MIN},
                              {"max", c10d::ReduceOp::MAX},
                              {"product", c10d::ReduceOp::PRODUCT}};

// The reduction of every rank's input_of, computed here (averages divide the sum in the dtype, integers
// truncated, as the backend documents).
at::Tensor expected_reduction(int64_t n, at::ScalarType type, c10d::ReduceOp::RedOpType op, int world) {
  at::Tensor acc = input_of(0, n, at::kDouble);
  for (int r = 1; r < world; ++r) {
    const at::Tensor x = input_of(r, n, at::kDouble);
    switch (op) {
      case c10d::ReduceOp::SUM:
      case c10d::ReduceOp::AVG:
        acc = acc + x;
        break;
      case c10d::ReduceOp::MIN:
        acc = at::minimum(acc, x);
        break;
      case c10d::ReduceOp::MAX:
        acc = at::maximum(acc, x);
        break;
      case c10d::ReduceOp::PRODUCT:
        acc = acc * x;
        break;
      default:
        ADD_FAILURE() << "unexpected op";
    }
  }
  at::Tensor result = acc.to(type);
  if (op == c10d::ReduceOp::AVG) {
    result = at::isFloatingType(type) ? result.div(world) : result.div(world, /*rounding_mode=*/"trunc");
  }
  return result;
}

std::string what(at::ScalarType type, int64_t n, const char* op = "") {
  return std::string(c10::toString(type)) + "[" + std::to_string(n) + "] " + op + " on rank " +
         std::to_string(world_rank()) + " of " + std::to_string(world_size());
}

// First in the file: in the singleton run (no mpirun) MPI has not started yet, and must not start here.
TEST(ProcessGroupMpiTest, AWorldAboveOneOutsideAnMpiLauncherIsRefusedBeforeMpiStarts) {
  int started_before = 0;
  MPI_Initialized(&started_before);
  std::vector<std::pair<std::string, std::string>> saved;
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"}) {
    if (const char* value = std::getenv(name)) saved.emplace_back(name, value);
    ::unsetenv(name);
  }
  try {
    ProcessGroupMpi(0, 2, MpiOptions().timeout(std::chrono::seconds(60)));
    ADD_FAILURE() << "a world of 2 outside mpirun was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(
        std::string(e.what()).find("rank 0 of 2 for lockstep but was not started by an MPI launcher. The "
                                   "mpi backend needs its ranks started by mpirun"),
        std::string::npos)
        << e.what();
  }
  ::setenv("OMPI_COMM_WORLD_SIZE", "3", 1);
  try {
    ProcessGroupMpi(0, 2, MpiOptions().timeout(std::chrono::seconds(60)));
    ADD_FAILURE() << "a world of 2 in an mpirun of 3 was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("was started by one for a world of 3"), std::string::npos)
        << e.what();
  }
  ::unsetenv("OMPI_COMM_WORLD_SIZE");
  for (const auto& [name, value] : saved) ::setenv(name.c_str(), value.c_str(), 1);
  int started_after = 0;
  MPI_Initialized(&started_after);
  EXPECT_EQ(started_after, started_before) << "MPI was started by a group that was refused";
}

TEST(ProcessGroupMpiTest, ReportsMpiAndMatchesTheLaunchersWorld) {
  auto pg = make_group();
  EXPECT_EQ(pg->getRank(), world_rank());
  EXPECT_EQ(pg->getSize(), world_size());
  EXPECT_EQ(pg->getBackendName(), "mpi");
  EXPECT_NE(ProcessGroupMpi::library_version().find("MPI"), std::string::npos)
      << ProcessGroupMpi::library_version();
}

TEST(ProcessGroupMpiTest, AllreduceEveryOpAndDtypeMatchesTheLocalReduction) {
  auto pg = make_group();
  const int world = world_size();
  for (const auto type : kReducible) {
    for (const auto& op : kOps) {
      for (const int64_t n : {0, 1, 1001}) {
        std::vector<at::Tensor> t{input_of(world_rank(), n, type)};
        c10d::AllreduceOptions opts;
        opts.reduceOp = c10d::ReduceOp(op.op);
        pg->allreduce(t, opts)->wait();
        EXPECT_TRUE(at::equal(t[0], expected_reduction(n, type, op.op, world))) << what(type, n, op.name);
        EXPECT_EQ(t[0].scalar_type(), type);
      }
    }
  }
}

TEST(ProcessGroupMpiTest, AllreducesAbove4MiBGoInPiecesAndMatchTheLocalReduction) {
  auto pg = make_group();
  const int64_t n = (int64_t{1} << 21) + 3;  // float32: 8 MiB + 12 bytes, three pieces; float16: two
  for (const auto type : {at::kFloat, at::kHalf}) {
    for (const auto& op : {kOps[0], kOps[3]}) {
      std::vector<at::Tensor> t{input_of(world_rank(), n, type)};
      c10d::AllreduceOptions opts;
      opts.reduceOp = c10d::ReduceOp(op.op);
      pg->allreduce(t, opts)->wait();
      EXPECT_TRUE(at::equal(t[0], expected_reduction(n, type, op.op, world_size())))
          << what(type, n, op.name);
    }
  }
}

TEST(ProcessGroupMpiTest, AllreduceOfANonContiguousTensorWritesTheResultBack) {
  auto pg = make_group();
  at::Tensor base = input_of(world_rank(), 12, at::kFloat).reshape({3, 4});
  std::vector<at::Tensor> t{base.t()};  // a transposed view: not contiguous
  ASSERT_FALSE(t[0].is_contiguous());
  pg->allreduce(t)->wait();
  EXPECT_TRUE(
      at::equal(base, expected_reduction(12, at::kFloat, c10d::ReduceOp::SUM, world_size()).reshape({3, 4})));
}

TEST(ProcessGroupMpiTest, AllgatherIntoNonContiguousOutputsWritesEachRanksBlock) {
  auto pg = make_group();
  const int world = world_size();
  std::vector<at::Tensor> input{at::arange(6, at::kFloat).reshape({2, 3}) + 100 * world_rank()};
  std::vector<at::Tensor> bases, outputs;
  for (int r = 0; r < world; ++r) {
    bases.push_back(at::zeros({3, 2}, at::kFloat));
    outputs.push_back(bases.back().t());  // [2, 3], transposed: not contiguous, no 1-D view
    ASSERT_FALSE(outputs.back().is_contiguous());
  }
  std::vector<std::vector<at::Tensor>> out{outputs};
  pg->allgather(out, input)->wait();
  for (int r = 0; r < world; ++r) {
    EXPECT_TRUE(at::equal(bases[r].t(), at::arange(6, at::kFloat).reshape({2, 3}) + 100 * r))
        << "block " << r;
  }
}

TEST(ProcessGroupMpiTest, ManyQueuedCollectivesCompleteInIssueOrderThroughTheirFutures) {
  auto pg = make_group();
  std::vector<at::Tensor> tensors;
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  for (int i = 0; i < 20; ++i) {
    tensors.push_back(at::full({1000}, static_cast<double>(i + world_rank()), at::kDouble));
    std::vector<at::Tensor> one{tensors.back()};
    works.push_back(pg->allreduce(one));
  }
  // Waiting on the last one first: it completes only after every earlier one. (Its future completes
  // just before the Work itself, so that callbacks are done when wait() returns: wait for both.)
  works.back()->getFuture()->wait();
  EXPECT_TRUE(works.back()->getFuture()->completed());
  works.back()->wait();
  for (auto& w : works) EXPECT_TRUE(w->isCompleted());
  const int world = world_size();
  for (int i = 0; i < 20; ++i) {
    const double want = world * i + world * (world - 1) / 2.0;
    EXPECT_TRUE(at::equal(tensors[i], at::full({1000}, want, at::kDouble))) << "collective " << i;
    EXPECT_TRUE(works[i]->isSuccess());
  }
}

TEST(ProcessGroupMpiTest, BroadcastFromEveryRootInEveryDtype) {
  auto pg = make_group();
  for (const auto type : {at::kFloat, at::kDouble, at::kHalf, at::kInt, at::kLong, at::kByte, at::kBool}) {
    for (int root = 0; root < world_size(); ++root) {
      for (const int64_t n : {0, 1, 1001}) {
        const at::Tensor want = input_of(root, n, at::kLong).remainder(2).to(type);
        std::vector<at::Tensor> t{world_rank() == root ? want.clone() : at::zeros({n}, type)};
        c10d::BroadcastOptions opts;
        opts.rootRank = root;
        pg->broadcast(t, opts)->wait();
        EXPECT_TRUE(at::equal(t[0], want)) << what(type, n) << " from root " << root;
      }
    }
  }
}

TEST(ProcessGroupMpiTest, AllgatherAndAllgatherBaseCollectEveryRanksInput) {
  auto pg = make_group();
  const int world = world_size();
  for (const auto type : {at::kFloat, at::kHalf, at::kLong, at::kByte}) {
    for (const int64_t n : {0, 1, 1001}) {
      std::vector<at::Tensor> inputs{input_of(world_rank(), n, type)};
      std::vector<std::vector<at::Tensor>> outputs(1);
      for (int r = 0; r < world; ++r) outputs[0].push_back(at::empty({n}, type));
      pg->allgather(outputs, inputs)->wait();
      for (int r = 0; r < world; ++r)
        EXPECT_TRUE(at::equal(outputs[0][r], input_of(r, n, type))) << what(type, n) << " from " << r;

      at::Tensor flat = at::empty({world * n}, type);
      pg->_allgather_base(flat, inputs[0])->wait();
      for (int r = 0; r < world; ++r) {
        EXPECT_TRUE(at::equal(flat.narrow(0, r * n, n), input_of(r, n, type)))
            << what(type, n) << " base, from " << r;
      }
    }
  }
}

// ProcessGroup::split's subgroups: the world ranks of one parity get a communicator of their own
// (MPI_Comm_create_group, called by the members only), which reduces among them, beside the world's.
TEST(ProcessGroupMpiTest, ASubgroupOfSomeWorldRanksReducesAmongThemOnly) {
  auto world = make_group();
  std::vector<int> members;
  for (int r = 0; r < world_size(); ++r) {
    if (r % 2 == world_rank() % 2) members.push_back(r);
  }
  const double expected = std::accumulate(members.begin(), members.end(), 0.0);
  auto sub = c10::make_intrusive<ProcessGroupMpi>(
      world_rank() / 2, static_cast<int>(members.size()),
      MpiOptions().timeout(std::chrono::seconds(60)).world_ranks(members));
  for (int round = 0; round < 3; ++round) {
    std::vector<at::Tensor> mine{at::full({5}, static_cast<double>(world_rank()), at::kDouble)};
    sub->allreduce(mine)->wait();
    EXPECT_TRUE(at::equal(mine[0], at::full({5}, expected, at::kDouble))) << "round " << round;
    std::vector<at::Tensor> all{at::ones({2})};
    world->allreduce(all)->wait();
    EXPECT_TRUE(at::equal(all[0], at::full({2}, static_cast<float>(world_size()))));
  }
  // A group rank that stands for another process's world rank is refused before any MPI call.
  try {
    ProcessGroupMpi(0, 1, MpiOptions().world_ranks({world_rank() == 0 ? 1 : 0}));
    ADD_FAILURE() << "a subgroup of another process's rank was made";
  } catch (const std::exception& e) {
    EXPECT_NE(
        std::string(e.what()).find("mpi subgroup: this process is MPI rank " + std::to_string(world_rank())),
        std::string::npos)
        << e.what();
  }
}

TEST(ProcessGroupMpiTest, ReduceScatterGivesEachRankItsReducedPiece) {
  auto pg = make_group();
  const int world = world_size();
  const int rank = world_rank();
  for (const auto type : {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16, at::kInt, at::kLong}) {
    for (const auto& op : kOps) {
      for (const int64_t n : {0, 1, 1001}) {
        // Rank r's piece j is input_of(r, world * n) sliced at j: the expected piece is a slice of the
        // reduction of the whole.
        const at::Tensor whole = input_of(rank, world * n, type);
        const at::Tensor want = expected_reduction(world * n, type, op.op, world).narrow(0, rank * n, n);
        std::vector<std::vector<at::Tensor>> inputs(1);
        for (int j = 0; j < world; ++j) inputs[0].push_back(whole.narrow(0, j * n, n).clone());
        std::vector<at::Tensor> outputs{at::empty({n}, type)};
        c10d::ReduceScatterOptions opts;
        opts.reduceOp = c10d::ReduceOp(op.op);
        pg->reduce_scatter(outputs, inputs, opts)->wait();
        EXPECT_TRUE(at::equal(outputs[0], want)) << what(type, n, op.name);

        at::Tensor base_out = at::empty({n}, type);
        at::Tensor whole_copy = whole.clone();
        pg->_reduce_scatter_base(base_out, whole_copy, opts)->wait();
        EXPECT_TRUE(at::equal(base_out, want)) << what(type, n, op.name) << " base";
      }
    }
  }
}

// Two groups over the same ranks whose ranks enter their collectives in opposite orders, as a mesh's
// data-parallel group (DDP's buckets, from its own thread) and tensor-parallel group can: even ranks x
// then y, odd ranks y then x. Each rank's first collective needs a peer's, and that peer's first is the
// other group's. A worker that held MPI for the whole of its collective would keep the other group's
// worker out, and the two groups would wait on each other until the timeout (20 s: a hang fails here).
TEST(ProcessGroupMpiTest, TwoGroupsEnteredInOppositeOrdersBothComplete) {
  const auto options = MpiOptions().timeout(std::chrono::seconds(20));
  auto x = c10::make_intrusive<ProcessGroupMpi>(world_rank(), world_size(), options);
  auto y = c10::make_intrusive<ProcessGroupMpi>(world_rank(), world_size(), options);
  const bool even = world_rank() % 2 == 0;
  ProcessGroupMpi& first = even ? *x : *y;
  ProcessGroupMpi& second = even ? *y : *x;
  for (int round = 0; round < 3; ++round) {
    std::vector<at::Tensor> on_x{at::full({1000}, 1.0)};
    std::vector<at::Tensor> on_y{at::full({1000}, 2.0)};
    auto started = first.allreduce(even ? on_x : on_y);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the first is inside MPI by now
    auto next = second.allreduce(even ? on_y : on_x);
    started->wait();
    next->wait();
    EXPECT_TRUE(at::equal(on_x[0], at::full({1000}, 1.0 * world_size()))) << "round " << round;
    EXPECT_TRUE(at::equal(on_y[0], at::full({1000}, 2.0 * world_size()))) << "round " << round;
    auto fence = first.barrier();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    second.barrier()->wait();
    fence->wait();
  }
}

// An order of events, no clock: the last rank comes only once every other rank is about to wait in the
// barrier, and says so (a file named after the ranks' common parent, mpirun's daemon) before it enters. A
// rank that leaves the barrier before the file exists left before the last rank arrived.
TEST(ProcessGroupMpiTest, BarrierHoldsEveryRankUntilTheLastArrives) {
  auto pg = make_group();
  pg->barrier()->wait();  // line up
  if (world_size() == 1) return;
  const std::string prefix = "/tmp/lockstep-mpi-barrier-" + std::to_string(::getppid());
  const std::string arrived = prefix + "-last-arrived";
  const int last = world_size() - 1;
  if (world_rank() == last) {
    for (int rank = 0; rank < last; ++rank) {
      const std::string entering = prefix + "-entering-" + std::to_string(rank);
      EXPECT_TRUE(lockstep::testing::wait_until([&] { return std::ifstream(entering).good(); },
                                                std::chrono::seconds(60)))  // a hang bound
          << "rank " << rank << " never came to the barrier";
    }
    std::ofstream(arrived) << "1";
  } else {
    std::ofstream(prefix + "-entering-" + std::to_string(world_rank())) << "1";
  }
  pg->barrier()->wait();
  EXPECT_TRUE(std::ifstream(arrived).good())
      << "rank " << world_rank() << " left the barrier before rank " << last << " arrived";
  pg->barrier()->wait();  // every rank has looked: the files can go
  if (world_rank() == last) {
    std::remove(arrived.c_str());
    for (int rank = 0; rank < last; ++rank)
      std::remove((prefix + "-entering-" + std::to_string(rank)).c_str());
  }
}

TEST(ProcessGroupMpiTest, WaitWithATimeoutThrowsWhileAPeerIsLateAndSucceedsOnceItArrives) {
  if (world_size() == 1) GTEST_SKIP() << "needs a peer that can be late (run under mpirun -np 2 or more)";
  // Rank 1 stays away until rank 0 has seen its timed wait fail: an event (a file named after the ranks'
  // common parent, mpirun's daemon), not a sleep that a busy machine could outlast.
  const std::string rank0_timed_out = "/tmp/lockstep-mpi-late-" + std::to_string(::getppid());
  auto pg = make_group();
  pg->barrier()->wait();
  if (world_rank() == 0) {
    auto work = pg->barrier();
    try {
      work->wait(std::chrono::milliseconds(100));
      ADD_FAILURE() << "wait(100 ms) returned while rank 1 was still away";
    } catch (const std::runtime_error& e) {
      // The time since the barrier was issued: at least the 100 ms waited.
      std::smatch match;
      const std::string what = e.what();
      const bool found = std::regex_search(
          what, match,
          std::regex("rank 0: mpi barrier #2 did not complete within ([0-9]+) ms of being issued"));
      EXPECT_TRUE(found) << what;
      if (found) {
        EXPECT_GE(std::stoi(match[1].str()), 100) << what;
      }
    }
    EXPECT_FALSE(work->isCompleted());
    std::ofstream(rank0_timed_out) << "1";
    EXPECT_TRUE(work->wait(std::chrono::seconds(60)));
    std::remove(rank0_timed_out.c_str());
  } else {
    lockstep::testing::wait_until([&] { return std::ifstream(rank0_timed_out).good(); },
                                  std::chrono::seconds(60));
    pg->barrier()->wait();
  }
}

TEST(ProcessGroupMpiTest, RefusesTensorsItCannotMoveWithTheFix) {
  auto pg = make_group();
  std::vector<at::Tensor> meta{at::empty({4}, at::TensorOptions().device(at::kMeta))};
  try {
    pg->allreduce(meta);
    ADD_FAILURE() << "a tensor that is not on the CPU was accepted";
  } catch (const c10::Error& e) {
    const std::string text = e.what_without_backtrace();
    EXPECT_NE(text.find("mpi allreduce: the tensor (Float[4]) is on meta"), std::string::npos) << text;
    EXPECT_NE(text.find("use backend 'nccl' (or 'gloo')"), std::string::npos) << text;
  }
  std::vector<at::Tensor> two{at::ones({2}), at::ones({2})};
  EXPECT_THROW(pg->allreduce(two), c10::Error);
  std::vector<at::Tensor> flags{at::ones({2}, at::kBool)};
  try {
    pg->allreduce(flags);
    ADD_FAILURE() << "bool tensors were accepted by allreduce";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what_without_backtrace()).find("cannot reduce Bool"), std::string::npos);
  }
  std::vector<at::Tensor> sparse{at::ones({2}).to_sparse()};
  EXPECT_THROW(pg->broadcast(sparse), c10::Error);
  std::vector<at::Tensor> t{at::ones({2})};
  c10d::AllreduceOptions band;
  band.reduceOp = c10d::ReduceOp(c10d::ReduceOp::BAND);
  EXPECT_THROW(pg->allreduce(t, band), std::invalid_argument);
  // Nothing was queued: the group still works.
  pg->allreduce(t)->wait();
  EXPECT_TRUE(at::equal(t[0], at::full({2}, static_cast<float>(world_size()))));
}

TEST(ProcessGroupMpiTest, AWorldThatIsNotMpisIsRefusedWithHowToStartTheRanks) {
  try {
    ProcessGroupMpi pg(world_rank(), world_size() + 1, MpiOptions());
    ADD_FAILURE() << "a world of " << world_size() + 1 << " was accepted by MPI's world of " << world_size();
  } catch (const std::runtime_error& e) {
    const std::string text = e.what();
    // Refused before MPI starts where the launcher's environment names the world, else after (MPI's own).
    EXPECT_NE(text.find("rank " + std::to_string(world_rank()) + " of " + std::to_string(world_size() + 1) +
                        " for lockstep but "),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("mpirun -np " + std::to_string(world_size() + 1)), std::string::npos) << text;
    EXPECT_NE(text.find("--allow-run-as-root"), std::string::npos) << text;
  }
}

}  // namespace
}  // namespace lockstep::comm
