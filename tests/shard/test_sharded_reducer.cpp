// ZeRO-2 (shard/sharded_reducer.h) with real ranks (threads over an in-memory store, worlds 1, 2, 3, 4, 8
// over shm, 2 and 3 over Gloo): DDP with the ShardedReducer and a ZeroOptimizer, each rank on B/N samples,
// must end with the parameters of one process on all B, after several Adam steps with weight decay, two
// parameter groups, gradient accumulation (no_sync on some steps, two synchronised backward passes summing
// on others), clipping by the global norm (the norm itself compared too), and a skipped step (clear()).
// Buckets of one parameter each (sent straight from .grad, or packed when the size does not divide by the
// world; more buckets than may be in flight) and the default caps (small parameters packed together, a
// large one alone) are both covered.
// After every backward no full gradient is left, and each rank keeps about 1/N of the gradient bytes.
#include <gtest/gtest.h>

#include <torch/nn.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <algorithm>
#include <atomic>
#include <string>
#include <tuple>
#include <vector>

#include "../comm/thread_group.h"
#include "lockstep/ddp/distributed_data_parallel.h"
#include "lockstep/shard/sharded_reducer.h"
#include "lockstep/shard/zero_optimizer.h"
#include "sharded_training.h"

namespace lockstep::shard::zero2_test {
namespace {

using lockstep::shard::testing::regression_batch;
using lockstep::shard::testing::train_one_process;
using lockstep::shard::testing::two_group_adam;
using lockstep::testing::expect_all_ok;
using lockstep::testing::run_ranks;

constexpr int64_t kMicroBatch = 24;  // divisible by 1, 2, 3, 4 and 8
constexpr int kSteps = 6;
constexpr double kMaxNorm = 0.5;  // below the gradients' norm on the first steps: clipping acts

// 120 + 12, 132000 + 11000, 33000 + 3 parameters. The 132000 weights (1.06 MB) are a bucket of their own,
// sent straight from .grad on every world here; a bucket per parameter sends the 11000 biases straight on
// 1, 2, 4 and 8 ranks and packed on 3; the bias of 3 has empty chunks on 4 and 8 ranks.
torch::nn::Sequential make_net(uint64_t seed) {
  const auto generator = lockstep::testing::lock_default_generator(seed);
  torch::nn::Sequential net(torch::nn::Linear(10, 12), torch::nn::Tanh(), torch::nn::Linear(12, 11000),
                            torch::nn::Tanh(), torch::nn::Linear(11000, 3));
  net->to(torch::kDouble);
  return net;
}

// Two micro-batches a step: on even steps the first under no_sync, on odd steps both synchronised.
bool first_micro_is_local(int step) {
  return step % 2 == 0;
}
constexpr int kSkippedStep = 3;  // a garbage backward is reduced, then dropped with clear()

struct Reference {
  std::vector<torch::Tensor> params;
  std::vector<double> norms;
  int64_t state_bytes = 0;
};

Reference one_process() {
  auto net = make_net(7);
  auto optimizer = two_group_adam(net->parameters());
  Reference out;
  out.norms = train_one_process(net, *optimizer, kSteps, kMicroBatch, kMaxNorm);
  for (const auto& p : net->parameters()) out.params.push_back(p.detach().clone());
  out.state_bytes = optimizer_state_bytes(*optimizer);
  return out;
}

using Case = std::tuple<int, comm::Backend, bool>;  // world, backend, one bucket per parameter

class ShardedReducerWorld : public ::testing::TestWithParam<Case> {};

TEST_P(ShardedReducerWorld, MatchesOneProcessWithAccumulationClippingAndASkippedStep) {
  const auto [world, backend, bucket_per_parameter] = GetParam();
  const Reference want = one_process();
  ASSERT_GT(want.norms.front(), kMaxNorm) << "clipping must act on the first step";
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::atomic<int64_t> state_bytes{0};
  expect_all_ok(run_ranks(
      world, [&, world = world, backend = backend, bucket_per_parameter = bucket_per_parameter](int rank) {
        auto pg = comm::init_process_group(
            lockstep::testing::thread_group_options(rank, world, store, "zero2").backend(backend));
        auto net = make_net(rank == 0 ? 7 : 40 + rank);  // DDP broadcasts rank 0's weights
        auto options = ddp::DdpOptions().gradient_sync(ShardedReducer::factory());
        if (bucket_per_parameter) options.first_bucket_cap_mb(1e-9).bucket_cap_mb(1e-9);
        ddp::DistributedDataParallel<torch::nn::Sequential> ddp(net, pg, options);
        auto& reducer = dynamic_cast<ShardedReducer&>(ddp.gradient_sync());
        ASSERT_EQ(reducer.bucket_indices().size(), bucket_per_parameter ? 6u : 3u);
        ZeroOptimizer optimizer(two_group_adam(net->parameters()), pg, &reducer);
        const int64_t per_rank = kMicroBatch / world;
        const auto no_full_gradient_left = [&] {
          for (const auto& p : net->parameters())
            EXPECT_FALSE(p.grad().defined()) << "a full gradient is left";
        };
        for (int step = 0; step < kSteps; ++step) {
          if (step == kSkippedStep) {
            auto [x, y] = regression_batch(99, rank * per_rank, per_rank);
            torch::mse_loss(ddp.forward(x), y * 100.0).backward();
            ASSERT_TRUE(reducer.gradient(0).defined());
            reducer.clear();  // what a skipped step does
            ASSERT_FALSE(reducer.gradient(0).defined());
          }
          for (int micro = 0; micro < 2; ++micro) {
            auto [x, y] = regression_batch(2 * step + micro, rank * per_rank, per_rank);
            if (micro == 0 && first_micro_is_local(step)) {
              auto local = ddp.no_sync();
              torch::mse_loss(ddp.forward(x), y).backward();
              EXPECT_TRUE(net->parameters().front().grad().defined()) << "no_sync keeps the full gradient";
            } else {
              torch::mse_loss(ddp.forward(x), y).backward();
              no_full_gradient_left();
            }
          }
          const double norm = reducer.clip_grad_norm_(kMaxNorm);
          EXPECT_NEAR(norm, want.norms[step], 1e-9 * want.norms[step]) << "step " << step;
          optimizer.step();
          EXPECT_FALSE(reducer.gradient(0).defined()) << "step() consumes the chunk gradients";
        }
        const auto got = net->parameters();
        ASSERT_EQ(got.size(), want.params.size());
        for (size_t i = 0; i < got.size(); ++i) {
          EXPECT_TRUE(torch::allclose(got[i], want.params[i], 1e-10, 1e-12))
              << "rank " << rank << ", parameter " << i << " off by "
              << (got[i] - want.params[i]).abs().max().item<double>();
        }
        // Between steps only the chunk gradients are kept (whole chunks of each parameter): under half of the
        // gradients' bytes from 4 ranks on.
        int64_t parts = 0, gradient_elements = 0;
        for (const auto& p : got) {
          parts += (p.numel() + world - 1) / world;
          gradient_elements += p.numel();
        }
        EXPECT_EQ(static_cast<int64_t>(reducer.bucket_bytes()), 8 * parts);
        if (world >= 4) {
          EXPECT_LT(static_cast<int64_t>(reducer.bucket_bytes()), 8 * gradient_elements / 2);
        }
        state_bytes += optimizer.state_bytes();
        EXPECT_EQ(reducer.iterations(),
                  kSteps / 2 * 1 + kSteps / 2 * 2 + 1);  // even steps sync once; one skipped
        pg.shutdown();
      }));
  EXPECT_EQ(state_bytes.load(), want.state_bytes) << "the ranks' optimizer states add up to one process's";
}

INSTANTIATE_TEST_SUITE_P(
    Worlds, ShardedReducerWorld,
    ::testing::Values(Case{1, comm::Backend::kShm, true}, Case{2, comm::Backend::kShm, true},
                      Case{2, comm::Backend::kShm, false}, Case{3, comm::Backend::kShm, true},
                      Case{4, comm::Backend::kShm, true}, Case{8, comm::Backend::kShm, true},
                      Case{8, comm::Backend::kShm, false}, Case{2, comm::Backend::kGloo, true},
                      Case{3, comm::Backend::kGloo, false}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return "world" + std::to_string(std::get<0>(info.param)) + "_" +
             comm::to_string(std::get<1>(info.param)) +
             (std::get<2>(info.param) ? "_per_parameter" : "_packed");
    });

// What ZeRO-2 cannot do is refused at construction, by name; a parameter without a gradient is named.
TEST(ShardedReducer, RefusesUnusedParametersAndCommHooksAndNamesAMissingGradient) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto pg = comm::init_process_group(lockstep::testing::thread_group_options(0, 1, store, "zero2-refuse"));
  auto net = make_net(1);
  const auto refused = [&](ddp::DdpOptions options, const std::string& says) {
    try {
      ddp::DistributedDataParallel<torch::nn::Sequential> ddp(
          net, pg, options.gradient_sync(ShardedReducer::factory()));
      ADD_FAILURE() << "accepted; expected an error saying " << says;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  refused(ddp::DdpOptions().find_unused_parameters(true), "find_unused_parameters is not supported");
  refused(ddp::DdpOptions().comm_hook(std::make_shared<ddp::CompressionHook>(at::kBFloat16)),
          "bf16_compress");

  ddp::DistributedDataParallel<torch::nn::Sequential> ddp(
      net, pg, ddp::DdpOptions().gradient_sync(ShardedReducer::factory()));
  EXPECT_THROW(ddp.reducer(), std::logic_error);  // it is not the all-reduce Reducer
  auto [x, y] = regression_batch(0, 0, 4);
  auto hidden = net[0]->as<torch::nn::Linear>()->forward(x);  // the other layers get no gradient
  try {
    hidden.sum().backward();
    ADD_FAILURE() << "a backward without the last layers' gradients passed";
  } catch (const std::runtime_error& e) {  // a message, without LibTorch's stack trace
    EXPECT_NE(std::string(e.what()).find("4.weight"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("Exception raised from"), std::string::npos) << e.what();
  }
  pg.shutdown();
}

}  // namespace
}  // namespace lockstep::shard::zero2_test
