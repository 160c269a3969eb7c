// Who starts the ranks (launch/rank_start.h): one rule for `lockstep fit` and a Trainer program, for each
// way a process can be started — a terminal, torchrun/lockstep run, srun with a task per rank, srun with a
// task per node, an sbatch script outside srun — and the refusals, each naming the option.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "lockstep/launch/rank_start.h"

namespace lockstep::launch {
namespace {

const std::vector<std::string> kCommand{"/bin/train", "--x"};

env::Environment torchrun_rank(int local_world, int nodes) {
  env::Environment e;
  e.source = env::Source::kTorchrun;
  e.local_world_size = local_world;
  e.world_size = local_world * nodes;
  e.num_nodes = nodes;
  return e;
}

env::SlurmNode slurm_node(int nodes, int node_rank, int tasks) {
  env::SlurmNode node;
  node.num_nodes = nodes;
  node.node_rank = node_rank;
  node.tasks_on_node = tasks;
  node.master_addr = "node0";
  node.master_port = 12345;
  node.run_id = "slurm-7.0";
  return node;
}

std::string error_of(const RankRequest& request, const env::Environment& environment,
                     const std::optional<env::SlurmNode>& node = std::nullopt) {
  try {
    plan_rank_start(request, kCommand, environment, node);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(RankStart, APlainProcessWithOneDeviceIsTheOnlyRank) {
  const auto plan = plan_rank_start(RankRequest{}, kCommand, env::Environment(), std::nullopt);
  EXPECT_TRUE(plan.become_rank);
  EXPECT_FALSE(plan.launch.has_value());
  EXPECT_EQ(plan.environment.world_size, 1);
}

TEST(RankStart, APlainProcessWithDevicesStartsThemStandalone) {
  RankRequest request;
  request.devices = 3;
  const auto plan = plan_rank_start(request, kCommand, env::Environment(), std::nullopt);
  ASSERT_TRUE(plan.launch.has_value());
  EXPECT_FALSE(plan.become_rank);
  EXPECT_EQ(plan.launch->nproc_per_node().count(), 3);
  EXPECT_TRUE(plan.launch->standalone());
  EXPECT_EQ(plan.launch->direct_stdout_local_rank(), 0);
}

TEST(RankStart, AlwaysLaunchStartsEvenOneRankWithItsRestarts) {
  RankRequest request;
  request.always_launch = true;
  request.max_restarts = 2;
  const auto plan = plan_rank_start(request, kCommand, env::Environment(), std::nullopt);
  ASSERT_TRUE(plan.launch.has_value());
  EXPECT_EQ(plan.launch->nproc_per_node().count(), 1);
  EXPECT_EQ(plan.launch->max_restarts(), 2);
}

TEST(RankStart, ARankOfAJobBecomesThatRankWhenTheOptionsAgree) {
  RankRequest request;
  request.devices = 2;
  request.num_nodes = 2;
  const auto plan = plan_rank_start(request, kCommand, torchrun_rank(2, 2), std::nullopt);
  EXPECT_TRUE(plan.become_rank);
  EXPECT_EQ(plan.environment.source, env::Source::kTorchrun);
  EXPECT_EQ(plan.environment.world_size, 4);
}

TEST(RankStart, OptionsContradictingTheJobNameBothNumbers) {
  RankRequest request;
  request.devices = 4;
  EXPECT_NE(error_of(request, torchrun_rank(2, 1)).find("devices 4 contradicts the environment"),
            std::string::npos);
  request.devices.reset();
  request.num_nodes = 3;
  EXPECT_NE(error_of(request, torchrun_rank(2, 2)).find("num_nodes 3 contradicts the environment"),
            std::string::npos);
  request.num_nodes.reset();
  request.max_restarts = 1;
  request.program = "lockstep fit";
  EXPECT_NE(error_of(request, torchrun_rank(2, 1)).find("give the restarts to that launcher"),
            std::string::npos);
}

TEST(RankStart, SrunWithATaskPerNodeStartsTheNodesRanks) {
  RankRequest request;
  request.devices = 4;
  env::Environment slurm = torchrun_rank(1, 2);
  slurm.source = env::Source::kSlurm;
  const auto plan = plan_rank_start(request, kCommand, slurm, slurm_node(2, 1, 1));
  ASSERT_TRUE(plan.launch.has_value());
  EXPECT_EQ(plan.launch->nproc_per_node().count(), 4);
  EXPECT_EQ(plan.launch->nnodes(), 2);
  EXPECT_EQ(plan.launch->node_rank(), 1);
  EXPECT_EQ(plan.launch->master_addr().value_or(""), "node0");
  EXPECT_EQ(plan.launch->master_port().value_or(0), 12345);
  EXPECT_FALSE(plan.launch->direct_stdout_local_rank().has_value());  // node 0 speaks
  request.num_nodes = 3;
  EXPECT_NE(
      error_of(request, slurm, slurm_node(2, 1, 1)).find("num_nodes 3 does not match the Slurm job's 2"),
      std::string::npos);
}

TEST(RankStart, SrunWithATaskPerRankBecomesTheRank) {
  env::Environment slurm = torchrun_rank(4, 1);
  slurm.source = env::Source::kSlurm;
  const auto plan = plan_rank_start(RankRequest{}, kCommand, slurm, slurm_node(1, 0, 4));
  EXPECT_TRUE(plan.become_rank);
  EXPECT_EQ(plan.environment.local_world_size, 4);
}

TEST(RankStart, AnSbatchScriptOutsideSrunIsAProcessOfItsOwn) {
  RankRequest request;
  request.devices = 2;
  env::Environment job = torchrun_rank(8, 2);  // what SLURM_* describe: the job, not this process
  job.source = env::Source::kSlurm;
  const auto plan = plan_rank_start(request, kCommand, job, std::nullopt);
  ASSERT_TRUE(plan.launch.has_value());
  EXPECT_TRUE(plan.launch->standalone());
  EXPECT_EQ(plan.launch->nproc_per_node().count(), 2);
}

TEST(RankStart, WhatAPlainProcessCannotStartIsRefusedWithTheFix) {
  RankRequest request;
  request.num_nodes = 2;
  request.program = "train";
  EXPECT_NE(error_of(request, env::Environment()).find("num_nodes 2 needs one launcher per node"),
            std::string::npos);
  request.num_nodes.reset();
  request.devices = 2;
  request.mpi_backend = true;
  EXPECT_NE(error_of(request, env::Environment())
                .find("backend 'mpi' needs its ranks started by mpirun: run `mpirun -np 2 train"),
            std::string::npos);
}

}  // namespace
}  // namespace lockstep::launch
