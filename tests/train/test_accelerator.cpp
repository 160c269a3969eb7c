// The Accelerate-style Accelerator, with ranks as threads over an in-memory store (real Gloo/shm groups):
// gradient accumulation over 2 ranks equals one process on the global batch (and differs without it),
// save_state/load_state resumes bit-identically, bf16 trains, the collectives' helpers, and the errors.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include <unistd.h>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/cuda.h>
#include <torch/nn.h>
#include <torch/optim.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "../comm/thread_group.h"
#include "lockstep/models/mlp.h"
#include "lockstep/train/accelerator.h"

namespace lockstep::train {
namespace {

using lockstep::testing::expect_all_ok;
using lockstep::testing::run_ranks;
using namespace std::chrono_literals;

constexpr uint64_t kShuffleSeed = 17;

struct NetImpl : torch::nn::Module {
  NetImpl()
      : fc1(register_module("fc1", torch::nn::Linear(16, 12))),
        fc2(register_module("fc2", torch::nn::Linear(12, 4))) {}
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::relu(fc1(x.flatten(1)))); }
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Net);

// Net with the weights of `seed`. The default generator is process-wide: thread ranks must not interleave.
Net make_net(uint64_t seed) {
  const auto generator = lockstep::testing::lock_default_generator(seed);
  return Net();
}

// n images 1x4x4 with labels a fixed "teacher" gives them (learnable), built from their own generator.
std::shared_ptr<const data::TensorDataset> make_dataset(int64_t n) {
  auto generator = at::detail::createCPUGenerator(5);
  auto images = at::randint(0, 256, {n, 1, 4, 4}, generator, at::kByte);
  auto teacher = at::randn({16, 4}, generator);
  auto labels = (images.flatten(1).to(at::kFloat) / 255.0 - 0.5).matmul(teacher).argmax(1);
  return std::make_shared<const data::TensorDataset>(images, labels, "toy");
}

enum class Opt { kSgd, kAdam };

std::unique_ptr<torch::optim::Optimizer> make_optimizer(Net& net, Opt opt) {
  if (opt == Opt::kSgd)
    return std::make_unique<torch::optim::SGD>(net->parameters(), torch::optim::SGDOptions(0.1));
  return std::make_unique<torch::optim::Adam>(net->parameters(), torch::optim::AdamOptions(0.01));
}

std::vector<at::Tensor> parameters_of(Net& net) {
  std::vector<at::Tensor> out;
  for (auto& p : net->parameters()) out.push_back(p.detach().clone());
  return out;
}

double max_difference(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>());
  return worst;
}

comm::ProcessGroup make_group(int rank, int world, const c10::intrusive_ptr<c10d::Store>& store) {
  return comm::init_process_group(
      lockstep::testing::thread_group_options(rank, world, store, "accelerator-test")
          .rendezvous_timeout(30s)
          .collective_timeout(30s));
}

c10::intrusive_ptr<c10d::Store> new_store() {
  return c10::make_intrusive<c10d::HashStore>();
}

// One process, no Accelerator: the sampler's order at world size 1, batches of `batch`, `epochs` epochs.
std::vector<at::Tensor> reference_params(const std::shared_ptr<const data::TensorDataset>& dataset, Opt opt,
                                         int64_t batch, int epochs) {
  auto net = make_net(7);
  auto optimizer = make_optimizer(net, opt);
  data::DistributedSampler sampler(dataset->size(), data::DistributedSamplerOptions(1, 0).seed(kShuffleSeed));
  data::Loader loader(dataset, data::LoaderOptions(batch));
  for (int epoch = 0; epoch < epochs; ++epoch) {
    sampler.set_epoch(epoch);
    loader.start_epoch(sampler.indices(), epoch);
    while (auto b = loader.next()) {
      optimizer->zero_grad();
      torch::nn::functional::cross_entropy(net(b->data), b->target).backward();
      optimizer->step();
    }
  }
  return parameters_of(net);
}

// `world` ranks with the Accelerator (batch per rank, accumulation `steps`); each rank's final parameters.
std::vector<std::vector<at::Tensor>> accelerate_params(
    const std::shared_ptr<const data::TensorDataset>& dataset, Opt opt, int world, int64_t batch,
    int64_t steps, int epochs, StrategyKind strategy = StrategyKind::kDdp) {
  std::vector<std::vector<at::Tensor>> result(world);
  auto store = new_store();
  expect_all_ok(run_ranks(world, [&](int rank) {
    auto group = make_group(rank, world, store);
    Accelerator accelerator(
        group, AcceleratorOptions().gradient_accumulation_steps(steps).seed(kShuffleSeed).strategy(strategy));
    auto net = make_net(rank == 0 ? 7 : 100 + rank);  // prepare must broadcast rank 0's weights
    auto [model, optimizer, loader] = accelerator.prepare(
        net, make_optimizer(net, opt), DataLoaderSpec(dataset, data::LoaderOptions(batch)));
    for (int epoch = 0; epoch < epochs; ++epoch) {
      loader.set_epoch(epoch);
      for (auto& b : loader) {
        auto scope = accelerator.accumulate(model);
        accelerator.backward(torch::nn::functional::cross_entropy(model(b.data), b.target));
        optimizer.step();
        optimizer.zero_grad();
      }
    }
    const FullParameters whole = accelerator.full_parameters();  // fsdp: whole again (else nothing)
    result[rank] = parameters_of(net);
    group.shutdown();
  }));
  return result;
}

void expect_accumulation_exact(Opt opt, int64_t samples, StrategyKind strategy = StrategyKind::kDdp) {
  const auto dataset = make_dataset(samples);
  const int64_t b = 4;
  const auto want = reference_params(dataset, opt, /*batch=*/4 * b, /*epochs=*/2);
  const auto got = accelerate_params(dataset, opt, /*world=*/2, b, /*steps=*/2, /*epochs=*/2, strategy);
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_EQ(got[rank].size(), want.size());
    EXPECT_LE(max_difference(got[rank], want), 1e-5) << "rank " << rank;
  }
}

