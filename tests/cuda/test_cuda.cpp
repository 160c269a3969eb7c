// The GPU paths (ctest -L cuda), on a machine with a CUDA device; where LibTorch sees none every case skips
// with the reason (tests/allowed-skips.txt: CI has no GPU). What they prove: a rank trains on its local GPU;
// an nccl group moves CUDA tensors and routes CPU tensors to its host backend; the Trainer on a GPU trains
// what one CPU process trains (two ranks sharing a GPU: scripts/gpu-check.sh, as processes);
// 16-mixed trains with the GradScaler; the loader's pinned batches; checkpoints cross devices; a step
// captured in a CUDA graph (cuda_graphs) trains and resumes as eager steps do.
#include <ftw.h>
#include <gtest/gtest.h>

#include <c10/cuda/CUDAFunctions.h>
#include <torch/cuda.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>

#include "../comm/thread_group.h"
#include "lockstep/optim/foreach_sgd.h"
#include "lockstep/optim/fused_adam.h"
#include "lockstep/optim/lr_schedule.h"
#include "lockstep/train/device.h"
#include "lockstep/train/trainer.h"

namespace lockstep::train::cuda_test {
namespace {

using lockstep::testing::expect_all_ok;
using lockstep::testing::run_ranks;
using Pair = std::tuple<at::Tensor, at::Tensor>;

#define LOCKSTEP_REQUIRE_GPU()      \
  if (!torch::cuda::is_available()) \
  GTEST_SKIP() << "no CUDA device: LibTorch sees none (the GPU machine runs these: docs/gpu.md)"

// 64 rows of 4 features and a target from a fixed linear rule plus noise; made once (thread ranks).
const std::pair<at::Tensor, at::Tensor>& rows() {
  static const std::pair<at::Tensor, at::Tensor> made = [] {
    const auto generator = at::detail::createCPUGenerator(5);
    at::Tensor x = at::randn({64, 4}, generator);
    at::Tensor y = x.matmul(torch::tensor({0.5f, -1.0f, 2.0f, 0.25f})) + 0.1 * at::randn({64}, generator);
    return std::make_pair(x, y);
  }();
  return made;
}

// `loss_factor` scales the loss and divides SGD's rate: the same steps, with gradients small enough that
// float16's backward never overflows under the GradScaler's first scale (2^16).
class TwoLayer : public BasicTrainModule<Pair> {
 public:
  explicit TwoLayer(double loss_factor = 1.0)
      : a(register_module("a", torch::nn::Linear(4, 8))),
        b(register_module("b", torch::nn::Linear(8, 1))),
        loss_factor_(loss_factor) {
    torch::NoGradGuard no_grad;  // the same start everywhere, whatever the generator did before
    a->weight.copy_(at::linspace(-0.5, 0.5, 32).reshape({8, 4}));
    a->bias.fill_(0.05);
    b->weight.copy_(at::linspace(0.3, -0.3, 8).reshape({1, 8}));
    b->bias.zero_();
  }
  at::Tensor loss_of(const Pair& batch) {
    const at::Tensor out = b(torch::relu(a(std::get<0>(batch)))).squeeze(1);
    return torch::nn::functional::mse_loss(out.to(at::kFloat), std::get<1>(batch)) * loss_factor_;
  }
  at::Tensor training_step(const Pair& batch, int64_t) override {
    at::Tensor loss = loss_of(batch);
    log("train_loss", loss, LogOptions().sync_dist(true));
    return loss;
  }
  void validation_step(const Pair& batch, int64_t) override {
    log("val_loss", loss_of(batch), LogOptions().sync_dist(true));
  }
  OptimizerConfig configure_optimizers() override {
    return {std::make_unique<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.05 / loss_factor_)),
            std::nullopt};
  }
  torch::nn::Linear a, b;
  double loss_factor_;
};

class PairData : public BasicDataModule<Pair> {
 public:
  explicit PairData(int64_t batch) : batch_(batch) {}
  data::DataSource<Pair> train_data() override { return source(); }
  std::optional<data::DataSource<Pair>> val_data() override { return source().shuffle(false); }

 private:
  data::DataSource<Pair> source() const {
    const auto [x, y] = rows();
    return {data::make_dataset(x.size(0),
                               [x = x, y = y](int64_t i) {
                                 return Pair{x[i], y[i]};
                               }),
            data::LoaderOptions(batch_).num_workers(1)};
  }
  int64_t batch_;
};

