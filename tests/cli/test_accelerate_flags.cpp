// `lockstep launch`'s flags (apps/lockstep/accelerate_flags.h): accelerate launch's command line parsed as
// Accelerate parses it, the launcher options it gives, and the environment a worker then gets (the
// launcher's own worker_environment over those options).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "accelerate_flags.h"
#include "cli_parse.h"
#include "lockstep/launch/launch_config.h"
#include "lockstep/launch/launch_error.h"
#include "lockstep/launch/worker_env.h"

namespace lockstep::cli {
namespace {

// `lockstep launch ARGS` up to the launcher: parse, refuse, translate. `gpus`: what the node shows.
AccelerateLaunch launch_of(std::vector<std::string> args, int gpus = 0) {
  CLI::App app("test", "lockstep launch");
  app.prefix_command();
  AccelerateFlags flags;
  add_accelerate_flags(app, flags);
  std::reverse(args.begin(), args.end());  // CLI11 parses a reversed vector
  app.parse(args);
  refuse_unsupported_flags(app);
  std::vector<std::string> command;
  if (const auto unknown = take_command(app, command)) throw UsageError{"unknown option " + *unknown};
  return accelerate_launch(flags, command, gpus);
}

std::string error_of(std::vector<std::string> args, int gpus = 0) {
  try {
    launch_of(std::move(args), gpus);
  } catch (const UsageError& e) {
    return e.message;
  } catch (const launch::LaunchError& e) {
    return e.what();
  }
  return "(no error)";
}

std::map<std::string, std::string> env_map(const launch::EnvPairs& pairs) {
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : pairs) {
    EXPECT_EQ(out.count(key), 0u) << key << " set twice";
    out[key] = value;
  }
  return out;
}

// What worker `local_rank` of this node gets from the launcher for `launch`, from an empty environment.
std::map<std::string, std::string> worker_env_of(const AccelerateLaunch& launch, int local_rank = 0) {
  const launch::LaunchConfig config = launch::resolve(launch.options);
  std::map<std::string, std::string> out;
  for (const std::string& entry : launch::worker_environment(config, config.static_world(), local_rank, {})) {
    const std::string key = entry.substr(0, entry.find('='));
    EXPECT_EQ(out.count(key), 0u) << key << " set twice";
    out[key] = entry.substr(entry.find('=') + 1);
  }
  return out;
}

const std::map<std::string, std::string> kDynamoDefaults = {
    {"ACCELERATE_DYNAMO_BACKEND", "NO"},
    {"ACCELERATE_DYNAMO_MODE", "default"},
    {"ACCELERATE_DYNAMO_USE_FULLGRAPH", "False"},
    {"ACCELERATE_DYNAMO_USE_DYNAMIC", "False"},
    {"ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION", "False"},
};

TEST(AccelerateFlags, TheSeedsLineStartsFourWorkersInFp16) {
  // seed 000: accelerate launch --num_processes=4 --mixed_precision=fp16 src/train_accelerate.py
  const auto launch = launch_of({"--num_processes=4", "--mixed_precision=fp16", "src/train_accelerate.py"});
  EXPECT_EQ(launch.options.nproc_per_node().count(), 4);
  EXPECT_TRUE(launch.options.nnodes().fixed());
  EXPECT_EQ(launch.options.nnodes().min, 1);
  EXPECT_EQ(launch.options.command(), std::vector<std::string>{"src/train_accelerate.py"});
  EXPECT_EQ(launch.options.program_mode(), launch::ProgramMode::kAuto);  // a .py under Python
  auto expected = kDynamoDefaults;
  expected["ACCELERATE_MIXED_PRECISION"] = "fp16";
  expected["ACCELERATE_USE_CPU"] = "True";  // no GPU on this node: the Python Accelerator joins over Gloo
  EXPECT_EQ(env_map(launch.options.worker_env()), expected);

  // On a node with GPUs the workers choose their device themselves, as under accelerate launch.
  const auto on_gpus = launch_of({"--num_processes=4", "--mixed_precision=fp16", "train.py"}, /*gpus=*/4);
  EXPECT_EQ(env_map(on_gpus.options.worker_env()).count("ACCELERATE_USE_CPU"), 0u);
}

TEST(AccelerateFlags, AWorkerGetsTorchrunsVariablesAndAccelerates) {
  const auto launch =
      launch_of({"--num_processes", "2", "--mixed_precision", "bf16", "--no_python", "/bin/true"});
  for (int local_rank = 0; local_rank < 2; ++local_rank) {
    auto env = worker_env_of(launch, local_rank);
    EXPECT_EQ(env["RANK"], std::to_string(local_rank));
    EXPECT_EQ(env["LOCAL_RANK"], std::to_string(local_rank));
    EXPECT_EQ(env["WORLD_SIZE"], "2");
    EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "2");
    EXPECT_EQ(env["MASTER_ADDR"], "127.0.0.1");
    EXPECT_FALSE(env["MASTER_PORT"].empty());
    EXPECT_EQ(env["ACCELERATE_MIXED_PRECISION"], "bf16");
    EXPECT_EQ(env["ACCELERATE_USE_CPU"], "True");
    for (const auto& [key, value] : kDynamoDefaults) EXPECT_EQ(env[key], value) << key;
    EXPECT_FALSE(env["OMP_NUM_THREADS"].empty());  // the launcher's default
  }
}

