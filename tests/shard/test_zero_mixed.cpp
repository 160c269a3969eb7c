// ZeroOptimizer's mixed precision (shard/zero_optimizer.h: narrower parameters over master chunks of the
// parameters' own dtype) with real ranks (threads over an in-memory store, worlds 1, 2, 3, 4 over shm, 2
// and 3 over Gloo), ZeRO-1 (DDP's Reducer averaging in its buckets' dtype) and ZeRO-2 (the sharded
// reducer). The mechanism is the one bf16-mixed uses (bfloat16 over float32), tested here as float32 over
// float64 so that the comparison can be tight: each rank on B/N samples must end with the master weights of
// one process whose float64 model is copied into a float32 one that computes, with gradient accumulation
// (no_sync) and clipping (the norm compared too). Sharded checkpoints restore the masters exactly on another
// world size, and weights loaded into the whole parameters become the masters.
#include <gtest/gtest.h>

#include <torch/nn.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "../comm/thread_group.h"
#include "lockstep/ddp/distributed_data_parallel.h"
#include "lockstep/ddp/reducer.h"
#include "lockstep/shard/shard_checkpoint.h"
#include "lockstep/shard/sharded_reducer.h"
#include "lockstep/shard/zero_optimizer.h"
#include "sharded_training.h"

namespace lockstep::shard::zero_mixed_test {
namespace {

using lockstep::shard::testing::regression_batch;
using lockstep::shard::testing::two_group_adam;
using lockstep::testing::expect_all_ok;
using lockstep::testing::run_ranks;

constexpr int64_t kMicroBatch = 24;  // divisible by 1, 2, 3 and 4
constexpr int kSteps = 4;
constexpr double kMaxNorm = 0.5;  // below the gradients' norm on the first steps: clipping acts

// 20480 + 2048, 6144 + 3 parameters: the first weights (80 KiB in float32) are gathered straight into their
// memory where 2048 divides by the world, the others packed; the bias of 3 has an empty chunk on 4 ranks.
torch::nn::Sequential make_net(uint64_t seed) {
  const auto generator = lockstep::testing::lock_default_generator(seed);
  torch::nn::Sequential net(torch::nn::Linear(10, 2048), torch::nn::Tanh(), torch::nn::Linear(2048, 3));
  net->to(torch::kDouble);
  return net;
}

// On even steps the first of the two micro-batches is accumulated under no_sync.
bool first_micro_is_local(int step) {
  return step % 2 == 0;
}

struct Reference {
  std::vector<torch::Tensor> masters;
  std::vector<double> norms;
};

// The one-process reference's backward of `step`: the float64 masters copied into the float32 model, then
// two micro-batches of the whole batch (`forward(x, micro)`), each one's float32 gradients cast to float64
// and summed in the masters' .grad (as a float32 .grad sums bfloat16 gradients under autocast).
template <typename Net, typename Forward>
void reference_backward(Net& master, Net& compute, int step, const Forward& forward) {
  const std::vector<torch::Tensor> masters = master->parameters(), computes = compute->parameters();
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < masters.size(); ++i) computes[i].copy_(masters[i]);
  }
  for (auto p : masters) p.mutable_grad() = torch::Tensor();
  for (int micro = 0; micro < 2; ++micro) {
    for (auto p : computes) p.mutable_grad() = torch::Tensor();
    auto [x, y] = regression_batch(2 * step + micro, 0, kMicroBatch);
    torch::mse_loss(forward(x.to(torch::kFloat), micro), y.to(torch::kFloat)).backward();
    for (size_t i = 0; i < masters.size(); ++i) {
      if (!computes[i].grad().defined()) continue;
      const torch::Tensor grad = computes[i].grad().to(torch::kDouble);
      torch::Tensor sum = masters[i];
      sum.mutable_grad() = sum.grad().defined() ? sum.grad() + grad : grad;
    }
  }
}

