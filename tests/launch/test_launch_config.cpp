#include "lockstep/launch/launch_config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/launch/launch_error.h"

namespace lockstep::launch {
namespace {

// Options for `true`, with a job secret, as a job that spans nodes needs (JobSecret below tests without).
LaunchOptions opts() {
  return LaunchOptions({"true"}).job_secret("a-secret-for-the-tests-0123456789");
}

int cores() {
  return std::max(1, static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN)));
}

bool is_hex16(const std::string& s) {
  return s.size() == 16 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

// Unsets the job secret's variables for one test (a developer's shell may have them).
class JobSecret : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : {"LOCKSTEP_JOB_SECRET", "LOCKSTEP_JOB_SECRET_FILE", "LOCKSTEP_NO_JOB_SECRET"}) {
      if (const char* value = std::getenv(name)) saved_.emplace_back(name, value);
      ::unsetenv(name);
    }
  }
  void TearDown() override {
    for (const auto& [name, value] : saved_) ::setenv(name.c_str(), value.c_str(), 1);
  }
  static std::string error_of(const LaunchOptions& options) {
    try {
      resolve(options);
    } catch (const LaunchError& e) {
      return e.what();
    }
    return "";
  }
  std::vector<std::pair<std::string, std::string>> saved_;
};

TEST_F(JobSecret, AJobThatStaysOnItsNodeGetsANewOne) {
  const LaunchOptions alone({"true"});
  const std::string first = resolve(alone).job_secret;
  EXPECT_EQ(first.size(), 64u);
  EXPECT_NE(first, resolve(alone).job_secret);
  EXPECT_EQ(resolve(LaunchOptions({"true"}).master_port(29555)).job_secret.size(), 64u);
  EXPECT_EQ(resolve(LaunchOptions({"true"}).in_place(true)).job_secret.size(), 64u);
  EXPECT_EQ(resolve(LaunchOptions({"true"}).rdzv_backend(RdzvBackend::kC10d)).job_secret.size(), 64u);
}

TEST_F(JobSecret, AJobOthersMayJoinNeedsOneOrTheOptOut) {
  EXPECT_NE(error_of(LaunchOptions({"true"}).nnodes(2)).find("spans nodes (nnodes=2) and has no job secret"),
            std::string::npos);
  EXPECT_NE(error_of(LaunchOptions({"true"}).rdzv_backend(RdzvBackend::kC10d).nnodes({1, 2}))
                .find("spans nodes (nnodes=1:2)"),
            std::string::npos);
  const std::string joinable = error_of(LaunchOptions({"true"}).in_place(true).master_port(29555));
  EXPECT_NE(joinable.find("serves a store other launchers may join"), std::string::npos) << joinable;
  EXPECT_NE(joinable.find("LOCKSTEP_JOB_SECRET="), std::string::npos) << joinable;
  EXPECT_NE(joinable.find("--no-job-secret"), std::string::npos) << joinable;

  const LaunchConfig waived = resolve(LaunchOptions({"true"}).nnodes(2).no_job_secret(true));
  EXPECT_TRUE(waived.no_job_secret);
  EXPECT_EQ(waived.job_secret, "");
  ::setenv("LOCKSTEP_NO_JOB_SECRET", "1", 1);
  EXPECT_TRUE(resolve(LaunchOptions({"true"}).nnodes(2)).no_job_secret);
}

TEST_F(JobSecret, AGivenOneIsUsedAndAWeakOneRefused) {
  ::setenv("LOCKSTEP_JOB_SECRET", "from-the-environment-0123", 1);
  EXPECT_EQ(resolve(LaunchOptions({"true"}).nnodes(2)).job_secret, "from-the-environment-0123");
  EXPECT_EQ(resolve(LaunchOptions({"true"})).job_secret, "from-the-environment-0123");
  EXPECT_EQ(resolve(LaunchOptions({"true"}).job_secret("given-in-the-options-0123")).job_secret,
            "given-in-the-options-0123");
  EXPECT_NE(error_of(LaunchOptions({"true"}).job_secret_file("/x/secret").no_job_secret(true))
                .find("no_job_secret and a job secret"),
            std::string::npos);
  const std::string weak = error_of(LaunchOptions({"true"}).job_secret("short"));
  EXPECT_NE(weak.find("job_secret has 5 bytes; use at least 16"), std::string::npos) << weak;
  EXPECT_EQ(weak.find("short"), std::string::npos) << weak;
  EXPECT_NE(error_of(LaunchOptions({"true"}).job_secret_file("/nonexistent/secret"))
                .find("cannot open the job secret file '/nonexistent/secret'"),
            std::string::npos);
}

