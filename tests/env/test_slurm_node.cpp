// slurm_node(): what a launcher started by srun, one per node, takes from Slurm.

#include <gtest/gtest.h>

#include <lockstep/env/environment.h>
#include <lockstep/env/slurm.h>
#include "fake_env.h"

#include <map>
#include <string>

namespace lockstep::env {
namespace {

using fake_env::table;
using fake_env::Vars;

// What srun sets for task `node` of `srun -N2 --ntasks-per-node=1` in job 12190, step 0.
Vars one_task_per_node(int node) {
  return {{"SLURM_PROCID", std::to_string(node)},
          {"SLURM_NTASKS", "2"},
          {"SLURM_LOCALID", "0"},
          {"SLURM_NODEID", std::to_string(node)},
          {"SLURM_NNODES", "2"},
          {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"},
          {"SLURM_TASKS_PER_NODE", "2(x2)"},
          {"SLURM_STEP_NODELIST", "lsnode[1-2]"},
          {"SLURM_JOB_NODELIST", "lsnode[1-2]"},
          {"SLURM_JOB_ID", "12190"},
          {"SLURM_STEP_ID", "0"}};
}

TEST(SlurmNode, NoneOutsideSlurm) {
  EXPECT_FALSE(slurm_node(table({})));
}

TEST(SlurmNode, NoneInTheBatchScript) {
  // sbatch's batch step sets SLURM_PROCID=0 and the job's variables, but no step id.
  Vars vars = one_task_per_node(0);
  vars.erase("SLURM_STEP_ID");
  vars.erase("SLURM_STEP_TASKS_PER_NODE");
  vars.erase("SLURM_STEP_NODELIST");
  EXPECT_FALSE(slurm_node(table(vars)));
}

TEST(SlurmNode, NoneInsideAWorkerOfAnotherLauncher) {
  // A worker of `lockstep run` inside a Slurm job inherits SLURM_*, but its launcher set RANK.
  Vars vars = one_task_per_node(1);
  vars["RANK"] = "3";
  vars["WORLD_SIZE"] = "4";
  EXPECT_FALSE(slurm_node(table(vars)));
}

TEST(SlurmNode, OneLauncherPerNodeTakesNodesMasterPortAndJob) {
  for (int node = 0; node < 2; ++node) {
    const auto result = slurm_node(table(one_task_per_node(node)));
    ASSERT_TRUE(result);
    EXPECT_EQ(result->num_nodes, 2);
    EXPECT_EQ(result->node_rank, node);
    EXPECT_EQ(result->tasks_on_node, 1) << "the step's list (1(x2)), not the job's (2(x2))";
    EXPECT_EQ(result->master_addr, "lsnode1");
    EXPECT_EQ(result->master_port, 10000 + 12190 % 10000);
    EXPECT_EQ(result->run_id, "slurm-12190.0");
  }
}

TEST(SlurmNode, MasterVariablesWin) {
  Vars vars = one_task_per_node(0);
  vars["MASTER_ADDR"] = "10.1.2.3";
  vars["MASTER_PORT"] = "29555";
  const auto result = slurm_node(table(vars));
  ASSERT_TRUE(result);
  EXPECT_EQ(result->master_addr, "10.1.2.3");
  EXPECT_EQ(result->master_port, 29555);
}

TEST(SlurmNode, ReportsSeveralTasksOnTheNode) {
  // srun --ntasks-per-node=2: the caller must refuse to start a launcher per task.
  Vars vars = one_task_per_node(1);
  vars["SLURM_NTASKS"] = "4";
  vars["SLURM_PROCID"] = "3";
  vars["SLURM_LOCALID"] = "1";
  vars["SLURM_STEP_TASKS_PER_NODE"] = "2(x2)";
  const auto result = slurm_node(table(vars));
  ASSERT_TRUE(result);
  EXPECT_EQ(result->tasks_on_node, 2);
  EXPECT_EQ(result->node_rank, 1);
}

TEST(SlurmNode, GarbledVariablesNameTheVariable) {
  Vars vars = one_task_per_node(0);
  vars["SLURM_STEP_NODELIST"] = "lsnode[2-1]";
  try {
    slurm_node(table(vars));
    ADD_FAILURE() << "expected EnvError";
  } catch (const EnvError& e) {
    EXPECT_NE(std::string(e.what()).find("SLURM_STEP_NODELIST='lsnode[2-1]'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lockstep::env
