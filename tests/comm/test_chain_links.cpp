// Point-to-point between neighbouring ranks (ChainLinks), with ranks as threads over an in-memory store:
// tensors of every rank's own shape and dtype arrive whole in both directions, in the order sent, also when
// both directions cross as a pipeline schedule crosses them; the ends of the chain refuse what has no peer.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <chrono>
#include <future>
#include <stdexcept>
#include <string>

#include "lockstep/comm/chain_links.h"
#include "lockstep/comm/process_group.h"
#include "thread_group.h"

namespace lockstep::comm {
namespace {

using lockstep::testing::expect_all_ok;
using lockstep::testing::run_ranks;

// What rank `from` sends as its message `k`: its own shape ([k + 1, from + 1]) and a dtype by direction.
at::Tensor message(int from, int k, at::ScalarType dtype) {
  return at::arange((k + 1) * (from + 1), at::TensorOptions().dtype(dtype)).reshape({k + 1, from + 1}) +
         100 * from + 1000 * k;
}

class ChainLinksWorld : public ::testing::TestWithParam<int> {};

// Every rank sends three messages each way before receiving any (sends are posted, never waited for in
// turn), then receives its neighbours' in order: shape, dtype and values as sent.
TEST_P(ChainLinksWorld, TensorsArriveWholeAndInOrderInBothDirectionsOnGlooAndShm) {
  const int world = GetParam();
  for (Backend backend : {Backend::kGloo, Backend::kShm}) {
    SCOPED_TRACE(to_string(backend));
    auto store = c10::make_intrusive<c10d::HashStore>();
    expect_all_ok(run_ranks(world, [&](int rank) {
      auto pg = init_process_group(
          lockstep::testing::thread_group_options(rank, world, store, "chain").backend(backend));
      ChainLinks links(pg, "pp");
      ASSERT_EQ(links.rank(), rank);
      for (int k = 0; k < 3; ++k) {
        if (rank + 1 < world) links.send_next(message(rank, k, at::kFloat));
        if (rank > 0) links.send_previous(message(rank, k, at::kDouble));
      }
      for (int k = 0; k < 3; ++k) {
        if (rank > 0) {
          const at::Tensor got = links.receive_previous(at::kCPU);
          EXPECT_EQ(got.scalar_type(), at::kFloat);
          EXPECT_TRUE(at::equal(got, message(rank - 1, k, at::kFloat))) << "from " << rank - 1 << " #" << k;
        }
        if (rank + 1 < world) {
          const at::Tensor got = links.receive_next(at::kCPU);
          EXPECT_EQ(got.scalar_type(), at::kDouble);
          EXPECT_TRUE(at::equal(got, message(rank + 1, k, at::kDouble))) << "from " << rank + 1 << " #" << k;
        }
      }
      links.wait_sends();
      EXPECT_EQ(links.pending_sends(), 0u);
      links.shutdown();
      pg.shutdown();
    }));
  }
}

// A relay down the chain and back, each rank waiting on what it receives before it sends: rank 0's tensor
// comes back having gained one per rank each way (a pipeline's forward, then its backward).
TEST_P(ChainLinksWorld, ARelayDownAndBackPassesThroughEveryRank) {
  const int world = GetParam();
  lockstep::testing::run_group_ranks(world, "chain-relay", [&](int rank, ProcessGroup& pg) {
    ChainLinks links(pg, "pp");
    at::Tensor x = rank == 0 ? at::zeros({2, 3}) : links.receive_previous(at::kCPU);
    x = x + 1;
    if (rank + 1 < world) {
      links.send_next(x);
      x = links.receive_next(at::kCPU);
    }
    x = x + 1;
    if (rank > 0) links.send_previous(x);
    if (rank == 0) {
      EXPECT_TRUE(at::equal(x, at::full({2, 3}, 2.0 * world)));
    }
    links.shutdown();
  });
}

INSTANTIATE_TEST_SUITE_P(Worlds, ChainLinksWorld, ::testing::Values(1, 2, 3, 8));

// The ends of the chain have no neighbour on one side: a send or receive there is a programming error.
TEST(ChainLinks, TheEndsRefuseWhatHasNoPeer) {
  lockstep::testing::run_group_ranks(2, "chain-ends", [&](int rank, ProcessGroup& pg) {
    ChainLinks links(pg, "pp");
    if (rank == 0) {
      EXPECT_THROW(links.send_previous(at::zeros({1})), std::logic_error);
      EXPECT_THROW(links.receive_previous(at::kCPU), std::logic_error);
    } else {
      EXPECT_THROW(links.send_next(at::zeros({1})), std::logic_error);
      EXPECT_THROW(links.receive_next(at::kCPU), std::logic_error);
    }
    links.shutdown();
  });
}

// A receive whose sender never sends fails after the collective timeout, naming the link's broadcast.
TEST(ChainLinks, AReceiveWithoutASendTimesOutNamingTheLink) {
  using namespace std::chrono_literals;
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::promise<void> received;  // rank 1 is done with its receive: rank 0 may leave
  std::shared_future<void> done = received.get_future().share();
  auto outcomes = run_ranks(2, [&](int rank) {
    auto pg = init_process_group(
        lockstep::testing::thread_group_options(rank, 2, store, "chain-timeout").collective_timeout(1s));
    ChainLinks links(pg, "pp");
    if (rank == 1) {
      try {
        links.receive_previous(at::kCPU);
        ADD_FAILURE() << "receive_previous returned without a send";
      } catch (const CommError& e) {
        EXPECT_NE(std::string(e.what()).find("pp-next0"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("broadcast"), std::string::npos) << e.what();
      }
      received.set_value();
    } else {
      ASSERT_EQ(done.wait_for(20s), std::future_status::ready) << "rank 1's receive never ended";
    }
    links.shutdown();
    pg.shutdown();
  });
  expect_all_ok(outcomes);
}

}  // namespace
}  // namespace lockstep::comm