TEST(AccelerateFlags, BothSpellingsAndBothValueForms) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--num_processes=3", "--mixed_precision=bf16", "--gradient_accumulation_steps=2", "t.py"},
           {"--num-processes", "3", "--mixed-precision", "bf16", "--gradient-accumulation-steps", "2",
            "t.py"},
           {"--num-processes=3", "--mixed_precision", "bf16", "--gradient_accumulation_steps", "2",
            "t.py"}}) {
    const auto launch = launch_of(args);
    EXPECT_EQ(launch.options.nproc_per_node().count(), 3);
    const auto env = env_map(launch.options.worker_env());
    EXPECT_EQ(env.at("ACCELERATE_MIXED_PRECISION"), "bf16");
    EXPECT_EQ(env.at("ACCELERATE_GRADIENT_ACCUMULATION_STEPS"), "2");
  }
}

TEST(AccelerateFlags, EverythingAfterTheScriptIsTheScripts) {
  const auto launch =
      launch_of({"--num_processes", "2", "train.py", "--num_processes", "5", "--mixed_precision=fp8", "-m"});
  EXPECT_EQ(launch.options.nproc_per_node().count(), 2);
  EXPECT_EQ(launch.options.command(),
            (std::vector<std::string>{"train.py", "--num_processes", "5", "--mixed_precision=fp8", "-m"}));
  EXPECT_EQ(env_map(launch.options.worker_env()).at("ACCELERATE_MIXED_PRECISION"), "no");  // the default
}

TEST(AccelerateFlags, EachFlagsVariable) {
  const auto launch = launch_of({"--cpu", "--debug", "--gpu_ids", "0,1", "--num_cpu_threads_per_process", "3",
                                 "--num_processes", "2", "prog"},
                                /*gpus=*/2);
  const auto env = env_map(launch.options.worker_env());
  EXPECT_EQ(env.at("ACCELERATE_USE_CPU"), "True");
  EXPECT_EQ(env.at("ACCELERATE_DEBUG_MODE"), "true");
  EXPECT_EQ(env.at("CUDA_VISIBLE_DEVICES"), "0,1");
  EXPECT_EQ(env.count("ACCELERATE_GRADIENT_ACCUMULATION_STEPS"), 0u);
  EXPECT_EQ(env.at("OMP_NUM_THREADS"), "3");
  // --gpu_ids all changes nothing.
  EXPECT_EQ(
      env_map(launch_of({"--gpu_ids", "all", "prog"}, 2).options.worker_env()).count("CUDA_VISIBLE_DEVICES"),
      0u);
}

