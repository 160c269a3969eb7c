// One rank of a tensor-parallel GPT training run, for the comparison with PyTorch's
// torch.distributed.tensor.parallel (tests/e2e/tp_python_parity.sh, tests/e2e/tp_gpt_python.py).
//
//   lockstep run --nproc-per-node N --standalone -- tp_gpt_worker --out DIR [--steps S] [--tensor-parallel T]
//                                                                 [--dtype float64|float32]
// (or under mpirun with TP_GPT_WORKER_BACKEND=mpi: the mesh's subgroups are MPI communicators)
//
// Every rank builds the same models::Gpt (float64 unless --dtype float32) (seed 1234) and the same token
// batches (seed 5678, rows that count up by one); rank 0 writes both to DIR/init.safetensors (the model under
// its parameter names, the batches as "tokens" [S, rows, length + 1], the shape and the learning rate as
// metadata). Then S steps of plain SGD on a data × tensor parallel mesh (models::TensorParallelGpt on
// mesh.tp(), each data-parallel rank its rows, gradients averaged over mesh.dp()); rank 0 writes each step's
// loss (averaged over mesh.dp()) to DIR/cpp_losses.txt, one per line, and the trained parameters gathered
// whole (full_parameters) to DIR/cpp_final.safetensors.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/utils.h>

#include "../support/gpt_peer_file.h"
#include "lockstep/comm/backend.h"
#include "lockstep/comm/device_mesh.h"
#include "lockstep/comm/process_group.h"
#include "lockstep/env/environment.h"
#include "lockstep/models/gpt.h"
#include "lockstep/models/tensor_parallel_gpt.h"
#include "lockstep/train/safetensors.h"
#include "tp_sgd_step.h"

namespace {

using namespace lockstep;

constexpr int64_t kRows = 4;  // per data-parallel rank
constexpr double kLr = 1.0;

models::GptOptions peer_options() {
  return models::GptOptions::tiny().vocab_size(256).context(16).layers(2).heads(4).embedding(64);
}

int run(const std::string& out, int steps, int tensor_parallel, at::ScalarType dtype) {
  std::filesystem::create_directories(out);
  auto options_of_world = comm::ProcessGroupOptions::from_environment(env::from_env());
  if (const char* backend = std::getenv("TP_GPT_WORKER_BACKEND"))  // mpi under mpirun (mpi_e2e.sh)
    options_of_world.backend(comm::parse_backend(backend));
  auto world = comm::init_process_group(options_of_world);
  comm::DeviceMesh mesh(world, tensor_parallel);
  const models::GptOptions options = peer_options();
  torch::manual_seed(1234);
  models::Gpt full(options);
  full->to(dtype);
  // Learnable batches, so that the losses fall and the comparison sees training: each row counts up by
  // one (mod the vocabulary) from a random start.
  torch::manual_seed(5678);
  const at::Tensor tokens = testing::counting_tokens(options, steps, kRows * mesh.data_parallel());
  if (world.rank() == 0) testing::save_peer_file(out + "/init.safetensors", *full, tokens, options, kLr);
  models::TensorParallelGpt model(*full, mesh.tp());
  full = nullptr;
  std::ofstream losses;
  if (world.rank() == 0) {
    losses.open(out + "/cpp_losses.txt");
    if (!losses) throw std::runtime_error("cannot write " + out + "/cpp_losses.txt");
  }
  for (int step = 0; step < steps; ++step) {
    const at::Tensor rows = tokens[step].narrow(0, mesh.dp_rank() * kRows, kRows);
    const double mean_loss = testing::tp_sgd_step(model, mesh, rows, kLr);
    if (world.rank() == 0) losses << std::setprecision(17) << mean_loss << "\n";
  }
  const auto whole = model->full_parameters();  // a collective of each tensor-parallel group
  if (world.rank() == 0) {
    std::vector<train::NamedTensor> tensors(whole.begin(), whole.end());
    train::save_safetensors(out + "/cpp_final.safetensors", tensors);
  }
  std::cout << "rank " << world.rank() << "/" << world.size() << " tp_gpt_worker ok (tp "
            << mesh.tensor_parallel() << ", dp " << mesh.data_parallel() << ", " << steps << " steps) over "
            << comm::to_string(world.backend()) << std::endl;
  mesh.shutdown();
  world.shutdown();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out;
  int steps = 20;
  int tensor_parallel = 2;
  at::ScalarType dtype = at::kDouble;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--out") {
      out = argv[i + 1];
    } else if (flag == "--steps") {
      steps = std::atoi(argv[i + 1]);
    } else if (flag == "--tensor-parallel") {
      tensor_parallel = std::atoi(argv[i + 1]);
    } else if (flag == "--dtype" &&
               (std::string(argv[i + 1]) == "float64" || std::string(argv[i + 1]) == "float32")) {
      dtype = std::string(argv[i + 1]) == "float32" ? at::kFloat : at::kDouble;
    } else {
      std::cerr << "tp_gpt_worker: unknown flag or value " << flag << " " << argv[i + 1] << "\n";
      return 2;
    }
  }
  if (out.empty() || steps < 1 || tensor_parallel < 1) {
    std::cerr << "usage: tp_gpt_worker --out DIR [--steps S >= 1] [--tensor-parallel T >= 1] "
                 "[--dtype float64|float32]\n";
    return 2;
  }
  try {
    return run(out, steps, tensor_parallel, dtype);
  } catch (const std::exception& e) {
    std::cerr << "tp_gpt_worker: " << e.what() << "\n";
    return 1;
  }
}