TEST(Accelerator, AccumulationOverTwoRanksEqualsOneProcessOnTheGlobalBatchSgd) {
  expect_accumulation_exact(Opt::kSgd, /*samples=*/64);
}

TEST(Accelerator, AccumulationOverTwoRanksEqualsOneProcessOnTheGlobalBatchAdam) {
  expect_accumulation_exact(Opt::kAdam, /*samples=*/64);
}

// 72 samples: 9 micro-batches per rank and epoch, so each pass ends with a group of one micro-batch, which
// must sync and count as a whole step (the reference's last batch holds 8 samples).
TEST(Accelerator, ShortLastGroupOfAPassIsExactToo) {
  expect_accumulation_exact(Opt::kSgd, /*samples=*/72);
}

// The check above can fail: without accumulation the same ranks take twice as many, smaller steps.
TEST(Accelerator, WithoutAccumulationTheParametersDiffer) {
  const auto dataset = make_dataset(64);
  const auto want = reference_params(dataset, Opt::kSgd, /*batch=*/16, /*epochs=*/2);
  const auto got = accelerate_params(dataset, Opt::kSgd, /*world=*/2, /*batch=*/4, /*steps=*/1, /*epochs=*/2);
  EXPECT_GT(max_difference(got[0], want), 1e-3);
  EXPECT_EQ(max_difference(got[0], got[1]), 0.0);  // but the ranks agree with each other
}

TEST(Accelerator, SyncStepsFollowGroupsAndPassEnds) {
  const auto dataset = make_dataset(14);  // 7 batches of 2 on one rank
  auto store = new_store();
  expect_all_ok(run_ranks(1, [&](int rank) {
    auto group = make_group(rank, 1, store);
    Accelerator accelerator(group, AcceleratorOptions().gradient_accumulation_steps(3));
    auto net = make_net(1);
    auto model = accelerator.prepare(net);
    auto loader = accelerator.prepare(DataLoaderSpec(dataset, data::LoaderOptions(2)));
    EXPECT_EQ(loader.size(), 7);
    for (int pass = 0; pass < 2; ++pass) {
      std::string pattern;
      for (auto& b : loader) {
        auto scope = accelerator.accumulate(model);
        EXPECT_EQ(scope.sync_gradients(), accelerator.sync_gradients());
        pattern += scope.sync_gradients() ? 'S' : '-';
        (void)b;
      }
      EXPECT_EQ(pattern, "--S--SS") << "pass " << pass;
      EXPECT_EQ(accelerator.step(), 3 * (pass + 1));
      EXPECT_EQ(loader.epoch(), pass + 1);             // each full pass advances the epoch
      EXPECT_EQ(accelerator.first_epoch(), pass + 1);  // where a loop (re)starting now would begin
    }
    EXPECT_TRUE(accelerator.membership_changes().empty());
    EXPECT_EQ(accelerator.elastic_world(), nullptr);
    group.shutdown();
  }));
}

// strategy zero1: the optimizer's state sharded over the ranks, the same steps as one process.
TEST(Accelerator, Zero1AccumulationEqualsOneProcessOnTheGlobalBatch) {
  expect_accumulation_exact(Opt::kAdam, 64, StrategyKind::kZero1);
  expect_accumulation_exact(Opt::kSgd, 64, StrategyKind::kZero1);
}

// strategy zero2: the gradients reduce-scattered during backward as well; accumulation keeps the full ones
// until the sync step, and clip_grad_norm_ clips the shards by the global norm (compared with one process
// clipping the whole gradients in the Trainer's tests: here only that it is the same on every rank).
TEST(Accelerator, Zero2AccumulationEqualsOneProcessOnTheGlobalBatch) {
  expect_accumulation_exact(Opt::kAdam, 64, StrategyKind::kZero2);
  expect_accumulation_exact(Opt::kSgd, 64, StrategyKind::kZero2);
}

// strategy fsdp: the parameters sharded too. Net is not Staged: it runs as one stage, one unit (sharded
// between steps, gathered whole around forward and backward); the same steps as one process.
TEST(Accelerator, FsdpAccumulationEqualsOneProcessOnTheGlobalBatch) {
  expect_accumulation_exact(Opt::kAdam, 64, StrategyKind::kFsdp);
  expect_accumulation_exact(Opt::kSgd, 64, StrategyKind::kFsdp);
}

