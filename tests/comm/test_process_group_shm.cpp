// The shared-memory backend with N ranks as threads over an in-memory store: every op and dtype, sizes
// 0, 1, odd and larger than a slot (so chunked through both buffers), world sizes 1-8; results equal to
// a reference computed from every rank's input, bit-identical across ranks; mismatched collectives,
// timeouts and bad input fail with errors that name the ranks and values.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <dirent.h>

#include <atomic>
#include <chrono>
#include <string>
#include <tuple>

#include "../support/wait_until.h"
#include "lockstep/comm/process_group.h"
#include "lockstep/comm/process_group_shm.h"
#include "thread_group.h"

namespace lockstep::comm {
namespace {

using lockstep::testing::expect_all_ok;
using lockstep::testing::run_ranks;
using namespace std::chrono_literals;

c10::intrusive_ptr<ProcessGroupShm> make_group(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                               int world, size_t slot_bytes,
                                               const std::string& run_id = "shm-test",
                                               std::chrono::milliseconds timeout = 20s) {
  // Small slots also take the worker-thread path (no inline runs), so both paths are tested.
  return c10::make_intrusive<ProcessGroupShm>(
      store, rank, world,
      ShmOptions().run_id(run_id).timeout(timeout).slot_bytes(slot_bytes).inline_when_idle(slot_bytes > 256));
}

// Rank r's input: small integers (exact in every dtype, sums included), different on every rank.
at::Tensor input_for(int rank, int64_t n, at::ScalarType type) {
  auto i = at::arange(n, at::kLong);
  return ((i * 7 + rank * 3) % 11 - 5).to(type);
}

at::Tensor reference(int world, int64_t n, at::ScalarType type, c10d::ReduceOp::RedOpType op) {
  std::vector<at::Tensor> all;
  for (int r = 0; r < world; ++r) all.push_back(input_for(r, n, at::kDouble));
  auto stacked = at::stack(all);
  at::Tensor out;
  switch (op) {
    case c10d::ReduceOp::SUM:
      out = stacked.sum(0);
      break;
    case c10d::ReduceOp::AVG:
      out = stacked.sum(0);
      break;
    case c10d::ReduceOp::MIN:
      out = std::get<0>(stacked.min(0));
      break;
    case c10d::ReduceOp::MAX:
      out = std::get<0>(stacked.max(0));
      break;
    case c10d::ReduceOp::PRODUCT:
      out = stacked.prod(0);
      break;
    default:
      ADD_FAILURE() << "unexpected op";
  }
  if (op == c10d::ReduceOp::AVG) {
    out = at::isFloatingType(type) ? out / world : at::div(out.to(type), world, "trunc");
  }
  return out.to(type);
}

// Exact in every dtype: the inputs are small integers, so their sums, minima and maxima are exact, and an
// average (a sum divided by a world size of at most 8, a short repeating binary fraction) rounds to the
// same value whether it is divided in float64 here or in the dtype's own arithmetic by the backend.
void expect_matches(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  ASSERT_EQ(got.scalar_type(), want.scalar_type()) << what;
  EXPECT_TRUE(at::equal(got, want)) << what << ": got\n"
                                    << got.slice(0, 0, 12) << "\nwant\n"
                                    << want.slice(0, 0, 12);
}

// world size x slot bytes (256: every tensor beyond 64 floats goes in chunks through both buffers, and
// collectives run on the group's worker thread; 4 MiB: inline on the caller's thread).
class ShmWorld : public ::testing::TestWithParam<std::tuple<int, size_t>> {};

TEST_P(ShmWorld, AllReduceEveryOpAndDtypeMatchesTheReference) {
  const auto [world, slot] = GetParam();
  auto store = c10::make_intrusive<c10d::HashStore>();
  expect_all_ok(run_ranks(world, [&, world = world, slot = slot](int rank) {
    auto pg = make_group(store, rank, world, slot);
    for (auto type : {at::kFloat, at::kDouble, at::kBFloat16, at::kHalf, at::kInt, at::kLong}) {
      for (auto op : {c10d::ReduceOp::SUM, c10d::ReduceOp::AVG, c10d::ReduceOp::MIN, c10d::ReduceOp::MAX}) {
        // With 256-byte slots, 3001 elements already take 12-47 chunks through both buffers.
        for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1001},
                          slot == 256 ? int64_t{3001} : int64_t{20001}}) {
          std::vector<at::Tensor> t{input_for(rank, n, type)};
          c10d::AllreduceOptions opts;
          opts.reduceOp = op;
          pg->allreduce(t, opts)->wait();
          expect_matches(t[0], reference(world, n, type, op),
                         std::string("allreduce ") + c10::toString(type) + " op " + std::to_string(op) +
                             " n=" + std::to_string(n) + " rank " + std::to_string(rank));
        }
      }
    }
  }));
}