TEST(AccelerateFlags, WithoutNumProcessesOnePerGpuElseOne) {
  EXPECT_EQ(launch_of({"prog"}, /*gpus=*/0).options.nproc_per_node().count(), 1);
  EXPECT_EQ(launch_of({"prog"}, /*gpus=*/3).options.nproc_per_node().count(), 3);
  EXPECT_EQ(launch_of({"--gpu_ids", "1,2", "prog"}, /*gpus=*/4).options.nproc_per_node().count(), 2);
  EXPECT_EQ(launch_of({"--cpu", "prog"}, /*gpus=*/4).options.nproc_per_node().count(), 1);
}

TEST(AccelerateFlags, ProgramModes) {
  EXPECT_EQ(launch_of({"-m", "pkg.train"}).options.program_mode(), launch::ProgramMode::kModule);
  EXPECT_EQ(launch_of({"--module", "pkg.train"}).options.program_mode(), launch::ProgramMode::kModule);
  EXPECT_EQ(launch_of({"--no_python", "train.py"}).options.program_mode(), launch::ProgramMode::kExecutable);
  EXPECT_EQ(launch_of({"--no-python", "train.py"}).options.program_mode(), launch::ProgramMode::kExecutable);
  EXPECT_EQ(launch_of({"build/examples/accelerate"}).options.program_mode(), launch::ProgramMode::kAuto);
}

TEST(AccelerateFlags, MachinesMeetAtTheMainProcess) {
  const auto node = launch_of({"--num_machines", "2", "--machine_rank", "1", "--num_processes", "8",
                               "--main_process_ip", "10.0.0.1", "--main_process_port", "29501", "t.py"});
  EXPECT_EQ(node.options.nnodes().min, 2);
  EXPECT_EQ(node.options.node_rank(), 1);
  EXPECT_EQ(node.options.nproc_per_node().count(), 4);  // num_processes counts all machines
  EXPECT_EQ(node.options.master_addr(), "10.0.0.1");
  EXPECT_EQ(node.options.master_port(), 29501);
  EXPECT_EQ(node.options.rdzv_backend(), launch::RdzvBackend::kStatic);
  // Accelerate's default port; --same_network changes nothing under the static rendezvous.
  const auto same = launch_of({"--num_machines=2", "--machine_rank=0", "--num_processes=2", "--same_network",
                               "--main_process_ip=10.0.0.1", "t.py"});
  EXPECT_EQ(same.options.master_port(), 29500);
  // c10d: the same address is where the machines meet, and the rendezvous numbers them.
  const auto elastic = launch_of({"--num_machines", "2", "--num_processes", "4", "--rdzv_backend", "c10d",
                                  "--main_process_ip", "10.0.0.1", "--main_process_port", "29400", "t.py"});
  EXPECT_EQ(elastic.options.rdzv_backend(), launch::RdzvBackend::kC10d);
  EXPECT_EQ(elastic.options.rdzv_endpoint(), "10.0.0.1:29400");
  EXPECT_FALSE(elastic.options.master_addr().has_value());
  EXPECT_FALSE(elastic.options.node_rank().has_value());
  // One machine: --main_process_port 0 is any free port, which the launcher picks when none is given.
  const auto free = launch_of({"--main_process_port", "0", "t.py"});
  EXPECT_FALSE(free.options.master_port().has_value());
  EXPECT_EQ(launch_of({"--main_process_port", "29555", "t.py"}).options.master_port(), 29555);
}