// rm -r: std::filesystem::remove_all is not called here, because the libtorch.so of PyPI's torch 2.11
// exports a copy of it that crashes when it binds to this binary's calls (seen on the H100: SIGSEGV at
// address 0 inside libtorch.so's remove_all).
void remove_tree(const std::string& path) {
  ::nftw(
      path.c_str(), [](const char* name, const struct stat*, int, struct FTW*) { return ::remove(name); }, 16,
      FTW_DEPTH | FTW_PHYS);
}

struct Quiet {
  std::FILE* file = std::fopen("/dev/null", "w");
  ~Quiet() { std::fclose(file); }
};

// Trains TwoLayer on `world` thread ranks (over Gloo) on this machine's GPU 0 or the CPU; returns rank 0's
// parameters on the CPU. On a GPU only one rank: a process runs the backward passes of all its threads on
// one CUDA device in one autograd thread, so a rank waiting in DDP's hook for its peer holds up the peer's
// backward (seen on the H100: a 20 s timeout). Ranks sharing a GPU are processes (scripts/gpu-check.sh).
std::vector<at::Tensor> train(int world, int64_t batch, TrainerOptions base, TrainerResult* result = nullptr,
                              double loss_factor = 1.0) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  Quiet quiet;
  std::vector<at::Tensor> params;
  auto outcomes = run_ranks(world, [&](int rank) {
    auto group = comm::init_process_group(
        lockstep::testing::thread_group_options(rank, world, store, "cuda").backend(comm::Backend::kGloo));
    auto module = std::make_shared<TwoLayer>(loss_factor);
    PairData data(batch);
    TrainerOptions options = base;  // each rank its own copy
    Trainer trainer(options.process_group(&group).out(quiet.file).save_final_weights(false));
    const TrainerResult r = trainer.fit(module, data);
    if (rank == 0) {
      for (const auto& p : module->parameters()) params.push_back(p.detach().cpu().clone());
      if (result) *result = r;
    }
    group.shutdown();
  });
  expect_all_ok(outcomes);
  return params;
}

void expect_close(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b, double rtol,
                  double atol) {
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a.empty());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(torch::allclose(a[i], b[i], rtol, atol)) << "parameter " << i << "\n" << a[i] << "\n" << b[i];
}

TEST(Cuda, RankTrainsOnItsLocalGpu) {
  LOCKSTEP_REQUIRE_GPU();
  const int count = static_cast<int>(torch::cuda::device_count());
  for (AcceleratorKind kind : {AcceleratorKind::kAuto, AcceleratorKind::kGpu}) {
    const c10::Device device = training_device(kind, count - 1, count, false);
    EXPECT_TRUE(device.is_cuda());
    EXPECT_EQ(device.index(), count - 1);
    use_device(device);
    EXPECT_EQ(c10::cuda::current_device(), count - 1);
  }
  EXPECT_TRUE(training_device(AcceleratorKind::kCpu, 0, 1, false).is_cpu());
  EXPECT_THROW(training_device(AcceleratorKind::kGpu, 0, count + 1, false), std::invalid_argument);
  use_device(c10::Device(c10::kCUDA, 0));
}

TEST(Cuda, NcclGroupMovesDeviceTensorsAndRoutesHostTensorsToItsHostBackend) {
  LOCKSTEP_REQUIRE_GPU();
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto group =
      comm::init_process_group(lockstep::testing::thread_group_options(0, 1, store, "nccl").cuda(true));
  EXPECT_EQ(group.backend(), comm::Backend::kNccl);  // auto, on a GPU
  EXPECT_EQ(group.native()->getBackendName(), "nccl");
  at::Tensor on_gpu = at::full({5}, 3.0f, at::TensorOptions().device(at::kCUDA));
  group.all_reduce(on_gpu, comm::ReduceOp::kAvg).wait();  // ordered on the stream, no host wait
  EXPECT_TRUE(at::equal(on_gpu.cpu(), at::full({5}, 3.0f)));
  at::Tensor on_host = at::full({3}, 2.0, at::kDouble);  // NCCL refuses CPU tensors: the host backend
  group.all_reduce(on_host, comm::ReduceOp::kSum).wait();
  EXPECT_TRUE(at::equal(on_host, at::full({3}, 2.0, at::kDouble)));
  EXPECT_EQ(group.all_gather_strings("one"), std::vector<std::string>{"one"});
  group.barrier();
  group.shutdown();
}