TEST_P(ShmWorld, BroadcastAllGatherReduceScatterAndBarrier) {
  const auto [world, slot] = GetParam();
  auto store = c10::make_intrusive<c10d::HashStore>();
  expect_all_ok(run_ranks(world, [&, world = world, slot = slot](int rank) {
    auto pg = make_group(store, rank, world, slot);
    for (int64_t n :
         {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1001}, slot == 256 ? int64_t{3001} : int64_t{20001}}) {
      for (int root = 0; root < world; root += std::max(1, world - 1)) {
        std::vector<at::Tensor> t{rank == root ? input_for(root, n, at::kByte) : at::zeros({n}, at::kByte)};
        c10d::BroadcastOptions opts;
        opts.rootRank = root;
        pg->broadcast(t, opts)->wait();
        ASSERT_TRUE(at::equal(t[0], input_for(root, n, at::kByte)))
            << "broadcast n=" << n << " root " << root;
      }
      std::vector<at::Tensor> in{input_for(rank, n, at::kDouble)};
      std::vector<std::vector<at::Tensor>> out(1);
      for (int r = 0; r < world; ++r) out[0].push_back(at::full({n}, -99.0, at::kDouble));
      pg->allgather(out, in)->wait();
      for (int r = 0; r < world; ++r) {
        ASSERT_TRUE(at::equal(out[0][r], input_for(r, n, at::kDouble)))
            << "allgather n=" << n << " from " << r;
      }
      // reduce_scatter: rank r's j-th input is input_for(r, n) + j, so rank j receives
      // reference_sum + world * j.
      std::vector<std::vector<at::Tensor>> pieces(1);
      for (int j = 0; j < world; ++j) pieces[0].push_back(input_for(rank, n, at::kFloat) + j);
      std::vector<at::Tensor> mine{at::empty({n}, at::kFloat)};
      pg->reduce_scatter(mine, pieces)->wait();
      expect_matches(mine[0], reference(world, n, at::kFloat, c10d::ReduceOp::SUM) + world * rank,
                     "reduce_scatter n=" + std::to_string(n));
      auto flat_in = at::cat(pieces[0]);
      auto flat_out = at::empty({n}, at::kFloat);
      pg->_reduce_scatter_base(flat_out, flat_in)->wait();
      expect_matches(flat_out, mine[0], "_reduce_scatter_base n=" + std::to_string(n));
      auto gathered = at::empty({world * n}, at::kDouble);
      pg->_allgather_base(gathered, in[0])->wait();
      ASSERT_TRUE(at::equal(gathered, at::cat(out[0]))) << "_allgather_base n=" << n;
    }
    pg->barrier()->wait();
  }));
}

