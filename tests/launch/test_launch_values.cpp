// The values torchrun's flags take, parsed as torchrun parses them (rendezvous_options.h,
// worker_output.h, the signal list), and what resolve() makes of the rendezvous flags.
#include <gtest/gtest.h>

#include <csignal>
#include <string>

#include "lockstep/launch/launch_config.h"
#include "lockstep/launch/launch_error.h"
#include "lockstep/launch/rendezvous_options.h"
#include "lockstep/launch/worker_output.h"

namespace lockstep::launch {
namespace {

// Options for `true` with a job secret, as a job that spans nodes needs (test_launch_config: JobSecret).
LaunchOptions secret_opts() {
  return LaunchOptions({"true"}).job_secret("a-secret-for-the-tests-0123456789");
}

using namespace std::chrono_literals;

// The LaunchError `f` throws, or "" when it throws none.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const LaunchError& e) {
    return e.what();
  }
  return "";
}

TEST(RendezvousValues, NnodesIsACountOrARange) {
  EXPECT_EQ(parse_nnodes("3"), NodeRange(3));
  EXPECT_EQ(parse_nnodes("2:4"), NodeRange(2, 4));
  EXPECT_TRUE(parse_nnodes("2:2").fixed());
  for (const char* bad : {"", "0", "3:2", "0:2", "1:", ":2", "a", "1:2:3", "-1", "+2"}) {
    EXPECT_NE(error_of([&] { parse_nnodes(bad); }).find("nnodes='" + std::string(bad) + "'"),
              std::string::npos)
        << bad;
  }
}

TEST(RendezvousValues, BackendsAreStaticAndC10d) {
  EXPECT_EQ(parse_rdzv_backend("static"), RdzvBackend::kStatic);
  EXPECT_EQ(parse_rdzv_backend("c10d"), RdzvBackend::kC10d);
  EXPECT_NE(error_of([] { parse_rdzv_backend("etcd-v2"); }).find("needs an etcd server"), std::string::npos);
  EXPECT_NE(error_of([] { parse_rdzv_backend("C10D"); }).find("rdzv_backend='C10D'"), std::string::npos);
}

TEST(RendezvousValues, EndpointsTakeTorchrunsDefaultPort) {
  EXPECT_EQ(parse_endpoint("node0").host, "node0");
  EXPECT_EQ(parse_endpoint("node0").port, 29400);
  EXPECT_EQ(parse_endpoint("10.0.0.1:1234").port, 1234);
  EXPECT_EQ(parse_endpoint("[::1]:5").host, "::1");
  EXPECT_EQ(parse_endpoint("[::1]:5").port, 5);
  EXPECT_EQ(parse_endpoint("fe80::1").host, "fe80::1");  // a bare IPv6 address
  EXPECT_EQ(parse_endpoint("localhost:0").port, 0);
  for (const char* bad : {"", ":29400", "h:", "h:x", "h:65536", "[::1", "[::1]x"}) {
    EXPECT_NE(error_of([&] { parse_endpoint(bad); }).find("rdzv_endpoint='" + std::string(bad) + "'"),
              std::string::npos)
        << bad;
  }
}

