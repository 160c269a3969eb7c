// The c10d rendezvous of elastic jobs (ElasticRendezvous, RoundWatch) with real agents: each agent is a
// thread with its own rendezvous object and its own connections to one store on loopback, as each node's
// launcher would be. Arrival order is made by waiting on the store (a node has taken its ticket), never
// by sleeping; every wait is bounded by kHang, which only turns a hang into a failure.
#include "lockstep/launch/detail/elastic_rendezvous.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../support/wait_until.h"
#include "lockstep/comm/store_client.h"
#include "lockstep/launch/detail/host.h"
#include "lockstep/launch/launch_error.h"

namespace lockstep::launch::detail {
namespace {

using namespace std::chrono_literals;
constexpr auto kHang = 60s;

// One node's launcher, as far as the rendezvous goes.
struct Agent {
  Agent(int port, int min, int max, int nproc, RdzvConf conf, std::string run_id = "rdzv-test") {
    config.rdzv_backend = RdzvBackend::kC10d;
    config.min_nodes = min;
    config.max_nodes = max;
    config.nnodes = max;
    config.nproc_per_node = nproc;
    config.rdzv_endpoint = Endpoint{"127.0.0.1", port};
    config.rdzv_conf = std::move(conf);
    config.run_id = std::move(run_id);
    config.monitor_interval = 20ms;
  }
  void connect() {
    rendezvous = std::make_unique<ElasticRendezvous>(config, [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(mutex);
      said.push_back(line);
    });
  }
  std::string transcript() {
    std::lock_guard<std::mutex> lock(mutex);
    std::string all;
    for (const std::string& line : said) all += line + "\n";
    return all;
  }