// Tensors inside shared buffers (new_shared_tensor) take the copy-free path: same bits as the copying path.
TEST_P(ShmWorld, SharedTensorAllReduceGivesTheCopyingPathsBits) {
  const auto [world, slot] = GetParam();
  auto store = c10::make_intrusive<c10d::HashStore>();
  expect_all_ok(run_ranks(world, [&, world = world, slot = slot](int rank) {
    auto pg = make_group(store, rank, world, slot);
    for (auto type : {at::kFloat, at::kDouble, at::kBFloat16, at::kHalf, at::kInt, at::kLong}) {
      const int64_t pad = 5;  // slices at an offset, as DDP's per-parameter views are
      at::Tensor buffer = pg->new_shared_tensor(20001 + pad, type);
      ASSERT_EQ(buffer.scalar_type(), type);
      ASSERT_TRUE(at::equal(buffer, at::zeros({20001 + pad}, type))) << "not zero-filled";
      for (auto op : {c10d::ReduceOp::SUM, c10d::ReduceOp::AVG, c10d::ReduceOp::MIN, c10d::ReduceOp::MAX}) {
        for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1001}, int64_t{20001}}) {
          const int64_t offset = n + pad <= buffer.numel() ? pad : 0;
          // Random floats (different per rank) so that the summation order matters for the bits.
          auto gen = at::detail::createCPUGenerator(77 + rank);
          at::Tensor input =
              at::isFloatingType(type) ? at::randn({n}, gen).to(type) : input_for(rank, n, type);
          at::Tensor shared = buffer.narrow(0, offset, n);
          shared.copy_(input);
          std::vector<at::Tensor> a{shared}, b{input.clone()};
          c10d::AllreduceOptions opts;
          opts.reduceOp = op;
          pg->allreduce(a, opts)->wait();
          pg->allreduce(b, opts)->wait();
          const std::string what = std::string(c10::toString(type)) + " op " + std::to_string(op) +
                                   " n=" + std::to_string(n) + " rank " + std::to_string(rank);
          ASSERT_TRUE(at::equal(shared, b[0])) << "shared and copying paths differ: " << what;
          if (!at::isFloatingType(type)) expect_matches(shared, reference(world, n, type, op), what);
        }
      }
    }
  }));
}

INSTANTIATE_TEST_SUITE_P(WorldsAndSlots, ShmWorld,
                         ::testing::Combine(::testing::Values(1, 2, 3, 8),
                                            ::testing::Values(size_t{256}, size_t{4} << 20)),
                         [](const auto& info) {
                           return "world" + std::to_string(std::get<0>(info.param)) + "_slot" +
                                  std::to_string(std::get<1>(info.param));
                         });

TEST(Shm, RandomFloatSumsAreBitIdenticalOnEveryRankAndCloseToGloo) {
  const int world = 3;
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto gloo_store = c10::make_intrusive<c10d::HashStore>();  // one store per job (the run id owns it)
  expect_all_ok(run_ranks(world, [&](int rank) {
    auto shm = init_process_group(
        lockstep::testing::thread_group_options(rank, world, store, "bits-shm").backend(Backend::kShm));
    auto gloo =
        init_process_group(lockstep::testing::thread_group_options(rank, world, gloo_store, "bits-gloo")
                               .backend(Backend::kGloo));
    ASSERT_EQ(shm.backend(), Backend::kShm);
    ASSERT_EQ(shm.native()->getBackendName(), "shm");
    auto gen = at::detail::createCPUGenerator(1234 + rank);
    auto x = at::randn({300001}, gen);
    auto a = x.clone();
    auto b = x.clone();
    shm.all_reduce(a).wait();
    gloo.all_reduce(b).wait();
    EXPECT_TRUE(at::allclose(a, b, 1e-5, 1e-5));
    std::vector<at::Tensor> everyone;
    for (int r = 0; r < world; ++r) everyone.push_back(at::empty_like(a));
    shm.all_gather(everyone, a).wait();
    for (int r = 0; r < world; ++r) EXPECT_TRUE(at::equal(everyone[r], a)) << "rank " << r << " differs";
    shm.shutdown();
    gloo.shutdown();
  }));
}

TEST(Shm, NonContiguousTensorsAreReducedInPlace) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  expect_all_ok(run_ranks(2, [&](int rank) {
    auto pg = make_group(store, rank, 2, 256);
    auto base = at::arange(40, at::kFloat).reshape({5, 8}) * (rank + 1);
    auto column = base.t();  // not contiguous
    std::vector<at::Tensor> t{column};
    pg->allreduce(t)->wait();
    EXPECT_TRUE(at::equal(base, at::arange(40, at::kFloat).reshape({5, 8}) * 3));
  }));
}

