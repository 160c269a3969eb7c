// One rank of a pipeline-parallel GPT training benchmark, under `lockstep run` (bench/pp_gpt.sh):
//
//   pp_gpt_bench [--schedule gpipe|1f1b] [--micro-batches M] [--batch B] [--steps N] [--warmup W]
//
// The world is one pipeline (pipeline::PipelineParallel, the cut balanced by parameters): models::Gpt of
// bench/tp_gpt_bench.cpp's --size bench (vocabulary 256, context 128, 4 layers of 8 heads, width 256),
// float32, Adam (lr 3e-4), B sequences a step that count up by one from a random start, one thread per
// rank. Prints one line per rank: tokens_per_s (the job's: B x context tokens a step over the timed steps'
// wall time), step_ms, waited (the share of the step this stage spent waiting for a neighbour: its bubble
// and the transfers), bubble_model ((P - 1)/(M + P - 1)), peak_micro_batches (activations held at once),
// stage_params, cut (the first forward call of stage 1: bench/pp_gpt_torch.py cuts there too), state_mb
// (the parameters this rank keeps allocated, their gradients and Adam's moments) and peak_rss_mb (the
// process's peak resident memory, LibTorch's own included).
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <torch/nn/functional/loss.h>
#include <torch/optim/adam.h>

#include "lockstep/comm/process_group.h"
#include "lockstep/env/environment.h"
#include "lockstep/models/gpt.h"
#include "lockstep/pipeline/pipeline_parallel.h"

namespace {

using namespace lockstep;

// The bytes of the parameters `model` keeps allocated, of their gradients, and of `adam`'s state.
double state_bytes(const torch::nn::Module& model, const torch::optim::Adam& adam) {
  double bytes = 0;
  for (const at::Tensor& p : model.parameters()) {
    bytes += static_cast<double>(p.nbytes());
    if (p.grad().defined()) bytes += static_cast<double>(p.grad().nbytes());
  }
  for (const auto& [key, state] : adam.state()) {
    const auto& moments = static_cast<const torch::optim::AdamParamState&>(*state);
    bytes += static_cast<double>(moments.exp_avg().nbytes() + moments.exp_avg_sq().nbytes());
  }
  return bytes;
}

double peak_rss_mb() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // KiB on Linux
}

int run(pipeline::Schedule schedule, int micro_batches, int64_t batch, int steps, int warmup) {
  at::set_num_threads(1);
  auto world = comm::init_process_group(comm::ProcessGroupOptions::from_environment(env::from_env()));
  const auto options =
      models::GptOptions::tiny().vocab_size(256).context(128).layers(4).heads(8).embedding(256);
  torch::manual_seed(1234);
  models::Gpt model(options);
  pipeline::PipelineParallel pipe(model.ptr(), *model, world, {schedule, micro_batches, {}});
  const std::vector<at::Tensor> parameters = pipe.parameters();
  int64_t stage_params = 0;
  for (const at::Tensor& p : parameters) stage_params += p.numel();
  torch::optim::Adam adam(parameters, torch::optim::AdamOptions(3e-4));
  const auto forward = [&](const at::Tensor& ids) { return model->forward(ids); };
  const auto loss = [&](const at::Tensor& logits, const at::Tensor& target) {
    return torch::nn::functional::cross_entropy(logits.reshape({-1, options.vocab_size()}),
                                                target.reshape({-1}));
  };
  torch::manual_seed(5678);
  double waited = 0.0;
  double stepped = 0.0;
  auto start = std::chrono::steady_clock::now();
  for (int step = 0; step < warmup + steps; ++step) {
    if (step == warmup) {
      world.barrier();
      start = std::chrono::steady_clock::now();
    }
    const at::Tensor tokens = (at::randint(options.vocab_size(), {batch, 1}, at::kLong) +
                               at::arange(options.context() + 1, at::kLong))
                                  .remainder(options.vocab_size());
    adam.zero_grad();
    pipe.forward_backward(tokens.slice(1, 0, options.context()), tokens.slice(1, 1), forward, loss);
    adam.step();
    if (step >= warmup) {
      waited += pipe.waited_seconds();
      stepped += pipe.step_seconds();
    }
  }
  world.barrier();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int P = world.size();
  std::printf(
      "rank=%d stage=%d P=%d M=%d schedule=%s tokens_per_s=%.1f step_ms=%.1f waited=%.3f bubble_model=%.3f "
      "peak_micro_batches=%d stage_params=%lld cut=%zu state_mb=%.1f peak_rss_mb=%.1f\n",
      world.rank(), pipe.stage(), P, micro_batches, pipeline::to_string(schedule),
      static_cast<double>(batch * options.context() * steps) / seconds, 1000.0 * seconds / steps,
      waited / stepped, static_cast<double>(P - 1) / (micro_batches + P - 1), pipe.peak_micro_batches(),
      static_cast<long long>(stage_params), P > 1 ? pipe.bounds()[1] : 0,
      state_bytes(*model, adam) / 1048576.0, peak_rss_mb());
  std::fflush(stdout);
  pipe.shutdown();
  world.shutdown();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  pipeline::Schedule schedule = pipeline::Schedule::k1F1B;
  int micro_batches = 4;
  int64_t batch = 16;
  int steps = 10;
  int warmup = 2;
  try {
    for (int i = 1; i + 1 < argc; i += 2) {
      const std::string flag = argv[i];
      const std::string value = argv[i + 1];
      if (flag == "--schedule") {
        schedule = pipeline::schedule_from_string(value);
      } else if (flag == "--micro-batches") {
        micro_batches = std::atoi(value.c_str());
      } else if (flag == "--batch") {
        batch = std::atoll(value.c_str());
      } else if (flag == "--steps") {
        steps = std::atoi(value.c_str());
      } else if (flag == "--warmup") {
        warmup = std::atoi(value.c_str());
      } else {
        std::fprintf(stderr, "pp_gpt_bench: unknown flag %s\n", flag.c_str());
        return 2;
      }
    }
    if (steps < 1 || warmup < 0 || batch < 1) {
      std::fprintf(stderr,
                   "usage: pp_gpt_bench [--schedule gpipe|1f1b] [--micro-batches M] [--batch B] "
                   "[--steps N >= 1] [--warmup W >= 0]\n");
      return 2;
    }
    return run(schedule, micro_batches, batch, steps, warmup);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pp_gpt_bench: %s\n", e.what());
    return 1;
  }
}