// One process: reference_backward, then the float64 gradients clipped and stepped by Adam.
Reference one_process(int steps) {
  auto master = make_net(7);
  auto compute = make_net(7);
  compute->to(torch::kFloat);
  const auto masters = master->parameters();
  auto optimizer = two_group_adam(masters);
  Reference out;
  for (int step = 0; step < steps; ++step) {
    reference_backward(master, compute, step,
                       [&](const torch::Tensor& x, int) { return compute->forward(x); });
    out.norms.push_back(torch::nn::utils::clip_grad_norm_(masters, kMaxNorm));
    optimizer->step();
  }
  for (const auto& p : masters) out.masters.push_back(p.detach().clone());
  return out;
}

enum class Stage { kZero1, kZero2 };
using Case = std::tuple<int, comm::Backend, Stage>;

ddp::DdpOptions ddp_options(Stage stage) {
  // The Trainer's options: .grad as a bucket view (which a cast parameter cannot be: its gradient is
  // copied into the bucket and the average back).
  auto options = ddp::DdpOptions().gradient_as_bucket_view(true);
  if (stage == Stage::kZero2) options.gradient_sync(ShardedReducer::factory());
  return options;
}

// `steps` steps from `first_step` on this rank's part of each micro-batch; returns each step's norm.
std::vector<double> train(ddp::DistributedDataParallel<torch::nn::Sequential>& ddp, ZeroOptimizer& optimizer,
                          int rank, int world, int first_step, int steps) {
  const int64_t per_rank = kMicroBatch / world;
  std::vector<double> norms;
  for (int step = first_step; step < first_step + steps; ++step) {
    optimizer.zero_grad();
    for (int micro = 0; micro < 2; ++micro) {
      auto [x, y] = regression_batch(2 * step + micro, rank * per_rank, per_rank);
      const auto loss = [&] {
        const auto out = ddp.forward(x.to(torch::kFloat));
        EXPECT_EQ(out.scalar_type(), torch::kFloat) << "forward does not compute in param_dtype";
        return torch::mse_loss(out, y.to(torch::kFloat));
      };
      if (micro == 0 && first_micro_is_local(step)) {
        auto local = ddp.no_sync();
        loss().backward();
        // Summed in float64 by the reducer, not in float32 .grad.
        for (const auto& p : ddp.module()->parameters())
          EXPECT_FALSE(p.grad().defined()) << "a cast parameter's no_sync gradient stayed in .grad";
      } else {
        loss().backward();
      }
    }
    norms.push_back(optimizer.clip_grad_norm_(kMaxNorm));
    optimizer.step();
  }
  return norms;
}

template <typename Net>
void expect_masters(ZeroOptimizer& optimizer, Net& net, const std::vector<torch::Tensor>& want, double rtol,
                    double atol, const std::string& what) {
  optimizer.gather_all();
  const std::vector<torch::Tensor> got = net->parameters();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].scalar_type(), torch::kDouble) << what << ": gather_all must give the master dtype";
    EXPECT_TRUE(torch::allclose(got[i], want[i], rtol, atol))
        << what << ", parameter " << i << " off by " << (got[i] - want[i]).abs().max().item<double>();
  }
  optimizer.reshard();
  for (const auto& p : net->parameters()) EXPECT_EQ(p.scalar_type(), torch::kFloat) << what << ": resharded";
}

class ZeroMixedWorld : public ::testing::TestWithParam<Case> {};