TEST(Shm, QueuedCollectivesRunInIssueOrderWhateverTheWaitOrder) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  expect_all_ok(run_ranks(3, [&](int rank) {
    auto pg = make_group(store, rank, 3, 256);  // worker thread
    std::vector<std::vector<at::Tensor>> tensors;
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    for (int i = 0; i < 6; ++i) tensors.push_back({at::full({500}, static_cast<float>(i + rank))});
    for (int i = 0; i < 6; ++i) works.push_back(pg->allreduce(tensors[i]));
    for (int i = 5; i >= 0; --i) {
      works[i]->wait();
      EXPECT_TRUE(at::equal(tensors[i][0], at::full({500}, static_cast<float>(3 * i + 3))))
          << "collective " << i;
    }
  }));
}

TEST(Shm, MismatchedCollectivesFailOnEveryRankNamingBoth) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto outcomes = run_ranks(2, [&](int rank) {
    auto pg = make_group(store, rank, 2, 4096);
    std::vector<at::Tensor> t{at::ones({10})};
    if (rank == 0) {
      pg->allreduce(t)->wait();
    } else {
      pg->broadcast(t)->wait();
    }
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_FALSE(outcomes[r].ok) << "rank " << r << " did not fail";
    const auto& e = outcomes[r].error;
    EXPECT_NE(e.find("mismatch"), std::string::npos) << e;
    EXPECT_NE(e.find("allreduce #1 (Float[10], sum)"), std::string::npos) << e;
    EXPECT_NE(e.find("broadcast #1 (Float[10], root 0)"), std::string::npos) << e;
  }
}

TEST(Shm, SharedOnOneRankPrivateOnAnotherIsAMismatchNamingBoth) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto outcomes = run_ranks(2, [&](int rank) {
    auto pg = init_process_group(
        lockstep::testing::thread_group_options(rank, 2, store, "shared-mismatch").backend(Backend::kShm));
    at::Tensor buffer = pg.new_comm_buffer(10, at::kFloat);  // shared with the shm backend
    at::Tensor t = rank == 0 ? buffer : at::zeros({10});
    pg.all_reduce(t).wait();
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_FALSE(outcomes[r].ok) << "rank " << r << " did not fail";
    const auto& e = outcomes[r].error;
    EXPECT_NE(e.find("mismatch"), std::string::npos) << e;
    EXPECT_NE(e.find("(Float[10], sum, in a shared tensor at byte 0)"), std::string::npos) << e;
    EXPECT_NE(e.find("(Float[10], sum)"), std::string::npos) << e;
  }
}

TEST(Shm, SharedTensorsOfDifferentSizesAreAMismatchNamingBoth) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto outcomes = run_ranks(2, [&](int rank) {
    auto pg = make_group(store, rank, 2, 4096);
    pg->new_shared_tensor(rank == 0 ? 100 : 101, at::kFloat);
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_FALSE(outcomes[r].ok) << "rank " << r << " did not fail";
    EXPECT_NE(outcomes[r].error.find("new_shared_tensor #1 (Float[100])"), std::string::npos)
        << outcomes[r].error;
    EXPECT_NE(outcomes[r].error.find("new_shared_tensor #1 (Float[101])"), std::string::npos)
        << outcomes[r].error;
  }
}

TEST(Shm, CommBufferIsSharedOnlyWithShm) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  expect_all_ok(run_ranks(2, [&](int rank) {
    auto gloo = init_process_group(
        lockstep::testing::thread_group_options(rank, 2, store, "comm-buffer-gloo").backend(Backend::kGloo));
    at::Tensor plain = gloo.new_comm_buffer(6, at::kDouble);
    EXPECT_TRUE(at::equal(plain, at::zeros({6}, at::kDouble)));
    plain.fill_(rank + 1);
    gloo.all_reduce(plain, ReduceOp::kAvg).wait();
    EXPECT_TRUE(at::equal(plain, at::full({6}, 1.5, at::kDouble)));
    gloo.shutdown();
  }));
}