// A Staged model (lockstep's Mlp) under fsdp: units of its stages (min_unit_params 100: one per layer), at
// most two whole at once, no parameter memory between steps, and the same weights as ddp on 1, 2 and 3
// ranks, with accumulation and clipping; under bf16 the parameters compute in bfloat16, end where ddp's
// autocast ends, and full_parameters() gives the float32 masters. So do zero1's and zero2's under bf16
// (bfloat16 parameters over float32 master chunks).
TEST(Accelerator, FsdpShardsAStagedModelInUnitsAndTrainsAsDdp) {
  const auto dataset = make_dataset(72);
  const auto train = [&](int world, StrategyKind kind, Precision precision, int64_t accumulation) {
    StrategyOptions strategy(kind);
    if (kind == StrategyKind::kFsdp) strategy.min_unit_params(100);
    std::vector<std::vector<at::Tensor>> result(world);
    auto store = new_store();
    expect_all_ok(run_ranks(world, [&](int rank) {
      auto group = make_group(rank, world, store);
      Accelerator accelerator(group, AcceleratorOptions()
                                         .gradient_accumulation_steps(accumulation)
                                         .seed(kShuffleSeed)
                                         .strategy(strategy)
                                         .mixed_precision(precision));
      models::Mlp mlp = [&] {
        const auto generator = lockstep::testing::lock_default_generator(rank == 0 ? 5 : 50 + rank);
        return models::Mlp(models::MlpOptions().in_features(16).hidden({24, 12}).num_classes(4).dropout(0.0));
      }();
      auto [model, optimizer, loader] =
          accelerator.prepare(mlp, torch::optim::Adam(mlp->parameters(), 0.01),
                              DataLoaderSpec(dataset, data::LoaderOptions(12 / world)));
      for (int epoch = 0; epoch < 2; ++epoch) {
        for (auto& b : loader) {
          auto scope = accelerator.accumulate(model);
          accelerator.backward(torch::nn::functional::cross_entropy(model(b.data), b.target));
          accelerator.clip_grad_norm_(0.5);
          optimizer.step();
          optimizer.zero_grad();
        }
      }
      if (auto* fsdp = model.fsdp()) {
        EXPECT_EQ(fsdp->units().size(), 3u);
        EXPECT_LE(fsdp->peak_gathered_units(), 2u);
        for (const auto& p : mlp->parameters()) {
          EXPECT_EQ(p.storage().nbytes(), 0u) << "a parameter holds memory between steps";
          EXPECT_EQ(p.scalar_type(), precision == Precision::kBf16Mixed ? at::kBFloat16 : at::kFloat);
        }
      }
      if (kind != StrategyKind::kDdp && precision == Precision::kBf16Mixed) {
        for (const auto& p : mlp->parameters()) EXPECT_EQ(p.scalar_type(), at::kBFloat16) << to_string(kind);
      }
      const FullParameters whole = accelerator.full_parameters();
      for (const auto& p : mlp->parameters()) result[rank].push_back(p.detach().clone());
      group.shutdown();
    }));
    return result;
  };
  for (const int world : {1, 2, 3}) {
    const auto want = train(world, StrategyKind::kDdp, Precision::k32, 2);
    const auto got = train(world, StrategyKind::kFsdp, Precision::k32, 2);
    for (int rank = 0; rank < world; ++rank) {
      ASSERT_EQ(got[rank].size(), want[0].size());
      EXPECT_LE(max_difference(got[rank], want[0]), 1e-5) << "world " << world << ", rank " << rank;
    }
  }
  // With accumulation: the bfloat16 gradients of the micro-batches sum in float32, as ddp's .grad does.
  const auto bf16_ddp = train(2, StrategyKind::kDdp, Precision::kBf16Mixed, 2);
  const auto bf16 = train(2, StrategyKind::kFsdp, Precision::kBf16Mixed, 2);
  EXPECT_EQ(bf16[0].front().scalar_type(), at::kFloat) << "full_parameters() must give the float32 masters";
  EXPECT_LE(max_difference(bf16[0], bf16_ddp[0]), 1e-4)
      << "bf16: fsdp's bfloat16 parameters against autocast";
  for (const StrategyKind strategy : {StrategyKind::kZero1, StrategyKind::kZero2}) {
    const auto zero = train(2, strategy, Precision::kBf16Mixed, 2);
    EXPECT_EQ(zero[0].front().scalar_type(), at::kFloat) << "full_parameters() must give the float32 masters";
    EXPECT_LE(max_difference(zero[0], bf16_ddp[0]), 1e-4)
        << "bf16: " << to_string(strategy) << "'s bfloat16 parameters against autocast";
  }
}