TEST_P(ZeroMixedWorld, ComputesInParamDtypeAndStepsTheMastersAsOneProcess) {
  const auto [world, backend, stage] = GetParam();
  const Reference want = one_process(kSteps);
  ASSERT_GT(want.norms.front(), kMaxNorm) << "clipping must act on the first step";
  auto store = c10::make_intrusive<c10d::HashStore>();
  expect_all_ok(run_ranks(world, [&, world = world, backend = backend, stage = stage](int rank) {
    auto pg = comm::init_process_group(
        lockstep::testing::thread_group_options(rank, world, store, "zero-mixed").backend(backend));
    auto net = make_net(rank == 0 ? 7 : 40 + rank);  // DDP broadcasts rank 0's weights
    ddp::DistributedDataParallel<torch::nn::Sequential> ddp(net, pg, ddp_options(stage));
    ZeroOptimizer optimizer(two_group_adam(net->parameters()), pg, ddp.gradient_sync(), torch::kFloat);
    ASSERT_EQ(optimizer.param_dtype(), torch::kFloat);
    int64_t chunks = 0;
    for (const auto& p : net->parameters()) {
      EXPECT_EQ(p.scalar_type(), torch::kFloat) << "a parameter is not in param_dtype";
      chunks += ZeroOptimizer::chunk(p.numel(), rank, world).length;
    }
    const std::vector<double> norms = train(ddp, optimizer, rank, world, 0, kSteps);
    for (int step = 0; step < kSteps; ++step)
      EXPECT_NEAR(norms[step], want.norms[step], 1e-5 * want.norms[step]) << "the norm of step " << step;
    if (stage == Stage::kZero1) {  // .grad holds the average too, in the parameter's dtype
      EXPECT_EQ(net->parameters().front().grad().scalar_type(), torch::kFloat);
    }
    // The masters (float64 chunks) and Adam's two moments of them: 24 bytes an element of this rank's.
    EXPECT_EQ(optimizer.state_bytes(), 24 * chunks);
    expect_masters(optimizer, net, want.masters, 1e-6, 1e-7, "rank " + std::to_string(rank));
    pg.shutdown();
  }));
}

INSTANTIATE_TEST_SUITE_P(
    Worlds, ZeroMixedWorld,
    ::testing::Values(
        Case{1, comm::Backend::kShm, Stage::kZero1}, Case{2, comm::Backend::kShm, Stage::kZero1},
        Case{3, comm::Backend::kShm, Stage::kZero1}, Case{4, comm::Backend::kShm, Stage::kZero1},
        Case{2, comm::Backend::kGloo, Stage::kZero1}, Case{3, comm::Backend::kGloo, Stage::kZero1},
        Case{1, comm::Backend::kShm, Stage::kZero2}, Case{2, comm::Backend::kShm, Stage::kZero2},
        Case{3, comm::Backend::kShm, Stage::kZero2}, Case{4, comm::Backend::kShm, Stage::kZero2},
        Case{2, comm::Backend::kGloo, Stage::kZero2}, Case{3, comm::Backend::kGloo, Stage::kZero2}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return std::string(std::get<2>(info.param) == Stage::kZero1 ? "zero1" : "zero2") + "_world" +
             std::to_string(std::get<0>(info.param)) + "_" + comm::to_string(std::get<1>(info.param));
    });