TEST(Shm, WorkFutureCompletesWithTheOutputs) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  expect_all_ok(run_ranks(2, [&](int rank) {
    for (size_t slot : {size_t{256}, size_t{4096}}) {  // worker thread, inline
      const std::string job = "future-" + std::to_string(slot);
      auto pg = make_group(c10::make_intrusive<c10d::PrefixStore>(job, store), rank, 2, slot, job);
      std::vector<at::Tensor> t{at::full({300}, 1.0f + rank)};
      auto work = pg->allreduce(t);
      std::atomic<int> calls{0};
      work->getFuture()->addCallback([&](c10::ivalue::Future& f) {
        EXPECT_FALSE(f.hasError());
        EXPECT_TRUE(at::equal(f.value().toTensorVector().at(0), at::full({300}, 3.0f)));
        ++calls;
      });
      work->wait();
      work->getFuture()->wait();
      EXPECT_EQ(calls.load(), 1);
    }
  }));
}

TEST(Shm, AbsentRankTimesOutNamingItAndThePeerStopsToo) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::chrono::steady_clock::duration elapsed{};
  std::atomic<bool> a_peer_failed{false};
  auto outcomes = run_ranks(3, [&](int rank) {
    // Rank 0's clock starts before the group exists, so before any rank's all-reduce (the group's creation
    // waits for every rank): the first timeout, and any failure caused by it, comes at least 1.5 s later.
    const auto start = std::chrono::steady_clock::now();
    auto pg = make_group(store, rank, 3, 4096, "timeout", 1500ms);
    std::vector<at::Tensor> t{at::ones({4})};
    if (rank == 2) {
      // Late: it comes only once rank 0 or 1 has failed (an event, not a sleep a busy machine could
      // outlast; 60 s only bounds a hang).
      lockstep::testing::wait_until([&] { return a_peer_failed.load(); }, 60s);
      pg->allreduce(t)->wait();
      return;
    }
    try {
      pg->allreduce(t)->wait();
    } catch (...) {
      if (rank == 0) elapsed = std::chrono::steady_clock::now() - start;
      a_peer_failed = true;
      throw;
    }
  });
  for (int r = 0; r < 3; ++r) ASSERT_FALSE(outcomes[r].ok) << "rank " << r << " did not fail";
  // The first rank to time out names rank 2; the others report that rank's failure.
  const std::string all = outcomes[0].error + outcomes[1].error;
  EXPECT_NE(all.find("waiting for rank(s) 2"), std::string::npos) << all;
  EXPECT_NE(outcomes[2].error.find("failed, so this group is unusable"), std::string::npos)
      << outcomes[2].error;
  EXPECT_GE(elapsed, 1500ms);  // the timeout was waited (a lower bound: no busy machine makes it shorter)
}

TEST(Shm, NoSegmentIsLeftInDevShmOnceEveryRankAttached) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  const std::string run_id = "leftover-check-" + std::to_string(::getpid());
  auto count_segments = [&] {
    int found = 0;
    if (DIR* dir = ::opendir("/dev/shm")) {
      while (dirent* entry = ::readdir(dir)) {
        found += std::string(entry->d_name).rfind("lockstep-" + run_id + "-", 0) == 0;
      }
      ::closedir(dir);
    }
    return found;
  };
  expect_all_ok(run_ranks(2, [&](int rank) {
    auto pg = make_group(store, rank, 2, 4096, run_id);
    pg->barrier()->wait();
    EXPECT_EQ(count_segments(), 0);
    std::vector<at::Tensor> t{at::ones({3})};
    pg->allreduce(t)->wait();  // still works with the name unlinked
    EXPECT_TRUE(at::equal(t[0], at::full({3}, 2.0f)));
    at::Tensor shared = pg->new_shared_tensor(1000, at::kFloat);  // its segment is unlinked too
    pg->barrier()->wait();  // rank 0 unlinks once every rank has mapped it
    EXPECT_EQ(count_segments(), 0);
    shared.fill_(1.0f);
    std::vector<at::Tensor> s{shared};
    pg->allreduce(s)->wait();
    EXPECT_TRUE(at::equal(shared, at::full({1000}, 2.0f)));
  }));
}