TEST(Cuda, TrainerOnTheGpuTrainsWhatOneCpuProcessTrains) {
  LOCKSTEP_REQUIRE_GPU();
  const auto options = TrainerOptions().max_epochs(2).seed(4);
  TrainerResult result;
  const auto cpu = train(1, 16, TrainerOptions(options).accelerator(AcceleratorKind::kCpu), &result);
  EXPECT_FALSE(result.epochs.back().peak_cuda_mb.has_value());
  const auto gpu = train(1, 16, TrainerOptions(options).accelerator(AcceleratorKind::kGpu), &result);
  EXPECT_EQ(result.global_step, 8);
  expect_close(gpu, cpu, 1e-4, 1e-5);  // the same steps; GPU kernels round differently
  ASSERT_TRUE(result.epochs.back().peak_cuda_mb.has_value());
  EXPECT_GT(*result.epochs.back().peak_cuda_mb, 0.0);
  // The check can fail: a different batch trains different parameters.
  const auto other = train(1, 8, TrainerOptions(options).accelerator(AcceleratorKind::kGpu));
  EXPECT_FALSE(torch::allclose(other[0], gpu[0], 1e-4, 1e-5));
}

TEST(Cuda, SixteenMixedTrainsWithTheGradScaler) {
  LOCKSTEP_REQUIRE_GPU();
  TrainerResult result;
  const auto base = TrainerOptions().max_epochs(3).seed(4).accelerator(AcceleratorKind::kGpu);
  // At loss_factor 1 the first scaled backward overflows float16 (2 * error / 16 * 2^16 > 65504): the
  // scaler skips that step and halves the scale, as torch's does, and the run ends elsewhere (seen on the
  // H100: 0.142 against 0.183). A 1/64 loss with a 64x rate takes the same steps without overflowing.
  const double factor = 1.0 / 64;
  const auto fp32 = train(1, 16, base, nullptr, factor);
  const auto fp16 = train(1, 16, TrainerOptions(base).precision(Precision::k16Mixed), &result, factor);
  ASSERT_EQ(result.epochs.size(), 3u);
  EXPECT_LT(result.epochs.back().train_loss, result.epochs.front().train_loss);
  for (const auto& p : fp16) EXPECT_TRUE(torch::isfinite(p).all().item<bool>());
  expect_close(fp16, fp32, 5e-2, 5e-3);          // float16's rounding, same steps
  EXPECT_FALSE(torch::equal(fp16[0], fp32[0]));  // autocast did run in float16
}

// lockstep's optimizers on the GPU (FusedAdam: ATen's multi-tensor kernel; ForeachSgd) against LibTorch's
// own on the same CUDA parameters and gradients.
TEST(Cuda, FusedAdamAndForeachSgdStepLikeLibTorchOnTheGpu) {
  LOCKSTEP_REQUIRE_GPU();
  const auto options = at::TensorOptions().device(at::kCUDA);
  auto make = [&] {
    torch::manual_seed(1);
    std::vector<at::Tensor> params;
    for (int64_t n : {1, 100, 4096}) params.push_back(torch::randn({n}, options).requires_grad_(true));
    return params;
  };
  auto run = [&](auto& reference, auto& ours, std::vector<at::Tensor>& a, std::vector<at::Tensor>& b) {
    torch::manual_seed(2);
    for (int step = 0; step < 20; ++step) {
      for (size_t i = 0; i < a.size(); ++i) {
        const at::Tensor g = torch::randn(a[i].sizes(), options);
        a[i].mutable_grad() = g.clone();
        b[i].mutable_grad() = g.clone();
      }
      reference.step();
      ours.step();
    }
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_TRUE(torch::allclose(a[i], b[i], 1e-5, 1e-6)) << "parameter " << i;
  };
  auto a = make(), b = make();
  torch::optim::Adam adam(a, torch::optim::AdamOptions(1e-2).weight_decay(1e-2));
  optim::FusedAdam fused(b, torch::optim::AdamOptions(1e-2).weight_decay(1e-2));
  run(adam, fused, a, b);
  auto c = make(), d = make();
  torch::optim::SGD sgd(c, torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(1e-3));
  optim::ForeachSgd foreach_sgd(d, torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(1e-3));
  run(sgd, foreach_sgd, c, d);
}