TEST(RendezvousValues, ConfKeysHaveTorchrunsNamesAndDefaults) {
  const RdzvConf defaults = parse_rdzv_conf("");
  EXPECT_EQ(defaults.join_timeout, 600s);
  EXPECT_EQ(defaults.last_call_timeout, 30s);
  EXPECT_EQ(defaults.close_timeout, 30s);
  EXPECT_EQ(defaults.read_timeout, 60s);
  EXPECT_EQ(defaults.keep_alive_interval, 5s);
  EXPECT_EQ(defaults.keep_alive_max_attempt, 3);
  EXPECT_EQ(defaults.keep_alive_timeout(), 15s);
  EXPECT_FALSE(defaults.is_host.has_value());

  const RdzvConf c = parse_rdzv_conf(
      "join_timeout=10, last_call_timeout=0,close_timeout=2.5,read_timeout=7,heartbeat_timeout=3,"
      "keep_alive_interval=0.5,keep_alive_max_attempt=6,is_host=false,store_type=tcp");
  EXPECT_EQ(c.join_timeout, 10s);
  EXPECT_EQ(c.last_call_timeout, 0s);
  EXPECT_EQ(c.close_timeout, 2500ms);
  EXPECT_EQ(c.read_timeout, 7s);
  EXPECT_EQ(c.heartbeat_timeout, 3s);
  EXPECT_EQ(c.keep_alive_timeout(), 3s);
  EXPECT_EQ(c.is_host, false);
  EXPECT_TRUE(c.notes.empty());
  EXPECT_EQ(parse_rdzv_conf("cas_backoff_max_seconds=1").notes.size(), 1u);
  EXPECT_EQ(parse_rdzv_conf("is_host=1").is_host, true);

  EXPECT_NE(error_of([] { parse_rdzv_conf("join_timeout"); }).find("expected key=value"), std::string::npos);
  EXPECT_NE(error_of([] { parse_rdzv_conf("read_timeout=0"); }).find("read_timeout='0'"), std::string::npos);
  EXPECT_NE(error_of([] { parse_rdzv_conf("is_host=maybe"); }).find("is_host='maybe'"), std::string::npos);
  EXPECT_NE(error_of([] { parse_rdzv_conf("keep_alive_max_attempt=0"); }).find("keep_alive_max_attempt='0'"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_rdzv_conf("timeout=3"); }).find("unknown key 'timeout'"), std::string::npos);
}

TEST(OutputValues, StdStreamsAreOneValueOrOnePerLocalRank) {
  EXPECT_EQ(StdStreams::parse("3", "tee").of(5), kBothStreams);
  const StdStreams some = StdStreams::parse("0:1,2:2", "redirects");
  EXPECT_EQ(some.of(0), kStdout);
  EXPECT_EQ(some.of(1), kNoStream);
  EXPECT_EQ(some.of(2), kStderr);
  for (const char* bad : {"4", "-1", "a", "0:4", "0:", ":1", "0:1,x"}) {
    EXPECT_NE(error_of([&] { StdStreams::parse(bad, "tee"); }).find("tee='" + std::string(bad) + "'"),
              std::string::npos)
        << bad;
  }
}

TEST(OutputValues, LinePrefixesFillTorchrunsMacros) {
  EXPECT_EQ(render_line_prefix("[${role_name}${local_rank}]:", 5, 1, "default", "h"), "[default1]:");
  EXPECT_EQ(render_line_prefix("${hostname}:${rank}: ${other}", 12, 0, "r", "gpu7"), "gpu7:12: ${other}");
}

TEST(OutputValues, FiltersAndRankListsAreTorchrunsCommaLists) {
  EXPECT_EQ(parse_filter_list("apple,orange"), (std::vector<std::string>{"apple", "orange"}));
  EXPECT_EQ(parse_filter_list("a,,b,c"), (std::vector<std::string>{"a,b", "c"}));
  EXPECT_TRUE(parse_filter_list("").empty());
  EXPECT_EQ(parse_local_ranks_filter("0,2"), (std::set<int>{0, 2}));
  EXPECT_NE(error_of([] { parse_local_ranks_filter("0,,1"); }).find("local_ranks_filter='0,,1'"),
            std::string::npos);
}

TEST(SignalValues, NamesWithOrWithoutSig) {
  EXPECT_EQ(parse_signals("SIGTERM,INT,SIGUSR2"), (std::vector<int>{SIGTERM, SIGINT, SIGUSR2}));
  EXPECT_EQ(signal_list_text(default_signals_to_handle()), "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1");
  EXPECT_NE(error_of([] { parse_signals("SIGSTOP"); }).find("'SIGSTOP' is not a signal"), std::string::npos);
}

TEST(ResolveRendezvous, C10dTakesTheEndpointAndKeepsNodeRankAsAWish) {
  const LaunchConfig c = resolve(secret_opts()
                                     .rdzv_backend(RdzvBackend::kC10d)
                                     .nnodes({2, 3})
                                     .rdzv_endpoint("node0")
                                     .node_rank(2)
                                     .run_id("j"));
  EXPECT_EQ(c.min_nodes, 2);
  EXPECT_EQ(c.max_nodes, 3);
  EXPECT_EQ(c.rdzv_endpoint.host, "node0");
  EXPECT_EQ(c.rdzv_endpoint.port, 29400);
  EXPECT_EQ(c.asked_node_rank, 2);
  EXPECT_EQ(c.run_id, "j");
  EXPECT_EQ(resolve(secret_opts().rdzv_backend(RdzvBackend::kC10d)).rdzv_endpoint.host, "localhost");
  // torchrun's default id: every node must agree on it without being told.
  EXPECT_EQ(resolve(secret_opts().rdzv_backend(RdzvBackend::kC10d).nnodes({1, 2})).run_id, "none");
  // A one-node c10d job too, as torchrun (seed 000's line: --nnodes=1 --rdzv_backend=c10d, no --rdzv_id).
  EXPECT_EQ(resolve(secret_opts().rdzv_backend(RdzvBackend::kC10d)).run_id, "none");
}

