// Hugging Face Accelerate's training script in the seeds' style (000, part 3: "Hugging Face Accelerate"),
// in C++ with lockstep::train::Accelerator: the single-process loop, with prepare(), accumulate() and
// backward() doing the distributed work.
//
//   build/lockstep launch --num_processes=2 --mixed_precision=fp16 build/examples/accelerate \
//       [--epochs 10] [--limit-batches N] [--mixed-precision no|bf16|fp16] [--gradient-accumulation-steps K]
//       [--batch-size 64] [--data-dir /usr/share/datasets/fashion-mnist] [--save model.pt]
//
// (or `build/lockstep run --nproc-per-node 2 --standalone -- build/examples/accelerate ...`). As in
// Accelerate, the precision and the accumulation steps the program does not set come from the launcher
// (`lockstep launch --mixed_precision`, `--gradient_accumulation_steps`); the example sets them only when
// its own --mixed-precision / --gradient-accumulation-steps are given, and prints the ones it trains with.
//
// Data: Fashion-MNIST (IDX files, the dataset-fashion-mnist package). --limit-batches trains only the first
// N batches of each epoch on every rank (rounded up to a multiple of the accumulation steps), for quick runs.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include <torch/nn.h>
#include <torch/optim.h>
#include <torch/serialize.h>

#include "lockstep/data/idx_dataset.h"
#include "lockstep/train/accelerator.h"
#include "lockstep/train/error_message.h"

namespace {

// The seed's SimpleNet: 784-256-128-10.
struct SimpleNetImpl : torch::nn::Module {
  SimpleNetImpl()
      : fc1(register_module("fc1", torch::nn::Linear(28 * 28, 256))),
        fc2(register_module("fc2", torch::nn::Linear(256, 128))),
        fc3(register_module("fc3", torch::nn::Linear(128, 10))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = x.flatten(1);
    x = torch::relu(fc1(x));
    x = torch::relu(fc2(x));
    return fc3(x);
  }
  torch::nn::Linear fc1, fc2, fc3;
};
TORCH_MODULE(SimpleNet);

struct Args {
  int epochs = 10;
  int64_t limit_batches = 0;                           // 0: whole epochs
  std::optional<std::string> mixed_precision;          // unset: the launcher's, else no
  std::optional<int64_t> gradient_accumulation_steps;  // unset: the launcher's, else 1
  int64_t batch_size = 64;
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  std::string save;
};

Args parse_args(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::printf(
          "usage: accelerate [--epochs N] [--limit-batches N] [--mixed-precision no|bf16|fp16]\n"
          "                  [--gradient-accumulation-steps K] [--batch-size B] [--data-dir DIR] [--save "
          "FILE]\n");
      std::exit(0);
    }
    if (i + 1 >= argc) throw std::invalid_argument(flag + " needs a value (see --help)");
    const std::string value = argv[++i];
    if (flag == "--epochs") {
      args.epochs = std::stoi(value);
    } else if (flag == "--limit-batches") {
      args.limit_batches = std::stoll(value);
    } else if (flag == "--mixed-precision") {
      args.mixed_precision = value;
    } else if (flag == "--gradient-accumulation-steps") {
      args.gradient_accumulation_steps = std::stoll(value);
    } else if (flag == "--batch-size") {
      args.batch_size = std::stoll(value);
    } else if (flag == "--data-dir") {
      args.data_dir = value;
    } else if (flag == "--save") {
      args.save = value;
    } else {
      throw std::invalid_argument("unknown option '" + flag + "' (see --help)");
    }
  }
  return args;
}

}  // namespace

int main(int argc, char** argv) {
  using lockstep::train::Accelerator;
  using lockstep::train::AcceleratorOptions;
  using lockstep::train::DataLoaderSpec;
  try {
    const Args args = parse_args(argc, argv);
    // Initialise the accelerator (reads the launcher's environment, joins the process group).
    AcceleratorOptions options = AcceleratorOptions().seed(42);
    if (args.mixed_precision)
      options.mixed_precision(lockstep::train::parse_precision(*args.mixed_precision));
    if (args.gradient_accumulation_steps)
      options.gradient_accumulation_steps(*args.gradient_accumulation_steps);
    Accelerator accelerator(options);
    const int64_t accumulation = accelerator.gradient_accumulation_steps();

    // Data: Fashion-MNIST's own mean and std (the seed's 0.1307/0.3081 are MNIST's).
    auto dataset = std::make_shared<const lockstep::data::IdxDataset>(
        lockstep::data::IdxDataset::from_dir(args.data_dir, lockstep::data::Split::kTrain));
    const auto loader_options =
        lockstep::data::LoaderOptions(args.batch_size)
            .num_workers(1)
            .transform(lockstep::data::TransformOptions().mean({0.2860}).std({0.3530}));

    // Model and optimizer; every rank may start from other weights: prepare broadcasts rank 0's.
    SimpleNet net;
    torch::optim::Adam adam(net->parameters(), torch::optim::AdamOptions(1e-3));

    // Prepare for distributed training.
    auto [model, optimizer, train_loader] =
        accelerator.prepare(net, std::move(adam), DataLoaderSpec(dataset, loader_options));

    int64_t limit = train_loader.size();
    if (args.limit_batches > 0) {
      limit = std::min(limit, (args.limit_batches + accumulation - 1) / accumulation *
                                  accumulation);  // whole accumulation groups
    }
    accelerator.print("training on ", accelerator.num_processes(), " process(es), ", limit, " batches of ",
                      args.batch_size, " per process and epoch, precision ",
                      lockstep::train::to_string(accelerator.mixed_precision()), ", gradient accumulation ",
                      accumulation);

    for (int epoch = 0; epoch < args.epochs; ++epoch) {
      model->train();
      train_loader.set_epoch(epoch);
      auto totals = torch::zeros({3}, torch::kDouble);  // loss sum, correct, samples
      int64_t batch_idx = 0;
      for (auto& batch : train_loader) {
        if (batch_idx++ == limit) break;
        auto scope = accelerator.accumulate(model);
        const auto output = model(batch.data);
        const auto loss = torch::nn::functional::cross_entropy(output, batch.target);
        accelerator.backward(loss);
        optimizer.step();
        optimizer.zero_grad();
        const auto samples = static_cast<double>(batch.target.size(0));
        totals[0] += loss.item<double>() * samples;
        totals[1] += output.argmax(1).eq(batch.target).sum().item<double>();
        totals[2] += samples;
      }
      // Print from the main process only, with the metrics of all processes.
      const auto all = accelerator.reduce(totals);
      accelerator.print("epoch ", epoch + 1, ": train_loss ", all[0].item<double>() / all[2].item<double>(),
                        " train_acc ", all[1].item<double>() / all[2].item<double>(), " (",
                        static_cast<int64_t>(all[2].item<double>()), " samples)");
    }

    // Save the model.
    accelerator.wait_for_everyone();
    if (accelerator.is_main_process() && !args.save.empty()) {
      torch::save(accelerator.unwrap_model(model), args.save);
      accelerator.print("saved ", args.save);
    }
    accelerator.end_training();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "accelerate: %s\n", lockstep::train::error_message(e).c_str());
    return 1;
  }
}