TEST(AccelerateFlags, TorchrunsFlagsPassThrough) {
  const auto launch = launch_of({"--max_restarts", "3", "--monitor_interval", "0.5", "--rdzv_conf",
                                 "join_timeout=60", "--rdzv_backend", "c10d", "--log_dir", "/tmp/logs",
                                 "--tee", "3", "--role", "trainer", "t.py"});
  EXPECT_EQ(launch.options.max_restarts(), 3);
  EXPECT_EQ(launch.options.monitor_interval(), std::chrono::milliseconds(500));
  EXPECT_EQ(launch.options.rdzv_conf().join_timeout, std::chrono::seconds(60));
  EXPECT_EQ(launch.options.log_dir(), "/tmp/logs");
  ASSERT_TRUE(launch.options.output().tee.has_value());
  EXPECT_EQ(launch.options.output().tee->of(0), launch::kBothStreams);
  EXPECT_EQ(launch.options.role(), "trainer");
  // Accepted flags that mean what lockstep launch does anyway.
  EXPECT_EQ(launch_of({"--multi_gpu", "--num_processes", "2", "-q", "--dynamo_backend", "no", "t.py"})
                .options.nproc_per_node()
                .count(),
            2);
}

// lockstep's own flags for the job secret (Accelerate has none), as lockstep run's of those names.
TEST(AccelerateFlags, TheJobSecretFlagsReachTheLauncher) {
  const auto file = launch_of({"--num_machines", "2", "--machine_rank", "0", "--main_process_ip", "10.0.0.1",
                               "--job_secret_file", "/run/secret", "t.py"});
  EXPECT_EQ(file.options.job_secret_file(), "/run/secret");
  EXPECT_FALSE(file.options.no_job_secret());
  EXPECT_TRUE(launch_of({"--no-job-secret", "t.py"}).options.no_job_secret());
  EXPECT_FALSE(launch_of({"t.py"}).options.no_job_secret());
  // The launcher's errors name its options; lockstep launch shows these flags instead.
  const auto& words = accelerate_option_flags();
  for (const char* option : {"job_secret_file", "no_job_secret"}) {
    EXPECT_NE(std::find(words.begin(), words.end(),
                        std::make_pair(std::string(option), "--" + std::string(option))),
              words.end())
        << option;
  }
}

TEST(AccelerateFlags, BadValuesAndCombinationsNameTheFlag) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--mixed_precision", "FP16", "t.py"},
       "--mixed_precision='FP16' is not valid (expected no, fp16 or bf16)"},
      {{"--mixed_precision=fp8", "t.py"}, "--mixed_precision=fp8 is not supported: float8 training"},
      {{"--num_processes", "0", "t.py"}, "--num_processes=0 is not valid (expected an integer >= 1)"},
      {{"--num_processes", "two", "t.py"}, "--num_processes='two' is not valid"},
      {{"--num_processes", "5", "--num_machines", "2", "--machine_rank", "0", "--main_process_ip", "h",
        "t.py"},
       "--num_processes=5 is not a multiple of --num_machines=2"},
      {{"--multi_gpu", "--num_processes", "1", "t.py"}, "--multi_gpu needs at least 2 processes"},
      {{"--cpu", "--multi_gpu", "t.py"}, "--cpu and --multi_gpu cannot be used together"},
      {{"-m", "--no_python", "t.py"}, "--module and --no_python cannot be used together"},
      {{"--num_machines", "2", "--main_process_ip", "h", "t.py"}, "--num_machines=2 needs --machine_rank"},
      {{"--num_machines", "2", "--machine_rank", "0", "t.py"}, "--num_machines=2 needs --main_process_ip"},
      {{"--num_machines", "2", "--machine_rank", "0", "--main_process_ip", "h", "--main_process_port", "0",
        "t.py"},
       "--main_process_port=0 (any free port) works only on one machine"},
      {{"--main_process_port", "70000", "t.py"}, "--main_process_port=70000 is not valid"},
      {{"--rdzv_backend", "c10d", "--same_network", "t.py"}, "--same_network makes the machines meet"},
      {{"--rdzv_backend", "etcd", "t.py"}, "etcd"},
      {{"--gradient_accumulation_steps", "0", "t.py"}, "--gradient_accumulation_steps=0 is not valid"},
      {{"--num_cpu_threads_per_process", "0", "t.py"}, "--num_cpu_threads_per_process=0 is not valid"},
      {{"--monitor_interval", "0", "t.py"}, "--monitor_interval='0' is not valid"},
      {{"--dynamo_backend", "inductor", "t.py"}, "--dynamo_backend=inductor is not supported: torch.compile"},
      {{"--tee", "9", "t.py"}, "--tee"},
  };
  for (const auto& [args, expected] : cases) {
    const std::string message = error_of(args);
    EXPECT_NE(message.find(expected), std::string::npos) << "args: " << args.front() << "...\n" << message;
  }
}