// Random where torchrun makes one (standalone, one node on a port of the launcher's choosing); "none"
// where nodes must agree without being told, as torchrun.
TEST(ResolveRendezvous, RunIdsAreRandomOnlyForAJobOnItsOwn) {
  EXPECT_EQ(resolve(secret_opts()).run_id.size(), 16u);
  EXPECT_EQ(resolve(secret_opts().standalone(true)).run_id.size(), 16u);
  EXPECT_EQ(resolve(secret_opts().master_port(29555)).run_id, "none");
  EXPECT_EQ(resolve(secret_opts().nnodes(2)).run_id, "none");
}

TEST(ResolveRendezvous, StaticTakesTheMasterFromAnEndpoint) {
  const LaunchConfig c = resolve(secret_opts().nnodes(2).rdzv_endpoint("10.0.0.1:1234"));
  EXPECT_EQ(c.master_addr, "10.0.0.1");
  EXPECT_EQ(c.master_port, 1234);
  EXPECT_NE(error_of([] {
              resolve(secret_opts().nnodes(2).rdzv_endpoint("h:1").master_port(5));
            }).find("rdzv_endpoint='h:1' names the master"),
            std::string::npos);
}

TEST(ResolveRendezvous, MistakesAreNamed) {
  EXPECT_NE(error_of([] {
              resolve(secret_opts().nnodes({1, 2}));
            }).find("needs rdzv_backend=c10d"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              resolve(secret_opts().rdzv_backend(RdzvBackend::kC10d).nnodes({1, 2}).rdzv_endpoint("h:0"));
            }).find("port 0"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              resolve(secret_opts().standalone(true).rdzv_backend(RdzvBackend::kC10d));
            }).find("standalone"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              resolve(secret_opts().worker_env({{"RANK", "3"}}));
            }).find("RANK is one of torchrun's variables"),
            std::string::npos);
  EXPECT_NE(error_of([] { resolve(secret_opts().role("a/b")); }).find("role='a/b'"), std::string::npos);
}

TEST(ResolveProgram, ScriptsModulesAndRunPathRunUnderPython) {
  const auto command = [](LaunchOptions o) { return resolve(o.python("/bin/sh")).command; };
  EXPECT_EQ(command(LaunchOptions({"train.py", "--lr", "1"})),
            (std::vector<std::string>{"/bin/sh", "-u", "train.py", "--lr", "1"}));
  EXPECT_EQ(command(LaunchOptions({"./train", "x"})), (std::vector<std::string>{"./train", "x"}));
  EXPECT_EQ(command(LaunchOptions({"pkg.main"}).program_mode(ProgramMode::kModule)),
            (std::vector<std::string>{"/bin/sh", "-u", "-m", "pkg.main"}));
  EXPECT_EQ(command(LaunchOptions({"train.py"}).program_mode(ProgramMode::kExecutable)),
            (std::vector<std::string>{"train.py"}));
  const std::vector<std::string> run_path =
      command(LaunchOptions({"/a/t.py", "x"}).program_mode(ProgramMode::kRunPath));
  ASSERT_EQ(run_path.size(), 6u);
  EXPECT_EQ(run_path[2], "-c");
  EXPECT_NE(run_path[3].find("runpy.run_path(sys.argv[0], run_name='__main__')"), std::string::npos);
  EXPECT_EQ(run_path[4], "/a/t.py");
  EXPECT_NE(error_of([] {
              resolve(LaunchOptions({"t.py"}).python("/no/such/python3"));
            }).find("python='/no/such/python3' is not an executable"),
            std::string::npos);
}

}  // namespace
}  // namespace lockstep::launch