// full_parameters() scopes nest: save_state and load_state inside one (they gather too) leave it whole,
// with the same values; a forward with gradients inside is refused, one under NoGradGuard runs; after the
// scope the parameters hold no memory again and training goes on from the loaded state. Under bf16, so the
// scopes' float32 masters and the bfloat16 parameters of training alternate.
TEST(Accelerator, FsdpFullParameterScopesNest) {
  const auto dataset = make_dataset(16);
  const auto dir =
      std::filesystem::temp_directory_path() / ("lockstep_fsdp_scopes_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  auto store = new_store();
  expect_all_ok(run_ranks(2, [&](int rank) {
    auto group = make_group(rank, 2, store);
    Accelerator accelerator(
        group,
        AcceleratorOptions().strategy(StrategyKind::kFsdp).mixed_precision(Precision::kBf16Mixed).seed(1));
    auto net = make_net(4);
    auto [model, optimizer, loader] = accelerator.prepare(net, torch::optim::Adam(net->parameters(), 0.01),
                                                          DataLoaderSpec(dataset, data::LoaderOptions(4)));
    const auto train_pass = [&, &model = model, &optimizer = optimizer, &loader = loader] {
      for (auto& b : loader) {
        accelerator.backward(torch::nn::functional::cross_entropy(model(b.data), b.target));
        optimizer.step();
        optimizer.zero_grad();
      }
    };
    train_pass();
    const auto x = torch::rand({2, 1, 4, 4});
    {
      const FullParameters whole = accelerator.full_parameters();
      const auto before = parameters_of(net);
      EXPECT_EQ(before.front().scalar_type(), at::kFloat);
      accelerator.save_state(dir.string());
      accelerator.load_state(dir.string());
      for (const auto& p : net->parameters())
        EXPECT_GT(p.storage().nbytes(), 0u) << "the outer scope ended early";
      EXPECT_EQ(max_difference(parameters_of(net), before), 0.0);
      {
        torch::NoGradGuard no_grad;
        EXPECT_EQ(model(x).sizes(), (std::vector<int64_t>{2, 4}));
      }
      EXPECT_THROW(model(x), c10::Error) << "a forward with gradients inside the scope";
    }
    for (const auto& p : net->parameters()) {
      EXPECT_EQ(p.storage().nbytes(), 0u);
      EXPECT_EQ(p.scalar_type(), at::kBFloat16);
    }
    train_pass();
    group.shutdown();
  }));
  std::filesystem::remove_all(dir);
}

// A model whose forward returns a tuple prepares and runs (PreparedModel::forward has one return type).
struct TwoHeadsImpl : torch::nn::Module {
  TwoHeadsImpl() : fc(register_module("fc", torch::nn::Linear(16, 4))) {}
  std::tuple<torch::Tensor, torch::Tensor> forward(const torch::Tensor& x) {
    const auto y = fc(x.flatten(1));
    return {y, y * 2};
  }
  torch::nn::Linear fc;
};
TORCH_MODULE(TwoHeads);

TEST(Accelerator, AModelReturningATupleRuns) {
  auto store = new_store();
  expect_all_ok(run_ranks(1, [&](int rank) {
    auto group = make_group(rank, 1, store);
    Accelerator accelerator(group);
    auto model = accelerator.prepare(TwoHeads());
    const auto [a, b] = model(torch::rand({3, 1, 4, 4}));
    EXPECT_TRUE(torch::allclose(b, a * 2));
    group.shutdown();
  }));
}

// A layer the loss does not use: refused with the Accelerator's own option in the advice (not DDP's, not
// the Trainer's, no C++ stack trace); with that option it trains, and the unused layer keeps its weights.
TEST(Accelerator, AnUnusedParameterNeedsTheDdpStrategysOptionAndTheErrorNamesIt) {
  const auto dataset = make_dataset(16);
  for (const bool find_unused : {false, true}) {
    auto store = new_store();
    std::vector<std::vector<at::Tensor>> fc2(2);
    const auto outcomes = run_ranks(2, [&](int rank) {
      auto group = make_group(rank, 2, store);
      Accelerator accelerator(
          group, AcceleratorOptions().strategy(DdpStrategy().find_unused_parameters(find_unused)));
      auto net = make_net(3);
      const std::vector<at::Tensor> before = {net->fc2->weight.detach().clone()};
      auto [model, optimizer, loader] = accelerator.prepare(net, torch::optim::SGD(net->parameters(), 0.1),
                                                            DataLoaderSpec(dataset, data::LoaderOptions(4)));
      for (auto& batch : loader) {
        accelerator.backward(net->fc1(batch.data.to(at::kFloat).flatten(1)).pow(2).mean());  // fc2 unused
        optimizer.step();
        optimizer.zero_grad();
      }
      fc2[rank] = {net->fc2->weight.detach().clone()};
      EXPECT_EQ(max_difference(fc2[rank], before), 0.0);
      group.shutdown();
    });
    for (const auto& outcome : outcomes) {
      if (find_unused) {
        EXPECT_TRUE(outcome.ok) << outcome.error;
        continue;
      }
      ASSERT_FALSE(outcome.ok) << "a parameter without a gradient was accepted";
      EXPECT_NE(outcome.error.find("fc2.weight"), std::string::npos) << outcome.error;
      EXPECT_NE(
          outcome.error.find("AcceleratorOptions().strategy(DdpStrategy().find_unused_parameters(true))"),
          std::string::npos)
          << outcome.error;
      EXPECT_EQ(outcome.error.find("Exception raised from"), std::string::npos) << outcome.error;
    }
  }
}

TEST(Accelerator, Zero2NeedsTheModelBeforeItsOptimizerAndNoFp16) {
  EXPECT_THROW(
      AcceleratorOptions().strategy(StrategyKind::kZero2).mixed_precision(Precision::k16Mixed).validate(),
      std::invalid_argument);
  auto store = new_store();
  expect_all_ok(run_ranks(1, [&](int rank) {
    auto group = make_group(rank, 1, store);
    Accelerator accelerator(group, AcceleratorOptions().strategy(StrategyKind::kZero2));
    auto net = make_net(1);
    try {
      accelerator.prepare(torch::optim::Adam(net->parameters(), 0.01));
      ADD_FAILURE() << "an optimizer prepared before its model was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("prepare the model before its optimizer"), std::string::npos)
          << e.what();
    }
    group.shutdown();
  }));
}

void expect_save_then_load_continues(StrategyKind strategy) {
  const auto dataset = make_dataset(48);
  const auto dir =
      std::filesystem::temp_directory_path() / ("lockstep_accelerator_state_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const int world = 2;
  std::vector<std::vector<at::Tensor>> continued(world), resumed(world);
  auto train_epoch = [](Accelerator& accelerator, auto& model, auto& optimizer, auto& loader) {
    for (auto& b : loader) {
      auto scope = accelerator.accumulate(model);
      accelerator.backward(torch::nn::functional::cross_entropy(model(b.data), b.target));
      optimizer.step();
      optimizer.zero_grad();
    }
  };
  const auto options = AcceleratorOptions().gradient_accumulation_steps(2).seed(3).strategy(strategy);
  {
    auto store = new_store();
    expect_all_ok(run_ranks(world, [&](int rank) {
      auto group = make_group(rank, world, store);
      Accelerator accelerator(group, options);
      auto net = make_net(11);
      auto [model, optimizer, loader] = accelerator.prepare(net, torch::optim::Adam(net->parameters(), 0.01),
                                                            DataLoaderSpec(dataset, data::LoaderOptions(4)));
      train_epoch(accelerator, model, optimizer, loader);
      accelerator.save_state(dir.string());
      train_epoch(accelerator, model, optimizer, loader);  // epoch 1 (the pass advanced it)
      const FullParameters whole = accelerator.full_parameters();
      continued[rank] = parameters_of(net);
      group.shutdown();
    }));
  }
  ASSERT_TRUE(std::filesystem::is_regular_file(dir / "accelerator_state.pt"));
  int shards = 0;  // a sharded optimizer: one file per rank beside the state, nothing gathered
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    shards += entry.path().filename().string().rfind("optimizer_0.step-", 0) == 0;
  EXPECT_EQ(shards, strategy == StrategyKind::kDdp ? 0 : world);
  {
    auto store = new_store();
    expect_all_ok(run_ranks(world, [&](int rank) {
      auto group = make_group(rank, world, store);
      Accelerator accelerator(group, options);
      auto net = make_net(99);  // other weights and a fresh Adam: all must come from the state
      auto [model, optimizer, loader] = accelerator.prepare(net, torch::optim::Adam(net->parameters(), 0.01),
                                                            DataLoaderSpec(dataset, data::LoaderOptions(4)));
      EXPECT_EQ(accelerator.step(), 0);
      accelerator.load_state(dir.string());
      EXPECT_EQ(loader.epoch(), 1);
      EXPECT_EQ(accelerator.step(), 3);  // 48 samples, 2 ranks, batch 4: 6 micro-steps per rank, 3 syncs
      train_epoch(accelerator, model, optimizer, loader);
      const FullParameters whole = accelerator.full_parameters();
      resumed[rank] = parameters_of(net);
      group.shutdown();
    }));
  }
  for (int rank = 0; rank < world; ++rank) {
    ASSERT_EQ(continued[rank].size(), resumed[rank].size());
    for (size_t i = 0; i < continued[rank].size(); ++i) {
      EXPECT_TRUE(torch::equal(continued[rank][i], resumed[rank][i]))
          << "rank " << rank << " parameter " << i;
    }
  }
  std::filesystem::remove_all(dir);
}

TEST(Accelerator, SaveStateThenLoadStateContinuesBitIdentically) {
  expect_save_then_load_continues(StrategyKind::kDdp);
  expect_save_then_load_continues(StrategyKind::kZero1);  // each rank's shard of the state
  expect_save_then_load_continues(StrategyKind::kZero2);
  expect_save_then_load_continues(StrategyKind::kFsdp);  // the model saved whole, the optimizer as shards
}

template <typename Exception, typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Exception& e) {
    return e.what();
  }
  return "(no exception of the expected type)";
}

