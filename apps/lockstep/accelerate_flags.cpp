#include "accelerate_flags.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "lockstep/launch/rendezvous_options.h"
#include "lockstep/launch/worker_output.h"
#include "torchrun_flags.h"

namespace lockstep::cli {
namespace accelerate_flags_detail {  // named: the CLI is a unity build, and other commands have helpers too
namespace {

// ---- The flags lockstep launch refuses, each group with its reason.

constexpr const char* kConfigReason =
    "lockstep launch reads no Accelerate config file: give its settings as flags (--num_processes, "
    "--num_machines, --mixed_precision, ...)";
constexpr const char* kTpuReason = "TPUs are not supported: lockstep trains on CPUs and CUDA GPUs";
constexpr const char* kTrainingFunctionReason =
    "only Accelerate's TPU launcher calls a named function (it imports the script under torch_xla's "
    "xmp.spawn); lockstep launch runs the script as a program, whose own `if __name__ == \"__main__\"` "
    "block (or main() in C++) starts the training: drop the flag";
constexpr const char* kDeepSpeedReason =
    "DeepSpeed is not part of lockstep; its ZeRO stages are lockstep's strategies, which the program "
    "chooses: AcceleratorOptions().strategy(Zero1Strategy() / Zero2Strategy() / FsdpStrategy()), or "
    "`lockstep fit "
    "--strategy zero1|zero2|fsdp`";
constexpr const char* kFsdpReason =
    "lockstep launch does not configure FSDP for the program: the program chooses it, "
    "AcceleratorOptions().strategy(FsdpStrategy()) (min_unit_params(), unit_starts() for its units), or "
    "`lockstep fit --strategy "
    "fsdp`";
constexpr const char* kMegatronReason =
    "Megatron-LM (tensor and pipeline parallelism) is not part of lockstep: data parallelism only (DDP, "
    "ZeRO, FSDP)";
constexpr const char* kParallelismReason =
    "N-d parallelism (ParallelismConfig: tensor, context and sequence parallel sizes) is not part of "
    "lockstep: data parallelism only (DDP, ZeRO, FSDP)";
constexpr const char* kFp8Reason =
    "float8 training is not part of lockstep (Accelerate's needs Transformer Engine, MS-AMP or torchao on a "
    "GPU of compute capability 8.9 or later): use --mixed_precision bf16 or fp16";
constexpr const char* kDynamoReason =
    "torch.compile (TorchDynamo) is Python's and a LibTorch C++ program has none, so lockstep launch gives "
    "every program ACCELERATE_DYNAMO_BACKEND=NO: run a Python script that should compile under accelerate "
    "launch";
constexpr const char* kAffinityReason =
    "lockstep does not pin workers to CPU cores (Accelerate binds each process to the cores nearest its "
    "NVIDIA GPU)";
constexpr const char* kSageMakerReason =
    "Amazon SageMaker launches are not supported: lockstep launch starts the workers on this machine";
constexpr const char* kMpiReason =
    "lockstep launch starts its workers itself: for an MPI job run `mpirun -np N PROGRAM` instead "
    "(lockstep's "
    "Accelerator reads Open MPI's OMPI_COMM_WORLD_* variables)";

struct RefusedFlag {
  const char* name;  // the underscore spelling, without "--"
  bool takes_value;
  const char* reason;
};

// Every flag of `accelerate launch` (1.15) that lockstep launch does not honour, with Accelerate's arity, so
// that what follows one is parsed as Accelerate would.
constexpr RefusedFlag kRefusedFlags[] = {
    {"config_file", true, kConfigReason},
    {"tpu", false, kTpuReason},
    {"tpu_cluster", false, kTpuReason},
    {"no_tpu_cluster", false, kTpuReason},
    {"tpu_use_sudo", false, kTpuReason},
    {"vm", true, kTpuReason},
    {"env", true, kTpuReason},
    {"main_training_function", true, kTrainingFunctionReason},
    {"downcast_bf16", false, kTpuReason},
    {"enable_cpu_affinity", false, kAffinityReason},
    {"dynamo_mode", true, kDynamoReason},
    {"dynamo_use_fullgraph", false, kDynamoReason},
    {"dynamo_use_dynamic", false, kDynamoReason},
    {"dynamo_use_regional_compilation", false, kDynamoReason},
    {"use_deepspeed", false, kDeepSpeedReason},
    {"deepspeed_config_file", true, kDeepSpeedReason},
    {"zero_stage", true, kDeepSpeedReason},
    {"offload_optimizer_device", true, kDeepSpeedReason},
    {"offload_param_device", true, kDeepSpeedReason},
    {"offload_optimizer_nvme_path", true, kDeepSpeedReason},
    {"offload_param_nvme_path", true, kDeepSpeedReason},
    {"gradient_clipping", true, kDeepSpeedReason},
    {"zero3_init_flag", true, kDeepSpeedReason},
    {"zero3_save_16bit_model", true, kDeepSpeedReason},
    {"deepspeed_hostfile", true, kDeepSpeedReason},
    {"deepspeed_exclusion_filter", true, kDeepSpeedReason},
    {"deepspeed_inclusion_filter", true, kDeepSpeedReason},
    {"deepspeed_multinode_launcher", true, kDeepSpeedReason},
    {"deepspeed_moe_layer_cls_names", true, kDeepSpeedReason},
    {"use_fsdp", false, kFsdpReason},
    {"fsdp_version", true, kFsdpReason},
    {"fsdp_offload_params", true, kFsdpReason},
    {"fsdp_min_num_params", true, kFsdpReason},
    {"fsdp_sharding_strategy", true, kFsdpReason},
    {"fsdp_reshard_after_forward", true, kFsdpReason},
    {"fsdp_auto_wrap_policy", true, kFsdpReason},
    {"fsdp_transformer_layer_cls_to_wrap", true, kFsdpReason},
    {"fsdp_backward_prefetch", true, kFsdpReason},
    {"fsdp_state_dict_type", true, kFsdpReason},
    {"fsdp_forward_prefetch", true, kFsdpReason},
    {"fsdp_use_orig_params", true, kFsdpReason},
    {"fsdp_cpu_ram_efficient_loading", true, kFsdpReason},
    {"fsdp_sync_module_states", true, kFsdpReason},
    {"fsdp_activation_checkpointing", true, kFsdpReason},
    {"fsdp_activation_checkpointing_offload", true, kFsdpReason},
    {"use_megatron_lm", false, kMegatronReason},
    {"megatron_lm_tp_degree", true, kMegatronReason},
    {"megatron_lm_use_custom_fsdp", true, kMegatronReason},
    {"megatron_lm_no_load_optim", true, kMegatronReason},
    {"megatron_lm_eod_mask_loss", true, kMegatronReason},
    {"megatron_lm_overlap_cpu_optimizer_d2h_h2d", true, kMegatronReason},
    {"megatron_lm_no_save_optim", true, kMegatronReason},
    {"megatron_lm_optimizer_cpu_offload", true, kMegatronReason},
    {"megatron_lm_use_precision_aware_optimizer", true, kMegatronReason},
    {"megatron_lm_decoder_last_pipeline_num_layers", true, kMegatronReason},
    {"megatron_lm_pp_degree", true, kMegatronReason},
    {"megatron_lm_num_micro_batches", true, kMegatronReason},
    {"megatron_lm_sequence_parallelism", true, kMegatronReason},
    {"megatron_lm_recompute_activations", true, kMegatronReason},
    {"megatron_lm_use_distributed_optimizer", true, kMegatronReason},
    {"megatron_lm_gradient_clipping", true, kMegatronReason},
    {"megatron_lm_recompute_granularity", true, kMegatronReason},
    {"megatron_lm_recompute_method", true, kMegatronReason},
    {"megatron_lm_recompute_num_layers", true, kMegatronReason},
    {"megatron_lm_attention_backend", true, kMegatronReason},
    {"megatron_lm_expert_model_parallel_size", true, kMegatronReason},
    {"megatron_lm_context_parallel_size", true, kMegatronReason},
    {"megatron_lm_attention_dropout", true, kMegatronReason},
    {"megatron_lm_hidden_dropout", true, kMegatronReason},
    {"megatron_lm_attention_softmax_in_fp32", true, kMegatronReason},
    {"megatron_lm_expert_tensor_parallel_size", true, kMegatronReason},
    {"megatron_lm_calculate_per_token_loss", true, kMegatronReason},
    {"megatron_lm_use_rotary_position_embeddings", true, kMegatronReason},
    {"use_parallelism_config", false, kParallelismReason},
    {"parallelism_config_dp_replicate_size", true, kParallelismReason},
    {"parallelism_config_dp_shard_size", true, kParallelismReason},
    {"parallelism_config_tp_size", true, kParallelismReason},
    {"parallelism_config_cp_size", true, kParallelismReason},
    {"parallelism_config_cp_backend", true, kParallelismReason},
    {"parallelism_config_cp_comm_strategy", true, kParallelismReason},
    {"parallelism_config_sp_size", true, kParallelismReason},
    {"parallelism_config_sp_backend", true, kParallelismReason},
    {"parallelism_config_sp_seq_length", true, kParallelismReason},
    {"parallelism_config_sp_seq_length_is_variable", true, kParallelismReason},
    {"parallelism_config_sp_attn_implementation", true, kParallelismReason},
    {"fp8_backend", true, kFp8Reason},
    {"fp8_use_autocast_during_eval", false, kFp8Reason},
    {"fp8_margin", true, kFp8Reason},
    {"fp8_interval", true, kFp8Reason},
    {"fp8_format", true, kFp8Reason},
    {"fp8_amax_history_len", true, kFp8Reason},
    {"fp8_amax_compute_algo", true, kFp8Reason},
    {"fp8_override_linear_precision", true, kFp8Reason},
    {"fp8_opt_level", true, kFp8Reason},
    {"fp8_enable_fsdp_float8_all_gather", true, kFp8Reason},
    {"fp8_pad_inner_dim", true, kFp8Reason},
    {"aws_access_key_id", true, kSageMakerReason},
    {"aws_secret_access_key", true, kSageMakerReason},
    {"mpirun_hostfile", true, kMpiReason},
};

// "--num_processes,--num-processes": Accelerate's two spellings of a flag (only the first when its name
// has no '_'), plus `short_name` ("-m") when given.
std::string spellings(const std::string& name, const std::string& short_name = "") {
  std::string dashed = name;
  std::replace(dashed.begin(), dashed.end(), '_', '-');
  std::string names = short_name.empty() ? "" : short_name + ",";
  names += "--" + name;
  if (dashed != name) names += ",--" + dashed;
  return names;
}

// ---- Values

// A flag's integer value (cli::parse_int: decimal digits, at most INT_MAX), at least `min`.
int integer_value(const std::string& flag, const std::string& text, int min, const char* expected) {
  const int value = parse_int(flag, text, expected);
  if (value < min) throw UsageError{flag + "=" + text + " is not valid (expected " + expected + ")"};
  return value;
}

// "no", "fp16" or "bf16": ACCELERATE_MIXED_PRECISION's value (Accelerate's choices, case as given).
std::string mixed_precision_value(const std::optional<std::string>& text) {
  if (!text) return "no";
  if (*text == "no" || *text == "fp16" || *text == "bf16") return *text;
  if (*text == "fp8") throw UsageError{"--mixed_precision=fp8 is not supported: " + std::string(kFp8Reason)};
  throw UsageError{"--mixed_precision='" + *text + "' is not valid (expected no, fp16 or bf16)"};
}

// --dynamo_backend: only "no" (Accelerate's default) runs here.
void check_dynamo_backend(const std::optional<std::string>& text) {
  if (!text || *text == "no") return;
  static const char* const kAccelerateBackends[] = {
      "eager", "aot_eager", "inductor", "aot_ts_nvfuser", "nvprims_nvfuser",         "cudagraphs",
      "ofi",   "fx2trt",    "onnxrt",   "tensorrt",       "aot_torchxla_trace_once", "torhchxla_trace_once",
      "tvm"};
  for (const char* backend : kAccelerateBackends) {
    if (*text == backend) {
      throw UsageError{"--dynamo_backend=" + *text + " is not supported: " + kDynamoReason};
    }
  }
  throw UsageError{"--dynamo_backend='" + *text +
                   "' is not valid (expected no; Accelerate's others are refused here)"};
}

// The GPUs the workers will see: `visible`, or with --gpu_ids the ids listed (none on a node without GPUs).
int worker_gpus(const std::optional<std::string>& gpu_ids, int visible) {
  if (!gpu_ids || *gpu_ids == "all" || visible == 0) return visible;
  return static_cast<int>(std::count(gpu_ids->begin(), gpu_ids->end(), ',')) + 1;
}

// ---- The launch

// Where the workers meet (the static rendezvous' master, or the c10d endpoint), as Accelerate's
// prepare_multi_gpu_env passes --main_process_ip/--main_process_port to torchrun.
void set_meeting_point(const AccelerateFlags& flags, launch::RdzvBackend backend, int machines,
                       launch::LaunchOptions& options) {
  const bool c10d = backend == launch::RdzvBackend::kC10d;
  if (flags.same_network && c10d) {
    throw UsageError{
        "--same_network makes the machines meet at --main_process_ip:--main_process_port as torchrun's "
        "static "
        "master, which --rdzv_backend=c10d does not use: drop --same_network (the c10d rendezvous meets "
        "there "
        "anyway)"};
  }
  if (machines > 1 && !flags.main_process_ip) {
    throw UsageError{"--num_machines=" + std::to_string(machines) +
                     " needs --main_process_ip, the address of the machine with --machine_rank 0 "
                     "(the same on every machine)"};
  }
  std::optional<int> port;
  if (flags.main_process_port) {
    port = integer_value("--main_process_port", *flags.main_process_port, 0, "a port in 0..65535");
    if (*port > 65535)
      throw UsageError{"--main_process_port=" + *flags.main_process_port +
                       " is not valid (expected a port in 0..65535)"};
  }
  if (port == 0) {
    // Accelerate's "any free port": one machine's own choice, which nothing else could learn.
    if (machines > 1 || flags.main_process_ip) {
      throw UsageError{
          "--main_process_port=0 (any free port) works only on one machine without --main_process_ip: give "
          "the port every process should reach"};
    }
    port.reset();
  }
  if (c10d) {
    if (flags.main_process_ip || port) {
      options.rdzv_endpoint(flags.main_process_ip.value_or("127.0.0.1") + ":" +
                            std::to_string(port.value_or(29500)));
    }
    return;
  }
  if (flags.main_process_ip) options.master_addr(*flags.main_process_ip);
  if (port) options.master_port(*port);
  if (flags.main_process_ip && !port) options.master_port(29500);  // Accelerate's default port
}

// The variables Accelerate's launcher gives its workers (accelerate/utils/launch.py, prepare_multi_gpu_env
// and prepare_simple_launcher_cmd_env), for these flags.
launch::EnvPairs accelerate_variables(const AccelerateFlags& flags, int gpus) {
  launch::EnvPairs vars = {
      {"ACCELERATE_MIXED_PRECISION", mixed_precision_value(flags.mixed_precision)},
      {"ACCELERATE_DYNAMO_BACKEND", "NO"},
      {"ACCELERATE_DYNAMO_MODE", "default"},
      {"ACCELERATE_DYNAMO_USE_FULLGRAPH", "False"},
      {"ACCELERATE_DYNAMO_USE_DYNAMIC", "False"},
      {"ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION", "False"},
  };
  if (flags.gradient_accumulation_steps) {
    const int steps = integer_value("--gradient_accumulation_steps", *flags.gradient_accumulation_steps, 1,
                                    "an integer >= 1");
    vars.emplace_back("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", std::to_string(steps));
  }
  // Without a GPU the workers train on the CPU anyway; the variable makes a Python Accelerate script join
  // the others (MULTI_CPU over Gloo) instead of training alone, as under Accelerate's own multi-CPU launch.
  if (flags.cpu || gpus == 0) vars.emplace_back("ACCELERATE_USE_CPU", "True");
  if (flags.debug) vars.emplace_back("ACCELERATE_DEBUG_MODE", "true");
  if (flags.gpu_ids && *flags.gpu_ids != "all") vars.emplace_back("CUDA_VISIBLE_DEVICES", *flags.gpu_ids);
  return vars;
}

launch::ProgramMode program_mode(const AccelerateFlags& flags) {
  if (flags.module && flags.no_python) {
    throw UsageError{"--module and --no_python cannot be used together (Accelerate refuses them too)"};
  }
  if (flags.module) return launch::ProgramMode::kModule;
  if (flags.no_python) return launch::ProgramMode::kExecutable;
  return launch::ProgramMode::kAuto;
}

// Processes per machine: --num_processes (all machines together, as in Accelerate) over --num_machines;
// unset, one per GPU of this node, at least one.
int processes_per_machine(const AccelerateFlags& flags, int machines, int gpus) {
  if (!flags.num_processes) return std::max(1, gpus);
  const int total = integer_value("--num_processes", *flags.num_processes, 1, "an integer >= 1");
  if (flags.multi_gpu && total < 2) {
    throw UsageError{"--multi_gpu needs at least 2 processes, got --num_processes=" + std::to_string(total) +
                     " (Accelerate refuses it too)"};
  }
  if (total % machines != 0) {
    throw UsageError{"--num_processes=" + std::to_string(total) +
                     " is not a multiple of --num_machines=" + std::to_string(machines) +
                     " (it counts the processes of all machines together; Accelerate would start " +
                     std::to_string(total / machines) + " on each and lose the rest): give a multiple"};
  }
  return total / machines;
}

}  // namespace
}  // namespace accelerate_flags_detail

namespace af = accelerate_flags_detail;

const char* const kAccelerateTable =
    "accelerate launch's flags (Accelerate 1.15) in lockstep launch:\n"
    "  --num_processes N                N workers in all, num_processes / num_machines on each machine,\n"
    "                                   with torchrun's variables (lockstep run --help)\n"
    "  --num_machines M, --machine_rank R, --main_process_ip A, --main_process_port P\n"
    "                                   the machines, this one's index and where rank 0 is (MASTER_ADDR,\n"
    "                                   MASTER_PORT; under --rdzv_backend c10d the rendezvous endpoint)\n"
    "  --mixed_precision no|fp16|bf16   ACCELERATE_MIXED_PRECISION (always set; default no)\n"
    "  --gradient_accumulation_steps K  ACCELERATE_GRADIENT_ACCUMULATION_STEPS=K\n"
    "  --cpu                            ACCELERATE_USE_CPU=True\n"
    "  --debug                          ACCELERATE_DEBUG_MODE=true\n"
    "  --gpu_ids LIST                   CUDA_VISIBLE_DEVICES=LIST ('all': unchanged)\n"
    "  --num_cpu_threads_per_process T  OMP_NUM_THREADS=T\n"
    "  --rdzv_backend, --rdzv_conf, --max_restarts, --monitor_interval, --log_dir, --role, -m/--module,\n"
    "  --no_python                      torchrun's meaning, as lockstep run's flags of those names\n"
    "  --tee T                          torchrun's --tee: streams also written to --log_dir's files\n"
    "  --multi_gpu, --same_network, -q/--quiet, --dynamo_backend no\n"
    "                                   accepted: each means what lockstep launch does anyway\n"
    "  --job_secret_file PATH, --no_job_secret\n"
    "                                   lockstep's own: the job secret, as lockstep run's flags of those\n"
    "                                   names (made for a job on one machine; docs/reliability.md)\n"
    "Every worker also gets ACCELERATE_DYNAMO_BACKEND=NO, ACCELERATE_DYNAMO_MODE=default and\n"
    "ACCELERATE_DYNAMO_USE_FULLGRAPH, _USE_DYNAMIC, _USE_REGIONAL_COMPILATION=False, as from Accelerate.\n"
    "A program that sets its own precision, accumulation steps or cpu (Accelerator(mixed_precision=...),\n"
    "AcceleratorOptions().mixed_precision(...)) keeps them (docs/accelerator.md).\n"
    "\n"
    "Different from accelerate launch, on purpose:\n"
    "  - N workers on any machine. accelerate launch starts one process unless --multi_gpu is given or 2\n"
    "    GPUs are seen (its multi-CPU launch needs mpirun).\n"
    "  - No GPU on this machine (or --cpu): ACCELERATE_USE_CPU=True, so that a Python script's Accelerator\n"
    "    joins the others over Gloo (Accelerate's multi-CPU mode) instead of each worker training alone.\n"
    "  - A program whose name does not end in .py is executed as it is (a C++ program needs no "
    "--no_python).\n"
    "  - --gradient_accumulation_steps reaches every program (Accelerate hands it to DeepSpeed only).\n"
    "  - OMP_NUM_THREADS defaults to max(1, cores / workers) (Accelerate: 1); on one machine without\n"
    "    --main_process_port the port is a free one (Accelerate: 29500, or a free one when that is taken).\n"
    "  - No Accelerate config file is read (nor accelerate config's default_config.yaml).\n"
    "  - Not set: NCCL_P2P_DISABLE/NCCL_IB_DISABLE (Accelerate's fix for RTX 4000 GPUs), KMP_AFFINITY and\n"
    "    KMP_BLOCKTIME (from its one-process CPU launch: compact pinning would put N workers on one set of\n"
    "    cores).\n"
    "Refused, each naming the reason: --config_file; --tpu and the TPU flags, --main_training_function;\n"
    "--use_deepspeed and the DeepSpeed flags (lockstep's ZeRO: "
    "AcceleratorOptions().strategy(Zero1Strategy()\n"
    "| Zero2Strategy()), lockstep fit --strategy zero1|zero2); --use_fsdp and --fsdp_* (FsdpStrategy(), "
    "lockstep fit\n"
    "--strategy fsdp); --use_megatron_lm, --megatron_lm_*; --use_parallelism_config, "
    "--parallelism_config_*;\n"
    "--mixed_precision fp8 and --fp8_*; --dynamo_backend other than no and --dynamo_*;\n"
    "--enable_cpu_affinity; --aws_*; --mpirun_hostfile.";

void add_accelerate_flags(CLI::App& app, AccelerateFlags& flags) {
  const char* resources = "Resources";
  app.add_option(af::spellings("num_processes"), flags.num_processes,
                 "Processes of all machines together (WORLD_SIZE); each\n"
                 "machine starts num_processes / num_machines. Default: one per\n"
                 "GPU of this machine, else 1")
      ->type_name("N")
      ->group(resources);
  app.add_option(af::spellings("num_machines"), flags.num_machines,
                 "Machines in the job; run lockstep launch on each. Default: 1")
      ->type_name("M")
      ->group(resources);
  app.add_option(af::spellings("machine_rank"), flags.machine_rank,
                 "This machine's index in [0, num_machines) (GROUP_RANK);\n"
                 "required with num_machines > 1 under the static rendezvous")
      ->type_name("R")
      ->group(resources);
  app.add_option(af::spellings("main_process_ip"), flags.main_process_ip,
                 "Address of the machine of rank 0 (MASTER_ADDR; under c10d the\n"
                 "rendezvous endpoint). Required with num_machines > 1")
      ->type_name("ADDR")
      ->group(resources);
  app.add_option(af::spellings("main_process_port"), flags.main_process_port,
                 "Its port (MASTER_PORT), default 29500; 0 or unset on one\n"
                 "machine without --main_process_ip: a free port")
      ->type_name("PORT")
      ->group(resources);
  app.add_option(af::spellings("num_cpu_threads_per_process"), flags.num_cpu_threads_per_process,
                 "OMP_NUM_THREADS of every worker. Default: OMP_NUM_THREADS\n"
                 "if set, else max(1, cores / processes per machine)")
      ->type_name("T")
      ->group(resources);
  app.add_option(af::spellings("gpu_ids"), flags.gpu_ids,
                 "CUDA_VISIBLE_DEVICES of every worker ('all': unchanged)")
      ->type_name("LIST")
      ->group(resources);
  app.add_flag(af::spellings("cpu"), flags.cpu, "Train on the CPU even with GPUs (ACCELERATE_USE_CPU=True)")
      ->group(resources);
  app.add_flag(af::spellings("multi_gpu"), flags.multi_gpu,
               "Accelerate's distributed GPU launch: what lockstep launch always\n"
               "does (needs num_processes >= 2; not with --cpu)")
      ->group(resources);
  app.add_flag(af::spellings("same_network"), flags.same_network,
               "The machines share a network: they meet at --main_process_ip\n"
               "as the static master (as without it here; not with c10d)")
      ->group(resources);

  const char* training = "Training (read by the program's Accelerator)";
  app.add_option(af::spellings("mixed_precision"), flags.mixed_precision,
                 "ACCELERATE_MIXED_PRECISION: no, fp16 or bf16 (fp8: refused).\n"
                 "Default: no. A program that sets its own precision keeps it")
      ->type_name("no|fp16|bf16")
      ->group(training);
  app.add_option(af::spellings("gradient_accumulation_steps"), flags.gradient_accumulation_steps,
                 "ACCELERATE_GRADIENT_ACCUMULATION_STEPS (Accelerate sets it\n"
                 "for DeepSpeed only)")
      ->type_name("K")
      ->group(training);
  app.add_option(af::spellings("dynamo_backend"), flags.dynamo_backend,
                 "Only 'no' (ACCELERATE_DYNAMO_BACKEND=NO, always set)")
      ->type_name("no")
      ->group(training);
  app.add_flag(af::spellings("debug"), flags.debug, "ACCELERATE_DEBUG_MODE=true")->group(training);

  const char* rendezvous = "Rendezvous and workers (torchrun's)";
  app.add_option(af::spellings("rdzv_backend"), flags.rdzv_backend,
                 "static (default) or c10d (elastic rounds at\n"
                 "--main_process_ip:--main_process_port)")
      ->type_name("B")
      ->group(rendezvous);
  app.add_option(af::spellings("rdzv_conf"), flags.rdzv_conf,
                 "c10d rendezvous settings: key=value,... (lockstep run --help)")
      ->type_name("CONF")
      ->group(rendezvous);
  app.add_option(af::spellings("max_restarts"), flags.max_restarts,
                 "Restart the workers after a failure up to K times. Default: 0")
      ->type_name("K")
      ->group(rendezvous);
  app.add_option(af::spellings("monitor_interval"), flags.monitor_interval,
                 "Seconds between looks at the c10d rendezvous. Default: 0.1")
      ->type_name("S")
      ->group(rendezvous);
  app.add_option(af::spellings("log_dir"), flags.log_dir, "Also keep each rank's output in files under DIR")
      ->type_name("DIR")
      ->group(rendezvous);
  app.add_option(af::spellings("tee", "-t"), flags.tee,
                 "Streams also written to --log_dir's files: 0-3 or R:S,...\n"
                 "(torchrun's --tee)")
      ->type_name("T")
      ->group(rendezvous);
  app.add_option(af::spellings("role"), flags.role, "ROLE_NAME of the workers. Default: default")
      ->type_name("ROLE")
      ->group(rendezvous);
  app.add_flag(af::spellings("module", "-m"), flags.module, "Run SCRIPT as a Python module (python -m)")
      ->group(rendezvous);
  app.add_flag(af::spellings("no_python"), flags.no_python, "Execute SCRIPT as it is, even a .py")
      ->group(rendezvous);
  app.add_flag(af::spellings("quiet", "-q"), flags.quiet,
               "Accepted: lockstep launch prints no launcher traceback anyway")
      ->group(rendezvous);
  // lockstep's own, as lockstep run's flags of those names (Accelerate has no job secret).
  app.add_option(af::spellings("job_secret_file"), flags.job_secret_file,
                 "lockstep: the job secret, in a file of mode 0600 (the\n"
                 "same on every machine). Default: LOCKSTEP_JOB_SECRET, else\n"
                 "LOCKSTEP_JOB_SECRET_FILE, else a new one for a job on one\n"
                 "machine; a job that spans machines needs one (or\n"
                 "--no_job_secret)")
      ->type_name("PATH")
      ->group(rendezvous);
  app.add_flag(af::spellings("no_job_secret"), flags.no_job_secret,
               "lockstep: run a job that spans machines without a job\n"
               "secret: whoever reaches its store's port and knows the\n"
               "run id can join it (also LOCKSTEP_NO_JOB_SECRET=1)")
      ->group(rendezvous);

  for (const af::RefusedFlag& refused : af::kRefusedFlags) {
    if (refused.takes_value) {
      app.add_option(af::spellings(refused.name))->group("");
    } else {
      app.add_flag(af::spellings(refused.name))->group("");
    }
  }
}

void refuse_unsupported_flags(const CLI::App& app) {
  for (const CLI::Option* given : app.parse_order()) {
    for (const af::RefusedFlag& refused : af::kRefusedFlags) {
      if (given->check_lname(refused.name)) {
        throw UsageError{"--" + std::string(refused.name) +
                         " is not supported by lockstep launch: " + refused.reason};
      }
    }
  }
}

AccelerateLaunch accelerate_launch(const AccelerateFlags& flags, const std::vector<std::string>& command,
                                   int visible_gpus) {
  if (flags.cpu && flags.multi_gpu) {
    throw UsageError{
        "--cpu and --multi_gpu cannot be used together (Accelerate: only one of --cpu, --multi_gpu, --tpu, "
        "--use_deepspeed, --use_fsdp)"};
  }
  af::check_dynamo_backend(flags.dynamo_backend);
  const int gpus = flags.cpu ? 0 : af::worker_gpus(flags.gpu_ids, visible_gpus);
  const int machines =
      flags.num_machines ? af::integer_value("--num_machines", *flags.num_machines, 1, "an integer >= 1") : 1;
  const launch::RdzvBackend backend =
      flags.rdzv_backend ? launch::parse_rdzv_backend(*flags.rdzv_backend) : launch::RdzvBackend::kStatic;

  AccelerateLaunch result{launch::LaunchOptions(command), {}};
  launch::LaunchOptions& options = result.options;
  options.program_mode(af::program_mode(flags));
  options.nproc_per_node(af::processes_per_machine(flags, machines, gpus));
  options.nnodes(machines);
  options.rdzv_backend(backend);
  if (flags.machine_rank) {
    options.node_rank(af::integer_value("--machine_rank", *flags.machine_rank, 0, "an integer >= 0"));
  } else if (machines > 1 && backend == launch::RdzvBackend::kStatic) {
    throw UsageError{"--num_machines=" + std::to_string(machines) +
                     " needs --machine_rank on every machine (0 on the one at --main_process_ip), or "
                     "--rdzv_backend=c10d, which numbers the machines as they arrive"};
  }
  af::set_meeting_point(flags, backend, machines, options);
  if (flags.rdzv_conf) {
    options.rdzv_conf(launch::parse_rdzv_conf(*flags.rdzv_conf));
    for (const std::string& note : options.rdzv_conf().notes)
      result.warnings.push_back("--rdzv_conf: " + note);
  }
  if (flags.max_restarts) {
    options.max_restarts(af::integer_value("--max_restarts", *flags.max_restarts, 0, "an integer >= 0"));
  }
  if (flags.monitor_interval)
    options.monitor_interval(parse_seconds("--monitor_interval", *flags.monitor_interval));
  if (flags.log_dir) options.log_dir(*flags.log_dir);
  if (flags.tee) {
    launch::WorkerOutput output;
    output.tee = launch::StdStreams::parse(*flags.tee, "--tee");
    options.output(output);
  }
  if (flags.role) options.role(*flags.role);
  if (flags.job_secret_file) options.job_secret_file(*flags.job_secret_file);
  options.no_job_secret(flags.no_job_secret);
  launch::EnvPairs variables = af::accelerate_variables(flags, gpus);
  if (flags.num_cpu_threads_per_process) {
    const int threads = af::integer_value("--num_cpu_threads_per_process", *flags.num_cpu_threads_per_process,
                                          1, "an integer >= 1");
    variables.emplace_back("OMP_NUM_THREADS", std::to_string(threads));
  }
  options.worker_env(variables);
  return result;
}

const std::vector<std::pair<std::string, std::string>>& accelerate_option_flags() {
  static const std::vector<std::pair<std::string, std::string>> kFlags = {
      {"nproc_per_node", "--num_processes"},
      {"nnodes", "--num_machines"},
      {"node_rank", "--machine_rank"},
      {"master_addr", "--main_process_ip"},
      {"master_port", "--main_process_port"},
      {"rdzv_endpoint", "--main_process_ip:--main_process_port"},
      {"rdzv_backend", "--rdzv_backend"},
      {"rdzv_conf", "--rdzv_conf"},
      {"max_restarts", "--max_restarts"},
      {"monitor_interval", "--monitor_interval"},
      {"log_dir", "--log_dir"},
      {"role", "--role"},
      {"job_secret_file", "--job_secret_file"},
      {"no_job_secret", "--no_job_secret"},
  };
  return kFlags;
}

}  // namespace lockstep::cli