TEST(Shm, BadInputIsRejectedNamingTheValue) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  try {
    ShmOptions().slot_bytes(100).validate();
    FAIL() << "slot_bytes 100 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("got 100"), std::string::npos) << e.what();
  }
  auto pg = make_group(store, 0, 1, 4096);
  std::vector<at::Tensor> two{at::ones({2}), at::ones({2})};
  try {
    pg->allreduce(two);
    FAIL() << "two tensors accepted";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("one tensor per rank, got 2"), std::string::npos) << e.what();
  }
  std::vector<at::Tensor> flags{at::ones({2}, at::kBool)};
  try {
    pg->allreduce(flags);
    FAIL() << "bool tensor accepted";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot reduce Bool"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_backend("tcp"), std::invalid_argument);
  EXPECT_EQ(parse_backend("hier"), Backend::kHier);
  EXPECT_EQ(parse_backend("shm"), Backend::kShm);
}

// Hierarchical: 2 "nodes" x 2 ranks as threads (shm inside a node, Gloo over loopback between leaders).
TEST(Hier, AllReduceAcrossTwoNodesMatchesTheFlatResult) {
  const int world = 4;
  auto store = c10::make_intrusive<c10d::HashStore>();
  expect_all_ok(run_ranks(world, [&](int rank) {
    auto pg = init_process_group(lockstep::testing::thread_group_options(rank, world, store, "hier-test")
                                     .num_nodes(2)
                                     .local_world_size(2)
                                     .interface("lo"));  // auto: multi-node CPU job -> hier
    ASSERT_EQ(pg.backend(), Backend::kHier);
    ASSERT_EQ(pg.native()->getBackendName(), "hier");
    for (int64_t n : {0, 1, 1001, 300007}) {
      for (auto op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
        auto t = input_for(rank, n, at::kDouble);
        pg.all_reduce(t, op).wait();
        const auto code = op == ReduceOp::kSum   ? c10d::ReduceOp::SUM
                          : op == ReduceOp::kAvg ? c10d::ReduceOp::AVG
                                                 : c10d::ReduceOp::MAX;
        expect_matches(t, reference(world, n, at::kDouble, code), "hier n=" + std::to_string(n));
      }
    }
    auto b = at::full({5}, rank == 3 ? 7.0 : 0.0);
    pg.broadcast(b, 3).wait();
    EXPECT_TRUE(at::equal(b, at::full({5}, 7.0)));
    pg.barrier();
    pg.shutdown();
  }));
}

TEST(Hier, UnevenNodesAreRefusedNamingTheNumbers) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto outcomes = run_ranks(3, [&](int rank) {
    init_process_group(lockstep::testing::thread_group_options(rank, 3, store, "hier-uneven")
                           .num_nodes(2)
                           .local_world_size(2)
                           .interface("lo")
                           .backend(Backend::kHier));
  });
  for (const auto& o : outcomes) {
    ASSERT_FALSE(o.ok);
    EXPECT_NE(o.error.find("world_size 3 is not num_nodes 2 x local_world_size 2"), std::string::npos)
        << o.error;
  }
}

TEST(Shm, AutoPicksShmForRanksOnThisHost) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  expect_all_ok(run_ranks(2, [&](int rank) {
    auto pg = init_process_group(lockstep::testing::thread_group_options(rank, 2, store, "auto-pick"));
    EXPECT_EQ(pg.backend(), Backend::kShm);
    pg.shutdown();
  }));
}

}  // namespace
}  // namespace lockstep::comm