TEST(Cuda, LoaderBuildsPinnedBatchesThatCopyWithoutBlocking) {
  LOCKSTEP_REQUIRE_GPU();
  const auto [x, y] = rows();
  auto dataset = data::make_dataset(x.size(0), [x = x, y = y](int64_t i) { return Pair{x[i], y[i]}; });
  data::BasicLoader<Pair> plain(dataset, data::LoaderOptions(16).num_workers(2));
  data::BasicLoader<Pair> pinned(dataset, data::LoaderOptions(16).num_workers(2));
  pinned.pin_memory();
  std::vector<int64_t> order(64);
  for (int64_t i = 0; i < 64; ++i) order[i] = (i * 7) % 64;
  plain.start_epoch(order, 0);
  pinned.start_epoch(order, 0);
  int batches = 0;
  while (auto a = plain.next()) {
    auto b = pinned.next();
    ASSERT_TRUE(b.has_value());
    EXPECT_FALSE(std::get<0>(*a).is_pinned());
    EXPECT_TRUE(std::get<0>(*b).is_pinned());
    EXPECT_TRUE(std::get<1>(*b).is_pinned());
    const Pair on_gpu = data::batch_to(*b, c10::Device(c10::kCUDA, 0));
    EXPECT_TRUE(at::equal(std::get<0>(on_gpu).cpu(), std::get<0>(*a)));
    EXPECT_TRUE(at::equal(std::get<1>(on_gpu).cpu(), std::get<1>(*a)));
    ++batches;
  }
  EXPECT_EQ(batches, 4);
}

TEST(Cuda, CheckpointsCrossDevices) {
  LOCKSTEP_REQUIRE_GPU();
  const std::string dir = ::testing::TempDir() + "lockstep_cuda_ckpt";
  remove_tree(dir);
  const auto base = TrainerOptions().seed(4).ckpt_dir(dir);
  TrainerResult result;
  // Written on the GPU, resumed on the CPU, and the other way round; each resume continues the steps.
  train(1, 16, TrainerOptions(base).max_epochs(1).accelerator(AcceleratorKind::kGpu));
  const auto resumed_on_cpu = train(
      1, 16, TrainerOptions(base).max_epochs(2).resume("last").accelerator(AcceleratorKind::kCpu), &result);
  EXPECT_EQ(result.global_step, 8);
  const auto straight =
      train(1, 16, TrainerOptions().seed(4).max_epochs(2).accelerator(AcceleratorKind::kCpu));
  expect_close(resumed_on_cpu, straight, 1e-4, 1e-5);
  train(1, 16, TrainerOptions(base).max_epochs(3).resume("last").accelerator(AcceleratorKind::kGpu), &result);
  EXPECT_EQ(result.global_step, 12);
  remove_tree(dir);
}

// ---- cuda_graphs ----

// TwoLayer with FusedAdam (GraphCapturable) and a cosine schedule: the rate changes at every step, so a
// replay that kept the captured rate would train something else. The schedule's length is fixed, so that
// runs of different max_epochs step alike.
class AdamTwoLayer : public TwoLayer {
 public:
  OptimizerConfig configure_optimizers() override {
    return {std::make_unique<optim::FusedAdam>(parameters(), torch::optim::AdamOptions(2e-2)),
            optim::LrSchedule(2e-2, optim::LrShape::kCosine, /*total_steps=*/40)};
  }
};

// Trains AdamTwoLayer with a world of one over nccl (what a graph captures) on GPU 0; returns its parameters
// on the CPU, and what rank 0 printed in `printed`.
std::vector<at::Tensor> train_nccl(int64_t batch, TrainerOptions base, TrainerResult* result,
                                   std::string* printed = nullptr) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::FILE* out = std::tmpfile();
  auto group =
      comm::init_process_group(lockstep::testing::thread_group_options(0, 1, store, "graph").cuda(true));
  EXPECT_EQ(group.backend(), comm::Backend::kNccl);
  auto module = std::make_shared<AdamTwoLayer>();
  PairData data(batch);
  Trainer trainer(
      base.process_group(&group).out(out).save_final_weights(false).accelerator(AcceleratorKind::kGpu));
  *result = trainer.fit(module, data);
  group.shutdown();
  std::vector<at::Tensor> params;
  for (const auto& p : module->parameters()) params.push_back(p.detach().cpu().clone());
  if (printed) {
    std::rewind(out);
    char line[512];
    while (std::fgets(line, sizeof line, out)) *printed += line;
  }
  std::fclose(out);
  return params;
}

