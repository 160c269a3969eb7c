// One rank of a GPT training benchmark, under `lockstep run` (bench/tp_gpt.sh runs it and the Python peers):
//
//   tp_gpt_bench --mode ddp|tp [--tensor-parallel T] [--size bench|small] [--batch B] [--steps N] [--warmup
//   W]
//
// ddp: models::Gpt under lockstep's DistributedDataParallel, each rank B sequences a step. tp: a DeviceMesh
// of the world with T-way tensor parallelism (models::TensorParallelGpt on mesh.tp()), each data-parallel
// rank B sequences, gradients averaged over mesh.dp() (one all-reduce per parameter: no buckets, no overlap).
// Both: float32, Adam (lr 3e-4), sequences that count up by one from a random start (the same data on every
// mode), one thread per rank. Prints one line per rank: tokens_per_s (the whole job's: every data-parallel
// rank's B x context tokens a step, over the timed steps' wall time), step_ms, model_state_mb (this rank's
// parameters, gradients and Adam state), peak_rss_mb, params (this rank's).
//   --size bench: vocabulary 256, context 128, 4 layers of 8 heads, width 256 (3.2M parameters)
//   --size small: GPT-2 small, dropout 0, its vocabulary padded to 50304 as nanoGPT pads it (divisible by T;
//                 124.5M parameters; for the memory figures)
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <torch/nn/functional/loss.h>
#include <torch/optim/adam.h>

#include "lockstep/comm/device_mesh.h"
#include "lockstep/comm/process_group.h"
#include "lockstep/ddp/distributed_data_parallel.h"
#include "lockstep/env/environment.h"
#include "lockstep/models/gpt.h"
#include "lockstep/models/tensor_parallel_gpt.h"

namespace {

using namespace lockstep;

double peak_rss_mb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;
}

// Parameters, their gradients and Adam's two moments, in MiB.
double model_state_mb(const std::vector<at::Tensor>& parameters, torch::optim::Adam& adam) {
  double bytes = 0;
  for (const at::Tensor& p : parameters) {
    bytes += static_cast<double>(p.nbytes());
    if (p.grad().defined()) bytes += static_cast<double>(p.grad().nbytes());
  }
  for (const auto& entry : adam.state()) {
    const auto& state = static_cast<const torch::optim::AdamParamState&>(*entry.second);
    bytes += static_cast<double>(state.exp_avg().nbytes() + state.exp_avg_sq().nbytes());
  }
  return bytes / (1024.0 * 1024.0);
}

struct Flags {
  std::string mode = "ddp";
  int tensor_parallel = 1;
  std::string size = "bench";
  int64_t batch = 4;
  int steps = 10;
  int warmup = 2;
  int64_t length = 0;  // 0: the model's context
};

int run(const Flags& flags) {
  at::set_num_threads(1);
  auto world = comm::init_process_group(comm::ProcessGroupOptions::from_environment(env::from_env()));
  const models::GptOptions options =
      flags.size == "small"
          ? models::GptOptions::gpt2_small().vocab_size(50304).dropout(0.0)
          : models::GptOptions::tiny().vocab_size(256).context(128).layers(4).heads(8).embedding(256);
  torch::manual_seed(1234);
  models::Gpt full(options);
  const int tp = flags.mode == "tp" ? flags.tensor_parallel : 1;
  comm::DeviceMesh mesh(world, tp);
  const int64_t length = flags.length > 0 ? std::min(flags.length, options.context()) : options.context();
  torch::manual_seed(5678 + mesh.dp_rank());
  const auto batch_of = [&](int) {
    const at::Tensor starts = at::randint(options.vocab_size(), {flags.batch, 1}, at::kLong);
    return (starts + at::arange(length + 1, at::kLong)).remainder(options.vocab_size());
  };

  std::unique_ptr<ddp::DistributedDataParallel<models::Gpt>> wrapped;
  models::TensorParallelGpt split{nullptr};
  std::vector<at::Tensor> parameters;
  if (flags.mode == "ddp") {
    wrapped = std::make_unique<ddp::DistributedDataParallel<models::Gpt>>(full, world);
    parameters = full->parameters();
  } else {
    split = models::TensorParallelGpt(*full, mesh.tp());
    full = nullptr;  // only the slices stay
    parameters = split->parameters();
  }
  torch::optim::Adam adam(parameters, torch::optim::AdamOptions(3e-4));
  double last_loss = 0;
  const auto step = [&](int i) {
    adam.zero_grad();
    const at::Tensor tokens = batch_of(i);
    const at::Tensor inputs = tokens.slice(1, 0, length), targets = tokens.slice(1, 1);
    at::Tensor loss;
    if (wrapped) {
      const at::Tensor logits = wrapped->forward(inputs);
      loss = torch::nn::functional::cross_entropy(logits.reshape({-1, options.vocab_size()}),
                                                  targets.reshape({-1}));
      loss.backward();
    } else {
      loss = split->loss(inputs, targets);
      loss.backward();
      if (mesh.data_parallel() > 1) {
        for (at::Tensor& p : parameters) {
          at::Tensor grad = p.mutable_grad();
          mesh.dp().all_reduce(grad, comm::ReduceOp::kAvg).wait();
        }
      }
    }
    adam.step();
    last_loss = loss.item<double>();
  };
  for (int i = 0; i < flags.warmup; ++i) step(i);
  world.barrier();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < flags.steps; ++i) step(flags.warmup + i);
  world.barrier();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  int64_t numel = 0;
  for (const at::Tensor& p : parameters) numel += p.numel();
  const double tokens = static_cast<double>(flags.steps * flags.batch * length * mesh.data_parallel());
  std::printf(
      "rank=%d mode=%s tp=%d dp=%d size=%s params=%lld tokens_per_s=%.1f step_ms=%.1f model_state_mb=%.1f "
      "peak_rss_mb=%.1f last_loss=%.4f\n",
      world.rank(), flags.mode.c_str(), tp, mesh.data_parallel(), flags.size.c_str(),
      static_cast<long long>(numel), tokens / seconds, 1000.0 * seconds / flags.steps,
      model_state_mb(parameters, adam), peak_rss_mb(), last_loss);
  std::fflush(stdout);
  mesh.shutdown();
  world.shutdown();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--mode") {
      flags.mode = value;
    } else if (flag == "--tensor-parallel") {
      flags.tensor_parallel = std::atoi(value.c_str());
    } else if (flag == "--size") {
      flags.size = value;
    } else if (flag == "--batch") {
      flags.batch = std::atoll(value.c_str());
    } else if (flag == "--steps") {
      flags.steps = std::atoi(value.c_str());
    } else if (flag == "--length") {
      flags.length = std::atoll(value.c_str());
    } else if (flag == "--warmup") {
      flags.warmup = std::atoi(value.c_str());
    } else {
      std::fprintf(stderr, "tp_gpt_bench: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if ((flags.mode != "ddp" && flags.mode != "tp") || (flags.size != "bench" && flags.size != "small") ||
      flags.tensor_parallel < 1 || flags.batch < 1 || flags.steps < 1 || flags.warmup < 0) {
    std::fprintf(
        stderr,
        "usage: tp_gpt_bench --mode ddp|tp [--tensor-parallel T >= 1] [--size bench|small] [--batch B >= 1] "
        "[--steps N >= 1] [--warmup W >= 0] [--length L]\n");
    return 2;
  }
  try {
    return run(flags);
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "tp_gpt_bench: %s\n", e.what_without_backtrace());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tp_gpt_bench: %s\n", e.what());
    return 1;
  }
}
