// A GPT trained with tensor parallelism (Megatron's split) inside data parallelism, on the `fortunes`
// package's text (/usr/share/games/fortunes, bytes as tokens), with real processes:
//
//   apt-get install fortunes
//   build/lockstep run --nproc-per-node 4 --standalone -- build/examples/tp_gpt --tensor-parallel 2
//
// What it shows (docs/parallelism.md):
//  - comm::DeviceMesh: the world as data parallel × tensor parallel (here 2 × 2);
//  - models::TensorParallelGpt: every rank builds the same models::Gpt from the seed and keeps its slices
//    (heads, MLP columns, vocabulary); the loss from the vocabulary-split logits;
//  - the data-parallel side by hand: each data-parallel rank reads its rows of the step's batch (the same
//    rows on every rank of its tensor-parallel group), gradients averaged over mesh.dp();
//  - the model gathered whole at the end (full_parameters) into one safetensors file with Gpt's names.
// Every --eval-every steps rank 0 prints the validation loss and perplexity (per byte) on the last tenth of
// the text; at the end the perplexity next to the unigram baseline's (each byte predicted from its
// frequency in the training text): the model must beat it.
//
// Options: --tensor-parallel T (default 2), --steps N (300), --batch-size B (per data-parallel rank, 16),
// --seq N (64), --lr X (Adam, 0.003), --dropout P (0.1), --layers N (2), --heads N (4), --width N (128),
// --eval-every N (100), --val-batches N (8), --seed S (0), --data-dir DIR, --out FILE.safetensors (none).
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/optim/adam.h>
#include <torch/utils.h>

#include "example_flags.h"
#include "lockstep/comm/device_mesh.h"
#include "lockstep/comm/process_group.h"
#include "lockstep/env/environment.h"
#include "lockstep/models/gpt.h"
#include "lockstep/models/tensor_parallel_gpt.h"
#include "lockstep/train/safetensors.h"
#include "text_corpus.h"

namespace {

using namespace lockstep;

std::map<std::string, std::string> parse(int argc, char** argv) {
  std::map<std::string, std::string> flags = {{"tensor-parallel", "2"},
                                              {"steps", "300"},
                                              {"batch-size", "16"},
                                              {"seq", "64"},
                                              {"lr", "0.003"},
                                              {"dropout", "0.1"},
                                              {"layers", "2"},
                                              {"heads", "4"},
                                              {"width", "128"},
                                              {"eval-every", "100"},
                                              {"val-batches", "8"},
                                              {"seed", "0"},
                                              {"data-dir", "/usr/share/games/fortunes"},
                                              {"out", ""}};
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag.rfind("--", 0) != 0 || !flags.count(flag.substr(2)))
      throw std::invalid_argument("unknown option '" + flag + "' (see the top of examples/tp_gpt.cpp)");
    if (i + 1 >= argc)
      throw std::invalid_argument(flag + " needs a value (see the top of examples/tp_gpt.cpp)");
    flags[flag.substr(2)] = argv[i + 1];
  }
  return flags;
}

// Rows [first, first + count) of windows, window w being bytes [w·seq, w·seq + seq + 1): [count, seq + 1].
at::Tensor windows(const examples::Corpus& corpus, const std::vector<int64_t>& starts, int64_t seq) {
  at::Tensor out = at::empty({static_cast<int64_t>(starts.size()), seq + 1}, at::kByte);
  for (size_t i = 0; i < starts.size(); ++i)
    corpus.read(starts[i] * seq, seq + 1, out[static_cast<int64_t>(i)].data_ptr<uint8_t>());
  return out.to(at::kLong);
}

