#include "fit_flags.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>

#include <CLI/CLI.hpp>

#include "lockstep/detail/join.h"
#include "lockstep/launch/nproc_per_node.h"
#include "yaml_config.h"

namespace lockstep::cli {
namespace {

constexpr const char* kFitDescription =
    "Train a ready model with data-parallel ranks (Lightning's flag names): an image classifier,\n"
    "or a GPT language model on text (--model gpt --data text).\n"
    "Without a surrounding launcher, starts --devices local ranks itself (default 1). Under\n"
    "`lockstep run`, torchrun, srun or mpirun it is one rank of that job (--devices, when given,\n"
    "must then match the ranks per node).\n"
    "Rank 0 prints one line per epoch (and a live progress bar on a terminal), appends the\n"
    "metrics to --metrics-file and saves the final weights to --ckpt-dir/final.pt and final.safetensors.";

constexpr const char* kFitFooter =
    "Examples:\n"
    "  lockstep fit --devices 2 --model mlp --max-epochs 10\n"
    "  lockstep fit --devices 2 --model cnn --max-epochs 15 --metrics-file cnn.jsonl\n"
    "  lockstep fit --model resnet18 --data cifar10 --data-dir ~/cifar-10-batches-bin\n"
    "  lockstep fit --model resnet18 --data synthetic --synthetic-shape 3,32,32 --batch-size 32\n"
    "  lockstep fit --devices 2 --model gpt --data text --strategy fsdp --precision bf16-mixed\n"
    "  lockstep run --nproc-per-node 2 --standalone -- lockstep fit --model mlp\n"
    "  srun --ntasks-per-node 2 lockstep fit --model mlp\n"
    "  lockstep fit --model cnn --print-config > cnn.yaml; lockstep fit --config cnn.yaml --devices 2\n"
    "Config files: YAML with the flag names as keys (max-epochs: 5, lr-scaling: linear); flags given\n"
    "on the command line win over the file; `key: null` keeps the default.\n"
    "Exit status: 0 on success, 1 when training fails (the error names the rank), 2 for bad flags.";

std::string joined(const std::vector<std::string>& names) {
  return lockstep::detail::join(names, "|");
}

// The defaults of the flags that --print-config leaves at null (their default depends on others).
std::map<std::string, std::string> config_notes(const train::FitConfig& config) {
  std::map<std::string, std::string> notes;
  if (!config.lr) {
    std::ostringstream lr;
    lr << "default: " << config.resolved_lr() << " for " << config.optimizer;
    notes["lr"] = lr.str();
  }
  if (!config.trainer.devices())
    notes["devices"] = "default: 1, or the surrounding launcher's ranks per node";
  if (!config.trainer.num_nodes()) notes["num-nodes"] = "default: the surrounding launcher's";
  if (config.data_dir.empty() && !config.resolved_data_dir().empty()) {
    notes["data-dir"] = "default: " + config.resolved_data_dir();
  }
  if (config.text_file.empty() && !config.resolved_text_file().empty()) {
    notes["text-file"] = "default: " + config.resolved_text_file();
  }
  if (!config.synthetic_shape && config.data == "synthetic") {
    notes["synthetic-shape"] = "default: " + config.resolved_synthetic_shape().to_string();
  }
  if (!config.augment) {
    notes["augment"] = std::string("default: ") + (config.resolved_augment() ? "on" : "off");
  }
  if (!config.lr_reference_batch) {
    notes["lr-reference-batch"] =
        "default: batch-size, " + std::to_string(config.resolved_lr_reference_batch());
  }
  if (!config.lr_step_epochs) {
    notes["lr-step-epochs"] =
        "default: max(1, max-epochs / 3) = " + std::to_string(config.resolved_lr_step_epochs());
  }
  if (config.checkpoint_filename.empty()) notes["checkpoint-filename"] = "default: epoch={epoch}-step={step}";
  return notes;
}

// One of the Trainer's options as a flag: the parsed value goes to `set` (which may throw
// std::invalid_argument, naming the option); --help and --print-config show `shown`, the option's default.
template <typename T>
CLI::Option* add_trainer_flag(CLI::App& app, const std::string& names, const std::string& help,
                              std::function<void(const T&)> set, const std::string& shown = "") {
  CLI::Option* option = app.add_option_function<T>(names, std::move(set), help);
  if (!shown.empty()) option->default_str(shown);
  return option;
}

template <typename T>
std::string shown(const T& value) {
  std::ostringstream s;
  s << value;
  return s.str();
}

// The flags that set config.trainer (TrainerOptions): Lightning's Trainer arguments.
void add_trainer_flags(CLI::App& app, train::TrainerOptions& t) {
  add_trainer_flag<int>(app, "--devices",
                        "Local ranks (processes) to train with; with --accelerator gpu, GPUs per node (one "
                        "rank each). Default: 1",
                        [&t](const int& n) { t.devices(n); })
      ->type_name("N");
  add_trainer_flag<std::string>(
      app, "--strategy",
      "ddp, zero1 (DDP with the optimizer's state sharded over the ranks: each rank keeps 1/N of\n"
      "Adam's moments), zero2 (zero1, and gradients reduce-scattered during backward: each rank keeps\n"
      "1/N of them), or fsdp (zero2, and parameters sharded too: each unit of layers gathered when used,\n"
      "released after; cnn and resnet18 are one unit). Exact against ddp; checkpoints sharded per rank.\n"
      "Lightning's names too: ddp_find_unused_parameters_true (ddp letting parameters go unused in a\n"
      "step), ddp_find_unused_parameters_false, auto (ddp), deepspeed_stage_1 (zero1), deepspeed_stage_2\n"
      "(zero2); the others are refused with what to use instead",
      [&t](const std::string& text) {
        // The strategy's own options given before it stay (--bucket-cap-mb, --fsdp-min-unit-params).
        train::StrategyOptions strategy = train::parse_strategy(text);
        strategy.bucket_cap_mb(t.strategy().bucket_cap_mb()).min_unit_params(t.strategy().min_unit_params());
        t.strategy(strategy);
      },
      t.strategy().name())
      ->type_name("ddp|zero1|zero2|fsdp|...");
  add_trainer_flag<int>(
      app, "--tensor-parallel",
      "T > 1 splits --model gpt over T consecutive ranks (Megatron's tensor parallelism: attention\n"
      "heads, MLP columns and the vocabulary split, each rank holding about 1/T of the blocks); the\n"
      "ranks form world / T data-parallel groups running --strategy ddp or zero1 (--devices a multiple\n"
      "of T). Checkpoints come in one part per tensor-parallel rank (last.ckpt, last.ckpt.tp1, ...)",
      [&t](const int& n) { t.tensor_parallel(n); }, shown(t.tensor_parallel()))
      ->type_name("T");
  add_trainer_flag<int>(
      app, "--pipeline-parallel",
      "P > 1 cuts --model mlp, resnet18 or gpt into P stages on P consecutive ranks (a pipeline:\n"
      "balanced by parameters; each rank holds and steps its stage's layers); each batch runs in\n"
      "--micro-batches pieces by --pipeline-schedule; the ranks form world / P data-parallel groups\n"
      "running --strategy ddp or zero1 (--devices a multiple of P). Checkpoints come in one part per\n"
      "stage (last.ckpt, last.ckpt.tp1.<save>, ...), each with the whole model",
      [&t](const int& n) { t.pipeline_parallel(n); }, shown(t.pipeline_parallel()))
      ->type_name("P");
  add_trainer_flag<int>(
      app, "--micro-batches",
      "Micro-batches each rank's batch is cut into under --pipeline-parallel (more: a smaller bubble,\n"
      "(P-1)/(M+P-1) of each stage's time idle; each at least one sample)",
      [&t](const int& n) { t.micro_batches(n); }, shown(t.micro_batches()))
      ->type_name("M");
  add_trainer_flag<std::string>(
      app, "--pipeline-schedule",
      "1f1b (a stage holds at most P - s micro-batches' activations) or gpipe (all M at once)",
      [&t](const std::string& text) { t.pipeline_schedule(pipeline::schedule_from_string(text)); },
      pipeline::to_string(t.pipeline_schedule()))
      ->type_name("1f1b|gpipe");
  add_trainer_flag<std::string>(
      app, "--accelerator",
      "Where to train: cpu, gpu (rank r on cuda:r of the visible devices, CUDA_VISIBLE_DEVICES), or\n"
      "auto = gpu when this process sees a CUDA device, else cpu",
      [&t](const std::string& text) { t.accelerator(train::parse_accelerator(text)); },
      to_string(t.accelerator()))
      ->type_name("auto|cpu|gpu");
  add_trainer_flag<int>(app, "--num-nodes,--num_nodes", "Nodes; must match the surrounding launcher",
                        [&t](const int& n) { t.num_nodes(n); })
      ->type_name("N");
  add_trainer_flag<std::string>(
      app, "--backend",
      "Collective backend: auto = nccl on GPUs; on the CPU shm when all ranks share this host, hier\n"
      "(shm within, gloo between nodes) for multi-node jobs; mpi needs ranks started by mpirun\n"
      "(docs/mpi.md); gloo also moves CUDA tensors (ranks sharing a GPU)",
      [&t](const std::string& name) { t.backend(comm::parse_backend(name)); }, to_string(t.backend()))
      ->type_name("auto|shm|hier|gloo|mpi|nccl");
  add_trainer_flag<int>(
      app, "--threads", "Intra-op threads per rank; 0 = cores / local ranks",
      [&t](const int& n) { t.threads(n); }, shown(t.threads()));
  add_trainer_flag<int64_t>(
      app, "--max-epochs,--max_epochs", "Epochs to train", [&t](const int64_t& n) { t.max_epochs(n); },
      shown(t.max_epochs()));
  add_trainer_flag<uint64_t>(
      app, "--seed", "Seed of weights, shuffling, dropout and augmentation",
      [&t](const uint64_t& n) { t.seed(n); }, shown(t.seed()));
  add_trainer_flag<std::string>(
      app, "--precision",
      "Numeric precision: 32, or bf16-mixed (forward under bfloat16 autocast, float32 weights and\n"
      "optimizer); 16-mixed (float16 autocast with a gradient scaler) needs a GPU",
      [&t](const std::string& text) { t.precision(train::parse_precision(text)); }, to_string(t.precision()))
      ->type_name("32|bf16-mixed|16-mixed");
  add_trainer_flag<int64_t>(
      app, "--accumulate-grad-batches", "Batches per optimizer step (gradients all-reduced once per step)",
      [&t](const int64_t& n) { t.accumulate_grad_batches(n); }, shown(t.accumulate_grad_batches()));
  add_trainer_flag<double>(
      app, "--gradient-clip-val", "Clip the gradients' global L2 norm; 0 = off",
      [&t](const double& v) { t.gradient_clip_val(v); }, shown(t.gradient_clip_val()));
  add_trainer_flag<int64_t>(
      app, "--fsdp-min-unit-params",
      "--strategy fsdp's auto-wrap: consecutive layers join one unit (gathered together) until it\n"
      "holds this many parameters (PyTorch's size_based_auto_wrap_policy min_num_params)",
      [&t](const int64_t& n) { t.strategy(train::StrategyOptions(t.strategy()).min_unit_params(n)); },
      shown(t.strategy().min_unit_params()));
  add_trainer_flag<std::string>(
      app, "--bucket-cap-mb,--bucket_cap_mb",
      "Size cap of DDP's gradient buckets, MiB (Lightning's DDPStrategy(bucket_cap_mb)). auto:\n"
      "a 16th of the model's gradients within [1, 25] MiB, so that most of the all-reduce\n"
      "overlaps backward even on a slow link (docs/multinode.md); Lightning's default is 25",
      [&t](const std::string& text) {
        if (text == "auto")
          return void(t.strategy(train::StrategyOptions(t.strategy()).bucket_cap_mb(std::nullopt)));
        char* end = nullptr;
        const double mb = std::strtod(text.c_str(), &end);
        if (text.empty() || end != text.c_str() + text.size()) {
          throw std::invalid_argument(
              "--bucket-cap-mb must be a number of MiB > 0, or auto (the default), got " + text);
        }
        // The range is checked by TrainerOptions::validate().
        t.strategy(train::StrategyOptions(t.strategy()).bucket_cap_mb(mb));
      },
      "auto")
      ->type_name("MB|auto");
  add_trainer_flag<std::string>(
      app, "--limit-train-batches", "Train batches per epoch: a count or a fraction",
      [&t](const std::string& text) {
        t.limit_train_batches(train::BatchLimit::parse("--limit-train-batches", text));
      },
      t.limit_train_batches().to_string())
      ->type_name("N|F");
  add_trainer_flag<std::string>(
      app, "--limit-val-batches", "Validation batches per epoch and rank: a count or a fraction",
      [&t](const std::string& text) {
        t.limit_val_batches(train::BatchLimit::parse("--limit-val-batches", text));
      },
      t.limit_val_batches().to_string())
      ->type_name("N|F");
  add_trainer_flag<std::string>(
      app, "--ckpt-dir,--ckpt_dir",
      "Write DIR/last.ckpt at every epoch end (model, optimizer, position, every rank's RNG)\n"
      "and the final weights to DIR/final.pt and DIR/final.safetensors; rank 0, atomically.\n"
      "With it, SIGUSR1 or SIGTERM (a preemption notice) writes DIR/last.ckpt at the next step\n"
      "and exits 75: requeue with --resume last",
      [&t](const std::string& dir) { t.ckpt_dir(dir); })
      ->type_name("DIR");
  add_trainer_flag<int64_t>(
      app, "--ckpt-every-n-steps",
      "Also rewrite DIR/last.ckpt every N optimizer steps (mid-epoch); 0 = epoch ends only",
      [&t](const int64_t& n) { t.ckpt_every_n_steps(n); }, shown(t.ckpt_every_n_steps()));
  add_trainer_flag<std::string>(
      app, "--resume",
      "Resume from a checkpoint: last (= --ckpt-dir's last.ckpt), auto (last when it exists,\n"
      "else start fresh: for requeued jobs) or its path; mid-epoch resumes reproduce the\n"
      "uninterrupted run",
      [&t](const std::string& resume) { t.resume(resume); })
      ->type_name("last|auto|PATH");
  add_trainer_flag<int64_t>(
      app, "--max-steps,--max_steps",
      "Stop after N optimizer steps in all (last.ckpt is written there); -1 = no limit",
      [&t](const int64_t& n) { t.max_steps(n); }, shown(t.max_steps()));
  add_trainer_flag<int64_t>(
      app, "--log-every-n-steps",
      "Append {\"step\", \"train_loss\", ...} to --metrics-file every N steps (rank 0's loss); 0 = off",
      [&t](const int64_t& n) { t.log_every_n_steps(n); }, shown(t.log_every_n_steps()));
  add_trainer_flag<std::string>(
      app, "--on-nan",
      "A NaN or infinite training loss: stop (naming the step and the rank), or skip that\n"
      "optimizer step on every rank (one extra 8-byte all-reduce per step)",
      [&t](const std::string& text) { t.on_nan(train::parse_on_nan(text)); }, to_string(t.on_nan()))
      ->type_name("stop|skip");
  add_trainer_flag<double>(
      app, "--collective-timeout,--collective_timeout",
      "Seconds one collective may take before every rank stops with an error naming the ranks\n"
      "that had not arrived; a rank that reaches no collective (or sends no heartbeat) for that\n"
      "long is stopped by the launcher. 0 = LOCKSTEP_TIMEOUT, else 1800",
      [&t](const double& seconds) {
        if (!(seconds >= 0.0 && seconds <= 1e7)) {
          throw std::invalid_argument(
              "--collective-timeout must be a number of seconds in (0, 1e7] (0 = the default), got " +
              shown(seconds));
        }
        if (seconds == 0.0) return void(t.collective_timeout(std::nullopt));
        t.collective_timeout(std::chrono::milliseconds(static_cast<long long>(seconds * 1000.0)));
      },
      "0")
      ->type_name("S");
  add_trainer_flag<std::string>(app, "--metrics-file,--metrics_file",
                                "Append one JSON object per epoch (rank 0)",
                                [&t](const std::string& path) { t.metrics_file(path); })
      ->type_name("FILE.jsonl");
  add_trainer_flag<std::string>(
      app, "--logger",
      "Loggers, comma-separated: tensorboard, csv, jsonl (Lightning's layouts; rank 0 writes\n"
      "hparams.yaml, step records every --log-every-n-steps (50 when 0), epoch records with\n"
      "the step breakdown) into DIR/lightning_logs/version_N; read it with `lockstep report`",
      [&t](const std::string& names) { t.logger(names); })
      ->type_name("NAMES");
  add_trainer_flag<std::string>(
      app, "--default-root-dir,--default_root_dir",
      "Where --logger's lightning_logs/ goes (Lightning's default_root_dir)",
      [&t](const std::string& dir) { t.default_root_dir(dir); }, t.default_root_dir())
      ->type_name("DIR");
  app.add_flag_function(
      "--elastic", [&t](int64_t count) { t.elastic(count > 0); },
      "In-place recovery: a lost rank costs the step in progress, not a restart. The survivors\n"
      "go on in the same processes, the rest of the epoch re-sharded over them (strategy ddp,\n"
      "backend gloo or auto; ranks started by `lockstep fit` or `lockstep run --recovery in-place`;\n"
      "docs/elastic.md)");
  app.add_flag_function(
      "--keep-global-batch,--keep_global_batch", [&t](int64_t count) { t.keep_global_batch(count > 0); },
      "When the world changes (--elastic, or --resume on another number of ranks), keep the\n"
      "global batch: each rank accumulates first world x --accumulate-grad-batches / new world\n"
      "batches (the nearest whole count where the world does not divide it; the change's line\n"
      "says so). Default: the per-rank batch stays and the global batch follows the world\n"
      "(--lr-scaling rescales the rate to it)");
  app.add_flag_function(
      "--cuda-graphs,--cuda_graphs", [&t](int64_t count) { t.cuda_graphs(count > 0); },
      "On a GPU: capture the training step (forward, backward, all-reduce, optimizer) in a CUDA\n"
      "graph after 3 eager steps and replay it for every batch of the same shape (LibTorch 2.4+,\n"
      "--precision 32, --strategy ddp over nccl, adam or adamw, no --gradient-clip-val,\n"
      "--accumulate-grad-batches or --on-nan skip; otherwise the step runs eagerly and a line says\n"
      "why). The loss is read on the host only for the step records and the epoch mean; the step\n"
      "breakdown is off");
  add_trainer_flag<int64_t>(
      app, "--breakdown-every-n-batches",
      "Time data, forward, backward, exposed all-reduce and optimizer on every N-th batch of\n"
      "each rank; each epoch record holds them per rank and a rank > 20% slower than the\n"
      "others is named (a GPU waits for the device on those batches); 0 = off",
      [&t](const int64_t& n) { t.breakdown_every_n_batches(n); }, shown(t.breakdown_every_n_batches()));
}

// The effective configuration as the loggers' hparams: the `key: value` lines of --print-config's YAML.
std::vector<std::pair<std::string, std::string>> config_hparams(const std::string& yaml) {
  std::vector<std::pair<std::string, std::string>> out;
  std::istringstream lines(yaml);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') continue;
    const std::size_t colon = line.find(": ");
    if (colon == std::string::npos) continue;
    std::string value = line.substr(colon + 2);
    if (const std::size_t note = value.find("  #"); note != std::string::npos) value.resize(note);
    out.emplace_back(line.substr(0, colon), value);
  }
  return out;
}

// What the flags that are not plain values hold until they are parsed (after app.parse()).
struct FitFlagText {
  std::optional<std::string> augment;
  std::string num_workers = "auto";
  std::optional<std::string> synthetic_shape;
  std::optional<std::string> mlp_hidden;
};

// Every flag of `lockstep fit` but --config and --print-config.
void add_fit_flags(CLI::App& app, train::FitConfig& config, FitFlagText& text) {
  app.add_option("--model", config.model, "Model to train")
      ->type_name(joined(train::fit_model_names()))
      ->capture_default_str();
  app.add_option("--data", config.data, "Dataset")
      ->type_name(joined(train::fit_data_names()))
      ->capture_default_str();
  app.add_option("--data-dir,--data_dir", config.data_dir,
                 "Directory of the dataset's files. Default for fashion-mnist:\n"
                 "/usr/share/datasets/fashion-mnist (apt-get install dataset-fashion-mnist)")
      ->type_name("DIR");
  app.add_option("--text-file,--text_file", config.text_file,
                 "Text of --data text (--model gpt): a file, or a directory whose files without an\n"
                 "extension are read in name order, as bytes. Default: /usr/share/games/fortunes\n"
                 "(apt-get install fortunes)")
      ->type_name("PATH");
  app.add_option("--synthetic-size", config.synthetic_size, "Training images of --data synthetic")
      ->capture_default_str();
  app.add_option("--synthetic-shape", text.synthetic_shape,
                 "Image shape of --data synthetic, channels,height,width\n"
                 "(3,32,32: CIFAR-10-sized). Default: 1,28,28 (Fashion-MNIST's)")
      ->type_name("C,H,W");
  add_trainer_flags(app, config.trainer);
  app.add_option("--batch-size,--batch_size", config.batch_size, "Batch size per rank")
      ->capture_default_str();
  app.add_option("--lr", config.lr, "Learning rate. Default: 1e-3 (adam, adamw), 0.05 (sgd)")
      ->type_name("LR");
  app.add_option("--optimizer", config.optimizer,
                 "Optimizer (adam and adamw take a fused one-pass step, bit-identical to LibTorch's)")
      ->type_name("adam|adamw|sgd")
      ->capture_default_str();
  app.add_option("--weight-decay", config.weight_decay, "Weight decay")->capture_default_str();
  app.add_option("--momentum", config.momentum, "SGD momentum")->capture_default_str();
  app.add_option("--lr-scaling", config.lr_scaling,
                 "Scale --lr by global batch / --lr-reference-batch (global = batch-size x\n"
                 "ranks x accumulate-grad-batches): linear x ratio, sqrt x its square root")
      ->type_name("none|linear|sqrt")
      ->capture_default_str();
  app.add_option("--lr-reference-batch", config.lr_reference_batch,
                 "The batch size --lr is meant for. Default: --batch-size (one rank)")
      ->type_name("N");
  app.add_option("--lr-schedule", config.lr_schedule,
                 "Learning rate over the run (per optimizer step, after the warmup): cosine\n"
                 "decay to 0, constant, or step (x --lr-gamma every --lr-step-epochs)")
      ->type_name("cosine|constant|step")
      ->capture_default_str();
  app.add_option("--lr-step-epochs", config.lr_step_epochs,
                 "Epochs between two decays of --lr-schedule step, counted after the\n"
                 "warmup. Default: max(1, max-epochs / 3)")
      ->type_name("E");
  app.add_option("--lr-gamma", config.lr_gamma, "Factor of each --lr-schedule step decay, in (0, 1]")
      ->capture_default_str();
  app.add_option("--warmup-epochs", config.warmup_epochs, "Linear warmup, in epochs (fractions allowed)")
      ->capture_default_str();
  app.add_option("--dropout", config.dropout,
                 "Dropout probability of mlp, cnn and gpt. Default: the model's, 0.2 (gpt: 0)")
      ->type_name("P");
  app.add_option(
         "--mlp-hidden,--mlp_hidden", text.mlp_hidden,
         "Hidden widths of --model mlp, e.g. 4096,4096,4096 (a wide model for memory work). Default:\n"
         "256,128")
      ->type_name("W,W,...");
  app.add_option("--augment", text.augment,
                 "Random crop (padding 4) + horizontal flip. Default: on for cifar10")
      ->type_name("on|off");
  app.add_flag("--data-on-device,--data_on_device", config.data_on_device,
               "Keep the dataset on the training device (a GPU), normalised once, and batch it there\n"
               "(Fashion-MNIST is 188 MB as float32); not with --augment on");
  app.add_option("--num-workers,--num_workers", text.num_workers,
                 "Loader threads per rank (0: in the training thread); auto: 1 when\n"
                 "the host has a spare core per rank (cores >= ranks x (threads + 1)), else 0")
      ->type_name("N|auto")
      ->capture_default_str();
  app.add_option("--prefetch-factor", config.prefetch_factor, "Batches queued ahead per loader thread")
      ->capture_default_str();
  app.add_option("--max-restarts,--max_restarts", config.max_restarts,
                 "When a rank fails, stop all and start them again, up to K times; a restarted run resumes\n"
                 "from --ckpt-dir's last.ckpt (use --ckpt-every-n-steps to lose fewer steps)")
      ->type_name("K")
      ->capture_default_str();
  app.add_option("--monitor", config.monitor,
                 "Epoch metric that --save-top-k and --early-stopping-patience rank by\n"
                 "(train_loss, val_loss, val_acc, ...)")
      ->type_name("NAME")
      ->capture_default_str();
  app.add_option("--monitor-mode", config.monitor_mode,
                 "Whether a lower (min) or higher (max) --monitor is better")
      ->type_name("min|max")
      ->capture_default_str();
  app.add_option("--save-top-k", config.save_top_k,
                 "Keep the K best checkpoints by --monitor in --ckpt-dir besides last.ckpt;\n"
                 "0 = none, -1 = every epoch's")
      ->type_name("K")
      ->capture_default_str();
  app.add_option("--checkpoint-filename", config.checkpoint_filename,
                 "Name of the --save-top-k files, without .ckpt: {epoch}, {step} and metrics,\n"
                 "with an optional format: '{epoch}-{val_loss:.4f}' -> epoch=3-val_loss=0.2514.ckpt.\n"
                 "Default: epoch={epoch}-step={step}")
      ->type_name("PATTERN");
  app.add_option("--early-stopping-patience", config.early_stopping_patience,
                 "Stop after N epochs in a row without --monitor improving; 0 = off")
      ->type_name("N")
      ->capture_default_str();
  app.add_option("--early-stopping-min-delta", config.early_stopping_min_delta,
                 "The least change of --monitor that counts as an improvement")
      ->type_name("D")
      ->capture_default_str();
  app.add_option("--progress", config.progress, "Live progress bar: auto = when stdout is a terminal")
      ->type_name("auto|on|off")
      ->capture_default_str();
}

// Sets what FitFlagText held once the flags are parsed.
void apply_flag_text(const FitFlagText& text, train::FitConfig& config) {
  if (text.mlp_hidden) config.mlp_hidden = train::FitConfig::parse_widths("--mlp-hidden", *text.mlp_hidden);
  if (text.synthetic_shape) {
    config.synthetic_shape = train::ImageShape::parse("--synthetic-shape", *text.synthetic_shape);
  }
  if (text.num_workers == "auto") {
    config.num_workers = -1;
  } else {
    const bool digits = !text.num_workers.empty() && text.num_workers.size() <= 6 &&
                        text.num_workers.find_first_not_of("0123456789") == std::string::npos;
    if (!digits) {
      throw std::invalid_argument("--num-workers '" + text.num_workers +
                                  "' is not a number of loader threads (expected 0, 1, 2, ... or auto)");
    }
    config.num_workers = std::stoll(text.num_workers);
  }
  if (text.augment) {
    if (*text.augment != "on" && *text.augment != "off") {
      throw std::invalid_argument("--augment '" + *text.augment + "' is not known (expected on or off)");
    }
    config.augment = *text.augment == "on";
  }
}

}  // namespace

