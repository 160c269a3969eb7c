// from_env(): every source, precedence between sources and explicit options, and every error.

#include <gtest/gtest.h>

#include <lockstep/env/environment.h>
#include "fake_env.h"

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace lockstep::env {
namespace {

using fake_env::table;
using fake_env::Vars;

// What from_env must return; starts as the single-process defaults.
struct Expected {
  int rank = 0;
  int local_rank = 0;
  int world_size = 1;
  int local_world_size = 1;
  int node_rank = 0;
  int num_nodes = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  int restart_count = 0;
  std::string run_id = "none";
  Source source = Source::kSingleProcess;
};

struct Case {
  std::string name;
  Vars vars;
  EnvOptions options;
  Expected expected;
};

std::ostream& operator<<(std::ostream& os, const Case& c) {
  return os << c.name;
}

Expected layout(int rank, int local_rank, int world_size, int local_world_size, int node_rank, int num_nodes,
                Source source) {
  Expected e;
  e.rank = rank;
  e.local_rank = local_rank;
  e.world_size = world_size;
  e.local_world_size = local_world_size;
  e.node_rank = node_rank;
  e.num_nodes = num_nodes;
  e.source = source;
  return e;
}

Expected with_master(Expected e, std::string addr, int port) {
  e.master_addr = std::move(addr);
  e.master_port = port;
  return e;
}

Expected with_job(Expected e, std::string run_id, int restart_count) {
  e.run_id = std::move(run_id);
  e.restart_count = restart_count;
  return e;
}

class FromEnv : public testing::TestWithParam<Case> {};

TEST_P(FromEnv, ReadsEveryField) {
  const Case& c = GetParam();
  const Environment env = from_env(c.options, table(c.vars));
  const Expected& e = c.expected;
  EXPECT_EQ(env.rank, e.rank);
  EXPECT_EQ(env.local_rank, e.local_rank);
  EXPECT_EQ(env.world_size, e.world_size);
  EXPECT_EQ(env.local_world_size, e.local_world_size);
  EXPECT_EQ(env.node_rank, e.node_rank);
  EXPECT_EQ(env.num_nodes, e.num_nodes);
  EXPECT_EQ(env.master_addr, e.master_addr);
  EXPECT_EQ(env.master_port, e.master_port);
  EXPECT_EQ(env.restart_count, e.restart_count);
  EXPECT_EQ(env.run_id, e.run_id);
  EXPECT_EQ(to_string(env.source), std::string(to_string(e.source)));
  EXPECT_EQ(env.is_distributed(), e.world_size > 1);
}

const Vars kTorchrunFull = {{"RANK", "5"},
                            {"LOCAL_RANK", "1"},
                            {"WORLD_SIZE", "8"},
                            {"LOCAL_WORLD_SIZE", "4"},
                            {"GROUP_RANK", "1"},
                            {"GROUP_WORLD_SIZE", "2"},
                            {"MASTER_ADDR", "node0"},
                            {"MASTER_PORT", "29400"},
                            {"TORCHELASTIC_RESTART_COUNT", "2"},
                            {"TORCHELASTIC_RUN_ID", "job42"}};

// Slurm, 4 nodes with 2, 2, 2 and 1 tasks; this is global rank 5, the second task of the third node.
const Vars kSlurmFull = {{"SLURM_PROCID", "5"},
                         {"SLURM_NTASKS", "7"},
                         {"SLURM_LOCALID", "1"},
                         {"SLURM_NODEID", "2"},
                         {"SLURM_NNODES", "4"},
                         {"SLURM_TASKS_PER_NODE", "2(x3),1"},
                         {"SLURM_JOB_NODELIST", "gpu[01-04]"},
                         {"SLURM_JOB_ID", "123456"},
                         {"SLURM_STEP_ID", "0"}};

Vars with(Vars base, const Vars& changes) {
  for (const auto& [k, v] : changes) base[k] = v;
  return base;
}

Vars without(Vars base, const std::vector<std::string>& names) {
  for (const auto& name : names) base.erase(name);
  return base;
}

const std::string kTfTwoWorkers =
    R"({"cluster": {"worker": ["host1:2222", "host2:2223"]}, "task": {"type": "worker", "index": 1}})";
const std::string kTfChief =
    R"({"cluster": {"chief": ["c0:1111"], "worker": ["w1:2222", "w2:2222"]}, "task": {"type": "worker", "index": 1}})";

const Expected kSlurmFullExpected =
    with_job(with_master(layout(5, 1, 7, 2, 2, 4, Source::kSlurm), "gpu01", 10000 + 123456 % 10000),
             "slurm-123456.0", 0);

INSTANTIATE_TEST_SUITE_P(
    Sources, FromEnv,
    testing::Values(
        Case{"NothingSetIsASingleProcess", {}, {}, Expected{}},
        Case{"UnrelatedVariablesIgnored", {{"HOME", "/root"}, {"LOCAL_RANK", "0"}}, {}, Expected{}},
        // torchrun
        Case{"TorchrunFull",
             kTorchrunFull,
             {},
             with_job(with_master(layout(5, 1, 8, 4, 1, 2, Source::kTorchrun), "node0", 29400), "job42", 2)},
        Case{"TorchrunMinimalIsOneNode",
             {{"RANK", "1"}, {"WORLD_SIZE", "2"}},
             {},
             layout(1, 1, 2, 2, 0, 1, Source::kTorchrun)},
        Case{"TorchrunLeadingZerosAccepted",
             {{"RANK", "01"}, {"WORLD_SIZE", "002"}},
             {},
             layout(1, 1, 2, 2, 0, 1, Source::kTorchrun)},
        Case{"TorchrunNodesFromGroupWorldSize",
             {{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"GROUP_WORLD_SIZE", "2"}, {"MASTER_ADDR", "h0"}},
             {},
             with_master(layout(3, 1, 4, 2, 1, 2, Source::kTorchrun), "h0", 29500)},
        Case{"TorchrunNodesFromDivision",
             without(kTorchrunFull, {"GROUP_WORLD_SIZE"}),
             {},
             with_job(with_master(layout(5, 1, 8, 4, 1, 2, Source::kTorchrun), "node0", 29400), "job42", 2)},
        Case{"TorchrunUnevenNodesFromLockstepNnodes",
             {{"RANK", "4"},
              {"WORLD_SIZE", "5"},
              {"LOCAL_RANK", "0"},
              {"LOCAL_WORLD_SIZE", "1"},
              {"GROUP_RANK", "2"},
              {"LOCKSTEP_NNODES", "3"},
              {"MASTER_ADDR", "h0"}},
             {},
             with_master(layout(4, 0, 5, 1, 2, 3, Source::kTorchrun), "h0", 29500)},
        Case{"TorchrunLockstepNnodesBeatsGroupWorldSize",
             {{"RANK", "0"},
              {"WORLD_SIZE", "4"},
              {"LOCKSTEP_NNODES", "4"},
              {"GROUP_WORLD_SIZE", "2"},
              {"MASTER_ADDR", "h0"}},
             {},
             with_master(layout(0, 0, 4, 1, 0, 4, Source::kTorchrun), "h0", 29500)},
        // Slurm
        Case{"SlurmFull", kSlurmFull, {}, kSlurmFullExpected},
        Case{"SlurmLastNodeHasOneTask",
             with(kSlurmFull, {{"SLURM_PROCID", "6"}, {"SLURM_NODEID", "3"}, {"SLURM_LOCALID", "0"}}),
             {},
             with_job(with_master(layout(6, 0, 7, 1, 3, 4, Source::kSlurm), "gpu01", 13456), "slurm-123456.0",
                      0)},
        Case{"SlurmStepNodelistPreferred",
             with(kSlurmFull, {{"SLURM_STEP_NODELIST", "gpu[03-04],gpu[07-08]"}}),
             {},
             with_master(kSlurmFullExpected, "gpu03", 13456)},
        Case{"SlurmLegacyNodelist",
             with(without(kSlurmFull, {"SLURM_JOB_NODELIST"}), {{"SLURM_NODELIST", "cn[7-9,11]"}}),
             {},
             with_master(kSlurmFullExpected, "cn7", 13456)},
        Case{"SlurmMasterVariablesWin",
             with(kSlurmFull, {{"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "1234"}}),
             {},
             with_master(kSlurmFullExpected, "10.0.0.1", 1234)},
        Case{"SlurmNodesFromTasksList", without(kSlurmFull, {"SLURM_NNODES"}), {}, kSlurmFullExpected},
        Case{
            "SlurmStepTasksPerNodePreferred",
            with(kSlurmFull, {{"SLURM_STEP_TASKS_PER_NODE", "2(x3),1"}, {"SLURM_TASKS_PER_NODE", "garbage"}}),
            {},
            kSlurmFullExpected},
        Case{"SlurmRestartCount",
             {{"SLURM_PROCID", "0"},
              {"SLURM_NTASKS", "1"},
              {"SLURM_JOB_ID", "77"},
              {"SLURM_STEP_ID", "2"},
              {"SLURM_RESTART_COUNT", "3"}},
             {},
             with_job(with_master(layout(0, 0, 1, 1, 0, 1, Source::kSlurm), "127.0.0.1", 10077), "slurm-77.2",
                      3)},
        // sbatch's batch script: the job's variables but no step. A program run there directly (not by
        // srun) is one process, not rank 0 of 4 waiting for the other three.
        Case{"SlurmBatchScriptIsOneProcess",
             {{"SLURM_PROCID", "0"},
              {"SLURM_NTASKS", "4"},
              {"SLURM_NNODES", "2"},
              {"SLURM_TASKS_PER_NODE", "2(x2)"},
              {"SLURM_JOB_NODELIST", "a,b"},
              {"SLURM_JOB_ID", "77"}},
             {},
             Expected{}},
        Case{"SlurmMinimalSingleTask",
             {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}},
             {},
             layout(0, 0, 1, 1, 0, 1, Source::kSlurm)},
        Case{"SlurmPortTopOfRange",
             {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"SLURM_JOB_ID", "9999"}, {"SLURM_STEP_ID", "0"}},
             {},
             with_job(with_master(layout(0, 0, 1, 1, 0, 1, Source::kSlurm), "127.0.0.1", 19999),
                      "slurm-9999.0", 0)},
        Case{"SlurmPortWrapsAround",
             {{"SLURM_PROCID", "0"},
              {"SLURM_NTASKS", "1"},
              {"SLURM_JOB_ID", "4294967295"},
              {"SLURM_STEP_ID", "0"}},
             {},
             with_job(with_master(layout(0, 0, 1, 1, 0, 1, Source::kSlurm), "127.0.0.1",
                                  10000 + 4294967295LL % 10000),
                      "slurm-4294967295.0", 0)},
        Case{"SlurmWithoutTasksListEvenNodes",
             {{"SLURM_PROCID", "3"},
              {"SLURM_NTASKS", "4"},
              {"SLURM_NNODES", "2"},
              {"SLURM_NODEID", "1"},
              {"SLURM_JOB_NODELIST", "a,b"}},
             {},
             with_master(layout(3, 1, 4, 2, 1, 2, Source::kSlurm), "a", 29500)},
        Case{"SlurmCyclicDistribution",
             // srun --distribution=cyclic: ranks 0 and 2 on node 0, ranks 1 and 3 on node 1.
             {{"SLURM_PROCID", "1"},
              {"SLURM_NTASKS", "4"},
              {"SLURM_LOCALID", "0"},
              {"SLURM_NODEID", "1"},
              {"SLURM_NNODES", "2"},
              {"SLURM_TASKS_PER_NODE", "2(x2)"},
              {"SLURM_JOB_NODELIST", "a,b"}},
             {},
             with_master(layout(1, 0, 4, 2, 1, 2, Source::kSlurm), "a", 29500)},
        Case{"TorchrunLastRankOfTheLastNode",
             with(kTorchrunFull, {{"RANK", "7"}, {"LOCAL_RANK", "3"}}),
             {},
             with_job(with_master(layout(7, 3, 8, 4, 1, 2, Source::kTorchrun), "node0", 29400), "job42", 2)},
        // OpenMPI
        Case{"OpenMpiTwoNodes",
             {{"OMPI_COMM_WORLD_RANK", "3"},
              {"OMPI_COMM_WORLD_SIZE", "4"},
              {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
              {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
              {"MASTER_ADDR", "h0"},
              {"MASTER_PORT", "4000"}},
             {},
             with_master(layout(3, 1, 4, 2, 1, 2, Source::kOpenMpi), "h0", 4000)},
        Case{"OpenMpiOneNodeDefaultsMaster",
             {{"OMPI_COMM_WORLD_RANK", "1"},
              {"OMPI_COMM_WORLD_SIZE", "2"},
              {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
              {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}},
             {},
             layout(1, 1, 2, 2, 0, 1, Source::kOpenMpi)},
        Case{"OpenMpiNodeRankVariableIsNotANodeIndex",
             {{"OMPI_COMM_WORLD_RANK", "1"},
              {"OMPI_COMM_WORLD_SIZE", "2"},
              {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
              {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
              {"OMPI_COMM_WORLD_NODE_RANK", "1"}},
             {},
             layout(1, 1, 2, 2, 0, 1, Source::kOpenMpi)},
        Case{"OpenMpiUnevenNodesFromLockstepNnodes",
             // Node 0 runs ranks 0 and 1, node 1 runs rank 2: 3 is not a multiple of 2.
             {{"OMPI_COMM_WORLD_RANK", "1"},
              {"OMPI_COMM_WORLD_SIZE", "3"},
              {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
              {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
              {"LOCKSTEP_NNODES", "2"},
              {"MASTER_ADDR", "h0"}},
             {},
             with_master(layout(1, 1, 3, 2, 0, 2, Source::kOpenMpi), "h0", 29500)},
        Case{"OpenMpiRunIdFromJobId",
             {{"OMPI_COMM_WORLD_RANK", "0"},
              {"OMPI_COMM_WORLD_SIZE", "1"},
              {"OMPI_MCA_ess_base_jobid", "3173318657"},
              {"PMIX_NAMESPACE", "prterun-host-1234@1"}},
             {},
             with_job(layout(0, 0, 1, 1, 0, 1, Source::kOpenMpi), "ompi-3173318657", 0)},
        Case{"OpenMpiRunIdFromPmixNamespace",
             {{"OMPI_COMM_WORLD_RANK", "0"},
              {"OMPI_COMM_WORLD_SIZE", "1"},
              {"OMPI_MCA_ess_base_jobid", ""},
              {"PMIX_NAMESPACE", "prterun-host-1234@1"}},
             {},
             with_job(layout(0, 0, 1, 1, 0, 1, Source::kOpenMpi), "ompi-prterun-host-1234@1", 0)},
        Case{"OpenMpiRunIdOptionWins",
             {{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "1"}, {"OMPI_MCA_ess_base_jobid", "7"}},
             EnvOptions().run_id("mine"),
             with_job(layout(0, 0, 1, 1, 0, 1, Source::kOpenMpi), "mine", 0)},
        // TF_CONFIG
        Case{"TfConfigWorkers",
             {{"TF_CONFIG", kTfTwoWorkers}},
             {},
             with_master(layout(1, 0, 2, 1, 1, 2, Source::kTfConfig), "host1", 2222)},
        Case{"TfConfigChiefIsRankZeroWorkersFollow",
             {{"TF_CONFIG", kTfChief}},
             {},
             with_master(layout(2, 0, 3, 1, 2, 3, Source::kTfConfig), "c0", 1111)},
        Case{
            "TfConfigChiefTask",
            {{"TF_CONFIG",
              R"({"cluster": {"chief": ["c0:1111"], "worker": ["w1:2222"]}, "task": {"type": "chief", "index": 0}})"}},
            {},
            with_master(layout(0, 0, 2, 1, 0, 2, Source::kTfConfig), "c0", 1111)},
        Case{"TfConfigIpv6",
             {{"TF_CONFIG",
               R"({"cluster": {"worker": ["[::1]:2222"]}, "task": {"type": "worker", "index": 0}})"}},
             {},
             with_master(layout(0, 0, 1, 1, 0, 1, Source::kTfConfig), "::1", 2222)},
        Case{"TfConfigOtherJobsIgnored",
             {{"TF_CONFIG", R"({"cluster": {"worker": ["a:1", "b:2"], "ps": ["p:3"], "evaluator": ["e:4"]},
                               "task": {"type": "worker", "index": 0}})"}},
             {},
             with_master(layout(0, 0, 2, 1, 0, 2, Source::kTfConfig), "a", 1)},
        Case{"TfConfigMasterVariablesWin",
             {{"TF_CONFIG", kTfTwoWorkers}, {"MASTER_ADDR", "m"}, {"MASTER_PORT", "9"}},
             {},
             with_master(layout(1, 0, 2, 1, 1, 2, Source::kTfConfig), "m", 9)},
        Case{"TfConfigBlankIsUnset", {{"TF_CONFIG", " \n"}}, {}, Expected{}},
        // Precedence between sources.
        Case{"TorchrunBeatsSlurm",
             with(kSlurmFull, {{"RANK", "1"}, {"WORLD_SIZE", "2"}}),
             {},
             layout(1, 1, 2, 2, 0, 1, Source::kTorchrun)},
        Case{"SlurmBeatsOpenMpi",
             with(kSlurmFull, {{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "1"}}),
             {},
             kSlurmFullExpected},
        Case{"OpenMpiBeatsTfConfig",
             {{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "1"}, {"TF_CONFIG", kTfTwoWorkers}},
             {},
             layout(0, 0, 1, 1, 0, 1, Source::kOpenMpi)},
        Case{"TfConfigBeatsSingleProcess",
             {{"TF_CONFIG", kTfTwoWorkers}, {"LOCAL_RANK", "0"}},
             {},
             with_master(layout(1, 0, 2, 1, 1, 2, Source::kTfConfig), "host1", 2222)},
        // Explicit options: each overrides just its field.
        Case{"OptionsRankOverridesTorchrun",
             {{"RANK", "1"}, {"WORLD_SIZE", "2"}},
             EnvOptions().rank(0),
             layout(0, 0, 2, 2, 0, 1, Source::kExplicit)},
        Case{"OptionsPortKeepsTorchrunSource", kTorchrunFull, EnvOptions().master_port(5555),
             with_job(with_master(layout(5, 1, 8, 4, 1, 2, Source::kTorchrun), "node0", 5555), "job42", 2)},
        Case{"OptionsOverrideEveryField", kTorchrunFull,
             EnvOptions()
                 .rank(0)
                 .local_rank(0)
                 .world_size(1)
                 .local_world_size(1)
                 .node_rank(0)
                 .num_nodes(1)
                 .master_addr("me")
                 .master_port(7)
                 .restart_count(9)
                 .run_id("mine"),
             with_job(with_master(layout(0, 0, 1, 1, 0, 1, Source::kExplicit), "me", 7), "mine", 9)},
        Case{"OptionsOverrideSlurmMasterAndRunId", kSlurmFull, EnvOptions().master_addr("x").run_id("r"),
             with_job(with_master(layout(5, 1, 7, 2, 2, 4, Source::kSlurm), "x", 13456), "r", 0)},
        Case{"OptionsOnlyRankAndWorldAreOneNode",
             {},
             EnvOptions().rank(1).world_size(4),
             layout(1, 1, 4, 4, 0, 1, Source::kExplicit)},
        Case{"OptionsNumNodesSplitsEvenly",
             {},
             EnvOptions().rank(3).world_size(4).num_nodes(2).master_addr("h"),
             with_master(layout(3, 1, 4, 2, 1, 2, Source::kExplicit), "h", 29500)},
        Case{"OptionsPortAloneKeepsSingleProcess",
             {},
             EnvOptions().master_port(1234),
             with_master(Expected{}, "127.0.0.1", 1234)},
        Case{"OptionsWorldSizeOverridesTfConfig",
             {{"TF_CONFIG", kTfTwoWorkers}},
             EnvOptions().world_size(3),
             with_master(layout(1, 0, 3, 1, 1, 2, Source::kExplicit), "host1", 2222)}),
    [](const testing::TestParamInfo<Case>& info) { return info.param.name; });

struct ErrorCase {
  std::string name;
  Vars vars;
  EnvOptions options;
  std::vector<std::string> parts;  // each must appear in the message
};

std::ostream& operator<<(std::ostream& os, const ErrorCase& c) {
  return os << c.name;
}

class FromEnvError : public testing::TestWithParam<ErrorCase> {};

TEST_P(FromEnvError, MessageNamesVariableAndValue) {
  const ErrorCase& c = GetParam();
  try {
    const Environment env = from_env(c.options, table(c.vars));
    ADD_FAILURE() << "expected EnvError, got rank " << env.rank << " of " << env.world_size;
  } catch (const EnvError& e) {
    const std::string message = e.what();
    for (const auto& part : c.parts) {
      EXPECT_NE(message.find(part), std::string::npos) << "message: " << message << "\nmissing: " << part;
    }
  }
}

const Vars kTwoRanks = {{"RANK", "0"}, {"WORLD_SIZE", "2"}};
const std::string kTfPrefix = R"({"cluster": {"worker": ["host1:2222", "host2:2223"]}, "task": )";

INSTANTIATE_TEST_SUITE_P(
    Errors, FromEnvError,
    testing::Values(
        // Strict integers.
        ErrorCase{"WorldSizeNotAnInteger",
                  {{"RANK", "0"}, {"WORLD_SIZE", "two"}},
                  {},
                  {"WORLD_SIZE='two' is not an integer", "[1, 2147483647]"}},
        ErrorCase{
            "RankNegative", {{"RANK", "-1"}, {"WORLD_SIZE", "2"}}, {}, {"RANK='-1' is out of range [0, "}},
        ErrorCase{
            "RankTrailingJunk", {{"RANK", "1x"}, {"WORLD_SIZE", "2"}}, {}, {"RANK='1x' is not an integer"}},
        ErrorCase{
            "RankLeadingSpace", {{"RANK", " 1"}, {"WORLD_SIZE", "2"}}, {}, {"RANK=' 1' is not an integer"}},
        ErrorCase{"RankPlusSign", {{"RANK", "+1"}, {"WORLD_SIZE", "2"}}, {}, {"RANK='+1' is not an integer"}},
        ErrorCase{"RankEmpty", {{"RANK", ""}, {"WORLD_SIZE", "2"}}, {}, {"RANK='' is not an integer"}},
        ErrorCase{"RankHex", {{"RANK", "0x1"}, {"WORLD_SIZE", "2"}}, {}, {"RANK='0x1' is not an integer"}},
        ErrorCase{"WorldSizeOverflow",
                  {{"RANK", "0"}, {"WORLD_SIZE", "99999999999"}},
                  {},
                  {"WORLD_SIZE=99999999999 is out of range [1, 2147483647]"}},
        ErrorCase{"WorldSizeHugeOverflow",
                  {{"RANK", "0"}, {"WORLD_SIZE", "123456789012345678901234567890"}},
                  {},
                  {"WORLD_SIZE=123456789012345678901234567890 is out of range"}},
        ErrorCase{
            "WorldSizeZero", {{"RANK", "0"}, {"WORLD_SIZE", "0"}}, {}, {"WORLD_SIZE=0 is out of range [1, "}},
        ErrorCase{"MasterPortTooLarge",
                  with(kTwoRanks, {{"MASTER_PORT", "70000"}}),
                  {},
                  {"MASTER_PORT=70000 is out of range [1, 65535]"}},
        ErrorCase{
            "MasterPortZero", with(kTwoRanks, {{"MASTER_PORT", "0"}}), {}, {"MASTER_PORT=0 is out of range"}},
        ErrorCase{"MasterPortNotAnInteger",
                  with(kTwoRanks, {{"MASTER_PORT", "http"}}),
                  {},
                  {"MASTER_PORT='http' is not an integer"}},
        ErrorCase{"MasterAddrEmpty", with(kTwoRanks, {{"MASTER_ADDR", ""}}), {}, {"MASTER_ADDR='' is empty"}},
        ErrorCase{"RestartCountNotAnInteger",
                  with(kTwoRanks, {{"TORCHELASTIC_RESTART_COUNT", "x"}}),
                  {},
                  {"TORCHELASTIC_RESTART_COUNT='x' is not an integer"}},
        ErrorCase{"RunIdEmpty",
                  with(kTwoRanks, {{"TORCHELASTIC_RUN_ID", ""}}),
                  {},
                  {"TORCHELASTIC_RUN_ID='' is empty"}},
        // torchrun consistency.
        ErrorCase{"RankOutOfRange",
                  {{"RANK", "4"}, {"WORLD_SIZE", "4"}},
                  {},
                  {"RANK=4 is out of range for WORLD_SIZE=4: RANK must be in [0, 3]"}},
        ErrorCase{"RankWithoutWorldSize",
                  {{"RANK", "1"}},
                  {},
                  {"RANK is set (RANK=1) but WORLD_SIZE is not: torchrun sets both; set WORLD_SIZE"}},
        ErrorCase{"LocalWorldSizeLargerThanWorld",
                  {{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", "8"}},
                  {},
                  {"LOCAL_WORLD_SIZE=8 is larger than WORLD_SIZE=4", "[1, 4]"}},
        ErrorCase{"LocalRankOutOfRange",
                  {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}},
                  {},
                  {"LOCAL_RANK=2 is out of range for LOCAL_WORLD_SIZE=2: LOCAL_RANK must be in [0, 1]"}},
        ErrorCase{"GroupRankOutOfRange",
                  {{"RANK", "0"},
                   {"WORLD_SIZE", "4"},
                   {"LOCAL_WORLD_SIZE", "2"},
                   {"GROUP_RANK", "2"},
                   {"MASTER_ADDR", "h"}},
                  {},
                  {"GROUP_RANK=2 is out of range for num_nodes=2", "GROUP_RANK must be in [0, 1]"}},
        ErrorCase{"UnevenNodesNeedNodeCount",
                  {{"RANK", "0"}, {"WORLD_SIZE", "5"}, {"LOCAL_WORLD_SIZE", "2"}},
                  {},
                  {"WORLD_SIZE=5 is not a multiple of LOCAL_WORLD_SIZE=2", "LOCKSTEP_NNODES"}},
        ErrorCase{"NodeCountLargerThanWorld",
                  {{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", "1"}, {"LOCKSTEP_NNODES", "8"}},
                  {},
                  {"LOCKSTEP_NNODES=8 is larger than WORLD_SIZE=4"}},
        ErrorCase{"NodeCountNotAnInteger",
                  with(kTwoRanks, {{"LOCKSTEP_NNODES", "2nodes"}}),
                  {},
                  {"LOCKSTEP_NNODES='2nodes' is not an integer"}},
        ErrorCase{"NoRankLeftForOtherNodes",
                  {{"RANK", "0"},
                   {"WORLD_SIZE", "4"},
                   {"LOCAL_WORLD_SIZE", "4"},
                   {"LOCKSTEP_NNODES", "2"},
                   {"MASTER_ADDR", "h"}},
                  {},
                  {"LOCAL_WORLD_SIZE=4", "LOCKSTEP_NNODES=2", "WORLD_SIZE=4", "at least one rank"}},
        ErrorCase{"LocalWorldSizeNotDerivable",
                  {{"RANK", "0"}, {"WORLD_SIZE", "5"}, {"GROUP_WORLD_SIZE", "2"}},
                  {},
                  {"WORLD_SIZE=5 is not a multiple of GROUP_WORLD_SIZE=2", "LOCAL_WORLD_SIZE"}},
        ErrorCase{"MultiNodeWithoutMasterAddr",
                  {{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", "2"}},
                  {},
                  {"num_nodes=2", "WORLD_SIZE=4 / LOCAL_WORLD_SIZE=2", "set MASTER_ADDR"}},
        ErrorCase{"TorchrunRankDoesNotFollowGroupRank",
                  with(kTorchrunFull, {{"RANK", "6"}}),
                  {},
                  {"RANK=6 does not match GROUP_RANK=1 * LOCAL_WORLD_SIZE=4 + LOCAL_RANK=1 = 5",
                   "RANK = GROUP_RANK * LOCAL_WORLD_SIZE + LOCAL_RANK"}},
        ErrorCase{"OptionsDoNotHideInconsistentTorchrunVariables",
                  with(kTorchrunFull, {{"GROUP_RANK", "0"}}),
                  EnvOptions().node_rank(1),
                  {"RANK=5 does not match GROUP_RANK=0 * LOCAL_WORLD_SIZE=4 + LOCAL_RANK=1 = 1"}},
        ErrorCase{"TorchrunGroupRankOutOfRangeIsNamedAsSuch",
                  with(kTorchrunFull, {{"GROUP_RANK", "3"}}),
                  {},
                  {"GROUP_RANK=3 is out of range for GROUP_WORLD_SIZE=2"}},
        ErrorCase{
            "TorchrunWorldSizeIsNotNodesTimesLocalWorldSize",
            with(kTorchrunFull, {{"WORLD_SIZE", "12"}}),
            {},
            {"LOCAL_WORLD_SIZE=4 * GROUP_WORLD_SIZE=2 = 8 does not match WORLD_SIZE=12", "LOCKSTEP_NNODES"}},
        ErrorCase{"TorchrunGroupWorldSizeTooSmallForWorld",
                  {{"RANK", "0"},
                   {"WORLD_SIZE", "4"},
                   {"LOCAL_WORLD_SIZE", "1"},
                   {"GROUP_WORLD_SIZE", "2"},
                   {"MASTER_ADDR", "h"}},
                  {},
                  {"LOCAL_WORLD_SIZE=1 * GROUP_WORLD_SIZE=2 = 2 does not match WORLD_SIZE=4"}},
        // Slurm.
        ErrorCase{
            "SlurmLocalidAndNodeidBeyondOneNode",
            {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"SLURM_LOCALID", "1"}, {"SLURM_NODEID", "1"}},
            {},
            {"SLURM_LOCALID=1 is out of range for local_world_size=1"}},
        ErrorCase{"SlurmNodeidBeyondSlurmNnodes",
                  {{"SLURM_PROCID", "0"},
                   {"SLURM_NTASKS", "2"},
                   {"SLURM_NNODES", "1"},
                   {"SLURM_LOCALID", "0"},
                   {"SLURM_NODEID", "1"}},
                  {},
                  {"SLURM_NODEID=1 is out of range for SLURM_NNODES=1: SLURM_NODEID must be in [0, 0]"}},
        ErrorCase{
            "SlurmNodeidBeyondDerivedNodeCount",
            {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"}, {"SLURM_NODEID", "1"}},
            {},
            {"SLURM_NODEID=1 is out of range for num_nodes=1"}},
        ErrorCase{"SlurmLocalidBeyondThisNodesTasks",
                  with(kSlurmFull, {{"SLURM_PROCID", "6"}, {"SLURM_NODEID", "3"}, {"SLURM_LOCALID", "1"}}),
                  {},
                  {"SLURM_LOCALID=1 is out of range for local_world_size=1",
                   "SLURM_TASKS_PER_NODE='2(x3),1' at SLURM_NODEID=3"}},
        ErrorCase{"SlurmProcidWithoutNtasks",
                  {{"SLURM_PROCID", "0"}},
                  {},
                  {"SLURM_PROCID is set (SLURM_PROCID=0) but SLURM_NTASKS is not: srun sets both; set "
                   "SLURM_NTASKS"}},
        ErrorCase{"SlurmProcidOutOfRange",
                  with(kSlurmFull, {{"SLURM_PROCID", "7"}}),
                  {},
                  {"SLURM_PROCID=7 is out of range for SLURM_NTASKS=7: SLURM_PROCID must be in [0, 6]"}},
        ErrorCase{"SlurmNtasksDoesNotMatchTasksPerNode",
                  with(kSlurmFull, {{"SLURM_NTASKS", "5"}}),
                  {},
                  {"SLURM_NTASKS=5 does not match SLURM_TASKS_PER_NODE='2(x3),1'", "7 tasks"}},
        ErrorCase{"SlurmNnodesDoesNotMatchTasksPerNode",
                  with(kSlurmFull, {{"SLURM_NNODES", "3"}}),
                  {},
                  {"SLURM_NNODES=3 does not match SLURM_TASKS_PER_NODE='2(x3),1'", "4 node(s)"}},
        ErrorCase{"SlurmNodeidBeyondTasksPerNode",
                  with(kSlurmFull, {{"SLURM_NODEID", "4"}}),
                  {},
                  {"SLURM_NODEID=4 is out of range for SLURM_TASKS_PER_NODE='2(x3),1'", "[0, 3]"}},
        ErrorCase{"SlurmLocalidOutOfRange",
                  with(kSlurmFull, {{"SLURM_LOCALID", "2"}}),
                  {},
                  {"SLURM_LOCALID=2 is out of range for local_world_size=2",
                   "SLURM_TASKS_PER_NODE='2(x3),1' at SLURM_NODEID=2"}},
        ErrorCase{"SlurmTasksPerNodeGarbled",
                  with(kSlurmFull, {{"SLURM_TASKS_PER_NODE", "2(x0)"}}),
                  {},
                  {"SLURM_TASKS_PER_NODE='2(x0)'"}},
        ErrorCase{"SlurmJobNodelistReversed",
                  with(kSlurmFull, {{"SLURM_JOB_NODELIST", "gpu[03-01]"}}),
                  {},
                  {"SLURM_JOB_NODELIST='gpu[03-01]'", "reversed"}},
        ErrorCase{"SlurmStepNodelistUnclosed",
                  with(kSlurmFull, {{"SLURM_STEP_NODELIST", "gpu[01-02"}}),
                  {},
                  {"SLURM_STEP_NODELIST='gpu[01-02'", "never closed"}},
        ErrorCase{"SlurmJobIdNotAnInteger",
                  with(kSlurmFull, {{"SLURM_JOB_ID", "12a"}}),
                  {},
                  {"SLURM_JOB_ID='12a' is not an integer"}},
        ErrorCase{"SlurmJobIdTooLarge",
                  with(kSlurmFull, {{"SLURM_JOB_ID", "4294967296"}}),
                  {},
                  {"SLURM_JOB_ID=4294967296 is out of range [0, 4294967295]"}},
        ErrorCase{"SlurmStepIdNotAnInteger",
                  with(kSlurmFull, {{"SLURM_STEP_ID", "batch"}}),
                  {},
                  {"SLURM_STEP_ID='batch' is not an integer"}},
        ErrorCase{"SlurmRestartCountNegative",
                  with(kSlurmFull, {{"SLURM_RESTART_COUNT", "-2"}}),
                  {},
                  {"SLURM_RESTART_COUNT='-2' is out of range"}},
        ErrorCase{"SlurmMultiNodeWithoutNodelist",
                  without(kSlurmFull, {"SLURM_JOB_NODELIST"}),
                  {},
                  {"SLURM_NNODES=4", "MASTER_ADDR"}},
        ErrorCase{"SlurmMasterPortVariableChecked",
                  with(kSlurmFull, {{"MASTER_PORT", "65536"}}),
                  {},
                  {"MASTER_PORT=65536 is out of range [1, 65535]"}},
        // OpenMPI.
        ErrorCase{
            "OpenMpiRankWithoutSize",
            {{"OMPI_COMM_WORLD_RANK", "0"}},
            {},
            {"OMPI_COMM_WORLD_RANK is set (OMPI_COMM_WORLD_RANK=0) but OMPI_COMM_WORLD_SIZE is not: mpirun "
             "sets both"}},
        ErrorCase{"OpenMpiRankNotAnInteger",
                  {{"OMPI_COMM_WORLD_RANK", "r0"}, {"OMPI_COMM_WORLD_SIZE", "2"}},
                  {},
                  {"OMPI_COMM_WORLD_RANK='r0' is not an integer"}},
        ErrorCase{"OpenMpiLocalSizeLargerThanSize",
                  {{"OMPI_COMM_WORLD_RANK", "0"},
                   {"OMPI_COMM_WORLD_SIZE", "2"},
                   {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"}},
                  {},
                  {"OMPI_COMM_WORLD_LOCAL_SIZE=3 is larger than OMPI_COMM_WORLD_SIZE=2"}},
        ErrorCase{"OpenMpiLocalRankOutOfRange",
                  {{"OMPI_COMM_WORLD_RANK", "0"},
                   {"OMPI_COMM_WORLD_SIZE", "2"},
                   {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                   {"OMPI_COMM_WORLD_LOCAL_RANK", "2"}},
                  {},
                  {"OMPI_COMM_WORLD_LOCAL_RANK=2 is out of range for OMPI_COMM_WORLD_LOCAL_SIZE=2"}},
        ErrorCase{"OpenMpiMultiNodeWithoutMasterAddr",
                  {{"OMPI_COMM_WORLD_RANK", "0"},
                   {"OMPI_COMM_WORLD_SIZE", "4"},
                   {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}},
                  {},
                  {"num_nodes=2", "OMPI_COMM_WORLD_SIZE=4 / OMPI_COMM_WORLD_LOCAL_SIZE=2", "MASTER_ADDR"}},
        // TF_CONFIG.
        ErrorCase{"TfConfigNotJson", {{"TF_CONFIG", "{cluster"}}, {}, {"TF_CONFIG='{cluster' is not JSON"}},
        ErrorCase{"TfConfigNotAnObject",
                  {{"TF_CONFIG", "[1, 2]"}},
                  {},
                  {"TF_CONFIG the top level is not a JSON object", "TF_CONFIG='[1, 2]'"}},
        ErrorCase{
            "TfConfigIndexOutOfRange",
            {{"TF_CONFIG", kTfPrefix + R"({"type": "worker", "index": 2}})"}},
            {},
            {"task.index=2 is out of range for cluster.worker (2 entries): task.index must be in [0, 1]",
             "TF_CONFIG='" + kTfPrefix}},
        ErrorCase{"TfConfigIndexNegative",
                  {{"TF_CONFIG", kTfPrefix + R"({"type": "worker", "index": -1}})"}},
                  {},
                  {"task.index=-1 is out of range", "TF_CONFIG='"}},
        ErrorCase{"TfConfigIndexNotAnInteger",
                  {{"TF_CONFIG", kTfPrefix + R"({"type": "worker", "index": "1"}})"}},
                  {},
                  {"task.index=\"1\" is not an integer", "TF_CONFIG='"}},
        ErrorCase{"TfConfigIndexFloat",
                  {{"TF_CONFIG", kTfPrefix + R"({"type": "worker", "index": 1.5}})"}},
                  {},
                  {"task.index=1.5 is not an integer"}},
        ErrorCase{"TfConfigNoTask",
                  {{"TF_CONFIG", R"({"cluster": {"worker": ["a:1"]}})"}},
                  {},
                  {"TF_CONFIG has no task", R"(TF_CONFIG='{"cluster": {"worker": ["a:1"]}}')"}},
        ErrorCase{"TfConfigNoCluster",
                  {{"TF_CONFIG", R"({"task": {"type": "worker", "index": 0}})"}},
                  {},
                  {"TF_CONFIG has no cluster"}},
        ErrorCase{"TfConfigNoTaskType",
                  {{"TF_CONFIG", kTfPrefix + R"({"index": 0}})"}},
                  {},
                  {"TF_CONFIG has no task.type"}},
        ErrorCase{"TfConfigParameterServerTask",
                  {{"TF_CONFIG", kTfPrefix + R"({"type": "ps", "index": 0}})"}},
                  {},
                  {"task.type='ps'", "\"chief\" or \"worker\""}},
        ErrorCase{"TfConfigTwoChiefs",
                  {{"TF_CONFIG",
                    R"({"cluster": {"chief": ["a:1", "b:2"]}, "task": {"type": "chief", "index": 0}})"}},
                  {},
                  {"cluster.chief has 2 entries", "at most one"}},
        ErrorCase{"TfConfigChiefTaskWithoutChief",
                  {{"TF_CONFIG", kTfPrefix + R"({"type": "chief", "index": 0}})"}},
                  {},
                  {"no chief entries"}},
        ErrorCase{"TfConfigEmptyCluster",
                  {{"TF_CONFIG", R"({"cluster": {"worker": []}, "task": {"type": "worker", "index": 0}})"}},
                  {},
                  {"neither a chief nor any worker"}},
        ErrorCase{
            "TfConfigWorkerWithoutPort",
            {{"TF_CONFIG", R"({"cluster": {"worker": ["host1"]}, "task": {"type": "worker", "index": 0}})"}},
            {},
            {"cluster.worker[0]='host1' is not host:port"}},
        ErrorCase{
            "TfConfigWorkerBadPort",
            {{"TF_CONFIG",
              R"({"cluster": {"worker": ["a:1", "host1:70000"]}, "task": {"type": "worker", "index": 0}})"}},
            {},
            {"cluster.worker[1]='host1:70000'", "port '70000'", "[1, 65535]"}},
        ErrorCase{
            "TfConfigWorkerEmptyHost",
            {{"TF_CONFIG", R"({"cluster": {"worker": [":1"]}, "task": {"type": "worker", "index": 0}})"}},
            {},
            {"cluster.worker[0]=':1' has an empty host"}},
        ErrorCase{"TfConfigWorkerNotAString",
                  {{"TF_CONFIG", R"({"cluster": {"worker": [42]}, "task": {"type": "worker", "index": 0}})"}},
                  {},
                  {"cluster.worker entry 42 is not a \"host:port\" string"}},
        ErrorCase{
            "TfConfigWorkerListNotAList",
            {{"TF_CONFIG", R"({"cluster": {"worker": "a:1"}, "task": {"type": "worker", "index": 0}})"}},
            {},
            {"cluster.worker is not a list"}},
        // Explicit options are validated like variables.
        ErrorCase{
            "OptionsRankWithoutWorldSize",
            {},
            EnvOptions().rank(1),
            {"EnvOptions::rank=1 is out of range for world_size=1", "EnvOptions::rank must be in [0, 0]"}},
        ErrorCase{
            "OptionsRankNegative", {}, EnvOptions().rank(-1), {"EnvOptions::rank=-1 is out of range [0, "}},
        ErrorCase{"OptionsPortOutOfRange",
                  {},
                  EnvOptions().master_port(70000),
                  {"EnvOptions::master_port=70000 is out of range [1, 65535]"}},
        ErrorCase{"OptionsMasterAddrEmpty",
                  {},
                  EnvOptions().master_addr(""),
                  {"EnvOptions::master_addr='' is empty"}},
        ErrorCase{"OptionsRunIdEmpty", {}, EnvOptions().run_id(""), {"EnvOptions::run_id='' is empty"}},
        ErrorCase{"OptionsWorldSmallerThanTorchrunRank",
                  {{"RANK", "3"}, {"WORLD_SIZE", "4"}},
                  EnvOptions().world_size(2),
                  {"RANK=3 is out of range for EnvOptions::world_size=2"}},
        ErrorCase{"OptionsUnevenNodes",
                  {},
                  EnvOptions().world_size(4).num_nodes(3),
                  {"EnvOptions::world_size=4 is not a multiple of EnvOptions::num_nodes=3"}},
        ErrorCase{"OptionsDoNotHideMalformedVariables",
                  {{"RANK", "x"}, {"WORLD_SIZE", "2"}},
                  EnvOptions().rank(0),
                  {"RANK='x' is not an integer"}}),
    [](const testing::TestParamInfo<ErrorCase>& info) { return info.param.name; });

TEST(FromEnv, EmptyLookupIsAnError) {
  EXPECT_THROW(from_env(EnvOptions(), EnvLookup()), EnvError);
}

TEST(FromEnv, OptionsWinOverTorchrunOnlyForTheirField) {
  // LOCAL_RANK still comes from the environment when only rank is overridden.
  const Environment env =
      from_env(EnvOptions().rank(2), table({{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "3"}}));
  EXPECT_EQ(env.rank, 2);
  EXPECT_EQ(env.local_rank, 3);
  EXPECT_EQ(env.world_size, 4);
  EXPECT_EQ(env.source, Source::kExplicit);
}

TEST(SourceName, EverySourceHasItsName) {
  EXPECT_STREQ(to_string(Source::kExplicit), "explicit");
  EXPECT_STREQ(to_string(Source::kTorchrun), "torchrun");
  EXPECT_STREQ(to_string(Source::kSlurm), "slurm");
  EXPECT_STREQ(to_string(Source::kOpenMpi), "openmpi");
  EXPECT_STREQ(to_string(Source::kTfConfig), "tf_config");
  EXPECT_STREQ(to_string(Source::kSingleProcess), "single_process");
}

TEST(ProcessEnv, ReadsTheRealEnvironment) {
  const std::string name = "LOCKSTEP_TEST_ENV_PROCESS_ENV";
  ::unsetenv(name.c_str());
  EXPECT_EQ(process_env()(name), std::nullopt);
  ::setenv(name.c_str(), "value 1", /*overwrite=*/1);
  EXPECT_EQ(process_env()(name), std::optional<std::string>("value 1"));
  ::setenv(name.c_str(), "", /*overwrite=*/1);
  EXPECT_EQ(process_env()(name), std::optional<std::string>(""));
  ::unsetenv(name.c_str());
}

}  // namespace
}  // namespace lockstep::env