// 64 rows in batches of 12: five full batches and a short one per epoch. Three eager steps, then the
// fourth batch is captured; every later full batch replays the graph, every short one runs eagerly (with
// the gradients a replay left released). The result equals eager training's: the parameters, the step
// count, and the mean loss training_step logged (added up on the device at each replay).
TEST(Cuda, GraphStepTrainsWhatEagerStepsTrain) {
  LOCKSTEP_REQUIRE_GPU();
  const auto base = TrainerOptions().max_epochs(3).seed(4);
  TrainerResult eager_result, graph_result;
  std::string printed;
  const auto eager = train_nccl(12, base, &eager_result);
  const auto graph = train_nccl(12, TrainerOptions(base).cuda_graphs(true), &graph_result, &printed);
  EXPECT_NE(printed.find("cuda graphs: on"), std::string::npos) << printed;
  EXPECT_EQ(eager_result.graph_replays, 0);
  EXPECT_EQ(graph_result.graph_replays, 3 * 6 - 3 - 3);  // 18 batches, 3 warm-up, 3 short
  EXPECT_EQ(graph_result.global_step, eager_result.global_step);
  expect_close(graph, eager, 1e-5, 1e-6);
  ASSERT_EQ(graph_result.epochs.size(), 3u);
  for (size_t e = 0; e < 3; ++e)
    EXPECT_NEAR(graph_result.epochs[e].train_loss, eager_result.epochs[e].train_loss, 1e-5) << "epoch " << e;
  // The check can fail: another batch size trains other parameters.
  TrainerResult other_result;
  const auto other = train_nccl(16, TrainerOptions(base).cuda_graphs(true), &other_result);
  EXPECT_FALSE(torch::allclose(other[0], graph[0], 1e-5, 1e-6));
}

// A run resumed from a checkpoint written after replays continues as the uninterrupted run: the host's
// Adam step counts (which the checkpoint saves) advanced with every replay, also with the gradients
// released on the host by the eager step of each epoch's short batch (epoch 2's replays come after one).
TEST(Cuda, GraphStepResumesAsTheUninterruptedRun) {
  LOCKSTEP_REQUIRE_GPU();
  const std::string dir = ::testing::TempDir() + "lockstep_cuda_graph_ckpt";
  remove_tree(dir);
  const auto base = TrainerOptions().seed(4).cuda_graphs(true);
  TrainerResult result;
  const auto straight = train_nccl(12, TrainerOptions(base).max_epochs(3), &result);
  train_nccl(12, TrainerOptions(base).max_epochs(2).ckpt_dir(dir), &result);
  EXPECT_EQ(result.graph_replays, 2 * 6 - 3 - 2);
  const auto resumed =
      train_nccl(12, TrainerOptions(base).max_epochs(3).ckpt_dir(dir).resume("last"), &result);
  EXPECT_EQ(result.global_step, 18);
  expect_close(resumed, straight, 1e-5, 1e-6);
  remove_tree(dir);
}

// Where the step cannot be captured (here: a group over gloo, which moves CUDA tensors through the host)
// rank 0 says why and every step runs eagerly.
TEST(Cuda, GraphStepOverGlooRunsEagerlySayingWhy) {
  LOCKSTEP_REQUIRE_GPU();
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::FILE* out = std::tmpfile();
  auto group = comm::init_process_group(
      lockstep::testing::thread_group_options(0, 1, store, "graph-gloo").backend(comm::Backend::kGloo));
  auto module = std::make_shared<AdamTwoLayer>();
  PairData data(16);
  Trainer trainer(TrainerOptions()
                      .max_epochs(1)
                      .cuda_graphs(true)
                      .process_group(&group)
                      .out(out)
                      .save_final_weights(false)
                      .accelerator(AcceleratorKind::kGpu));
  const TrainerResult result = trainer.fit(module, data);
  group.shutdown();
  std::rewind(out);
  char line[512];
  std::string printed;
  while (std::fgets(line, sizeof line, out)) printed += line;
  std::fclose(out);
  EXPECT_NE(printed.find("cuda graphs: off, every step runs eagerly: backend gloo"), std::string::npos)
      << printed;
  EXPECT_EQ(result.graph_replays, 0);
  EXPECT_EQ(result.global_step, 4);
}

}  // namespace
}  // namespace lockstep::train::cuda_test