TEST(AccelerateFlags, RefusedFlagsNameTheFlagTheReasonAndLocksteps) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--use_fsdp", "t.py"},
       "--use_fsdp is not supported by lockstep launch: lockstep launch does not "
       "configure FSDP for the program: the program chooses it, "
       "AcceleratorOptions().strategy(FsdpStrategy())"},
      {{"--use-fsdp", "t.py"}, "--use_fsdp is not supported"},
      {{"--fsdp_version", "2", "t.py"}, "lockstep fit --strategy fsdp"},
      {{"--use_deepspeed", "t.py"},
       "--use_deepspeed is not supported by lockstep launch: DeepSpeed is not part"},
      {{"--zero_stage", "2", "t.py"},
       "--zero_stage is not supported"},  // its value is its own, not the script
      {{"--deepspeed-config-file=ds.json", "t.py"}, "--deepspeed_config_file is not supported"},
      {{"--config_file", "acc.yaml", "t.py"}, "reads no Accelerate config file"},
      {{"--tpu", "t.py"}, "TPUs are not supported"},
      {{"--main_training_function", "main", "t.py"}, "only Accelerate's TPU launcher calls a named function"},
      {{"--use_megatron_lm", "t.py"}, "Megatron-LM"},
      {{"--megatron_lm_tp_degree", "2", "t.py"}, "Megatron-LM"},
      {{"--use_parallelism_config", "t.py"}, "ParallelismConfig"},
      {{"--fp8_backend", "te", "t.py"}, "float8 training is not part of lockstep"},
      {{"--dynamo_mode", "max-autotune", "t.py"}, "torch.compile"},
      {{"--enable_cpu_affinity", "t.py"}, "does not pin workers"},
      {{"--aws_access_key_id", "k", "t.py"}, "SageMaker"},
      {{"--mpirun_hostfile", "hosts", "t.py"}, "mpirun -np N PROGRAM"},
      {{"--env", "A=1", "t.py"}, "TPUs"},
  };
  for (const auto& [args, expected] : cases) {
    const std::string message = error_of(args);
    EXPECT_NE(message.find(expected), std::string::npos) << "args: " << args.front() << "\n" << message;
  }
  // The first refused flag given is the one named.
  EXPECT_NE(error_of({"--tpu", "--use_fsdp", "t.py"}).find("--tpu is not supported"), std::string::npos);
}

TEST(AccelerateFlags, TheHelpTableNamesEveryFlagLockstepLaunchHonours) {
  CLI::App app("test", "lockstep launch");
  AccelerateFlags flags;
  add_accelerate_flags(app, flags);
  const std::string table = kAccelerateTable;
  int honoured = 0;
  for (const CLI::Option* option : app.get_options()) {
    if (option->get_group().empty() || option->get_lnames().empty() || option->get_lnames().front() == "help")
      continue;
    ++honoured;
    const std::string flag = "--" + option->get_lnames().front();
    EXPECT_NE(table.find(flag), std::string::npos) << flag << " is missing from the help's table";
  }
  EXPECT_EQ(honoured, 26);  // every flag of accelerate launch that lockstep launch honours
}

}  // namespace
}  // namespace lockstep::cli