TEST(Resolve, DefaultsAreTorchrunsDefaults) {
  const LaunchConfig c = resolve(opts());
  EXPECT_EQ(c.nproc_per_node, 1);
  EXPECT_EQ(c.nnodes, 1);
  EXPECT_EQ(c.node_rank, 0);
  EXPECT_EQ(c.master_addr, "127.0.0.1");
  // One node and no master: a free port (torchrun runs such a job standalone); several nodes: 29500.
  EXPECT_TRUE(c.master_port >= 1 && c.master_port <= 65535) << c.master_port;
  EXPECT_EQ(resolve(opts().nnodes(2)).master_port, 29500);
  EXPECT_EQ(c.rdzv_backend, RdzvBackend::kStatic);
  EXPECT_EQ(c.max_restarts, 0);
  EXPECT_TRUE(c.log_dir.empty());
  EXPECT_EQ(c.grace_period, std::chrono::seconds(3));
  EXPECT_TRUE(is_hex16(c.run_id)) << c.run_id;
  EXPECT_EQ(c.command, std::vector<std::string>{"true"});
}

TEST(Resolve, SingleNodeRunIdsAreRandom) {
  EXPECT_NE(resolve(opts()).run_id, resolve(opts()).run_id);
}

TEST(Resolve, MultiNodeRunIdDefaultsToNone) {
  EXPECT_EQ(resolve(opts().nnodes(2).node_rank(1)).run_id, "none");
  EXPECT_EQ(resolve(opts().nnodes(2).run_id("job7")).run_id, "job7");
}

TEST(Resolve, ExplicitValuesAreKept) {
  const LaunchConfig c = resolve(opts()
                                     .nproc_per_node(3)
                                     .nnodes(4)
                                     .node_rank(2)
                                     .master_addr("10.1.2.3")
                                     .master_port(1234)
                                     .max_restarts(5)
                                     .log_dir("/tmp/x")
                                     .grace_period(std::chrono::milliseconds(250)));
  EXPECT_EQ(c.nproc_per_node, 3);
  EXPECT_EQ(c.world_size(), 12);
  EXPECT_EQ(c.rank_of(1), 7);
  EXPECT_EQ(c.master_addr, "10.1.2.3");
  EXPECT_EQ(c.master_port, 1234);
  EXPECT_EQ(c.max_restarts, 5);
  EXPECT_EQ(c.log_dir, "/tmp/x");
  EXPECT_EQ(c.grace_period.count(), 250);
}

TEST(Resolve, StandalonePicksAFreeLocalPortAndARandomId) {
  const LaunchConfig c = resolve(opts().standalone(true));
  EXPECT_EQ(c.master_addr, "127.0.0.1");
  EXPECT_GE(c.master_port, 1);
  EXPECT_LE(c.master_port, 65535);
  EXPECT_TRUE(is_hex16(c.run_id)) << c.run_id;
}

TEST(Resolve, OmpNumThreadsIsCoresPerWorkerAtLeastOne) {
  EXPECT_EQ(resolve(opts().nproc_per_node(1)).omp_num_threads, cores());
  EXPECT_EQ(resolve(opts().nproc_per_node(2)).omp_num_threads, std::max(1, cores() / 2));
  EXPECT_EQ(resolve(opts().nproc_per_node(1000)).omp_num_threads, 1);
}

TEST(Resolve, AutoUsesTheDeviceCountWhenThereAreDevices) {
  const LaunchConfig c =
      resolve(opts().nproc_per_node(NprocPerNode::automatic()).device_counter([] { return 3; }));
  EXPECT_EQ(c.nproc_per_node, 3);
}

