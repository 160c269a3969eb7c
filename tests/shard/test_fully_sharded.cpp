// FSDP (shard/fully_sharded_data_parallel.h) with real ranks (threads over an in-memory store, worlds 1, 2,
// 3, 4, 8 over shm, 2 and 3 over Gloo), on lockstep's Mlp (a Staged model): each rank on B/N samples must
// end with the parameters of one process on all B, after several Adam steps with weight decay, gradient
// accumulation (no_sync on some steps, two synchronised backward passes on others), clipping by the global
// norm and a skipped step. Between steps no parameter holds memory and each rank keeps 1/N of them; at most
// two units are whole at once. Units follow the size policy or the user's starts; gather_all/reshard give
// the whole model for checkpoints and take loaded weights back.
#include <gtest/gtest.h>

#include <torch/nn.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <atomic>
#include <string>
#include <tuple>
#include <vector>

#include "../comm/thread_group.h"
#include "lockstep/models/gpt.h"
#include "lockstep/models/mlp.h"
#include "lockstep/models/resnet18.h"
#include "lockstep/shard/fully_sharded_data_parallel.h"
#include "sharded_training.h"

namespace lockstep::shard::fsdp_test {
namespace {

using lockstep::shard::testing::regression_batch;
using lockstep::shard::testing::train_one_process;
using lockstep::shard::testing::two_group_adam;
using lockstep::testing::expect_all_ok;
using lockstep::testing::run_ranks;

constexpr int64_t kMicroBatch = 24;  // divisible by 1, 2, 3, 4 and 8
constexpr int kSteps = 6;
constexpr int kSkippedStep = 3;
constexpr double kMaxNorm = 0.5;

// Stages of 132, 9100, 11216 and 51 parameters: the 8400 and 11200 weights (66 and 88 KB) are gathered
// straight into their memory on every world here, the others packed; the last bias of 3 has empty chunks on
// 4 and 8 ranks.
models::Mlp make_mlp(uint64_t seed) {
  const auto generator = lockstep::testing::lock_default_generator(seed);
  models::Mlp mlp(models::MlpOptions().in_features(10).hidden({12, 700, 16}).num_classes(3).dropout(0.0));
  mlp->to(torch::kDouble);
  return mlp;
}

struct Reference {
  std::vector<torch::Tensor> params;
  std::vector<double> norms;
  torch::Tensor probe_output;  // the trained model on a probe batch
};

Reference one_process() {
  auto mlp = make_mlp(7);
  auto optimizer = two_group_adam(mlp->parameters());
  Reference out;
  out.norms = train_one_process(mlp, *optimizer, kSteps, kMicroBatch, kMaxNorm);
  for (const auto& p : mlp->parameters()) out.params.push_back(p.detach().clone());
  torch::NoGradGuard no_grad;
  out.probe_output = mlp->forward(regression_batch(100, 0, 5).first);
  return out;
}

using Case = std::tuple<int, comm::Backend>;

class FsdpWorld : public ::testing::TestWithParam<Case> {};

TEST_P(FsdpWorld, MatchesOneProcessWithAccumulationClippingAndASkippedStep) {
  const auto [world, backend] = GetParam();
  const Reference want = one_process();
  ASSERT_GT(want.norms.front(), kMaxNorm) << "clipping must act on the first step";
  auto store = c10::make_intrusive<c10d::HashStore>();
  expect_all_ok(run_ranks(world, [&, world = world, backend = backend](int rank) {
    auto pg = comm::init_process_group(
        lockstep::testing::thread_group_options(rank, world, store, "fsdp").backend(backend));
    auto mlp = make_mlp(rank == 0 ? 7 : 40 + rank);  // FSDP broadcasts rank 0's weights
    FullyShardedDataParallel fsdp(mlp.ptr(), pg, FsdpOptions().min_unit_params(100));
    ASSERT_EQ(fsdp.units(), (std::vector<std::vector<size_t>>{{0}, {1}, {2}, {3}}));
    auto optimizer = fsdp.make_optimizer(two_group_adam(mlp->parameters()));
    ShardedReducer& reducer = fsdp.reducer();
    const int64_t per_rank = kMicroBatch / world;
    const auto nothing_whole = [&](const char* when) {
      EXPECT_EQ(fsdp.gathered_units(), 0u) << when;
      for (const auto& p : mlp->parameters()) {
        EXPECT_EQ(p.storage().nbytes(), 0u) << when << ": a parameter holds memory";
        EXPECT_FALSE(p.grad().defined()) << when << ": a full gradient is left";
      }
    };
    nothing_whole("after construction");
    for (int step = 0; step < kSteps; ++step) {
      if (step == kSkippedStep) {
        auto [x, y] = regression_batch(99, rank * per_rank, per_rank);
        torch::mse_loss(mlp->forward(x), y * 100.0).backward();
        reducer.clear();  // what a skipped step does
      }
      for (int micro = 0; micro < 2; ++micro) {
        auto [x, y] = regression_batch(2 * step + micro, rank * per_rank, per_rank);
        if (micro == 0 && step % 2 == 0) {
          auto local = fsdp.no_sync();
          torch::mse_loss(mlp->forward(x), y).backward();
        } else {
          torch::mse_loss(mlp->forward(x), y).backward();
          nothing_whole("after a synchronised backward");
        }
      }
      EXPECT_NEAR(reducer.clip_grad_norm_(kMaxNorm), want.norms[step], 1e-9 * want.norms[step]) << step;
      optimizer->step();
    }
    EXPECT_LE(fsdp.peak_gathered_units(), 2u) << "more than two units were whole at once";
    // 1/N of the parameters here (whole chunks), and the weights one process trained.
    int64_t chunks = 0;
    for (const auto& p : mlp->parameters()) chunks += (p.numel() + world - 1) / world;
    EXPECT_EQ(static_cast<int64_t>(fsdp.shard_bytes()), 8 * chunks);
    {
      torch::NoGradGuard no_grad;
      const auto probe =
          mlp->forward(regression_batch(100, 0, 5).first);  // gathered unit by unit, released after
      EXPECT_TRUE(torch::allclose(probe, want.probe_output, 1e-10, 1e-12));
      EXPECT_EQ(fsdp.gathered_units(), 0u);
    }
    fsdp.gather_all();
    const auto got = mlp->parameters();
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_TRUE(torch::allclose(got[i], want.params[i], 1e-10, 1e-12))
          << "rank " << rank << ", parameter " << i << " off by "
          << (got[i] - want.params[i]).abs().max().item<double>();
    }
    fsdp.reshard();
    nothing_whole("after reshard");
    pg.shutdown();
  }));
}

INSTANTIATE_TEST_SUITE_P(Worlds, FsdpWorld,
                         ::testing::Values(Case{1, comm::Backend::kShm}, Case{2, comm::Backend::kShm},
                                           Case{3, comm::Backend::kShm}, Case{4, comm::Backend::kShm},
                                           Case{8, comm::Backend::kShm}, Case{2, comm::Backend::kGloo},
                                           Case{3, comm::Backend::kGloo}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return "world" + std::to_string(std::get<0>(info.param)) + "_" +
                                  comm::to_string(std::get<1>(info.param));
                         });

// Mixed precision: one process with a float64 master model and a float32 copy that computes (the master
// copied in before each step, the float32 gradients of the whole batch cast back for Adam).
std::vector<torch::Tensor> mixed_one_process(int steps) {
  auto master = make_mlp(7);
  auto compute = make_mlp(7);
  compute->to(torch::kFloat);
  auto optimizer = two_group_adam(master->parameters());
  const auto masters = master->parameters(), computes = compute->parameters();
  for (int step = 0; step < steps; ++step) {
    {
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < masters.size(); ++i) computes[i].copy_(masters[i]);
    }
    for (auto& p : computes) p.mutable_grad() = torch::Tensor();
    auto [x, y] = regression_batch(step, 0, kMicroBatch);
    torch::mse_loss(compute->forward(x.to(torch::kFloat)), y.to(torch::kFloat)).backward();
    for (size_t i = 0; i < masters.size(); ++i)
      masters[i].mutable_grad() = computes[i].grad().to(torch::kDouble);
    optimizer->step();
  }
  std::vector<torch::Tensor> out;
  for (const auto& p : masters) out.push_back(p.detach().clone());
  return out;
}

