// One rank of a pipeline-parallel GPT training run, for the comparisons with one process and with
// PyTorch's torch.distributed.pipelining (tests/e2e/pp_python_parity.sh, tests/e2e/pp_gpt_python.py).
//
//   lockstep run --nproc-per-node P --standalone -- pp_gpt_worker --out DIR [--steps S]
//                                                   [--micro-batches M] [--schedule gpipe|1f1b]
//
// Every rank builds the same float64 models::Gpt (seed 1234) and the same token batches (seed 5678, rows
// that count up by one, 8 a step); rank 0 writes both to DIR/init.safetensors (as tp_gpt_worker does: the
// model under its parameter names, "tokens" [S, 8, length + 1], the shape and lr as metadata). Then S steps
// of plain SGD with the world as one pipeline (PipelineParallel, cut after call 2: stage 0 the embeddings
// and block 0, stage 1 block 1, ln_f and the tied head, when P = 2; balanced otherwise); rank 0 writes each
// step's loss to DIR/cpp_losses.txt, one per line.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/functional/loss.h>
#include <torch/utils.h>

#include "../support/gpt_peer_file.h"
#include "lockstep/comm/process_group.h"
#include "lockstep/env/environment.h"
#include "lockstep/models/gpt.h"
#include "lockstep/pipeline/pipeline_parallel.h"

namespace {

using namespace lockstep;

constexpr int64_t kRows = 8;
constexpr double kLr = 0.3;  // 1.0 does not learn in 20 steps on these batches, 2.0 diverges within 40

int run(const std::string& out, int steps, int micro_batches, pipeline::Schedule schedule) {
  std::filesystem::create_directories(out);
  auto world = comm::init_process_group(comm::ProcessGroupOptions::from_environment(env::from_env()));
  const auto options =
      models::GptOptions::tiny().vocab_size(256).context(16).layers(2).heads(4).embedding(64);
  torch::manual_seed(1234);
  models::Gpt model(options);
  model->to(at::kDouble);
  torch::manual_seed(5678);
  const at::Tensor tokens = testing::counting_tokens(options, steps, kRows);
  if (world.rank() == 0) {
    testing::save_peer_file(out + "/init.safetensors", *model, tokens, options, kLr,
                            {{"micro_batches", std::to_string(micro_batches)}});
  }
  std::vector<size_t> cut;
  if (world.size() == 2) cut = {2};
  pipeline::PipelineParallel pipe(model.ptr(), *model, world, {schedule, micro_batches, cut});
  const auto forward = [&](const at::Tensor& ids) { return model->forward(ids); };
  const auto loss = [&](const at::Tensor& logits, const at::Tensor& target) {
    return torch::nn::functional::cross_entropy(logits.reshape({-1, options.vocab_size()}),
                                                target.reshape({-1}));
  };
  std::ofstream losses;
  if (world.rank() == 0) {
    losses.open(out + "/cpp_losses.txt");
    if (!losses) throw std::runtime_error("cannot write " + out + "/cpp_losses.txt");
  }
  const std::vector<at::Tensor> parameters = pipe.parameters();
  for (int step = 0; step < steps; ++step) {
    const at::Tensor batch = tokens[step];
    const double value =
        pipe.forward_backward(batch.slice(1, 0, options.context()), batch.slice(1, 1), forward, loss);
    {
      at::NoGradGuard no_grad;
      for (at::Tensor p : parameters) {
        p.sub_(p.grad() * kLr);
        p.mutable_grad().zero_();
      }
    }
    if (world.rank() == 0) losses << std::setprecision(17) << value << "\n";
  }
  std::cout << "rank " << world.rank() << "/" << world.size() << " pp_gpt_worker ok (stage " << pipe.stage()
            << " calls [" << pipe.bounds()[pipe.stage()] << ", " << pipe.bounds()[pipe.stage() + 1] << "), "
            << pipeline::to_string(schedule) << ", M " << micro_batches << ", " << steps << " steps, peak "
            << pipe.peak_micro_batches() << " micro-batches held)" << std::endl;
  pipe.shutdown();
  world.shutdown();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out;
  int steps = 20;
  int micro_batches = 4;
  pipeline::Schedule schedule = pipeline::Schedule::k1F1B;
  try {
    for (int i = 1; i + 1 < argc; i += 2) {
      const std::string flag = argv[i];
      if (flag == "--out") {
        out = argv[i + 1];
      } else if (flag == "--steps") {
        steps = std::atoi(argv[i + 1]);
      } else if (flag == "--micro-batches") {
        micro_batches = std::atoi(argv[i + 1]);
      } else if (flag == "--schedule") {
        schedule = pipeline::schedule_from_string(argv[i + 1]);
      } else {
        std::cerr << "pp_gpt_worker: unknown flag " << flag << "\n";
        return 2;
      }
    }
    if (out.empty() || steps < 1) {
      std::cerr
          << "usage: pp_gpt_worker --out DIR [--steps S >= 1] [--micro-batches M] [--schedule gpipe|1f1b]\n";
      return 2;
    }
    return run(out, steps, micro_batches, schedule);
  } catch (const std::exception& e) {
    std::cerr << "pp_gpt_worker: " << e.what() << "\n";
    return 1;
  }
}