// 2 ranks train 20 epochs in `precision` (bf16 or fp16) on the CPU: outputs float32, weights float32, the
// forward differs from the float32 module's (it ran in the lower precision), the loss falls.
void expect_mixed_precision_trains(Precision precision) {
  const auto dataset = make_dataset(256);
  const int world = 2;
  std::vector<double> first(world), last(world);
  auto store = new_store();
  expect_all_ok(run_ranks(world, [&](int rank) {
    auto group = make_group(rank, world, store);
    Accelerator accelerator(group,
                            AcceleratorOptions().mixed_precision(precision).gradient_accumulation_steps(2));
    EXPECT_EQ(accelerator.mixed_precision(), precision);
    EXPECT_EQ(accelerator.scaler().enabled(), precision == Precision::k16Mixed);  // fp16: loss scaling
    auto net = make_net(5);
    auto [model, optimizer, loader] = accelerator.prepare(net, torch::optim::Adam(net->parameters(), 0.02),
                                                          DataLoaderSpec(dataset, data::LoaderOptions(16)));
    for (int epoch = 0; epoch < 20; ++epoch) {
      auto sum = torch::zeros({2}, torch::kDouble);
      for (auto& b : loader) {
        auto scope = accelerator.accumulate(model);
        auto logits = model(b.data);
        EXPECT_EQ(logits.scalar_type(), at::kFloat);  // converted back, as Accelerate does
        auto loss = torch::nn::functional::cross_entropy(logits, b.target);
        accelerator.backward(loss);
        optimizer.step();
        optimizer.zero_grad();
        sum[0] += loss.item<double>();
        sum[1] += 1.0;
      }
      const auto mean = accelerator.reduce(sum, Reduction::kSum);
      const double epoch_loss = mean[0].item<double>() / mean[1].item<double>();
      if (epoch == 0) first[rank] = epoch_loss;
      last[rank] = epoch_loss;
    }
    for (auto& p : net->parameters()) EXPECT_EQ(p.scalar_type(), at::kFloat);
    // The forward really ran in bfloat16: it differs from the float32 module on the same input.
    const auto x = dataset->images().narrow(0, 0, 8).to(at::kFloat) / 255.0;
    torch::NoGradGuard no_grad;
    EXPECT_FALSE(torch::equal(model(x), net(x)));
    EXPECT_LE((model(x) - net(x)).abs().max().item<double>(), 0.1);
    group.shutdown();
  }));
  for (int rank = 0; rank < world; ++rank) {
    EXPECT_LT(last[rank], 0.8 * first[rank])
        << "rank " << rank << ": first " << first[rank] << " last " << last[rank];
    EXPECT_EQ(first[rank], first[0]);  // reduced over ranks: every rank sees the same value
  }
}

TEST(Accelerator, Bf16TrainsWithFloat32WeightsAndOutputs) {
  expect_mixed_precision_trains(parse_precision("bf16"));
}

// fp16 on the CPU: trains where LibTorch's CPU autocast has float16 (>= 2.5), as on CUDA (float16 autocast
// and the GradScaler); before that, an error that says why, and never float32 in fp16's name (which is what
// Python Accelerate does on a CPU: no autocast, no scaler, no warning).
TEST(Accelerator, Fp16OnCpuTrainsWhereLibTorchAutocastsFloat16) {
  if constexpr (cpu_autocast_has_float16()) {
    expect_mixed_precision_trains(parse_precision("fp16"));
  } else {
    auto store = new_store();
    expect_all_ok(run_ranks(1, [&](int rank) {
      auto group = make_group(rank, 1, store);
      const auto message = error_of<std::invalid_argument>(
          [&] { Accelerator(group, AcceleratorOptions().mixed_precision(Precision::k16Mixed).cpu(true)); });
      EXPECT_NE(message.find("\"16-mixed\" (fp16) cannot run on device \"cpu\" with LibTorch " TORCH_VERSION
                             ": its CPU autocast lowers to bfloat16 only"),
                std::string::npos)
          << message;
      EXPECT_NE(message.find("use bf16-mixed (Accelerate: bf16) or 32"), std::string::npos) << message;
      group.shutdown();
    }));
  }
}