// FsdpOptions::param_dtype: the parameters are gathered and computed in float32 while the shards, the chunk
// gradients and Adam stay float64 (the same mechanism as bfloat16 over float32, at a precision the
// comparison can be tight at). Each rank on B/N samples ends with the master weights of the one-process
// run; whole parameters (gather_all) come back in the master dtype.
class FsdpMixedWorld : public ::testing::TestWithParam<Case> {};

TEST_P(FsdpMixedWorld, ComputesInParamDtypeAndStepsTheMasterShards) {
  const auto [world, backend] = GetParam();
  constexpr int kMixedSteps = 4;
  const std::vector<torch::Tensor> want = mixed_one_process(kMixedSteps);
  auto store = c10::make_intrusive<c10d::HashStore>();
  expect_all_ok(run_ranks(world, [&, world = world, backend = backend](int rank) {
    auto pg = comm::init_process_group(
        lockstep::testing::thread_group_options(rank, world, store, "fsdp-mixed").backend(backend));
    auto mlp = make_mlp(rank == 0 ? 7 : 40 + rank);
    FullyShardedDataParallel fsdp(mlp.ptr(), pg,
                                  FsdpOptions().min_unit_params(100).param_dtype(torch::kFloat));
    auto optimizer = fsdp.make_optimizer(two_group_adam(mlp->parameters()));
    int64_t chunks = 0;
    for (const auto& p : mlp->parameters()) {
      EXPECT_EQ(p.scalar_type(), torch::kFloat) << "a parameter is not in param_dtype";
      chunks += (p.numel() + world - 1) / world;
    }
    EXPECT_EQ(static_cast<int64_t>(fsdp.shard_bytes()), 8 * chunks) << "the master shards are not float64";
    const int64_t per_rank = kMicroBatch / world;
    for (int step = 0; step < kMixedSteps; ++step) {
      auto [x, y] = regression_batch(step, rank * per_rank, per_rank);
      const auto out = mlp->forward(x.to(torch::kFloat));
      EXPECT_EQ(out.scalar_type(), torch::kFloat);
      torch::mse_loss(out, y.to(torch::kFloat)).backward();
      optimizer->step();
    }
    fsdp.gather_all();
    const auto got = mlp->parameters();
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].scalar_type(), torch::kDouble) << "gather_all must give the master dtype";
      EXPECT_TRUE(torch::allclose(got[i], want[i], 1e-5, 1e-7))
          << "rank " << rank << ", parameter " << i << " off by "
          << (got[i] - want[i]).abs().max().item<double>();
    }
    fsdp.reshard();
    for (const auto& p : mlp->parameters()) EXPECT_EQ(p.scalar_type(), torch::kFloat) << "after reshard";
    pg.shutdown();
  }));
}