TEST(Resolve, AutoUsesOnlineCoresWithoutDevices) {
  const LaunchConfig c =
      resolve(opts().nproc_per_node(NprocPerNode::automatic()).device_counter([] { return 0; }));
  EXPECT_EQ(c.nproc_per_node, cores());
  const LaunchConfig d = resolve(opts().nproc_per_node(NprocPerNode::automatic()).device_counter(nullptr));
  EXPECT_EQ(d.nproc_per_node, cores());
}

TEST(Resolve, GpuUsesTheDeviceCountAndRefusesANodeWithout) {
  EXPECT_EQ(
      resolve(opts().nproc_per_node(NprocPerNode::gpus()).device_counter([] { return 4; })).nproc_per_node,
      4);
  try {
    resolve(opts().nproc_per_node(NprocPerNode::gpus()).device_counter([] { return 0; }));
    ADD_FAILURE() << "gpu resolved on a node without GPUs";
  } catch (const LaunchError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "nproc_per_node='gpu' starts one worker per GPU, and this node shows none"),
              std::string::npos)
        << e.what();
  }
}

TEST(NprocPerNode, ParsesCountsAndAuto) {
  EXPECT_TRUE(NprocPerNode::parse("gpu").is_gpu());
  EXPECT_FALSE(NprocPerNode::parse("gpu").is_auto());
  EXPECT_TRUE(NprocPerNode::parse("auto").is_auto());
  EXPECT_FALSE(NprocPerNode::parse("4").is_auto());
  EXPECT_EQ(NprocPerNode::parse("4").count(), 4);
}

TEST(NprocPerNode, RejectsOtherTextNamingTheFlag) {
  for (const char* bad :
       {"", "0", "-1", "two", "4x", "AUTO", "99999999999", "+2", " 2", "2 ", "0x2", "2147483648", "1e3"}) {
    try {
      NprocPerNode::parse(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const LaunchError& e) {
      EXPECT_NE(std::string(e.what()).find("nproc_per_node='" + std::string(bad) + "'"), std::string::npos)
          << e.what();
    }
  }
}

TEST(NprocPerNode, AcceptsTheLargestInt) {
  EXPECT_EQ(NprocPerNode::parse("2147483647").count(), 2147483647);
  EXPECT_EQ(NprocPerNode::parse("007").count(), 7);
}

TEST(NprocPerNode, CudaVisibleDevicesIsReadAsCudaReadsIt) {
  using detail::count_cuda_visible_devices;
  EXPECT_EQ(count_cuda_visible_devices("0,1", 4), 2);
  EXPECT_EQ(count_cuda_visible_devices(" 0 , 1 ", 4), 2);
  EXPECT_EQ(count_cuda_visible_devices("3", 4), 1);
  EXPECT_EQ(count_cuda_visible_devices("0,1,2,3", 2), 2);  // indices 2 and 3 do not exist
  EXPECT_EQ(count_cuda_visible_devices("GPU-8a2b, MIG-1c3d", 1), 1);
  EXPECT_EQ(count_cuda_visible_devices("GPU-8a2b,GPU-9f00", 4), 2);
  EXPECT_EQ(count_cuda_visible_devices("01", 2), 1);
  // The first invalid entry hides it and everything after it.
  EXPECT_EQ(count_cuda_visible_devices("-1", 4), 0);
  EXPECT_EQ(count_cuda_visible_devices("-1,0,1", 4), 0);
  EXPECT_EQ(count_cuda_visible_devices("1,-1,0", 4), 1);
  EXPECT_EQ(count_cuda_visible_devices("0,7,1", 4), 1);
  EXPECT_EQ(count_cuda_visible_devices("0,0", 4), 1);
  EXPECT_EQ(count_cuda_visible_devices("none", 4), 0);
  EXPECT_EQ(count_cuda_visible_devices("", 4), 0);
  EXPECT_EQ(count_cuda_visible_devices("0,,1", 4), 1);
}

TEST(Resolve, AutoFallsBackToCoresWhenCudaVisibleDevicesHidesEveryGpu) {
  // What `CUDA_VISIBLE_DEVICES=-1 lockstep run --nproc-per-node auto` counts on a GPU node.
  const LaunchConfig c = resolve(opts().nproc_per_node(NprocPerNode::automatic()).device_counter([] {
    return detail::count_cuda_visible_devices("-1", 8);
  }));
  EXPECT_EQ(c.nproc_per_node, cores());
}

TEST(Resolve, RejectsMoreWorkersThanAnIntCanNumberNamingBothFlags) {
  try {
    resolve(opts().nnodes(65536).nproc_per_node(65536));
    FAIL() << "resolve accepted 2^32 workers";
  } catch (const LaunchError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("nnodes=65536"), std::string::npos) << message;
    EXPECT_NE(message.find("nproc_per_node=65536"), std::string::npos) << message;
  }
  const LaunchConfig c = resolve(opts().nnodes(2).nproc_per_node(1073741823).node_rank(1));
  EXPECT_EQ(c.world_size(), 2147483646);
  EXPECT_EQ(c.rank_of(1073741822), 2147483645);
}