TEST(Accelerator, GatherReduceAndProcessInfo) {
  const int world = 3;
  auto store = new_store();
  expect_all_ok(run_ranks(world, [&](int rank) {
    auto group = make_group(rank, world, store);
    Accelerator accelerator(group);
    EXPECT_EQ(accelerator.process_index(), rank);
    EXPECT_EQ(accelerator.num_processes(), world);
    EXPECT_EQ(accelerator.is_main_process(), rank == 0);
    EXPECT_EQ(accelerator.is_local_main_process(), rank == 0);  // one "node"
    EXPECT_EQ(accelerator.device(), c10::Device(c10::kCPU));
    const auto mine = torch::full({2}, static_cast<float>(rank));
    EXPECT_TRUE(torch::equal(accelerator.gather(mine), torch::tensor({0.f, 0.f, 1.f, 1.f, 2.f, 2.f})));
    EXPECT_TRUE(torch::equal(accelerator.gather(torch::tensor(static_cast<int64_t>(rank))),
                             torch::tensor({0, 1, 2}, torch::kLong)));
    EXPECT_TRUE(torch::equal(accelerator.reduce(mine), torch::full({2}, 3.f)));
    EXPECT_TRUE(torch::equal(accelerator.reduce(mine, Reduction::kMean), torch::full({2}, 1.f)));
    EXPECT_TRUE(torch::equal(mine, torch::full({2}, static_cast<float>(rank))));  // inputs untouched
    accelerator.wait_for_everyone();
    group.shutdown();
  }));
}

// ---- Accelerate's launcher variables (resolve_launch_environment)

env::EnvLookup lookup_of(std::map<std::string, std::string> variables) {
  return [variables = std::move(variables)](const std::string& name) -> std::optional<std::string> {
    const auto found = variables.find(name);
    if (found == variables.end()) return std::nullopt;
    return found->second;
  };
}

