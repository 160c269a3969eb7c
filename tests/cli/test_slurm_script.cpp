// `lockstep slurm`: the sbatch script of each style (its #SBATCH lines, the step, the requeue wiring),
// `bash -n` of every style, and the errors for bad flags.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include <unistd.h>

#include <gtest/gtest.h>

#include "slurm_script.h"  // apps/lockstep

namespace {

using lockstep::cli::slurm_script;
using lockstep::cli::SlurmScriptOptions;
using lockstep::cli::SlurmStyle;

// The script with its continuation lines (" \\\n  ") joined: the step's command as bash reads it.
std::string unwrapped(std::string text) {
  const std::string continuation = " \\\n  ";
  for (std::size_t at = text.find(continuation); at != std::string::npos; at = text.find(continuation, at)) {
    text.replace(at, continuation.size(), " ");
  }
  return text;
}

bool contains(const std::string& text, const std::string& part) {
  return unwrapped(text).find(part) != std::string::npos;
}

SlurmScriptOptions two_by_two(SlurmStyle style) {
  SlurmScriptOptions o;
  o.style = style;
  o.nodes = 2;
  o.ntasks_per_node = 2;
  o.command = {"lockstep", "fit", "--data", "synthetic", "--ckpt-dir", "ck"};
  return o;
}

TEST(SlurmScript, TorchrunStyleRunsOneLauncherPerNode) {
  const std::string s = slurm_script(two_by_two(SlurmStyle::kTorchrun));
  EXPECT_EQ(s.rfind("#!/bin/bash\n", 0), 0u);
  EXPECT_TRUE(contains(s, "#SBATCH --nodes=2\n")) << s;
  EXPECT_TRUE(contains(s, "#SBATCH --ntasks-per-node=1\n")) << s;
  EXPECT_TRUE(
      contains(s,
               "srun --kill-on-bad-exit=0 --wait=60 --ntasks-per-node=1 lockstep run --nproc-per-node 2 -- "
               "lockstep fit --data synthetic --ckpt-dir ck --resume auto\n"))
      << s;
}

// Every style makes a job secret before its step (srun passes the environment on), a new one per run: the
// line, run by bash, gives 64 hex digits, twice different.
TEST(SlurmScript, EveryStyleMakesAJobSecretForItsTasks) {
  for (const SlurmStyle style : {SlurmStyle::kTorchrun, SlurmStyle::kDdp, SlurmStyle::kLightning}) {
    const std::string s = slurm_script(two_by_two(style));
    const auto line = s.find("\nexport LOCKSTEP_JOB_SECRET=");
    ASSERT_NE(line, std::string::npos) << s;
    EXPECT_LT(line, s.find("\nsrun ")) << s;
    const std::string command = s.substr(line + 1, s.find('\n', line + 1) - line - 1);
    char path[] = "/tmp/lockstep_slurm_secret_XXXXXX";
    const int fd = ::mkstemp(path);
    ASSERT_GE(fd, 0);
    ::close(fd);
    std::ofstream(path) << command << "\necho \"$LOCKSTEP_JOB_SECRET\"\n";
    const auto run = [&] {
      std::string out;
      FILE* p = ::popen((std::string("bash ") + path).c_str(), "r");
      char buf[256];
      while (p != nullptr && std::fgets(buf, sizeof(buf), p) != nullptr) out += buf;
      if (p != nullptr) ::pclose(p);
      return out;
    };
    const std::string first = run();
    EXPECT_TRUE(std::regex_match(first, std::regex("[0-9a-f]{64}\n"))) << command << " gave " << first;
    EXPECT_NE(first, run());
    std::remove(path);
  }
}

TEST(SlurmScript, DdpStyleRunsOneTaskPerRank) {
  const std::string s = slurm_script(two_by_two(SlurmStyle::kDdp));
  EXPECT_TRUE(contains(s, "#SBATCH --ntasks-per-node=2\n")) << s;
  EXPECT_TRUE(
      contains(s, "srun --kill-on-bad-exit=0 --wait=60 --ntasks-per-node=2 lockstep fit --data synthetic"))
      << s;
  EXPECT_FALSE(contains(s, "lockstep run")) << s;
}

TEST(SlurmScript, LightningStyleRunsOneTaskPerNodeThatStartsItsRanks) {
  SlurmScriptOptions o = two_by_two(SlurmStyle::kLightning);
  o.command = {"lockstep", "fit", "--devices", "2", "--num-nodes", "2"};
  const std::string s = slurm_script(o);
  EXPECT_TRUE(contains(s, "#SBATCH --ntasks-per-node=1\n")) << s;
  EXPECT_TRUE(contains(
      s, "srun --kill-on-bad-exit=0 --wait=60 --ntasks-per-node=1 lockstep fit --devices 2 --num-nodes 2\n"))
      << s;
}

TEST(SlurmScript, GpusPerNodeSetTheRanksPerNode) {
  SlurmScriptOptions o;
  o.nodes = 3;
  o.gpus_per_node = 4;
  o.command = {"./train"};
  EXPECT_EQ(o.ranks_per_node(), 4);
  const std::string torchrun = slurm_script(o);
  EXPECT_TRUE(contains(torchrun, "#SBATCH --gpus-per-node=4\n")) << torchrun;
  EXPECT_TRUE(contains(torchrun, "lockstep run --nproc-per-node 4 -- ./train\n")) << torchrun;
  o.style = SlurmStyle::kDdp;
  EXPECT_TRUE(contains(slurm_script(o), "#SBATCH --ntasks-per-node=4\n"));
}

TEST(SlurmScript, GresAsksForGpusTheOlderWay) {
  SlurmScriptOptions o;
  o.gres = "gpu:a100:2";
  o.command = {"./train"};
  EXPECT_EQ(o.gpus(), 2);
  EXPECT_EQ(o.ranks_per_node(), 2);
  const std::string script = slurm_script(o);
  EXPECT_TRUE(contains(script, "#SBATCH --gres=gpu:a100:2\n")) << script;
  EXPECT_FALSE(contains(script, "--gpus-per-node")) << script;
  EXPECT_TRUE(contains(script, "lockstep run --nproc-per-node 2 -- ./train\n")) << script;
}

TEST(SlurmScript, ShapeFlagsBecomeSbatchLines) {
  SlurmScriptOptions o = two_by_two(SlurmStyle::kTorchrun);
  o.cpus_per_task = 8;
  o.time = "2:00:00";
  o.partition = "gpu";
  o.account = "proj42";
  o.job_name = "mnist";
  o.output = "logs/train_%j.out";
  const std::string s = slurm_script(o);
  for (const char* line :
       {"#SBATCH --cpus-per-task=8\n", "#SBATCH --time=2:00:00\n", "#SBATCH --partition=gpu\n",
        "#SBATCH --account=proj42\n", "#SBATCH --job-name=mnist\n", "#SBATCH --output=logs/train_%j.out\n",
        "#SBATCH --open-mode=append\n"}) {
    EXPECT_TRUE(contains(s, line)) << "missing " << line << "in\n" << s;
  }
  EXPECT_FALSE(contains(slurm_script(two_by_two(SlurmStyle::kTorchrun)), "--partition")) << "unset: no line";
}

TEST(SlurmScript, PreemptionSignalAndRequeueOnExit75) {
  const std::string s = slurm_script(two_by_two(SlurmStyle::kDdp));
  EXPECT_TRUE(contains(s, "#SBATCH --signal=USR1@90\n")) << s;
  EXPECT_TRUE(contains(s, "#SBATCH --requeue\n")) << s;
  EXPECT_TRUE(contains(s, "status=$?\nif [ \"$status\" -eq 75 ]; then\n")) << s;
  EXPECT_TRUE(contains(s, "  scontrol requeue \"$SLURM_JOB_ID\"\n")) << s;
  EXPECT_TRUE(contains(s, "exit \"$status\"\n")) << s;
}

TEST(SlurmScript, NoRequeueLeavesResumeToTheUser) {
  SlurmScriptOptions o = two_by_two(SlurmStyle::kTorchrun);
  o.requeue = false;
  o.signal = "R:USR1@300";
  const std::string s = slurm_script(o);
  EXPECT_TRUE(contains(s, "#SBATCH --no-requeue\n")) << s;
  EXPECT_TRUE(contains(s, "#SBATCH --signal=R:USR1@300\n")) << s;
  EXPECT_FALSE(contains(s, "scontrol requeue")) << s;
  EXPECT_FALSE(contains(s, "--resume auto")) << s;
}

TEST(SlurmScript, ResumeAutoOnlyForLockstepFitWithCkptDirAndNoResume) {
  SlurmScriptOptions o = two_by_two(SlurmStyle::kDdp);
  o.command = {"/opt/lockstep/bin/lockstep", "fit", "--ckpt-dir=ck"};
  EXPECT_TRUE(contains(slurm_script(o), "fit --ckpt-dir=ck --resume auto\n"));
  o.command = {"lockstep", "fit", "--ckpt-dir", "ck", "--resume", "last"};
  EXPECT_FALSE(contains(slurm_script(o), "--resume auto"));
  o.command = {"lockstep", "fit", "--data", "synthetic"};
  EXPECT_FALSE(contains(slurm_script(o), "--resume auto")) << "no checkpoint directory: nothing to resume";
  o.command = {"./train", "--ckpt-dir", "ck"};
  EXPECT_FALSE(contains(slurm_script(o), "--resume auto")) << "not lockstep fit: left alone";
}

TEST(SlurmScript, ArgumentsAreQuotedForBash) {
  EXPECT_EQ(lockstep::cli::shell_quote("plain-1.0"), "plain-1.0");
  EXPECT_EQ(lockstep::cli::shell_quote("two words"), "'two words'");
  EXPECT_EQ(lockstep::cli::shell_quote("it's"), "'it'\\''s'");
  EXPECT_EQ(lockstep::cli::shell_quote("$HOME"), "'$HOME'");
  EXPECT_EQ(lockstep::cli::shell_quote(""), "''");
}

TEST(SlurmScript, LockstepProgramOfTheTorchrunStyle) {
  SlurmScriptOptions o = two_by_two(SlurmStyle::kTorchrun);
  o.lockstep = "/opt/lockstep/bin/lockstep";
  EXPECT_TRUE(contains(slurm_script(o), " /opt/lockstep/bin/lockstep run --nproc-per-node 2 -- "));
}

// Every style, with awkward arguments and a long command, is valid bash.
TEST(SlurmScript, LongCommandsBreakBeforeFlagsOnly) {
  SlurmScriptOptions o = two_by_two(SlurmStyle::kDdp);
  for (int i = 0; i < 30; ++i) o.command.push_back("--flag-number-" + std::to_string(i));
  o.command.insert(o.command.end(), {"--lr", "0.1"});
  const std::string s = slurm_script(o);
  EXPECT_TRUE(s.find(" \\\n  --flag-number-") != std::string::npos) << "long: broken into lines\n" << s;
  EXPECT_TRUE(contains(s, "--flag-number-29 --lr 0.1 --resume auto\n")) << s;
  EXPECT_TRUE(s.find(" \\\n  0.1") == std::string::npos) << "a value stays with its flag\n" << s;
}

TEST(SlurmScript, EveryStyleIsValidBash) {
  for (SlurmStyle style : {SlurmStyle::kTorchrun, SlurmStyle::kDdp, SlurmStyle::kLightning}) {
    for (bool requeue : {true, false}) {
      SlurmScriptOptions o = two_by_two(style);
      o.requeue = requeue;
      o.command = {"lockstep", "fit", "--ckpt-dir", "dir with space", "--metrics-file", "it's.jsonl"};
      for (int i = 0; i < 30; ++i) o.command.push_back("--flag-number-" + std::to_string(i));
      char path[] = "/tmp/test_slurm_script_XXXXXX";
      const int fd = ::mkstemp(path);
      ASSERT_GE(fd, 0);
      ::close(fd);
      std::ofstream(path) << slurm_script(o);
      const int status = std::system(("bash -n " + std::string(path)).c_str());
      EXPECT_EQ(status, 0) << to_string(style) << ", requeue " << requeue << ":\n" << slurm_script(o);
      std::remove(path);
    }
  }
}

struct BadFlag {
  std::string name;
  void (*mutate)(SlurmScriptOptions&);
  std::string message;
};

std::ostream& operator<<(std::ostream& os, const BadFlag& c) {
  return os << c.name;
}

class SlurmScriptError : public testing::TestWithParam<BadFlag> {};

TEST_P(SlurmScriptError, NamesTheFlagAndTheFix) {
  SlurmScriptOptions o = two_by_two(SlurmStyle::kTorchrun);
  GetParam().mutate(o);
  try {
    slurm_script(o);
    ADD_FAILURE() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_TRUE(contains(e.what(), GetParam().message)) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Flags, SlurmScriptError,
    testing::Values(
        BadFlag{"Nodes", [](SlurmScriptOptions& o) { o.nodes = 0; },
                "--nodes=0 is not valid (expected an integer >= 1)"},
        BadFlag{"Tasks", [](SlurmScriptOptions& o) { o.ntasks_per_node = 0; },
                "--ntasks-per-node=0 is not valid"},
        BadFlag{"Gpus", [](SlurmScriptOptions& o) { o.gpus_per_node = -1; },
                "--gpus-per-node=-1 is not valid"},
        BadFlag{"Cpus", [](SlurmScriptOptions& o) { o.cpus_per_task = 0; }, "--cpus-per-task=0 is not valid"},
        BadFlag{"DdpTasksNotDevices",
                [](SlurmScriptOptions& o) {
                  o.style = SlurmStyle::kDdp;
                  o.gpus_per_node = 4;
                },
                "--style ddp runs one task per device, but --ntasks-per-node=2 differs from the GPUs per "
                "node (4)"},
        BadFlag{"GresNotGpus", [](SlurmScriptOptions& o) { o.gres = "mps:100"; },
                "--gres='mps:100' is not a GPU request (expected gpu:N or gpu:TYPE:N"},
        BadFlag{"GresAndGpusDisagree",
                [](SlurmScriptOptions& o) {
                  o.gres = "gpu:a100:4";
                  o.gpus_per_node = 2;
                },
                "--gres=gpu:a100:4 and --gpus-per-node=2 ask for different GPU counts"},
        BadFlag{"Time", [](SlurmScriptOptions& o) { o.time = "2 hours"; },
                "--time='2 hours' is not valid (expected Slurm's time limit"},
        BadFlag{"Partition", [](SlurmScriptOptions& o) { o.partition = "gpu\n#SBATCH"; }, "--partition='gpu"},
        BadFlag{"Account", [](SlurmScriptOptions& o) { o.account = "a b"; }, "--account='a b' is not valid"},
        BadFlag{"JobName", [](SlurmScriptOptions& o) { o.job_name = ""; }, "--job-name='' is not valid"},
        BadFlag{"Output", [](SlurmScriptOptions& o) { o.output = "my log.out"; },
                "--output='my log.out' is not valid"},
        BadFlag{"SignalToBatchOnly", [](SlurmScriptOptions& o) { o.signal = "B:USR1@90"; }, "drop 'B:'"},
        BadFlag{"Signal", [](SlurmScriptOptions& o) { o.signal = "usr1 at 90"; },
                "--signal='usr1 at 90' is not valid"},
        BadFlag{"NoCommand", [](SlurmScriptOptions& o) { o.command.clear(); }, "no training command given"}),
    [](const testing::TestParamInfo<BadFlag>& info) { return info.param.name; });

// The flag parser: -o, the style names, --no-requeue, and a usage error naming the flag.
int parse(std::vector<std::string> args, SlurmScriptOptions& o, std::string& file, std::string& err) {
  args.insert(args.begin(), "slurm");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  testing::internal::CaptureStderr();
  const int status = lockstep::cli::parse_slurm_flags(static_cast<int>(argv.size()), argv.data(), o, file);
  err = testing::internal::GetCapturedStderr();
  return status;
}

TEST(SlurmFlags, ParsesEveryFlag) {
  SlurmScriptOptions o;
  std::string file, err;
  ASSERT_EQ(parse({"--style",         "ddp",     "--nodes",      "2",  "--ntasks-per-node", "4",
                   "--cpus-per-task", "3",       "--time",       "10", "--partition",       "p",
                   "--account",       "a",       "--job-name",   "j",  "--output",          "o_%j.out",
                   "--signal",        "USR1@60", "--no-requeue", "-o", "job.sbatch",        "--",
                   "./train",         "--lr",    "0.1"},
                  o, file, err),
            -1)
      << err;
  EXPECT_EQ(o.style, SlurmStyle::kDdp);
  EXPECT_EQ(o.nodes, 2);
  EXPECT_EQ(o.ntasks_per_node, 4);
  EXPECT_EQ(o.cpus_per_task, 3);
  EXPECT_EQ(o.time, "10");
  EXPECT_EQ(o.signal, "USR1@60");
  EXPECT_FALSE(o.requeue);
  EXPECT_EQ(file, "job.sbatch");
  EXPECT_EQ(o.command, (std::vector<std::string>{"./train", "--lr", "0.1"}));
}

TEST(SlurmFlags, BadStyleAndBadValuesAreUsageErrors) {
  SlurmScriptOptions o;
  std::string file, err;
  EXPECT_EQ(parse({"--style", "mpi", "--", "./train"}, o, file, err), 2);
  EXPECT_TRUE(contains(err, "--style 'mpi' is not known (expected one of: torchrun, ddp, lightning)")) << err;
  SlurmScriptOptions o2;
  EXPECT_EQ(parse({"--nodes", "0", "--", "./train"}, o2, file, err), 2);
  EXPECT_TRUE(contains(err, "--nodes=0 is not valid")) << err;
  SlurmScriptOptions o3;
  EXPECT_EQ(parse({"--nodes", "2"}, o3, file, err), 2);
  EXPECT_TRUE(contains(err, "no training command given")) << err;
}

}  // namespace
