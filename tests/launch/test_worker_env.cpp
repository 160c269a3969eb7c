#include "lockstep/launch/worker_env.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace lockstep::launch {
namespace {

std::map<std::string, std::string> as_map(const EnvEntries& env) {
  std::map<std::string, std::string> m;
  for (const std::string& e : env) {
    const auto eq = e.find('=');
    EXPECT_TRUE(m.emplace(e.substr(0, eq), e.substr(eq + 1)).second) << "duplicate entry " << e;
  }
  return m;
}

LaunchConfig two_nodes_of_four() {
  LaunchConfig c;
  c.command = {"true"};
  c.nproc_per_node = 4;
  c.nnodes = 2;
  c.node_rank = 1;
  c.master_addr = "10.0.0.1";
  c.master_port = 1234;
  c.run_id = "job7";
  c.max_restarts = 3;
  c.omp_num_threads = 5;
  return c;
}

// The environment of a static launch's worker (the world as the flags fix it).
EnvEntries static_env(const LaunchConfig& c, int local_rank, int restart_count, const EnvEntries& base) {
  return worker_environment(c, c.static_world(restart_count), local_rank, base);
}

TEST(WorkerEnvironment, SetsTorchrunVariablesFromNodeAndLocalRank) {
  const auto env = as_map(static_env(two_nodes_of_four(), /*local_rank=*/2, /*restart_count=*/1, {}));
  EXPECT_EQ(env.at("RANK"), "6");
  EXPECT_EQ(env.at("LOCAL_RANK"), "2");
  EXPECT_EQ(env.at("WORLD_SIZE"), "8");
  EXPECT_EQ(env.at("LOCAL_WORLD_SIZE"), "4");
  EXPECT_EQ(env.at("GROUP_RANK"), "1");
  EXPECT_EQ(env.at("GROUP_WORLD_SIZE"), "2");
  EXPECT_EQ(env.at("ROLE_RANK"), "6");
  EXPECT_EQ(env.at("ROLE_WORLD_SIZE"), "8");
  EXPECT_EQ(env.at("ROLE_NAME"), "default");
  EXPECT_EQ(env.at("MASTER_ADDR"), "10.0.0.1");
  EXPECT_EQ(env.at("MASTER_PORT"), "1234");
  EXPECT_EQ(env.at("TORCHELASTIC_RESTART_COUNT"), "1");
  EXPECT_EQ(env.at("TORCHELASTIC_MAX_RESTARTS"), "3");
  EXPECT_EQ(env.at("TORCHELASTIC_RUN_ID"), "job7");
  EXPECT_EQ(env.at("TORCHELASTIC_USE_AGENT_STORE"), "False");
  EXPECT_EQ(env.at("OMP_NUM_THREADS"), "5");
  EXPECT_EQ(env.at("TORCH_NCCL_ASYNC_ERROR_HANDLING"), "1");
  EXPECT_EQ(env.at("TORCHELASTIC_SIGNALS_TO_HANDLE"), "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1");
}

// The launcher's job secret (given or made) replaces an inherited one; a waived one says so.
TEST(WorkerEnvironment, HandsTheJobSecretToTheWorkers) {
  LaunchConfig c = two_nodes_of_four();
  c.job_secret = "the-launchers-secret-0123456789";
  auto env = as_map(static_env(c, 0, 0, {"LOCKSTEP_JOB_SECRET=an-inherited-one-0123456789"}));
  EXPECT_EQ(env.at("LOCKSTEP_JOB_SECRET"), "the-launchers-secret-0123456789");
  EXPECT_EQ(env.count("LOCKSTEP_NO_JOB_SECRET"), 0u);
  c.job_secret = "";
  c.no_job_secret = true;
  env = as_map(static_env(c, 0, 0, {}));
  EXPECT_EQ(env.count("LOCKSTEP_JOB_SECRET"), 0u);
  EXPECT_EQ(env.at("LOCKSTEP_NO_JOB_SECRET"), "1");
}

TEST(WorkerEnvironment, KeepsTheUsersNcclErrorHandling) {
  const auto env = as_map(static_env(two_nodes_of_four(), /*local_rank=*/0, /*restart_count=*/0,
                                     {"TORCH_NCCL_ASYNC_ERROR_HANDLING=3"}));
  EXPECT_EQ(env.at("TORCH_NCCL_ASYNC_ERROR_HANDLING"), "3");
}

TEST(WorkerEnvironment, RankZeroOfNodeZero) {
  LaunchConfig c = two_nodes_of_four();
  c.node_rank = 0;
  const auto env = as_map(static_env(c, /*local_rank=*/0, /*restart_count=*/0, {}));
  EXPECT_EQ(env.at("RANK"), "0");
  EXPECT_EQ(env.at("GROUP_RANK"), "0");
  EXPECT_EQ(env.at("TORCHELASTIC_RESTART_COUNT"), "0");
}

TEST(WorkerEnvironment, ReplacesInheritedTorchrunVariablesAndKeepsTheRest) {
  const EnvEntries base = {"PATH=/usr/bin",
                           "RANK=99",
                           "WORLD_SIZE=99",
                           "HOME=/root",
                           "EMPTY=",
                           "WITH_EQUALS=a=b",
                           "TORCHELASTIC_USE_AGENT_STORE=True"};
  const EnvEntries env = static_env(two_nodes_of_four(), /*local_rank=*/0, /*restart_count=*/0, base);
  const auto m = as_map(env);
  EXPECT_EQ(m.at("RANK"), "4");
  EXPECT_EQ(m.at("WORLD_SIZE"), "8");
  EXPECT_EQ(m.at("TORCHELASTIC_USE_AGENT_STORE"), "False");
  EXPECT_EQ(m.at("PATH"), "/usr/bin");
  EXPECT_EQ(m.at("EMPTY"), "");
  EXPECT_EQ(m.at("WITH_EQUALS"), "a=b");
  // Untouched entries keep their order, first.
  ASSERT_GE(env.size(), 4u);
  EXPECT_EQ(env[0], "PATH=/usr/bin");
  EXPECT_EQ(env[1], "HOME=/root");
  EXPECT_EQ(env[2], "EMPTY=");
  EXPECT_EQ(env[3], "WITH_EQUALS=a=b");
}

TEST(WorkerEnvironment, KeepsUserOmpNumThreads) {
  const auto env = as_map(static_env(two_nodes_of_four(), 0, 0, {"OMP_NUM_THREADS=7"}));
  EXPECT_EQ(env.at("OMP_NUM_THREADS"), "7");
}

TEST(WorkerEnvironment, KeepsUserOmpNumThreadsEvenWhenEmpty) {
  const auto env = as_map(static_env(two_nodes_of_four(), 0, 0, {"OMP_NUM_THREADS="}));
  EXPECT_EQ(env.at("OMP_NUM_THREADS"), "");
}

// A launcher built on this one (lockstep launch's --num_cpu_threads_per_process) sets OMP_NUM_THREADS in
// worker_env: it stands instead of the default, once (as_map fails on a duplicate), over the inherited one.
TEST(WorkerEnvironment, WorkerEnvStandsInsteadOfTheLaunchersDefaults) {
  LaunchConfig c = two_nodes_of_four();
  c.worker_env = {{"OMP_NUM_THREADS", "3"}, {"PYTHONUNBUFFERED", "0"}};
  const auto env = as_map(static_env(c, 0, 0, {"OMP_NUM_THREADS=9"}));
  EXPECT_EQ(env.at("OMP_NUM_THREADS"), "3");
  EXPECT_EQ(env.at("PYTHONUNBUFFERED"), "0");
}

TEST(WorkerEnvironment, SetsPythonUnbufferedSoThatLinesArriveAsPrinted) {
  const auto env = as_map(static_env(two_nodes_of_four(), 0, 0, {"PATH=/usr/bin"}));
  EXPECT_EQ(env.at("PYTHONUNBUFFERED"), "1");
}

TEST(WorkerEnvironment, KeepsUserPythonUnbuffered) {
  EXPECT_EQ(as_map(static_env(two_nodes_of_four(), 0, 0, {"PYTHONUNBUFFERED=0"})).at("PYTHONUNBUFFERED"),
            "0");
  EXPECT_EQ(as_map(static_env(two_nodes_of_four(), 0, 0, {"PYTHONUNBUFFERED="})).at("PYTHONUNBUFFERED"), "");
}

// A node of a c10d round: its place comes from the round (nodes before it with other worker counts, a
// role of its own), not from the flags.
TEST(WorkerEnvironment, TakesTheNodesPlaceFromItsRound) {
  LaunchConfig c = two_nodes_of_four();
  c.role = "trainer";
  c.worker_env = {{"ACCELERATE_MIXED_PRECISION", "fp16"}};
  NodeWorld w;
  w.node_rank = 2;
  w.nnodes = 3;
  w.rank_offset = 5;  // nodes 0 and 1 hold 2 and 3 workers
  w.world_size = 13;
  w.role_rank_offset = 3;
  w.role_world_size = 7;
  w.master_addr = "10.0.0.9";
  w.master_port = 4321;
  w.restart_count = 2;
  const auto env = as_map(worker_environment(c, w, /*local_rank=*/1, {}));
  EXPECT_EQ(env.at("RANK"), "6");
  EXPECT_EQ(env.at("LOCAL_RANK"), "1");
  EXPECT_EQ(env.at("WORLD_SIZE"), "13");
  EXPECT_EQ(env.at("LOCAL_WORLD_SIZE"), "4");
  EXPECT_EQ(env.at("GROUP_RANK"), "2");
  EXPECT_EQ(env.at("GROUP_WORLD_SIZE"), "3");
  EXPECT_EQ(env.at("ROLE_RANK"), "4");
  EXPECT_EQ(env.at("ROLE_WORLD_SIZE"), "7");
  EXPECT_EQ(env.at("ROLE_NAME"), "trainer");
  EXPECT_EQ(env.at("MASTER_ADDR"), "10.0.0.9");
  EXPECT_EQ(env.at("MASTER_PORT"), "4321");
  EXPECT_EQ(env.at("TORCHELASTIC_RESTART_COUNT"), "2");
  EXPECT_EQ(env.at("ACCELERATE_MIXED_PRECISION"), "fp16");
}

TEST(WorkerEnvironment, CurrentEnvironmentHasPath) {
  ::setenv("LOCKSTEP_LAUNCH_TEST_VAR", "x=1", 1);  // NOLINT(concurrency-mt-unsafe): single thread
  const EnvEntries env = current_environment();
  EXPECT_NE(std::find(env.begin(), env.end(), "LOCKSTEP_LAUNCH_TEST_VAR=x=1"), env.end());
}

}  // namespace
}  // namespace lockstep::launch