const std::map<std::string, std::string> kLaunchedFp16 = {{"ACCELERATE_MIXED_PRECISION", "fp16"},
                                                          {"ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "4"},
                                                          {"ACCELERATE_USE_CPU", "True"}};

TEST(AcceleratorLaunchEnvironment, OptionsTheProgramLeftUnsetComeFromTheVariables) {
  const auto resolved = resolve_launch_environment(AcceleratorOptions(), lookup_of(kLaunchedFp16));
  EXPECT_EQ(resolved.mixed_precision(), Precision::k16Mixed);
  EXPECT_EQ(resolved.gradient_accumulation_steps(), 4);
  EXPECT_EQ(resolved.cpu(), true);
  for (const char* precision : {"no", "bf16"}) {
    const auto other = resolve_launch_environment(AcceleratorOptions(),
                                                  lookup_of({{"ACCELERATE_MIXED_PRECISION", precision}}));
    EXPECT_EQ(other.mixed_precision(), parse_precision(precision)) << precision;
  }
}

TEST(AcceleratorLaunchEnvironment, AnOptionTheProgramSetWinsOverTheVariable) {
  // Also where the program set the default value: set is set (k32 is not "unset").
  const auto resolved = resolve_launch_environment(
      AcceleratorOptions().mixed_precision(Precision::k32).gradient_accumulation_steps(1).cpu(false),
      lookup_of(kLaunchedFp16));
  EXPECT_EQ(resolved.mixed_precision(), Precision::k32);
  EXPECT_EQ(resolved.gradient_accumulation_steps(), 1);
  EXPECT_EQ(resolved.cpu(), false);
  // A program that asked for the GPU keeps it: ACCELERATE_USE_CPU does not move it to the CPU.
  EXPECT_EQ(resolve_launch_environment(AcceleratorOptions().accelerator(AcceleratorKind::kGpu),
                                       lookup_of(kLaunchedFp16))
                .cpu(),
            false);
  // Field by field: the others still come from the launcher.
  const auto mixed = resolve_launch_environment(AcceleratorOptions().mixed_precision(Precision::kBf16Mixed),
                                                lookup_of(kLaunchedFp16));
  EXPECT_EQ(mixed.mixed_precision(), Precision::kBf16Mixed);
  EXPECT_EQ(mixed.gradient_accumulation_steps(), 4);
  EXPECT_EQ(mixed.cpu(), true);
}

TEST(AcceleratorLaunchEnvironment, WithoutVariablesTheDefaults) {
  for (const auto& variables :
       {std::map<std::string, std::string>{},
        std::map<std::string, std::string>{{"ACCELERATE_MIXED_PRECISION", ""},
                                           {"ACCELERATE_GRADIENT_ACCUMULATION_STEPS", ""},
                                           {"ACCELERATE_USE_CPU", ""}}}) {
    const auto resolved = resolve_launch_environment(AcceleratorOptions(), lookup_of(variables));
    EXPECT_EQ(resolved.mixed_precision(), Precision::k32);
    EXPECT_EQ(resolved.gradient_accumulation_steps(), 1);
    EXPECT_EQ(resolved.cpu(), false);
  }
  EXPECT_FALSE(AcceleratorOptions().mixed_precision().has_value());  // unset until resolved
}

TEST(AcceleratorLaunchEnvironment, ReadsAccelerateTruthValues) {
  for (const char* yes : {"True", "true", "1", "YES", "y", "t", "on"}) {
    EXPECT_EQ(
        resolve_launch_environment(AcceleratorOptions(), lookup_of({{"ACCELERATE_USE_CPU", yes}})).cpu(),
        true)
        << yes;
  }
  for (const char* no : {"False", "0", "no", "n", "f", "OFF"}) {
    EXPECT_EQ(resolve_launch_environment(AcceleratorOptions(), lookup_of({{"ACCELERATE_USE_CPU", no}})).cpu(),
              false)
        << no;
  }
}

TEST(AcceleratorLaunchEnvironment, BadValuesNameTheVariableAndWhatIsAccepted) {
  const auto error_for = [](const char* name, const char* value) {
    return error_of<std::invalid_argument>([&] {
      resolve_launch_environment(AcceleratorOptions(), lookup_of({{name, value}}));
    });
  };
  auto message = error_for("ACCELERATE_MIXED_PRECISION", "FP16");
  EXPECT_NE(message.find("ACCELERATE_MIXED_PRECISION='FP16' is not a precision (expected no, fp16 or bf16"),
            std::string::npos)
      << message;
  message = error_for("ACCELERATE_MIXED_PRECISION", "fp8");
  EXPECT_NE(message.find("ACCELERATE_MIXED_PRECISION='fp8' asks for float8 training, which lockstep does not "
                         "have"),
            std::string::npos)
      << message;
  for (const char* steps : {"0", "-2", "two", "+3", " 3"}) {
    message = error_for("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", steps);
    EXPECT_NE(message.find(std::string("ACCELERATE_GRADIENT_ACCUMULATION_STEPS='") + steps +
                           "' is not valid (expected an integer >= 1"),
              std::string::npos)
        << message;
  }
  message = error_for("ACCELERATE_USE_CPU", "maybe");
  EXPECT_NE(message.find("ACCELERATE_USE_CPU='maybe' is not a truth value"), std::string::npos) << message;
  // A variable the program's own setting overrides is not read, so a bad one there is no error.
  EXPECT_EQ(resolve_launch_environment(AcceleratorOptions().mixed_precision(Precision::k32),
                                       lookup_of({{"ACCELERATE_MIXED_PRECISION", "FP16"}}))
                .mixed_precision(),
            Precision::k32);
}

TEST(AcceleratorLaunchEnvironment, AnOptionConflictFromTheLauncherNamesItsVariable) {
  const auto message = error_of<std::invalid_argument>([] {
    resolve_launch_environment(AcceleratorOptions().strategy(StrategyKind::kZero2),
                               lookup_of({{"ACCELERATE_MIXED_PRECISION", "fp16"}}));
  });
  EXPECT_NE(message.find("strategy 'zero2' does not support mixed_precision '16-mixed'"), std::string::npos)
      << message;
  EXPECT_NE(message.find("(set by the launcher: ACCELERATE_MIXED_PRECISION='fp16')"), std::string::npos)
      << message;
}

// Sets a variable of this process for one scope (the Accelerator reads the real environment).
class ScopedVariable {
 public:
  ScopedVariable(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value, /*overwrite=*/1);
  }
  ~ScopedVariable() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  ScopedVariable(const ScopedVariable&) = delete;
  ScopedVariable& operator=(const ScopedVariable&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(Accelerator, TakesTheLaunchersPrecisionUnlessTheProgramSetsOne) {
  const ScopedVariable precision("ACCELERATE_MIXED_PRECISION", "bf16");
  const ScopedVariable steps("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "3");
  auto store = new_store();
  expect_all_ok(run_ranks(1, [&](int rank) {
    auto group = make_group(rank, 1, store);
    {
      Accelerator launched(group);
      EXPECT_EQ(launched.mixed_precision(), Precision::kBf16Mixed);
      EXPECT_EQ(launched.gradient_accumulation_steps(), 3);
      EXPECT_EQ(launched.options().mixed_precision(), Precision::kBf16Mixed);
    }
    {
      Accelerator own(group,
                      AcceleratorOptions().mixed_precision(Precision::k32).gradient_accumulation_steps(2));
      EXPECT_EQ(own.mixed_precision(), Precision::k32);
      EXPECT_EQ(own.gradient_accumulation_steps(), 2);
    }
    group.shutdown();
  }));
}

TEST(Accelerator, BadOptionsAreRejectedBeforeConnecting) {
  // The environment constructor: it would rendezvous, but the options fail first.
  auto message = error_of<std::invalid_argument>(
      [] { Accelerator(AcceleratorOptions().gradient_accumulation_steps(0)); });
  EXPECT_NE(message.find("gradient_accumulation_steps must be >= 1, got 0"), std::string::npos) << message;
  // Precision and backend are enums: a bad spelling fails in its parse function, naming it.
  message = error_of<std::invalid_argument>([] { parse_precision("fp8"); });
  EXPECT_NE(message.find("'fp8'"), std::string::npos) << message;
  message = error_of<std::invalid_argument>([] { comm::parse_backend("bogus"); });
  EXPECT_NE(message.find("bogus"), std::string::npos) << message;
}

// In-place recovery refuses, before connecting, what TrainerOptions::check_elastic refuses (one rule:
// src/train/option_checks.h): the sharded strategies, backends other than gloo, a group of the caller's.
TEST(Accelerator, ElasticRefusesWhatInPlaceRecoveryCannotWorkWith) {
  EXPECT_FALSE(AcceleratorOptions().elastic());
  const auto refused = [](const std::string& message, const std::string& what, const std::string& fix) {
    EXPECT_NE(message.find("elastic (in-place recovery) does not work with " + what), std::string::npos)
        << message;
    EXPECT_NE(message.find(fix), std::string::npos) << message;
  };
  for (StrategyKind kind : {StrategyKind::kZero1, StrategyKind::kZero2, StrategyKind::kFsdp}) {
    // The environment constructor: it would form an elastic world, but the options fail first.
    refused(error_of<std::invalid_argument>(
                [&] { Accelerator(AcceleratorOptions().elastic(true).strategy(StrategyOptions(kind))); }),
            std::string("strategy '") + to_string(kind) + "'", "use strategy ddp");
  }
  refused(error_of<std::invalid_argument>(
              [] { Accelerator(AcceleratorOptions().elastic(true).backend(comm::Backend::kShm)); }),
          "backend 'shm'", "use backend gloo or auto");
  // Not elastic, the same options are fine (validate alone: constructing would connect).
  AcceleratorOptions()
      .strategy(StrategyOptions(StrategyKind::kZero1))
      .backend(comm::Backend::kShm)
      .validate();
  AcceleratorOptions().elastic(true).backend(comm::Backend::kGloo).validate();

  auto store = new_store();
  expect_all_ok(run_ranks(1, [&](int rank) {
    auto group = make_group(rank, 1, store);
    refused(error_of<std::invalid_argument>([&] { Accelerator(group, AcceleratorOptions().elastic(true)); }),
            "the Accelerator constructor that takes a process group of the caller's",
            "lockstep run --recovery in-place");
    Accelerator plain(group);
    const auto message = error_of<std::logic_error>([&] { plain.recover(); });
    EXPECT_NE(message.find("AcceleratorOptions().elastic(true)"), std::string::npos) << message;
    group.shutdown();
  }));
}

TEST(Accelerator, MisuseIsAClearError) {
  auto store = new_store();
  expect_all_ok(run_ranks(1, [&](int rank) {
    auto group = make_group(rank, 1, store);
    Accelerator accelerator(group);
    auto message =
        error_of<std::logic_error>([&] { accelerator.backward(torch::ones({1}, torch::requires_grad())); });
    EXPECT_NE(message.find("prepare"), std::string::npos) << message;

    const std::string missing = "/nonexistent/lockstep-accelerator-state";
    message = error_of<std::runtime_error>([&] { accelerator.load_state(missing); });
    EXPECT_NE(message.find(missing), std::string::npos) << message;
    EXPECT_NE(message.find("does not exist"), std::string::npos) << message;
    const auto empty_dir =
        std::filesystem::temp_directory_path() / ("lockstep_empty_" + std::to_string(::getpid()));
    std::filesystem::create_directories(empty_dir);
    message = error_of<std::runtime_error>([&] { accelerator.load_state(empty_dir.string()); });
    EXPECT_NE(message.find("accelerator_state.pt"), std::string::npos) << message;

    // A state with one model, loaded where none is prepared.
    auto net = make_net(1);
    {
      Accelerator saver(group);
      auto model = saver.prepare(net);
      saver.save_state(empty_dir.string());
    }
    message = error_of<std::runtime_error>([&] { accelerator.load_state(empty_dir.string()); });
    EXPECT_NE(message.find("prepare the same objects"), std::string::npos) << message;
    std::filesystem::remove_all(empty_dir);

    message = error_of<std::invalid_argument>([&] {
      accelerator.prepare(
          DataLoaderSpec(std::make_shared<const data::TensorDataset>(), data::LoaderOptions(4)));
    });
    EXPECT_NE(message.find("empty"), std::string::npos) << message;
    group.shutdown();
  }));
}

// ---- any data: tuple batches from a map-style dataset and from a stream of unknown length

using Rows = std::tuple<at::Tensor, at::Tensor>;

struct RowTable {
  at::Tensor x, y;
};

const RowTable& row_table() {
  static const RowTable table = [] {
    const auto generator = at::detail::createCPUGenerator(5);
    RowTable t{at::randn({48, 3}, generator), {}};
    t.y = t.x.matmul(torch::tensor({0.5f, 1.0f, -1.0f})) + 0.1 * at::randn({48}, generator);
    return t;
  }();
  return table;
}

// The rows in order, without a size: the loader learns where it ends by reading one batch ahead.
struct RowStream : data::IterableDataset<Rows> {
  std::unique_ptr<data::SampleStream<Rows>> open(int64_t) const override {
    struct Stream : data::SampleStream<Rows> {
      std::optional<Rows> next() override {
        const RowTable& t = row_table();
        if (i >= t.x.size(0)) return std::nullopt;
        const int64_t row = i++;
        return Rows{t.x[row], t.y[row]};
      }
      int64_t i = 0;
    };
    return std::make_unique<Stream>();
  }
};

data::DataSource<Rows> row_source(bool stream, int64_t batch) {
  if (stream) return {std::make_shared<RowStream>(), data::LoaderOptions(batch)};
  return {data::make_dataset(48,
                             [](int64_t i) {
                               return Rows{row_table().x[i], row_table().y[i]};
                             }),
          data::LoaderOptions(batch)};
}

// `world` ranks regress the rows with the Accelerator (batch per rank, accumulation `steps`, 2 epochs);
// rank 0's parameters.
std::vector<at::Tensor> accelerate_rows(bool stream, int world, int64_t batch, int64_t steps) {
  std::vector<at::Tensor> result;
  auto store = new_store();
  expect_all_ok(run_ranks(world, [&](int rank) {
    auto group = make_group(rank, world, store);
    Accelerator accelerator(group,
                            AcceleratorOptions().gradient_accumulation_steps(steps).seed(kShuffleSeed));
    auto linear = torch::nn::Linear(3, 1);
    {
      torch::NoGradGuard no_grad;
      linear->weight.fill_(0.1);
      linear->bias.zero_();
    }
    auto [model, optimizer, loader] =
        accelerator.prepare(linear, torch::optim::SGD(linear->parameters(), 0.05), row_source(stream, batch));
    EXPECT_EQ(loader.size(), stream ? -1 : 48 / world / batch);
    for (int epoch = 0; epoch < 2; ++epoch) {
      for (auto& [x, y] : loader) {
        auto scope = accelerator.accumulate(model);
        accelerator.backward(torch::nn::functional::mse_loss(model(x).squeeze(1), y));
        optimizer.step();
        optimizer.zero_grad();
      }
    }
    EXPECT_EQ(accelerator.step(), 2 * 48 / (world * batch * steps));
    if (rank == 0) result = {linear->weight.detach().clone(), linear->bias.detach().clone()};
    group.shutdown();
  }));
  return result;
}

// The same parameters for 1 x 12, 2 x 6, 3 x 4 and 2 x 3 accumulating 2, from both kinds of dataset; 1 x 6
// differs (the check can fail).
TEST(Accelerator, AnyDataRanksMatchOneProcessOnTheGlobalBatch) {
  for (bool stream : {false, true}) {
    SCOPED_TRACE(stream ? "stream" : "map-style");
    const auto one = accelerate_rows(stream, 1, 12, 1);
    for (const auto& other : {accelerate_rows(stream, 2, 6, 1), accelerate_rows(stream, 3, 4, 1),
                              accelerate_rows(stream, 2, 3, 2)}) {
      ASSERT_EQ(other.size(), one.size());
      for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(torch::allclose(other[i], one[i], 1e-5, 1e-6)) << i;
    }
    EXPECT_FALSE(torch::allclose(accelerate_rows(stream, 1, 6, 1)[0], one[0], 1e-5, 1e-6));
  }
}

}  // namespace
}  // namespace lockstep::train