  LaunchConfig config;
  std::unique_ptr<ElasticRendezvous> rendezvous;
  std::mutex mutex;
  std::vector<std::string> said;
};

RdzvConf conf(std::chrono::milliseconds last_call = 60s) {
  RdzvConf c;
  c.last_call_timeout = last_call;
  c.join_timeout = kHang;
  c.keep_alive_interval = 50ms;
  c.keep_alive_max_attempt = 4;
  return c;
}

// A plain client of the job's store, to see what the agents did (tickets taken) without being one.
comm::StoreClient observer(int port, int max, const std::string& run_id = "rdzv-test") {
  return comm::StoreClient(comm::TcpStoreOptions("127.0.0.1", port, run_id, max, 0).connect_timeout(10s));
}

// Starts agent.rendezvous->join() on a thread of its own and waits until it has taken ticket `ticket`
// of round 0 (so the next one started arrives after it).
std::future<Round> arrive(Agent& agent, comm::StoreClient& store, int ticket) {
  auto joined = std::async(std::launch::async, [&agent] { return agent.rendezvous->join(); });
  const std::string key = "r0/arrivals";
  EXPECT_TRUE(lockstep::testing::wait_until([&] { return store.add(key, 0) >= ticket; }, kHang))
      << "the agent never took ticket " << ticket << " of round 0";
  return joined;
}

Round get(std::future<Round>& joined) {
  if (joined.wait_for(kHang) != std::future_status::ready) {
    ADD_FAILURE() << "join() did not return";
    std::abort();  // a thread is stuck in join(): nothing sane to do
  }
  return joined.get();
}

// Connects `agents` (the first one hosts the store) and lets them arrive at round 0 in that order; returns
// each one's round once it has started.
std::vector<Round> meet(const std::vector<Agent*>& agents) {
  for (Agent* agent : agents) agent->connect();
  const Endpoint& at = agents.front()->config.rdzv_endpoint;
  comm::StoreClient store = observer(at.port, agents.front()->config.max_nodes);
  std::vector<std::future<Round>> joined;
  for (std::size_t i = 0; i < agents.size(); ++i) {
    joined.push_back(arrive(*agents[i], store, static_cast<int>(i) + 1));
  }
  std::vector<Round> rounds;
  for (auto& j : joined) rounds.push_back(get(j));
  return rounds;
}

TEST(ElasticRendezvous, NodesMeetInOrderOfArrivalAndShareOneMaster) {
  const int port = find_free_port();
  Agent a(port, 2, 3, 2, conf()), b(port, 2, 3, 1, conf()), c(port, 2, 3, 3, conf());
  const std::vector<Round> rounds = meet({&a, &b, &c});
  const Round &ra = rounds[0], &rb = rounds[1], &rc = rounds[2];
  EXPECT_TRUE(a.rendezvous->is_host());
  EXPECT_FALSE(b.rendezvous->is_host());
  for (const Round* r : {&ra, &rb, &rc}) {
    EXPECT_EQ(r->number, 0);
    ASSERT_EQ(r->nodes.size(), 3u);
    EXPECT_EQ(r->world.world_size, 6);
    EXPECT_EQ(r->world.nnodes, 3);
    EXPECT_EQ(r->world.restart_count, 0);
    EXPECT_EQ(r->world.master_addr, "127.0.0.1");
    EXPECT_EQ(r->world.master_port, ra.world.master_port);
    EXPECT_EQ(r->began_because, "the job started");
  }
  EXPECT_GT(ra.world.master_port, 0);
  EXPECT_NE(ra.world.master_port, port);
  EXPECT_EQ(ra.node_rank, 0);
  EXPECT_EQ(rb.node_rank, 1);
  EXPECT_EQ(rc.node_rank, 2);
  // Ranks follow the nodes' worker counts: a holds 0-1, b 2, c 3-5.
  EXPECT_EQ(ra.world.rank_offset, 0);
  EXPECT_EQ(rb.world.rank_offset, 2);
  EXPECT_EQ(rc.world.rank_offset, 3);
  EXPECT_EQ(rc.world.role_rank_offset, 3);
  EXPECT_EQ(rc.world.role_world_size, 6);
  EXPECT_NE(a.transcript().find("hosting the rendezvous of job 'rdzv-test'"), std::string::npos)
      << a.transcript();
}

TEST(ElasticRendezvous, RolesCountTheirOwnWorkers) {
  const int port = find_free_port();
  Agent a(port, 3, 3, 2, conf()), b(port, 3, 3, 1, conf()), c(port, 3, 3, 3, conf());
  b.config.role = "reader";
  const std::vector<Round> rounds = meet({&a, &b, &c});
  const Round &ra = rounds[0], &rb = rounds[1], &rc = rounds[2];
  EXPECT_EQ(ra.world.role_rank_offset, 0);
  EXPECT_EQ(ra.world.role_world_size, 5);  // a and c: 2 + 3
  EXPECT_EQ(rb.world.role_rank_offset, 0);
  EXPECT_EQ(rb.world.role_world_size, 1);
  EXPECT_EQ(rc.world.role_rank_offset, 2);
  EXPECT_EQ(rc.world.rank_offset, 3);
}

TEST(ElasticRendezvous, ANodeRankWishIsHonouredWhereItFits) {
  const int port = find_free_port();
  Agent a(port, 3, 3, 1, conf()), b(port, 3, 3, 1, conf()), c(port, 3, 3, 1, conf());
  b.config.asked_node_rank = 0;
  c.config.asked_node_rank = 0;  // taken by b, who arrived first: c gets the next free rank
  const std::vector<Round> rounds = meet({&a, &b, &c});
  const Round &ra = rounds[0], &rb = rounds[1], &rc = rounds[2];
  EXPECT_EQ(rb.node_rank, 0);
  EXPECT_EQ(ra.node_rank, 1);
  EXPECT_EQ(rc.node_rank, 2);
  EXPECT_TRUE(ra.notes.empty());
  ASSERT_EQ(rc.notes.size(), 1u);
  EXPECT_NE(rc.notes[0].find("another node asked for it first"), std::string::npos) << rc.notes[0];
  EXPECT_EQ(rb.world.rank_offset, 0);
  EXPECT_EQ(ra.world.rank_offset, 1);
}

TEST(ElasticRendezvous, MinNodesStartTheRoundAfterTheLastCall) {
  const int port = find_free_port();
  Agent a(port, 2, 4, 1, conf(200ms)), b(port, 2, 4, 1, conf(200ms));
  const std::vector<Round> rounds = meet({&a, &b});
  EXPECT_EQ(rounds[0].nodes.size(), 2u);
  EXPECT_EQ(rounds[1].world.world_size, 2);
  EXPECT_EQ(observer(port, 4).get_text("r0/close", 1s), "2");
}

TEST(ElasticRendezvous, TooFewNodesWithinTheJoinTimeoutIsAnErrorNamingTheCount) {
  const int port = find_free_port();
  RdzvConf c = conf();
  c.join_timeout = 300ms;
  Agent a(port, 2, 2, 1, c);
  a.connect();
  try {
    a.rendezvous->join();
    FAIL() << "join() returned with one node of at least two";
  } catch (const LaunchError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("only 1 of the at least 2 node(s) of round 0 arrived"), std::string::npos) << what;
    EXPECT_NE(what.find("join_timeout (0.3 s)"), std::string::npos) << what;
  }
}

TEST(ElasticRendezvous, ANodeArrivingAtARunningRoundEndsItAndJoinsTheNext) {
  const int port = find_free_port();
  Agent a(port, 2, 3, 1, conf(100ms)), b(port, 2, 3, 1, conf(100ms)), c(port, 2, 3, 1, conf(100ms));
  const std::vector<Round> rounds = meet({&a, &b});
  const Round &ra = rounds[0], &rb = rounds[1];
  ASSERT_EQ(ra.nodes.size(), 2u);
  c.connect();
  RoundWatch wa(*a.rendezvous, ra), wb(*b.rendezvous, rb);
  auto jc = std::async(std::launch::async, [&] { return c.rendezvous->join(); });
  ASSERT_TRUE(lockstep::testing::wait_until([&] { return wa.end() && wb.end(); }, kHang));
  for (RoundWatch* w : {&wa, &wb}) {
    EXPECT_FALSE(w->end()->failure);
    EXPECT_EQ(w->end()->reason, "1 node(s) asked to join");
  }
  auto ja1 = std::async(std::launch::async, [&] { return a.rendezvous->join(); });
  auto jb1 = std::async(std::launch::async, [&] { return b.rendezvous->join(); });
  const Round r1a = get(ja1), r1b = get(jb1), r1c = get(jc);
  for (const Round* r : {&r1a, &r1b, &r1c}) {
    EXPECT_EQ(r->number, 1);
    EXPECT_EQ(r->nodes.size(), 3u);
    EXPECT_EQ(r->world.restart_count, 1);
    EXPECT_EQ(r->began_because, "1 node(s) asked to join");
    EXPECT_TRUE(r->left.empty());
    ASSERT_EQ(r->joined.size(), 1u);  // c, by its launcher's id
    EXPECT_NE(r->describe().find("(joined: 127.0.0.1 (host "), std::string::npos) << r->describe();
  }
  EXPECT_EQ(a.rendezvous->failures(), 0);  // a membership change is not a failure
  EXPECT_NE(c.transcript().find("the job is running round 0 with 2 node(s); asking to join"),
            std::string::npos)
      << c.transcript();
}

TEST(ElasticRendezvous, ANodeThatStopsAnsweringIsDroppedAsAFailureNamingIt) {
  const int port = find_free_port();
  Agent a(port, 2, 2, 1, conf()), b(port, 2, 2, 1, conf());
  const Round ra = meet({&a, &b})[0];
  // b runs no watch: no keep-alive, as a node that was killed or stopped.
  RoundWatch wa(*a.rendezvous, ra);
  ASSERT_TRUE(lockstep::testing::wait_until([&] { return wa.end().has_value(); }, kHang));
  const RoundEnd end = *wa.end();
  EXPECT_TRUE(end.failure);
  EXPECT_NE(end.reason.find("node 1 (127.0.0.1, host "), std::string::npos) << end.reason;
  EXPECT_NE(end.reason.find("stopped answering: no keep-alive for"), std::string::npos) << end.reason;
  EXPECT_EQ(a.rendezvous->failures(), 1);
}

TEST(ElasticRendezvous, TheFirstEndStandsAndAFailureCountsOnce) {
  const int port = find_free_port();
  Agent a(port, 2, 2, 1, conf()), b(port, 2, 2, 1, conf());
  const std::vector<Round> rounds = meet({&a, &b});
  const Round &ra = rounds[0], &rb = rounds[1];
  const RoundEnd first = b.rendezvous->end_round(rb, RoundEnd{true, 3, "rank 1 exited with status 3"});
  const RoundEnd second = a.rendezvous->end_round(ra, RoundEnd{true, 143, "rank 0 was stopped"});
  EXPECT_EQ(first.reason, "rank 1 exited with status 3");
  EXPECT_EQ(second.reason, "rank 1 exited with status 3");
  EXPECT_EQ(second.status, 3);
  EXPECT_TRUE(second.failure);
  EXPECT_EQ(a.rendezvous->failures(), 1);
  EXPECT_EQ(observer(port, 2).get_text("round", 1s), "1");
}

TEST(ElasticRendezvous, AFinishedJobTurnsLateNodesAway) {
  const int port = find_free_port();
  Agent a(port, 1, 2, 1, conf(100ms)), b(port, 1, 2, 1, conf(100ms));
  const Round ra = meet({&a})[0];
  ASSERT_EQ(ra.nodes.size(), 1u);
  b.connect();
  a.rendezvous->finish(ra);  // the host, alone in its round: returns at once
  try {
    b.rendezvous->join();
    FAIL() << "a node joined a finished job";
  } catch (const JobOver& over) {
    EXPECT_NE(over.why.find("node 0 (127.0.0.1, host "), std::string::npos) << over.why;
    EXPECT_NE(over.why.find("finished round 0"), std::string::npos) << over.why;
  }
}

// The host keeps the store up for a node that is still working, and stops waiting for one that went
// silent: it never waits for a dead node.
TEST(ElasticRendezvous, TheHostServesUntilTheOthersAreDoneButNotForASilentOne) {
  const int port = find_free_port();
  RdzvConf c = conf();
  c.close_timeout = kHang;
  Agent a(port, 3, 3, 1, c), b(port, 3, 3, 1, c), d(port, 3, 3, 1, c);
  const std::vector<Round> rounds = meet({&a, &b, &d});  // d never bumps its keep-alive again: a dead node
  const Round &ra = rounds[0], &rb = rounds[1];
  comm::StoreClient store = observer(port, 3);
  auto wb = std::make_unique<RoundWatch>(*b.rendezvous, rb);
  auto host_finished = std::async(std::launch::async, [&] { a.rendezvous->finish(ra); });
  // While b is alive and not done, the host waits (whatever d does).
  ASSERT_TRUE(
      lockstep::testing::wait_until([&] { return store.try_get_text("closing").has_value(); }, kHang));
  EXPECT_EQ(host_finished.wait_for(300ms), std::future_status::timeout);
  wb.reset();
  b.rendezvous->finish(rb);
  EXPECT_EQ(host_finished.wait_for(kHang), std::future_status::ready);
}

TEST(ElasticRendezvous, ARendezvousOfAnotherJobIsRefusedNamingBothIds) {
  const int port = find_free_port();
  Agent a(port, 1, 2, 1, conf(), "job-a"), b(port, 1, 2, 1, conf(), "job-b");
  a.connect();
  try {
    b.connect();
    FAIL() << "an agent of another job connected";
  } catch (const LaunchError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("rdzv_id 'job-a'"), std::string::npos) << what;
    EXPECT_NE(what.find("rdzv_id 'job-b'"), std::string::npos) << what;
  }
}

TEST(ElasticRendezvous, LosingTheHostEndsTheRoundWithAnErrorSayingSo) {
  const int port = find_free_port();
  Agent a(port, 2, 2, 1, conf()), b(port, 2, 2, 1, conf());
  const Round rb = meet({&a, &b})[1];
  RoundWatch wb(*b.rendezvous, rb);
  a.rendezvous.reset();  // the host's launcher is gone, and its store with it
  ASSERT_TRUE(lockstep::testing::wait_until([&] { return wb.end().has_value(); }, kHang));
  EXPECT_TRUE(wb.end()->failure);
  EXPECT_NE(wb.end()->reason.find("lost the rendezvous at 127.0.0.1:" + std::to_string(port)),
            std::string::npos)
      << wb.end()->reason;
}

}  // namespace
}  // namespace lockstep::launch::detail