INSTANTIATE_TEST_SUITE_P(Worlds, FsdpMixedWorld,
                         ::testing::Values(Case{1, comm::Backend::kShm}, Case{2, comm::Backend::kShm},
                                           Case{3, comm::Backend::kShm}, Case{2, comm::Backend::kGloo}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return "world" + std::to_string(std::get<0>(info.param)) + "_" +
                                  comm::to_string(std::get<1>(info.param));
                         });

// The size policy closes a unit once it holds min_unit_params; the user's starts override it. Weights
// loaded into the whole parameters are taken back by reshard(true): the next forward computes with them.
TEST(Fsdp, UnitsFollowThePolicyAndLoadedWeightsAreResharded) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  expect_all_ok(run_ranks(2, [&](int rank) {
    auto pg = comm::init_process_group(lockstep::testing::thread_group_options(rank, 2, store, "fsdp-units"));
    auto mlp = make_mlp(3);
    {
      FullyShardedDataParallel fsdp(mlp.ptr(), pg, FsdpOptions().min_unit_params(600));
      EXPECT_EQ(fsdp.units(), (std::vector<std::vector<size_t>>{{0, 1}, {2}, {3}}));  // 9232, 11216, 51
      fsdp.gather_all();
    }
    {
      FullyShardedDataParallel fsdp(mlp.ptr(), pg, FsdpOptions().unit_starts({0, 3}));
      EXPECT_EQ(fsdp.units(), (std::vector<std::vector<size_t>>{{0, 1, 2}, {3}}));
      auto other = make_mlp(11);
      fsdp.gather_all();
      {
        torch::NoGradGuard no_grad;
        const auto mine = mlp->parameters(), theirs = other->parameters();
        for (size_t i = 0; i < mine.size(); ++i) mine[i].copy_(theirs[i]);  // as a checkpoint load would
      }
      fsdp.reshard(/*from_parameters=*/true);
      torch::NoGradGuard no_grad;
      const auto x = regression_batch(5, 0, 4).first;
      EXPECT_TRUE(torch::allclose(mlp->forward(x), other->forward(x)));
      fsdp.gather_all();
    }
    pg.shutdown();
  }));
}