void run(int argc, char** argv) {
  const auto flags = parse(argc, argv);
  const auto number = [&](const char* name) {
    return examples::whole_number(std::string("--") + name, flags.at(name));
  };
  const int64_t seq = number("seq"), batch = number("batch-size"), steps = number("steps");
  const uint64_t seed = static_cast<uint64_t>(number("seed"));
  examples::Corpus corpus(flags.at("data-dir"));
  const int64_t all_windows = (corpus.size() - 1) / seq;
  const int64_t train_windows = all_windows * 9 / 10;  // the first 90% trains, the rest validates

  auto world = comm::init_process_group(comm::ProcessGroupOptions::from_environment(env::from_env()));
  comm::DeviceMesh mesh(world, static_cast<int>(number("tensor-parallel")));
  const auto options = models::GptOptions()
                           .vocab_size(256)
                           .context(seq)
                           .layers(number("layers"))
                           .heads(number("heads"))
                           .embedding(number("width"))
                           .dropout(examples::real_number("--dropout", flags.at("dropout")));
  torch::manual_seed(seed);  // the same full model on every rank: each keeps its slices
  models::Gpt full(options);
  models::TensorParallelGpt model(*full, mesh.tp(), seed);
  full = nullptr;
  torch::optim::Adam adam(model->parameters(),
                          torch::optim::AdamOptions(examples::real_number("--lr", flags.at("lr"))));

  // The validation loss on the first val-batches × B windows of the validation text, averaged over mesh.dp()
  // (each data-parallel rank takes its share of them).
  const auto validate = [&] {
    torch::NoGradGuard no_grad;
    model->eval();
    const int64_t count = number("val-batches") * batch;
    std::vector<int64_t> mine;
    for (int64_t w = mesh.dp_rank(); w < count; w += mesh.data_parallel()) mine.push_back(train_windows + w);
    at::Tensor loss = at::zeros({1}, at::kDouble);
    if (!mine.empty()) {
      const at::Tensor rows = windows(corpus, mine, seq);
      loss += model->loss(rows.slice(1, 0, seq), rows.slice(1, 1)).to(at::kDouble) *
              static_cast<double>(mine.size());
    }
    mesh.dp().all_reduce(loss, comm::ReduceOp::kSum).wait();
    model->train();
    return loss.item<double>() / static_cast<double>(count);
  };

  at::Generator sampler = at::make_generator<at::CPUGeneratorImpl>(seed + 1);  // the same on every rank
  double val_loss = 0;
  for (int64_t step = 1; step <= steps; ++step) {
    // The step's global batch: B windows per data-parallel rank, drawn alike everywhere; this rank's rows.
    const at::Tensor picks = at::randint(train_windows, {batch * mesh.data_parallel()}, sampler, at::kLong);
    std::vector<int64_t> mine;
    for (int64_t i = 0; i < batch; ++i) mine.push_back(picks[mesh.dp_rank() * batch + i].item<int64_t>());
    const at::Tensor rows = windows(corpus, mine, seq);
    adam.zero_grad();
    at::Tensor loss = model->loss(rows.slice(1, 0, seq), rows.slice(1, 1));
    loss.backward();
    for (at::Tensor& p : model->parameters()) {
      at::Tensor grad = p.mutable_grad();
      mesh.dp().all_reduce(grad, comm::ReduceOp::kAvg).wait();
    }
    adam.step();
    if (step % number("eval-every") == 0 || step == steps) {
      val_loss = validate();
      if (world.rank() == 0)
        std::printf("step %lld: train_loss %.4f val_loss %.4f val_perplexity %.3f\n",
                    static_cast<long long>(step), loss.item<double>(), val_loss, std::exp(val_loss));
    }
  }
  const auto whole = model->full_parameters();  // a collective of each tensor-parallel group
  if (world.rank() == 0) {
    if (!flags.at("out").empty()) {
      train::save_safetensors(flags.at("out"), std::vector<train::NamedTensor>(whole.begin(), whole.end()));
      std::printf("tp_gpt: wrote the whole model to %s\n", flags.at("out").c_str());
    }
    std::printf(
        "tp_gpt quality: val_perplexity %.3f baseline %.3f (per byte; the baseline predicts each byte from "
        "its "
        "frequency), %lld step(s), %d data x %d tensor parallel\n",
        std::exp(val_loss),
        examples::unigram_perplexity(corpus, train_windows * seq + 1, train_windows * seq + 1,
                                     number("val-batches") * batch * seq),
        static_cast<long long>(steps), mesh.data_parallel(), mesh.tensor_parallel());
  }
  mesh.shutdown();
  world.shutdown();
}

}  // namespace

int main(int argc, char** argv) {
  return examples::run_example("tp_gpt", [&] { run(argc, argv); });
}
