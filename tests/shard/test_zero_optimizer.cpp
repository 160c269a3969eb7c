// ZeRO-1 (shard/zero_optimizer.h) with real ranks (threads over an in-memory store, worlds 1, 2, 3, 4, 8):
// DDP + ZeroOptimizer on B/N samples per rank must end with the parameters of one process on all B, for SGD
// with momentum and weight decay and for Adam with weight decay, with two parameter groups of their own
// learning rates, a branch unused on some steps and a layer never used (its chunks never step, as the
// whole parameter would not), and parameters smaller than the world (empty chunks). Each rank's optimizer
// state is its 1/N: the ranks' state bytes add up to one process's.
#include <gtest/gtest.h>

#include <torch/nn.h>
#include <torch/optim.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <atomic>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "../comm/thread_group.h"
#include "lockstep/ddp/distributed_data_parallel.h"
#include "lockstep/shard/shard_checkpoint.h"
#include "lockstep/shard/zero_optimizer.h"

namespace lockstep::shard {
namespace {

using lockstep::testing::expect_all_ok;
using lockstep::testing::run_ranks;

constexpr int64_t kGlobalBatch = 24;  // divisible by 1, 2, 3, 4 and 8
constexpr int kSteps = 5;

struct NetImpl : torch::nn::Module {
  NetImpl() {
    trunk = register_module("trunk", torch::nn::Linear(10, 12));
    head = register_module("head", torch::nn::Linear(12, 3));  // bias of 3: empty chunks on 4 and 8 ranks
    branch = register_module("branch", torch::nn::Linear(12, 3));
    never = register_module("never", torch::nn::Linear(12, 3));
  }
  torch::Tensor forward(const torch::Tensor& x, bool use_branch) {
    auto h = torch::tanh(trunk->forward(x));
    auto out = head->forward(h);
    return use_branch ? out + branch->forward(h) : out;
  }
  torch::nn::Linear trunk{nullptr}, head{nullptr}, branch{nullptr}, never{nullptr};
};
TORCH_MODULE(Net);

Net make_net(uint64_t seed) {
  const auto generator = lockstep::testing::lock_default_generator(seed);
  Net net;
  net->to(torch::kDouble);
  return net;
}

enum class Opt { kSgd, kAdam };

// Two groups: trunk at the base rate, the rest at a tenth of it.
std::unique_ptr<torch::optim::Optimizer> make_optimizer(Net& net, Opt opt) {
  std::vector<torch::Tensor> first = net->trunk->parameters(), rest;
  for (auto* m : {&net->head, &net->branch, &net->never})
    for (const auto& p : (*m)->parameters()) rest.push_back(p);
  if (opt == Opt::kSgd) {
    std::vector<torch::optim::OptimizerParamGroup> groups{
        torch::optim::OptimizerParamGroup(
            first, std::make_unique<torch::optim::SGDOptions>(
                       torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(0.01))),
        torch::optim::OptimizerParamGroup(
            rest, std::make_unique<torch::optim::SGDOptions>(
                      torch::optim::SGDOptions(0.01).momentum(0.9).weight_decay(0.01)))};
    return std::make_unique<torch::optim::SGD>(groups, torch::optim::SGDOptions(0.1));
  }
  std::vector<torch::optim::OptimizerParamGroup> groups{
      torch::optim::OptimizerParamGroup(first, std::make_unique<torch::optim::AdamOptions>(
                                                   torch::optim::AdamOptions(0.01).weight_decay(0.01))),
      torch::optim::OptimizerParamGroup(rest, std::make_unique<torch::optim::AdamOptions>(
                                                  torch::optim::AdamOptions(0.001).weight_decay(0.01)))};
  return std::make_unique<torch::optim::Adam>(groups, torch::optim::AdamOptions(0.01));
}

bool uses_branch(int step) {
  return step % 2 == 1;
}

std::pair<torch::Tensor, torch::Tensor> batch(int step, int64_t begin, int64_t count) {
  const auto options = torch::TensorOptions().dtype(torch::kDouble);
  auto index = torch::arange(begin, begin + count, options).unsqueeze(1);
  return {torch::sin(index * torch::arange(1, 11, options) * 0.37 + step),
          torch::cos(index * torch::arange(1, 4, options) * 0.11 - step)};
}

void none_grads(Net& net) {
  for (auto& p : net->parameters()) p.mutable_grad() = torch::Tensor();
}

std::vector<torch::Tensor> one_process(Opt opt, int64_t* state_bytes) {
  auto net = make_net(7);
  auto optimizer = make_optimizer(net, opt);
  for (int step = 0; step < kSteps; ++step) {
    none_grads(net);
    auto [x, y] = batch(step, 0, kGlobalBatch);
    torch::mse_loss(net->forward(x, uses_branch(step)), y).backward();
    optimizer->step();
  }
  *state_bytes = optimizer_state_bytes(*optimizer);
  std::vector<torch::Tensor> out;
  for (const auto& p : net->parameters()) out.push_back(p.detach().clone());
  return out;
}

// `net` holds `want`'s parameters (to double rounding), each mismatch reported with `what`.
void expect_same_parameters(Net& net, Net& want, const std::string& what) {
  const auto got = net->parameters(), expected = want->parameters();
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(torch::allclose(got[i], expected[i], 1e-12, 1e-14)) << what << ": parameter " << i;
}

class ZeroOptimizerWorld : public ::testing::TestWithParam<int> {};

TEST_P(ZeroOptimizerWorld, MatchesOneProcessAndHoldsItsShareOfTheState) {
  const int world = GetParam();
  for (Opt opt : {Opt::kSgd, Opt::kAdam}) {
    SCOPED_TRACE(opt == Opt::kSgd ? "SGD" : "Adam");
    int64_t want_bytes = 0;
    const auto want = one_process(opt, &want_bytes);
    auto store = c10::make_intrusive<c10d::HashStore>();
    std::atomic<int64_t> state_bytes{0};
    expect_all_ok(run_ranks(world, [&](int rank) {
      auto pg =
          comm::init_process_group(lockstep::testing::thread_group_options(rank, world, store, "zero1"));
      auto net = make_net(rank == 0 ? 7 : 40 + rank);  // DDP broadcasts rank 0's weights
      ddp::DistributedDataParallel<Net> ddp(net, pg, ddp::DdpOptions().find_unused_parameters(true));
      ZeroOptimizer optimizer(make_optimizer(net, opt), pg);
      const int64_t per_rank = kGlobalBatch / world;
      for (int step = 0; step < kSteps; ++step) {
        optimizer.zero_grad();
        none_grads(net);
        auto [x, y] = batch(step, rank * per_rank, per_rank);
        torch::mse_loss(ddp.forward(x, uses_branch(step)), y).backward();
        optimizer.step();
      }
      const auto params = net->parameters();
      ASSERT_EQ(params.size(), want.size());
      for (size_t i = 0; i < params.size(); ++i) {
        EXPECT_TRUE(torch::allclose(params[i], want[i], 1e-12, 1e-14))
            << "rank " << rank << ", parameter " << i << " off by "
            << (params[i] - want[i]).abs().max().item<double>();
      }
      state_bytes += optimizer.state_bytes();
      pg.shutdown();
    }));
    EXPECT_EQ(state_bytes.load(), want_bytes);  // every element's state once, somewhere
    EXPECT_GT(want_bytes, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ZeroOptimizerWorld, ::testing::Values(1, 2, 3, 4, 8),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "world" + std::to_string(info.param);
                         });

// Steps [from, to) of rank `rank` of `world` (world 1 without DDP: one process).
void train_steps(Net& net, torch::optim::Optimizer& optimizer, ddp::DistributedDataParallel<Net>* ddp,
                 int from, int to, int rank, int world) {
  const int64_t per_rank = kGlobalBatch / world;
  for (int step = from; step < to; ++step) {
    none_grads(net);
    auto [x, y] = batch(step, rank * per_rank, per_rank);
    auto out = ddp ? ddp->forward(x, uses_branch(step)) : net->forward(x, uses_branch(step));
    torch::mse_loss(out, y).backward();
    optimizer.step();
  }
}

std::string to_bytes(const std::function<void(torch::serialize::OutputArchive&)>& write) {
  torch::serialize::OutputArchive archive;
  write(archive);
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

torch::serialize::InputArchive from_bytes(const std::string& bytes) {
  torch::serialize::InputArchive archive;
  std::istringstream in(bytes);
  archive.load_from(in);
  return archive;
}

// A checkpoint of a 3-rank ZeRO-1 run holds Adam's whole state in Adam's own format: it resumes on 2
// ranks with ZeRO-1, and in one process with a plain Adam, and both end where one process trained
// throughout. Saving without consolidate() first is refused.
TEST(ZeroOptimizer, CheckpointsHoldTheWholeStateAndResumeOnAnotherWorld) {
  auto straight = make_net(7);
  auto straight_optimizer = make_optimizer(straight, Opt::kAdam);
  train_steps(straight, *straight_optimizer, nullptr, 0, kSteps, 0, 1);

  std::string state_bytes;
  std::vector<torch::Tensor> params;
  auto store = c10::make_intrusive<c10d::HashStore>();
  expect_all_ok(run_ranks(3, [&](int rank) {
    auto pg = comm::init_process_group(lockstep::testing::thread_group_options(rank, 3, store, "zero1-save"));
    auto net = make_net(rank == 0 ? 7 : 40 + rank);
    ddp::DistributedDataParallel<Net> ddp(net, pg, ddp::DdpOptions().find_unused_parameters(true));
    ZeroOptimizer optimizer(make_optimizer(net, Opt::kAdam), pg);
    train_steps(net, optimizer, &ddp, 0, 3, rank, 3);
    if (rank == 0) {
      EXPECT_THROW(to_bytes([&](auto& a) { optimizer.save(a); }), std::logic_error);
    }
    optimizer.consolidate(0);
    if (rank == 1) {
      EXPECT_THROW(to_bytes([&](auto& a) { optimizer.save(a); }), std::logic_error);
    }
    if (rank == 0) {
      state_bytes = to_bytes([&](auto& a) { optimizer.save(a); });
      for (const auto& p : net->parameters()) params.push_back(p.detach().clone());
    }
    pg.shutdown();
  }));
  ASSERT_FALSE(state_bytes.empty());

  auto restored = [&](uint64_t seed) {
    auto net = make_net(seed);
    torch::NoGradGuard no_grad;
    auto ps = net->parameters();
    for (size_t i = 0; i < ps.size(); ++i) ps[i].copy_(params[i]);
    return net;
  };
  auto expect_straight = [&](Net& net, const std::string& what) {
    expect_same_parameters(net, straight, what);
  };
  // One process, plain Adam: the checkpoint is Adam's own format.
  auto one = restored(7);
  auto adam = make_optimizer(one, Opt::kAdam);
  auto archive = from_bytes(state_bytes);
  adam->load(archive);
  train_steps(one, *adam, nullptr, 3, kSteps, 0, 1);
  expect_straight(one, "plain Adam resumed");
  // Two ranks, ZeRO-1: each keeps its chunks of the whole state.
  auto store2 = c10::make_intrusive<c10d::HashStore>();
  expect_all_ok(run_ranks(2, [&](int rank) {
    auto pg =
        comm::init_process_group(lockstep::testing::thread_group_options(rank, 2, store2, "zero1-load"));
    auto net = restored(7);
    ddp::DistributedDataParallel<Net> ddp(net, pg, ddp::DdpOptions().find_unused_parameters(true));
    ZeroOptimizer optimizer(make_optimizer(net, Opt::kAdam), pg);
    auto in = from_bytes(state_bytes);
    optimizer.load(in);
    train_steps(net, optimizer, &ddp, 3, kSteps, rank, 2);
    expect_straight(net, "ZeRO-1 resumed on 2 ranks, rank " + std::to_string(rank));
    pg.shutdown();
  }));
}

// Sharded checkpoints (shard_checkpoint.h): each rank of a 3-rank ZeRO-1 run writes only its chunks of the
// parameters and of Adam's state. From those three shards the run resumes on 2 ranks and on 4 (re-sharded:
// chunks of other sizes, empty ones on 4 for the 3-element biases) with ZeRO-1, and in one process with a
// plain Adam, starting from other parameters (all come from the shards); each ends where one process
// trained throughout. Shards of another world size than the one named, or fewer, are refused.
TEST(ZeroOptimizer, ShardedCheckpointsResumeOnAnyWorldFromEachRanksOwnShard) {
  auto straight = make_net(7);
  auto straight_optimizer = make_optimizer(straight, Opt::kAdam);
  train_steps(straight, *straight_optimizer, nullptr, 0, kSteps, 0, 1);

  std::vector<std::string> shards(3);
  auto store = c10::make_intrusive<c10d::HashStore>();
  expect_all_ok(run_ranks(3, [&](int rank) {
    auto pg =
        comm::init_process_group(lockstep::testing::thread_group_options(rank, 3, store, "shards-save"));
    auto net = make_net(rank == 0 ? 7 : 40 + rank);
    ddp::DistributedDataParallel<Net> ddp(net, pg, ddp::DdpOptions().find_unused_parameters(true));
    ZeroOptimizer optimizer(make_optimizer(net, Opt::kAdam), pg);
    train_steps(net, optimizer, &ddp, 0, 3, rank, 3);
    shards[rank] = to_bytes([&](auto& a) { optimizer.save_shard(a); });
    pg.shutdown();
  }));
  const ShardReader read = [&](int k, torch::serialize::InputArchive& archive) {
    std::istringstream in(shards.at(k));
    archive.load_from(in);
  };
  auto expect_straight = [&](Net& net, const std::string& what) {
    expect_same_parameters(net, straight, what);
  };
  // One process, plain Adam: the whole state put together from the chunks.
  auto one = make_net(99);
  auto adam = make_optimizer(one, Opt::kAdam);
  load_whole_from_shards(*adam, 3, read);
  train_steps(one, *adam, nullptr, 3, kSteps, 0, 1);
  expect_straight(one, "plain Adam from 3 shards");
  for (int world : {2, 4}) {
    auto store2 = c10::make_intrusive<c10d::HashStore>();
    expect_all_ok(run_ranks(world, [&](int rank) {
      auto pg = comm::init_process_group(lockstep::testing::thread_group_options(
          rank, world, store2, "shards-load-" + std::to_string(world)));
      auto net = make_net(60 + rank);  // the shards bring the parameters
      ddp::DistributedDataParallel<Net> ddp(net, pg, ddp::DdpOptions().find_unused_parameters(true));
      ZeroOptimizer optimizer(make_optimizer(net, Opt::kAdam), pg);
      optimizer.load_shards(3, read);
      train_steps(net, optimizer, &ddp, 3, kSteps, rank, world);
      expect_straight(
          net, "ZeRO-1 from 3 shards on " + std::to_string(world) + " ranks, rank " + std::to_string(rank));
      pg.shutdown();
    }));
  }
  // The checks can fail: two of the three shards are chunks of the wrong size for a 2-shard checkpoint.
  auto other = make_net(7);
  auto other_adam = make_optimizer(other, Opt::kAdam);
  EXPECT_THROW(load_whole_from_shards(*other_adam, 2, read), std::runtime_error);
}

// A parameter of 1 MiB or more whose size divides by the world is all-gathered straight into its own memory
// (the others through the packed buckets), with its own chunk as the input on shm and Gloo: 131072 doubles
// of a 512 x 256 layer on 2 and 4 ranks (on 3 it does not divide, and goes through a bucket).
TEST(ZeroOptimizer, LargeParametersGatherStraightIntoTheirMemory) {
  auto make = [](uint64_t seed) {
    const auto generator = lockstep::testing::lock_default_generator(seed);
    torch::nn::Sequential net(torch::nn::Linear(10, 512), torch::nn::Tanh(), torch::nn::Linear(512, 256),
                              torch::nn::Tanh(), torch::nn::Linear(256, 3));
    net->to(torch::kDouble);
    return net;
  };
  auto run = [](torch::nn::Sequential& net, torch::optim::Optimizer& optimizer,
                ddp::DistributedDataParallel<torch::nn::Sequential>* ddp, int rank, int world) {
    const int64_t per_rank = kGlobalBatch / world;
    for (int step = 0; step < 3; ++step) {
      for (auto& p : net->parameters()) p.mutable_grad() = torch::Tensor();
      auto [x, y] = batch(step, rank * per_rank, per_rank);
      torch::mse_loss(ddp ? ddp->forward(x) : net->forward(x), y).backward();
      optimizer.step();
    }
  };
  auto one = make(3);
  torch::optim::Adam adam(one->parameters(), torch::optim::AdamOptions(0.01));
  run(one, adam, nullptr, 0, 1);
  for (auto [world, backend] : {std::pair{2, comm::Backend::kShm}, std::pair{2, comm::Backend::kGloo},
                                std::pair{3, comm::Backend::kShm}, std::pair{4, comm::Backend::kGloo}}) {
    SCOPED_TRACE(comm::to_string(backend));
    auto store = c10::make_intrusive<c10d::HashStore>();
    expect_all_ok(run_ranks(world, [&, world = world, backend = backend](int rank) {
      auto pg = comm::init_process_group(
          lockstep::testing::thread_group_options(rank, world, store, "zero1-big").backend(backend));
      auto net = make(rank == 0 ? 3 : 50 + rank);
      ddp::DistributedDataParallel<torch::nn::Sequential> ddp(net, pg);
      ZeroOptimizer optimizer(
          std::make_unique<torch::optim::Adam>(net->parameters(), torch::optim::AdamOptions(0.01)), pg);
      run(net, optimizer, &ddp, rank, world);
      const auto got = net->parameters(), want = one->parameters();
      // (1e-10: dividing the summed gradient by 3 rounds, where one process divides a sum over 24 samples)
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_TRUE(torch::allclose(got[i], want[i], 1e-10, 1e-12))
            << "world " << world << ", parameter " << i << " off by "
            << (got[i] - want[i]).abs().max().item<double>();
      pg.shutdown();
    }));
  }
}

TEST(ZeroOptimizer, ChunksCoverEachParameterOnceInRankOrder) {
  for (int64_t numel : {0, 1, 3, 7, 8, 1000}) {
    for (int world : {1, 2, 3, 8}) {
      int64_t next = 0;
      for (int r = 0; r < world; ++r) {
        const auto c = ZeroOptimizer::chunk(numel, r, world);
        EXPECT_EQ(c.begin, std::min(next, numel));
        EXPECT_LE(c.length, (numel + world - 1) / world);
        next = c.begin + c.length;
      }
      EXPECT_EQ(next, numel) << numel << " elements over " << world;
    }
  }
}

TEST(ZeroOptimizer, RefusesWhatItCannotShard) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto pg = comm::init_process_group(lockstep::testing::thread_group_options(0, 1, store, "zero1-refuse"));
  EXPECT_THROW(ZeroOptimizer(nullptr, pg), std::invalid_argument);
  auto p = torch::ones({2, 3}, torch::requires_grad());
  auto stepped =
      std::make_unique<torch::optim::Adam>(std::vector<torch::Tensor>{p}, torch::optim::AdamOptions(0.1));
  p.mutable_grad() = torch::ones({2, 3});
  stepped->step();
  try {
    ZeroOptimizer(std::move(stepped), pg);
    ADD_FAILURE() << "an optimizer with state was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("already has state"), std::string::npos) << e.what();
  }
  auto transposed = torch::ones({3, 2}).t().requires_grad_();  // a leaf, not contiguous
  auto bad = std::make_unique<torch::optim::SGD>(std::vector<torch::Tensor>{transposed},
                                                 torch::optim::SGDOptions(0.1));
  EXPECT_THROW(ZeroOptimizer(std::move(bad), pg), std::invalid_argument);
  pg.shutdown();
}

}  // namespace
}  // namespace lockstep::shard