// Two ranks train two steps and write their shards; three ranks load them (each its chunks of the masters,
// exactly, and the parameters whole, cast) and train on: the masters end as one process's after four steps.
TEST(ZeroMixed, ShardedCheckpointsRestoreTheMastersOnAnotherWorld) {
  const Reference want = one_process(kSteps);
  std::vector<std::string> shards(2);
  std::vector<torch::Tensor> saved_masters;
  std::mutex saved_mutex;
  for (const int world : {2, 3}) {
    auto store = c10::make_intrusive<c10d::HashStore>();
    expect_all_ok(run_ranks(world, [&](int rank) {
      auto pg = comm::init_process_group(
          lockstep::testing::thread_group_options(rank, world, store, "zero-mixed-ckpt"));
      auto net = make_net(world == 2 ? 7 : 99);  // the resumed run's own weights are overwritten
      ddp::DistributedDataParallel<torch::nn::Sequential> ddp(net, pg, ddp_options(Stage::kZero1));
      ZeroOptimizer optimizer(two_group_adam(net->parameters()), pg, ddp.gradient_sync(), torch::kFloat);
      if (world == 2) {
        train(ddp, optimizer, rank, world, 0, kSteps / 2);
        torch::serialize::OutputArchive archive;
        optimizer.save_shard(archive);
        std::ostringstream bytes;
        archive.save_to(bytes);
        shards[static_cast<size_t>(rank)] = bytes.str();
        optimizer.gather_all();
        if (rank == 0) {
          std::lock_guard<std::mutex> lock(saved_mutex);
          for (const auto& p : net->parameters()) saved_masters.push_back(p.detach().clone());
        }
        optimizer.reshard();
        pg.shutdown();
        return;
      }
      optimizer.load_shards(2, [&](int k, torch::serialize::InputArchive& archive) {
        std::istringstream bytes(shards.at(static_cast<size_t>(k)));
        archive.load_from(bytes);
      });
      const auto params = net->parameters();
      for (size_t i = 0; i < params.size(); ++i) {
        EXPECT_EQ(params[i].scalar_type(), torch::kFloat);
        EXPECT_TRUE(torch::equal(params[i], saved_masters[i].to(torch::kFloat)))
            << "parameter " << i << " is not its master cast";
      }
      expect_masters(optimizer, net, saved_masters, 0.0, 0.0, "loaded on rank " + std::to_string(rank));
      train(ddp, optimizer, rank, world, kSteps / 2, kSteps / 2);
      expect_masters(optimizer, net, want.masters, 1e-6, 1e-7, "resumed on rank " + std::to_string(rank));
      pg.shutdown();
    }));
  }
}

// Weights loaded into the whole parameters (a ddp checkpoint, inside FullParameters) become the masters.
TEST(ZeroMixed, WeightsLoadedIntoTheWholeParametersBecomeTheMasters) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  expect_all_ok(run_ranks(2, [&](int rank) {
    auto pg = comm::init_process_group(lockstep::testing::thread_group_options(rank, 2, store, "zero-load"));
    auto net = make_net(7);
    ddp::DistributedDataParallel<torch::nn::Sequential> ddp(net, pg, ddp_options(Stage::kZero2));
    ZeroOptimizer optimizer(two_group_adam(net->parameters()), pg, ddp.gradient_sync(), torch::kFloat);
    const auto loaded = make_net(123)->parameters();  // float64 values no float32 holds exactly
    {
      const FullParameters whole(std::vector<ZeroOptimizer*>{&optimizer});
      const auto params = net->parameters();
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < params.size(); ++i) params[i].copy_(loaded[i]);
    }
    for (const auto& p : net->parameters()) EXPECT_EQ(p.scalar_type(), torch::kFloat);
    expect_masters(optimizer, net, loaded, 0.0, 0.0, "rank " + std::to_string(rank));
    pg.shutdown();
  }));
}

// A head used only in the no_sync micro-batch (find_unused_parameters: its float64 sum is reduced by the
// synchronised backward it took no part in) and a frozen layer the optimizer holds (DDP leaves it out: it
// keeps its master chunk and never steps), against one process.
struct BranchyImpl : torch::nn::Module {
  BranchyImpl() {
    trunk = register_module("trunk", torch::nn::Linear(10, 16));
    frozen = register_module("frozen", torch::nn::Linear(10, 16));
    head = register_module("head", torch::nn::Linear(16, 3));
    extra = register_module("extra", torch::nn::Linear(16, 3));
    for (auto& p : frozen->parameters()) p.set_requires_grad(false);
  }
  torch::Tensor forward(const torch::Tensor& x, bool use_extra) {
    const auto h = torch::tanh(trunk->forward(x) + frozen->forward(x));
    return use_extra ? head->forward(h) + extra->forward(h) : head->forward(h);
  }
  torch::nn::Linear trunk{nullptr}, frozen{nullptr}, head{nullptr}, extra{nullptr};
};
TORCH_MODULE(Branchy);