// ResNet18 is Staged: FSDP's size policy makes units of its stages (stem to layer3, layer4, the head), and
// 2 ranks on half the batch each step as one process on all of it (BatchNorm in eval mode: its running
// statistics, not per-rank batch statistics, so the ranks compute what one process does).
TEST(Fsdp, ResNet18TrainsInUnitsOfItsStages) {
  const auto make = [] {
    const auto generator = lockstep::testing::lock_default_generator(3);
    models::ResNet18 net(models::ResNet18Options().in_channels(3).num_classes(4));
    net->eval();
    return net;
  };
  torch::manual_seed(8);
  const auto x = torch::randn({4, 3, 8, 8});
  const auto y = torch::tensor({0, 1, 2, 3});
  constexpr int kResNetSteps = 2;
  std::vector<torch::Tensor> want;
  {
    auto net = make();
    torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.05));
    for (int step = 0; step < kResNetSteps; ++step) {
      sgd.zero_grad();
      torch::nn::functional::cross_entropy(net->forward(x), y).backward();
      sgd.step();
    }
    for (const auto& p : net->parameters()) want.push_back(p.detach().clone());
  }
  auto store = c10::make_intrusive<c10d::HashStore>();
  expect_all_ok(run_ranks(2, [&](int rank) {
    auto pg =
        comm::init_process_group(lockstep::testing::thread_group_options(rank, 2, store, "fsdp-resnet"));
    auto net = make();
    FullyShardedDataParallel fsdp(net.ptr(), pg);
    EXPECT_EQ(fsdp.units(), (std::vector<std::vector<size_t>>{{0, 1, 2, 3}, {4}, {5}}));
    auto sgd = fsdp.make_optimizer(
        std::make_shared<torch::optim::SGD>(net->parameters(), torch::optim::SGDOptions(0.05)));
    for (int step = 0; step < kResNetSteps; ++step) {
      torch::nn::functional::cross_entropy(net->forward(x.narrow(0, 2 * rank, 2)), y.narrow(0, 2 * rank, 2))
          .backward();
      sgd->step();
    }
    EXPECT_LE(fsdp.peak_gathered_units(), 2u);
    fsdp.gather_all();
    const auto got = net->parameters();
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_TRUE(torch::allclose(got[i], want[i], 1e-4, 1e-5))
          << "rank " << rank << ", parameter " << i << " off by "
          << (got[i] - want[i]).abs().max().item<double>();
    }
    pg.shutdown();
  }));
}