struct BadOptions {
  std::string name;
  std::function<LaunchOptions()> make;
  std::string message_part;
};
// NOLINTNEXTLINE(readability-identifier-naming): the name GoogleTest looks for
void PrintTo(const BadOptions& options, std::ostream* os) {
  *os << options.name;
}

class ResolveRejects : public ::testing::TestWithParam<BadOptions> {};

TEST_P(ResolveRejects, NamingTheFlagAndValue) {
  try {
    resolve(GetParam().make());
    FAIL() << "resolve accepted the options";
  } catch (const LaunchError& e) {
    EXPECT_NE(std::string(e.what()).find(GetParam().message_part), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Options, ResolveRejects,
    ::testing::Values(
        BadOptions{"EmptyCommand", [] { return LaunchOptions({}); }, "no worker command"},
        BadOptions{"EmptyProgram", [] { return LaunchOptions({""}); }, "no worker command"},
        BadOptions{"ZeroProcs", [] { return opts().nproc_per_node(0); }, "nproc_per_node=0"},
        BadOptions{"ZeroNodes", [] { return opts().nnodes(0); }, "nnodes=0"},
        BadOptions{"NodeRankTooBig", [] { return opts().nnodes(2).node_rank(2); },
                   "node_rank=2 is out of range for nnodes=2"},
        BadOptions{"NegativeNodeRank", [] { return opts().node_rank(-1); }, "node_rank=-1"},
        BadOptions{"PortTooBig", [] { return opts().master_port(70000); }, "master_port=70000"},
        BadOptions{"PortZero", [] { return opts().master_port(0); }, "master_port=0"},
        BadOptions{"EmptyAddr", [] { return opts().master_addr(""); }, "master_addr=''"},
        BadOptions{"NegativeRestarts", [] { return opts().max_restarts(-1); }, "max_restarts=-1"},
        BadOptions{"EmptyRunId", [] { return opts().run_id(""); }, "run_id=''"},
        BadOptions{"EmptyLogDir", [] { return opts().log_dir(""); }, "log_dir=''"},
        BadOptions{"NegativeGrace", [] { return opts().grace_period(std::chrono::milliseconds(-1)); },
                   "grace_period=-1ms"},
        BadOptions{"StandaloneMultiNode", [] { return opts().standalone(true).nnodes(2); },
                   "standalone runs a single-node job, but nnodes=2"},
        BadOptions{"StandaloneWithPort", [] { return opts().standalone(true).master_port(1234); },
                   "master_port=1234"},
        BadOptions{"StandaloneWithAddr", [] { return opts().standalone(true).master_addr("h"); },
                   "master_addr=h"},
        BadOptions{"InPlaceWithRestarts", [] { return opts().in_place(true).max_restarts(1); },
                   "max_restarts=1 with in_place: choose one way to recover"},
        BadOptions{"InPlaceOnTwoNodes", [] { return opts().in_place(true).nnodes(2).master_port(29500); },
                   "in_place with 2 node(s) and the static rendezvous is not supported yet"},
        BadOptions{"ZeroHeartbeatTimeout",
                   [] { return opts().in_place(true).heartbeat_timeout(std::chrono::milliseconds(0)); },
                   "heartbeat_timeout=0"}),
    [](const ::testing::TestParamInfo<BadOptions>& info) { return info.param.name; });

}  // namespace
}  // namespace lockstep::launch