Branchy make_branchy(uint64_t seed) {
  const auto generator = lockstep::testing::lock_default_generator(seed);
  Branchy net;
  net->to(torch::kDouble);
  return net;
}

TEST(ZeroMixed, UnusedAndFrozenParametersStepAsOneProcess) {
  // One process: micro-batch 0 uses the extra head, micro-batch 1 does not; float32 gradients summed in
  // float64.
  auto master = make_branchy(7);
  auto compute = make_branchy(7);
  compute->to(torch::kFloat);
  const auto masters = master->parameters();
  auto reference = torch::optim::Adam(masters, torch::optim::AdamOptions(0.01));
  for (int step = 0; step < kSteps; ++step) {
    reference_backward(master, compute, step,
                       [&](const torch::Tensor& x, int micro) { return compute->forward(x, micro == 0); });
    reference.step();
  }
  for (const int world : {1, 2}) {
    auto store = c10::make_intrusive<c10d::HashStore>();
    expect_all_ok(run_ranks(world, [&](int rank) {
      auto pg = comm::init_process_group(
          lockstep::testing::thread_group_options(rank, world, store, "zero-mixed-unused"));
      auto net = make_branchy(rank == 0 ? 7 : 40 + rank);
      const auto initial_frozen = make_branchy(7)->frozen->weight.detach().clone();
      ddp::DistributedDataParallel<Branchy> ddp(
          net, pg, ddp::DdpOptions().find_unused_parameters(true).gradient_as_bucket_view(true));
      auto adam = std::make_shared<torch::optim::Adam>(net->parameters(), torch::optim::AdamOptions(0.01));
      ZeroOptimizer optimizer(adam, pg, ddp.gradient_sync(), torch::kFloat);
      const int64_t per_rank = kMicroBatch / world;
      for (int step = 0; step < kSteps; ++step) {
        optimizer.zero_grad();
        for (int micro = 0; micro < 2; ++micro) {
          auto [x, y] = regression_batch(2 * step + micro, rank * per_rank, per_rank);
          const auto loss = [&] {
            return torch::mse_loss(ddp.forward(x.to(torch::kFloat), micro == 0), y.to(torch::kFloat));
          };
          if (micro == 0) {
            auto local = ddp.no_sync();
            loss().backward();
          } else {
            loss().backward();
          }
        }
        optimizer.step();
      }
      std::vector<torch::Tensor> want;
      for (const auto& p : masters) want.push_back(p.detach());
      const std::string what = "world " + std::to_string(world) + ", rank " + std::to_string(rank);
      expect_masters(optimizer, net, want, 1e-6, 1e-7, what);
      optimizer.gather_all();
      EXPECT_TRUE(torch::equal(net->frozen->weight, initial_frozen)) << what << ": the frozen layer changed";
      optimizer.reshard();
      pg.shutdown();
    }));
  }
}

TEST(ZeroMixed, RefusesAParamDtypeNotNarrowerThanTheParameters) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  expect_all_ok(run_ranks(1, [&](int rank) {
    auto pg =
        comm::init_process_group(lockstep::testing::thread_group_options(rank, 1, store, "zero-refuse"));
    auto net = make_net(7);
    ddp::DistributedDataParallel<torch::nn::Sequential> ddp(net, pg, ddp_options(Stage::kZero1));
    for (const auto dtype : {torch::kDouble, torch::kInt}) {
      try {
        ZeroOptimizer optimizer(two_group_adam(net->parameters()), pg, ddp.gradient_sync(), dtype);
        ADD_FAILURE() << "param_dtype " << dtype << " was accepted";
      } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("narrower than the parameters' Double"), std::string::npos)
            << e.what();
      }
    }
    EXPECT_EQ(net->parameters().front().scalar_type(), torch::kDouble) << "a refusal must leave the model";
    pg.shutdown();
  }));
}

}  // namespace
}  // namespace lockstep::shard::zero_mixed_test