const std::vector<OptionFlag>& fit_option_flags() {
  static const std::vector<OptionFlag> flags = [] {
    CLI::App app;
    train::FitConfig config;
    FitFlagText text;
    add_fit_flags(app, config, text);
    return option_flags(app);
  }();
  return flags;
}

std::string in_flag_words(const std::string& message) {
  return in_flag_words(message, fit_option_flags());
}

int parse_fit_flags(int argc, char** argv, train::FitConfig& config) {
  CLI::App app(kFitDescription, "lockstep fit");
  app.footer(kFitFooter);
  app.get_formatter()->column_width(38);
  FitFlagText text;
  add_fit_flags(app, config, text);

  bool print_config = false;
  CLI::Option* config_file =
      app.set_config("--config", "", "Read flags from a YAML file (keys: the flag names; flags win)");
  config_file->type_name("FILE.yaml");
  auto yaml = std::make_shared<YamlConfig>(app, *config_file);
  app.config_formatter(yaml);
  app.add_flag("--print-config", print_config,
               "Print the effective configuration (defaults, --config file and flags merged) as\n"
               "YAML that --config accepts, then exit without training")
      ->configurable(false);

  // A bad value read from the file: say so, since the user did not type that flag.
  const auto source_of = [&yaml](const std::string& message) -> std::string {
    for (const std::string& key : yaml->applied_keys()) {
      const std::string flag = "--" + key;
      for (std::size_t at = message.find(flag); at != std::string::npos; at = message.find(flag, at + 1)) {
        const std::size_t end = at + flag.size();
        if (end == message.size() ||
            !(std::isalnum(static_cast<unsigned char>(message[end])) || message[end] == '-')) {
          return " (" + key + " is set in --config " + yaml->file_name() + ")";
        }
      }
    }
    return "";
  };

  try {
    app.parse(argc, argv);
    apply_flag_text(text, config);
    config.trainer.hparams(
        config_hparams(app.config_to_str(/*default_also=*/true, /*write_description=*/false)));
    config.validate();
    if (config.trainer.accelerator() == train::AcceleratorKind::kAuto &&
        launch::visible_cuda_device_count() == 0)
      config.trainer.check_cpu_training("accelerator 'auto', and no GPU is visible");
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::ParseError& e) {
    std::cerr << "lockstep fit: " << e.what() << source_of(e.what())
              << "\nRun 'lockstep fit --help' for the flags.\n";
    return 2;
  } catch (const std::invalid_argument& e) {
    const std::string message = in_flag_words(e.what());
    std::cerr << "lockstep fit: " << message << source_of(message)
              << "\nRun 'lockstep fit --help' for the flags.\n";
    return 2;
  }
  if (print_config) {
    yaml->set_notes(config_notes(config));
    std::cout << "# lockstep fit: effective configuration; `lockstep fit --config FILE` reads it back\n"
              << app.config_to_str(/*default_also=*/true, /*write_description=*/false);
    return 0;
  }
  return -1;
}

}  // namespace lockstep::cli
