// Rendezvous over a real c10d::TCPStore: ranks as threads on loopback, and the failures users hit
// (port taken, nobody listening, another job on the port) as errors that name the address.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <ATen/ATen.h>

#include <chrono>
#include <future>

#include "lockstep/comm/network.h"
#include "lockstep/comm/process_group.h"
#include "thread_ranks.h"

namespace lockstep::comm {
namespace {

using lockstep::testing::run_ranks;
using namespace std::chrono_literals;

// A listening socket on a kernel-chosen loopback port; closed on destruction.
class Listener {
 public:
  Listener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = 0;
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(::listen(fd_, 4), 0);
    socklen_t len = sizeof(addr);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
  }
  ~Listener() { ::close(fd_); }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// A port nothing listens on (bound then released).
int unused_port() {
  Listener l;
  return l.port();
}

ProcessGroupOptions tcp_options(int rank, int world, int port, const std::string& run_id = "tcp-run") {
  return ProcessGroupOptions(rank, world)
      .master_addr("127.0.0.1")
      .master_port(port)
      .run_id(run_id)
      .rendezvous_timeout(20s)
      .collective_timeout(20s)
      .gloo_threads(1);
}

TEST(TcpRendezvous, ThreeRanksAllReduceOverLoopback) {
  const int port = unused_port();
  auto outcomes = run_ranks(3, [&](int rank) {
    auto pg = init_process_group(tcp_options(rank, 3, port));
    auto t = at::full({100}, static_cast<float>(rank + 1));
    pg.all_reduce(t).wait();
    if (!at::equal(t, at::full({100}, 6.0f))) throw std::runtime_error("wrong sum");
    pg.shutdown();
  });
  for (size_t r = 0; r < outcomes.size(); ++r) EXPECT_TRUE(outcomes[r].ok) << r << ": " << outcomes[r].error;
}

TEST(TcpRendezvous, PortInUseOnRankZeroNamesThePort) {
  Listener taken;
  try {
    init_process_group(tcp_options(0, 2, taken.port()).rendezvous_timeout(3s));
    FAIL() << "rank 0 started on a port that is in use";
  } catch (const CommError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("port " + std::to_string(taken.port()) + " is already in use"), std::string::npos)
        << msg;
    EXPECT_NE(msg.find("master_port"), std::string::npos) << msg;
    EXPECT_EQ(e.rank(), 0);
  }
}

TEST(TcpRendezvous, UnreachableMasterFailsWithinTheTimeoutNamingHostAndPort) {
  const int port = unused_port();
  const auto start = std::chrono::steady_clock::now();
  try {
    init_process_group(tcp_options(1, 2, port).rendezvous_timeout(2s));
    FAIL() << "connected to a master that does not exist";
  } catch (const CommError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << msg;
    EXPECT_NE(msg.find("MASTER_ADDR"), std::string::npos) << msg;
    EXPECT_NE(msg.find("rank 1"), std::string::npos) << msg;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 30s);  // its 2 s timeout: only a hang passes 30 s
}

TEST(TcpRendezvous, UnresolvableMasterNamesTheHost) {
  try {
    init_process_group(tcp_options(1, 2, 29999).master_addr("no-such-host.invalid").rendezvous_timeout(2s));
    FAIL() << "resolved a host that cannot exist";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("no-such-host.invalid"), std::string::npos) << e.what();
  }
}

TEST(TcpRendezvous, ProcessOfAnotherJobOnTheSamePortIsRefused) {
  const int port = unused_port();
  std::promise<void> job_up_promise, stranger_done_promise;
  std::shared_future<void> job_up = job_up_promise.get_future().share();
  std::shared_future<void> stranger_done = stranger_done_promise.get_future().share();
  auto outcomes = run_ranks(3, [&](int i) {
    if (i < 2) {
      // The real job: ranks 0 and 1 of "job-a". It stays up until the stranger has been turned away.
      auto pg = init_process_group(tcp_options(i, 2, port, "job-a"));
      if (i == 0) job_up_promise.set_value();
      if (stranger_done.wait_for(20s) != std::future_status::ready) throw std::runtime_error("stranger hung");
      auto t = at::ones({4});
      pg.all_reduce(t).wait();
      if (!at::equal(t, at::full({4}, 2.0f))) throw std::runtime_error("job disturbed by the stranger");
      pg.shutdown();
    } else {
      struct Done {
        std::promise<void>& p;
        ~Done() { p.set_value(); }
      } done{stranger_done_promise};
      if (job_up.wait_for(20s) != std::future_status::ready) throw std::runtime_error("job never came up");
      init_process_group(tcp_options(1, 2, port, "job-b").rendezvous_timeout(5s));
    }
  });
  EXPECT_TRUE(outcomes[0].ok) << outcomes[0].error;
  EXPECT_TRUE(outcomes[1].ok) << outcomes[1].error;
  ASSERT_FALSE(outcomes[2].ok);
  EXPECT_NE(outcomes[2].error.find("belongs to run id 'job-a'"), std::string::npos) << outcomes[2].error;
  EXPECT_NE(outcomes[2].error.find("'job-b'"), std::string::npos) << outcomes[2].error;
}

TEST(TcpRendezvous, WorldSizesThatDisagreeAreRefusedNamingBoth) {
  // Two "nodes" started with different --nnodes / --nproc-per-node: rank 0 says 2 ranks, rank 1 says 3.
  // Rank 1 is refused at once naming both sizes; rank 0, left alone, fails at its rendezvous timeout.
  const int port = unused_port();
  auto outcomes = run_ranks(2, [&](int rank) {
    init_process_group(
        tcp_options(rank, rank == 0 ? 2 : 3, port, "ws-run").rendezvous_timeout(rank == 0 ? 4s : 10s));
  });
  ASSERT_FALSE(outcomes[1].ok);
  EXPECT_NE(
      outcomes[1].error.find("rank 0 of run 'ws-run' has WORLD_SIZE=2 but this process has WORLD_SIZE=3"),
      std::string::npos)
      << outcomes[1].error;
  EXPECT_NE(outcomes[1].error.find("every rank (and every node's launcher) must use the same world size"),
            std::string::npos)
      << outcomes[1].error;
  EXPECT_FALSE(outcomes[0].ok) << "rank 0 formed a job of 2 without rank 1";
}

TEST(Network, LocalAddressForLoopbackIsLoopback) {
  EXPECT_EQ(local_address_for("127.0.0.1"), "127.0.0.1");
  EXPECT_EQ(local_address_for("localhost").rfind("127.", 0) == 0 || local_address_for("localhost") == "::1",
            true);
  EXPECT_THROW(local_address_for("no-such-host.invalid"), std::runtime_error);
}

TEST(Network, PortIsFreeSeesAListener) {
  Listener l;
  EXPECT_FALSE(port_is_free(l.port()));
  EXPECT_TRUE(port_is_free(unused_port()));
}

}  // namespace
}  // namespace lockstep::comm