// The GPT's head is tied to the token embedding: forward runs stage 0 again after ln_f (models/gpt.h), so
// FSDP gathers unit 0 a second time for the head, and the embedding's gradient sums both uses. 2 and 3 ranks
// on their share of the sequences end where one process on all of them does (float64, dropout 0), and no
// more than two units are whole at once (measured: 2 with a unit per stage).
TEST(Fsdp, GptWithItsTiedHeadMatchesOneProcess) {
  const auto make = [] {
    const auto generator = lockstep::testing::lock_default_generator(11);
    models::Gpt gpt(models::GptOptions().vocab_size(32).context(8).layers(2).heads(2).embedding(16));
    gpt->to(torch::kDouble);
    return gpt;
  };
  const auto loss_of = [](models::Gpt& gpt, const torch::Tensor& tokens) {
    const auto logits = gpt->forward(tokens.narrow(1, 0, 7));
    return torch::nn::functional::cross_entropy(logits.reshape({-1, 32}),
                                                tokens.narrow(1, 1, 7).reshape({-1}));
  };
  torch::manual_seed(12);
  const auto tokens = torch::randint(32, {6, 8});  // 6 sequences: 3, 2 or 1 per rank
  constexpr int kGptSteps = 3;
  std::vector<torch::Tensor> want;
  {
    auto gpt = make();
    torch::optim::SGD sgd(gpt->parameters(), torch::optim::SGDOptions(0.5));
    for (int step = 0; step < kGptSteps; ++step) {
      sgd.zero_grad();
      loss_of(gpt, tokens).backward();
      sgd.step();
    }
    for (const auto& p : gpt->parameters()) want.push_back(p.detach().clone());
  }
  // One unit (the size policy, for so small a model), or each stage its own: embeddings, 2 blocks, ln_f.
  for (const auto& starts : {std::vector<size_t>{}, std::vector<size_t>{0, 1, 2, 3}})
    for (const int world : {2, 3}) {
      auto store = c10::make_intrusive<c10d::HashStore>();
      expect_all_ok(run_ranks(world, [&](int rank) {
        auto pg = comm::init_process_group(
            lockstep::testing::thread_group_options(rank, world, store, "fsdp-gpt-" + std::to_string(world)));
        auto gpt = make();
        FullyShardedDataParallel fsdp(gpt.ptr(), pg, FsdpOptions().unit_starts(starts));
        auto sgd = fsdp.make_optimizer(
            std::make_shared<torch::optim::SGD>(gpt->parameters(), torch::optim::SGDOptions(0.5)));
        const int64_t share = 6 / world;
        for (int step = 0; step < kGptSteps; ++step) {
          loss_of(gpt, tokens.narrow(0, share * rank, share)).backward();
          sgd->step();
        }
        EXPECT_EQ(fsdp.units().size(), starts.empty() ? 1u : 4u);
        EXPECT_LE(fsdp.peak_gathered_units(), 2u);  // the head's second gather of unit 0 included
        fsdp.gather_all();
        const auto got = gpt->parameters();
        for (size_t i = 0; i < got.size(); ++i) {
          EXPECT_LT((got[i] - want[i]).abs().max().item<double>(), 1e-12)
              << "world " << world << ", rank " << rank << ", parameter " << i;
        }
        pg.shutdown();
      }));
    }
}

TEST(Fsdp, RefusesWhatItCannotShard) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto pg = comm::init_process_group(lockstep::testing::thread_group_options(0, 1, store, "fsdp-refuse"));
  const auto refused = [&](const std::function<void()>& build, const std::string& says) {
    try {
      build();
      ADD_FAILURE() << "accepted; expected an error saying " << says;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  torch::nn::Sequential plain(torch::nn::Linear(3, 4));
  refused([&] { FullyShardedDataParallel(plain.ptr(), pg); }, "is not Staged");
  auto mlp = make_mlp(1);
  refused(
      [&] {
        FullyShardedDataParallel(mlp.ptr(), pg, FsdpOptions().unit_starts({1, 2}));
      },
      "must start at stage 0");
  refused(
      [&] {
        FullyShardedDataParallel(mlp.ptr(), pg, FsdpOptions().unit_starts({0, 9}));
      },
      "names stage 9");
  refused([&] { FullyShardedDataParallel(mlp.ptr(), pg, FsdpOptions().min_unit_params(0)); },
          "min_unit_params must be >= 1");
  refused([&] { FullyShardedDataParallel(mlp.ptr(), pg, FsdpOptions().param_dtype(torch::kInt)); },
          "param_dtype must be a floating-point dtype");
  pg.shutdown();
}

}  // namespace
}  // namespace lockstep::shard::fsdp_test
