// Exactness: N ranks (threads over an in-memory store) each training on B/N samples must end with the same
// parameters as one process training on all B samples. The core cases (DdpBackendWorld: SGD, Adam, tiny
// buckets, gradient_as_bucket_view with Adam and weight decay, no_sync accumulation, a user's comm hook,
// buckets of two dtypes) run on each CPU backend by name, shm and gloo, at world sizes 1-4; the others
// (unused parameters, buffers, an empty parameter, join) on Gloo. MPI's ranks are processes: the same
// exactness runs there through ddp_process_worker (tests/ddp/CMakeLists.txt). Float64 models, so the
// comparison can be tight (1e-9 relative); float32 parameters get float32's tolerance.
#include <gtest/gtest.h>

#include <sstream>

#include <torch/nn.h>
#include <torch/optim.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <tuple>

#include "../comm/thread_group.h"
#include "lockstep/ddp/bucket.h"
#include "lockstep/ddp/distributed_data_parallel.h"

namespace lockstep::ddp {
namespace {

using lockstep::testing::expect_all_ok;
using lockstep::testing::run_ranks;
using namespace std::chrono_literals;

constexpr double kRtol = 1e-9;
constexpr double kAtol = 1e-12;

struct NetImpl : torch::nn::Module {
  explicit NetImpl(int hidden = 16, bool with_unused = false, bool with_empty = false) {
    fc1 = register_module("fc1", torch::nn::Linear(20, hidden));
    fc2 = register_module("fc2", torch::nn::Linear(hidden, 8));
    fc3 = register_module("fc3", torch::nn::Linear(8, 4));
    if (with_unused) unused = register_module("unused", torch::nn::Linear(8, 3));
    if (with_empty) empty = register_parameter("empty", torch::zeros({0}));
    scale = register_buffer("scale", torch::ones({4}));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = torch::relu(fc1->forward(x));
    h = torch::relu(fc2->forward(h));
    auto out = fc3->forward(h) * scale;
    if (empty.defined()) out = out + empty.sum();
    return out;
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr}, unused{nullptr};
  torch::Tensor empty, scale;
};
TORCH_MODULE(Net);

struct Data {
  torch::Tensor x, y;
};

Data make_data(int64_t n) {
  torch::manual_seed(1234);
  return {torch::randn({n, 20}, torch::kDouble), torch::randn({n, 4}, torch::kDouble)};
}

Net make_net(uint64_t seed, int hidden = 16, bool with_unused = false, bool with_empty = false) {
  // The default generator is process-wide: ranks running as threads must not interleave their draws.
  const auto generator = lockstep::testing::lock_default_generator(seed);
  Net net(hidden, with_unused, with_empty);
  net->to(torch::kDouble);
  return net;
}

enum class Opt { kSgd, kAdam, kAdamWeightDecay, kSgdMomentumWeightDecay };

std::unique_ptr<torch::optim::Optimizer> make_optimizer(torch::nn::Module& net, Opt opt) {
  switch (opt) {
    case Opt::kSgd:
      return std::make_unique<torch::optim::SGD>(net.parameters(), torch::optim::SGDOptions(0.1));
    case Opt::kAdam:
      return std::make_unique<torch::optim::Adam>(net.parameters(), torch::optim::AdamOptions(0.01));
    case Opt::kAdamWeightDecay:
      return std::make_unique<torch::optim::Adam>(net.parameters(),
                                                  torch::optim::AdamOptions(0.01).weight_decay(0.1));
    case Opt::kSgdMomentumWeightDecay:
      return std::make_unique<torch::optim::SGD>(
          net.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(0.1));
  }
  return nullptr;
}

// One process, all samples, `steps` steps.
std::vector<torch::Tensor> reference_params(const Data& d, Opt opt, int steps, bool with_unused = false,
                                            bool with_empty = false) {
  auto net = make_net(7, 16, with_unused, with_empty);
  auto optimizer = make_optimizer(*net, opt);
  for (int s = 0; s < steps; ++s) {
    optimizer->zero_grad();
    torch::mse_loss(net->forward(d.x), d.y).backward();
    optimizer->step();
  }
  std::vector<torch::Tensor> out;
  for (auto& p : net->parameters()) out.push_back(p.detach().clone());
  return out;
}

c10::intrusive_ptr<c10d::Store> new_store() {
  return c10::make_intrusive<c10d::HashStore>();
}

// A group of `backend`, named: which backend an exactness case ran on never depends on the machine.
comm::ProcessGroup make_group(int rank, int world, const c10::intrusive_ptr<c10d::Store>& store,
                              comm::Backend backend = comm::Backend::kGloo) {
  return comm::init_process_group(lockstep::testing::thread_group_options(rank, world, store, "ddp-test")
                                      .backend(backend)
                                      .rendezvous_timeout(30s)
                                      .collective_timeout(30s));
}

// Every parameter within `rtol`/`atol` of the single-process run's (float64 models: 1e-9 relative).
void expect_same(const std::vector<torch::Tensor>& got, const std::vector<torch::Tensor>& want, int rank,
                 double rtol = kRtol, double atol = kAtol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (!torch::allclose(got[i], want[i], rtol, atol)) {
      throw std::runtime_error("rank " + std::to_string(rank) + ": parameter " + std::to_string(i) +
                               " differs from the single-process run by " +
                               std::to_string((got[i] - want[i]).abs().max().item<double>()) + " (rtol " +
                               std::to_string(rtol) + ")");
    }
  }
}

// `steps` steps of `ddp` (wrapping `net`) on this rank's contiguous slice of `data`, then the parameters
// compared with the single-process run's `want`.
void train_slice_and_compare(DistributedDataParallel<Net>& ddp, Net& net, Opt opt, const Data& data, int rank,
                             int world, int steps, const std::vector<torch::Tensor>& want) {
  auto optimizer = make_optimizer(*net, opt);
  const int64_t per_rank = data.x.size(0) / world;
  auto x = data.x.narrow(0, rank * per_rank, per_rank);
  auto y = data.y.narrow(0, rank * per_rank, per_rank);
  for (int s = 0; s < steps; ++s) {
    optimizer->zero_grad();
    torch::mse_loss(ddp.forward(x), y).backward();
    optimizer->step();
  }
  std::vector<torch::Tensor> got;
  for (auto& p : net->parameters()) got.push_back(p.detach());
  expect_same(got, want, rank);
  EXPECT_EQ(ddp.reducer().iterations(), steps);
}

// N ranks, each on its contiguous B/N slice, with DDP built from `options`, over `backend`.
void train_ddp_and_compare(comm::Backend backend, int world, Opt opt, const DdpOptions& options,
                           int steps = 5) {
  const auto data = make_data(24);
  const auto want = reference_params(data, opt, steps);
  auto store = new_store();
  expect_all_ok(run_ranks(world, [&](int rank) {
    auto pg = make_group(rank, world, store, backend);
    auto net = make_net(rank == 0 ? 7 : 100 + rank);  // DDP must broadcast rank 0's weights
    DistributedDataParallel<Net> ddp(net, pg, options);
    train_slice_and_compare(ddp, net, opt, data, rank, world, steps, want);
    pg.shutdown();
  }));
}

// A user's hook, as PyTorch's tests write one: the sum over the ranks, then the division, in two steps
// of its own (not AllReduceHook's code). It counts its calls and the gradient elements it reduced (every
// rank's, together), so that a test can tell that DDP ran it and not its default.
class SumThenDivideHook : public CommHook {
 public:
  comm::Work run(comm::ProcessGroup& group, at::Tensor& bucket) override {
    comm::Work work = group.all_reduce(bucket);
    work.wait();
    bucket.div_(group.size());
    calls.fetch_add(1);
    elements.fetch_add(bucket.numel());
    return work;
  }
  const char* name() const override { return "sum_then_divide"; }
  std::atomic<int64_t> calls{0};
  std::atomic<int64_t> elements{0};
};

// fc3 in float32 inside a float64 model: DDP's buckets hold one dtype each, so this model has two kinds.
struct MixedNetImpl : torch::nn::Module {
  MixedNetImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(20, 16));
    fc2 = register_module("fc2", torch::nn::Linear(16, 4));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = torch::relu(fc1->forward(x));
    return fc2->forward(h.to(torch::kFloat)).to(torch::kDouble);
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(MixedNet);

MixedNet make_mixed_net(uint64_t seed) {
  const auto generator = lockstep::testing::lock_default_generator(seed);
  MixedNet net;
  net->fc1->to(torch::kDouble);
  return net;
}

using BackendWorld = std::tuple<comm::Backend, int>;
class DdpBackendWorld : public ::testing::TestWithParam<BackendWorld> {
 protected:
  comm::Backend backend() const { return std::get<0>(GetParam()); }
  int world() const { return std::get<1>(GetParam()); }
};

TEST_P(DdpBackendWorld, SgdMatchesOneProcessOnTheGlobalBatch) {
  train_ddp_and_compare(backend(), world(), Opt::kSgd, DdpOptions());
}

TEST_P(DdpBackendWorld, AdamMatchesOneProcessOnTheGlobalBatch) {
  train_ddp_and_compare(backend(), world(), Opt::kAdam, DdpOptions());
}

TEST_P(DdpBackendWorld, EveryParameterItsOwnBucket) {
  train_ddp_and_compare(backend(), world(), Opt::kAdam,
                        DdpOptions().bucket_cap_mb(1e-9).first_bucket_cap_mb(1e-9));
}

TEST_P(DdpBackendWorld, GradientAsBucketView) {
  train_ddp_and_compare(backend(), world(), Opt::kSgdMomentumWeightDecay,
                        DdpOptions().gradient_as_bucket_view(true));
}

TEST_P(DdpBackendWorld, AdamWithWeightDecayOnBucketViews) {
  train_ddp_and_compare(backend(), world(), Opt::kAdamWeightDecay,
                        DdpOptions().gradient_as_bucket_view(true).bucket_cap_mb(0.001));
}

// The hook gives the default's result (the reference), so that alone cannot show it ran: in every step of
// every rank it must have reduced each gradient element once, in more than one bucket (1 KB buckets, the
// first one too: its default, 1 MB, would hold the whole 4 KB model).
TEST_P(DdpBackendWorld, AUsersCommHookInsideTraining) {
  const auto hook = std::make_shared<SumThenDivideHook>();
  const int steps = 5;
  train_ddp_and_compare(backend(), world(), Opt::kAdam,
                        DdpOptions().comm_hook(hook).bucket_cap_mb(0.001).first_bucket_cap_mb(0.001), steps);
  int64_t numel = 0;
  for (const auto& p : make_net(7)->parameters()) numel += p.numel();
  EXPECT_EQ(hook->elements.load(), int64_t{world()} * steps * numel);
  EXPECT_GT(hook->calls.load(), int64_t{world()} * steps) << "1 KB buckets: several a step";
}

TEST_P(DdpBackendWorld, NoSyncAccumulationEqualsTheLargeBatch) {
  // N ranks x 48/(2N) samples x 2 accumulation steps == 1 process x 48 samples.
  const auto data = make_data(48);
  const int steps = 3;
  const int n = world();
  const auto want = reference_params(data, Opt::kSgdMomentumWeightDecay, steps);
  auto store = new_store();
  expect_all_ok(run_ranks(n, [&](int rank) {
    auto pg = make_group(rank, n, store, backend());
    auto net = make_net(rank == 0 ? 7 : 99 + rank);
    DistributedDataParallel<Net> ddp(net, pg);
    auto optimizer = make_optimizer(*net, Opt::kSgdMomentumWeightDecay);
    const int64_t micro_batch = 48 / (2 * n);
    for (int s = 0; s < steps; ++s) {
      optimizer->zero_grad();
      for (int micro = 0; micro < 2; ++micro) {
        auto x = data.x.narrow(0, (rank * 2 + micro) * micro_batch, micro_batch);
        auto y = data.y.narrow(0, (rank * 2 + micro) * micro_batch, micro_batch);
        auto loss = torch::mse_loss(ddp.forward(x), y) / 2.0;
        if (micro == 0) {
          auto guard = ddp.no_sync();
          loss.backward();
        } else {
          loss.backward();
        }
      }
      optimizer->step();
    }
    std::vector<torch::Tensor> got;
    for (auto& p : net->parameters()) got.push_back(p.detach());
    expect_same(got, want, rank);
    EXPECT_EQ(ddp.reducer().iterations(), steps);  // only the synchronised backwards count
    pg.shutdown();
  }));
}

TEST_P(DdpBackendWorld, BucketsOfTwoDtypes) {
  const auto data = make_data(24);
  const int steps = 4;
  auto reference = make_mixed_net(7);
  auto ref_opt = make_optimizer(*reference, Opt::kAdam);
  for (int s = 0; s < steps; ++s) {
    ref_opt->zero_grad();
    torch::mse_loss(reference->forward(data.x), data.y).backward();
    ref_opt->step();
  }
  std::vector<torch::Tensor> want;
  for (auto& p : reference->parameters()) want.push_back(p.detach().clone());
  auto store = new_store();
  const int n = world();
  expect_all_ok(run_ranks(n, [&](int rank) {
    auto pg = make_group(rank, n, store, backend());
    auto net = make_mixed_net(rank == 0 ? 7 : 60 + rank);
    DistributedDataParallel<MixedNet> ddp(net, pg, DdpOptions().bucket_cap_mb(1));
    EXPECT_GE(ddp.reducer().bucket_indices().size(), 2u) << "one bucket per dtype at least";
    auto optimizer = make_optimizer(*net, Opt::kAdam);
    const int64_t share = 24 / n;
    for (int s = 0; s < steps; ++s) {
      optimizer->zero_grad();
      torch::mse_loss(ddp.forward(data.x.narrow(0, rank * share, share)),
                      data.y.narrow(0, rank * share, share))
          .backward();
      optimizer->step();
    }
    std::vector<torch::Tensor> got;
    for (auto& p : net->parameters()) got.push_back(p.detach());
    // float32 arithmetic in fc2's forward and backward reaches every gradient, fc1's float64 ones too:
    // float32's tolerance for all (the buckets' dtypes are what this case is about).
    expect_same(got, want, rank, 1e-5, 1e-7);
    pg.shutdown();
  }));
}

INSTANTIATE_TEST_SUITE_P(CpuBackends, DdpBackendWorld,
                         ::testing::Combine(::testing::Values(comm::Backend::kShm, comm::Backend::kGloo),
                                            ::testing::Values(1, 2, 3, 4)),
                         [](const ::testing::TestParamInfo<BackendWorld>& info) {
                           return std::string(comm::to_string(std::get<0>(info.param))) + "_world" +
                                  std::to_string(std::get<1>(info.param));
                         });

// Weights loaded with LibTorch's Module::load after DDP wrapped the model: load replaces each parameter's
// gradient accumulator, so DDP must move its hooks (else gradients silently stop being all-reduced and
// the ranks drift apart). Every rank starts from other weights and loads the reference's.
TEST(Ddp, WeightsLoadedAfterWrappingStillReduce) {
  const int world = 2;
  const int steps = 4;
  const auto data = make_data(24);
  const auto want = reference_params(data, Opt::kSgd, steps);
  std::ostringstream saved;
  {
    auto reference = make_net(7);
    torch::serialize::OutputArchive archive;
    reference->save(archive);
    archive.save_to(saved);
  }
  const std::string bytes = saved.str();
  auto store = new_store();
  expect_all_ok(run_ranks(world, [&](int rank) {
    auto pg = make_group(rank, world, store);
    auto net = make_net(300 + rank);
    for (bool as_view : {false, true}) {
      if (as_view) net = make_net(300 + rank);
      DistributedDataParallel<Net> ddp(net, pg, DdpOptions().gradient_as_bucket_view(as_view));
      {
        std::istringstream in(bytes);
        torch::serialize::InputArchive archive;
        archive.load_from(in);
        net->load(archive);
      }
      train_slice_and_compare(ddp, net, Opt::kSgd, data, rank, world, steps, want);
    }
    pg.shutdown();
  }));
}

TEST(Ddp, BucketsFollowTheCapsInReverseOrder) {
  auto store = new_store();
  expect_all_ok(run_ranks(1, [&](int rank) {
    auto pg = make_group(rank, 1, store);
    auto net = make_net(7);
    DistributedDataParallel<Net> ddp(net, pg, DdpOptions().bucket_cap_mb(1e-9).first_bucket_cap_mb(1e-9));
    const auto buckets = ddp.reducer().bucket_indices();
    ASSERT_EQ(buckets.size(), 6u);  // 3 layers x (weight, bias), each alone
    for (size_t b = 0; b < buckets.size(); ++b) EXPECT_EQ(buckets[b], std::vector<size_t>{5 - b});
    DistributedDataParallel<Net> one(net, pg);
    EXPECT_EQ(one.reducer().bucket_indices().size(), 1u);
    EXPECT_EQ(one.reducer().bucket_bytes(), (20 * 16 + 16 + 16 * 8 + 8 + 8 * 4 + 4) * sizeof(double));
  }));
}

TEST(Ddp, DefaultCapIsASixteenthOfTheGradientsWithinBounds) {
  auto store = new_store();
  expect_all_ok(run_ranks(1, [&](int rank) {
    auto pg = make_group(rank, 1, store);
    // 32 layers of 1 MiB (+ 2 KiB bias) of float gradients: the default cap is 2 MiB + 4 KiB, so the
    // buckets after the first hold two layers each; an explicit 25 MiB (PyTorch's default) makes three,
    // the last (the first 4 layers, whose gradients are ready last) 8 MiB.
    torch::nn::Sequential net;
    for (int i = 0; i < 32; ++i) net->push_back(torch::nn::Linear(512, 512));
    size_t gradient_bytes = 0;
    for (const auto& p : net->parameters()) gradient_bytes += p.nbytes();
    const size_t cap = auto_bucket_cap_bytes(gradient_bytes);
    ASSERT_EQ(cap, gradient_bytes / kAutoBuckets);
    const auto bytes_of = [&](const std::vector<size_t>& bucket) {
      size_t bytes = 0;
      for (size_t i : bucket) bytes += net->parameters()[i].nbytes();
      return bytes;
    };
    DistributedDataParallel<torch::nn::Sequential> automatic(net, pg);
    const auto buckets = automatic.reducer().bucket_indices();
    EXPECT_EQ(buckets.size(), 17u);  // the last bias alone (first cap 1 MiB), then 16 pairs of layers
    for (size_t b = 1; b < buckets.size(); ++b) EXPECT_LE(bytes_of(buckets[b]), cap) << "bucket " << b;
    DistributedDataParallel<torch::nn::Sequential> fixed(net, pg, DdpOptions().bucket_cap_mb(25));
    const auto big = fixed.reducer().bucket_indices();
    EXPECT_EQ(big.size(), 3u);
    EXPECT_GT(bytes_of(big.back()), size_t{6} << 20);
  }));
}

TEST(Ddp, UnusedParametersWhenAskedMatchOneProcess) {
  const auto data = make_data(24);
  const auto want = reference_params(data, Opt::kSgd, 3, /*with_unused=*/true);
  auto store = new_store();
  expect_all_ok(run_ranks(2, [&](int rank) {
    auto pg = make_group(rank, 2, store);
    auto net = make_net(rank == 0 ? 7 : 5, 16, /*with_unused=*/true);
    DistributedDataParallel<Net> ddp(net, pg, DdpOptions().find_unused_parameters(true));
    auto optimizer = make_optimizer(*net, Opt::kSgd);
    for (int s = 0; s < 3; ++s) {
      optimizer->zero_grad();
      torch::mse_loss(ddp.forward(data.x.narrow(0, rank * 12, 12)), data.y.narrow(0, rank * 12, 12))
          .backward();
      optimizer->step();
    }
    std::vector<torch::Tensor> got;
    for (auto& p : net->parameters()) got.push_back(p.detach());
    expect_same(got, want, rank);
    pg.shutdown();
  }));
}

TEST(Ddp, UnusedParametersWithoutTheOptionNameTheParameters) {
  auto store = new_store();
  auto outcomes = run_ranks(2, [&](int rank) {
    auto pg = make_group(rank, 2, store);
    auto net = make_net(7, 16, /*with_unused=*/true);
    DistributedDataParallel<Net> ddp(net, pg);
    torch::mse_loss(ddp.forward(torch::randn({4, 20}, torch::kDouble)), torch::zeros({4, 4}, torch::kDouble))
        .backward();
  });
  for (const auto& o : outcomes) {
    ASSERT_FALSE(o.ok);
    EXPECT_NE(o.error.find("unused.weight, unused.bias"), std::string::npos) << o.error;
    EXPECT_NE(o.error.find("find_unused_parameters(true)"), std::string::npos) << o.error;
  }
}

TEST(Ddp, EmptyParameterIsHarmless) {
  const auto data = make_data(24);
  const auto want = reference_params(data, Opt::kAdam, 3, false, /*with_empty=*/true);
  auto store = new_store();
  expect_all_ok(run_ranks(3, [&](int rank) {
    auto pg = make_group(rank, 3, store);
    auto net = make_net(rank == 0 ? 7 : 8, 16, false, /*with_empty=*/true);
    DistributedDataParallel<Net> ddp(net, pg, DdpOptions().bucket_cap_mb(1e-9).first_bucket_cap_mb(1e-9));
    auto optimizer = make_optimizer(*net, Opt::kAdam);
    for (int s = 0; s < 3; ++s) {
      optimizer->zero_grad();
      torch::mse_loss(ddp.forward(data.x.narrow(0, rank * 8, 8)), data.y.narrow(0, rank * 8, 8)).backward();
      optimizer->step();
    }
    std::vector<torch::Tensor> got;
    for (auto& p : net->parameters()) got.push_back(p.detach());
    expect_same(got, want, rank);
    pg.shutdown();
  }));
}

TEST(Ddp, BuffersComeFromRankZeroAtConstructionAndBeforeEachForward) {
  auto store = new_store();
  expect_all_ok(run_ranks(3, [&](int rank) {
    auto pg = make_group(rank, 3, store);
    auto net = make_net(7);
    net->scale.fill_(static_cast<double>(rank + 1));
    DistributedDataParallel<Net> ddp(net, pg);
    if (!torch::equal(net->scale, torch::ones({4}, torch::kDouble)))
      throw std::runtime_error("not broadcast");
    net->scale.fill_(static_cast<double>(10 + rank));  // drift, e.g. a running statistic
    ddp.forward(torch::randn({2, 20}, torch::kDouble));
    if (!torch::equal(net->scale, torch::full({4}, 10.0, torch::kDouble)))
      throw std::runtime_error("not re-broadcast");
    pg.shutdown();
  }));
}

TEST(Ddp, DifferentModelsAreRejectedOnEveryRankNamingTheParameter) {
  auto store = new_store();
  auto outcomes = run_ranks(2, [&](int rank) {
    auto pg = make_group(rank, 2, store);
    auto net = make_net(7, rank == 0 ? 16 : 12);
    DistributedDataParallel<Net> ddp(net, pg);
  });
  for (const auto& o : outcomes) {
    ASSERT_FALSE(o.ok);
    EXPECT_NE(o.error.find("parameter #0 is 'fc1.weight' Double[16, 20] on rank 0 but 'fc1.weight' "
                           "Double[12, 20] on rank 1"),
              std::string::npos)
        << o.error;
  }
}

TEST(Ddp, JoinHandlesUnevenInputsAndMatchesTheReference) {
  // Rank r has 2 + 2r batches of 6 samples. Iteration i's gradient is the sum of the mean-loss gradients
  // of the ranks still training, divided by the world size (PyTorch's join semantics); the reference
  // replays that in one process. Nobody hangs, and every rank ends with the reference parameters.
  const int world = 3;
  const int64_t per_batch = 6;
  auto batches_of = [](int rank) { return 2 + 2 * rank; };
  const auto data = make_data(per_batch * (2 + 4 + 6));
  auto slice = [&](int rank, int i) {
    int64_t offset = 0;
    for (int r = 0; r < rank; ++r) offset += batches_of(r) * per_batch;
    offset += i * per_batch;
    return std::make_pair(data.x.narrow(0, offset, per_batch), data.y.narrow(0, offset, per_batch));
  };
  auto reference = make_net(7);
  torch::optim::SGD ref_opt(reference->parameters(), torch::optim::SGDOptions(0.1));
  for (int i = 0; i < batches_of(world - 1); ++i) {
    ref_opt.zero_grad();
    torch::Tensor loss = torch::zeros({}, torch::kDouble);
    for (int r = 0; r < world; ++r) {
      if (i < batches_of(r)) {
        auto [x, y] = slice(r, i);
        loss = loss + torch::mse_loss(reference->forward(x), y) / world;
      }
    }
    loss.backward();
    ref_opt.step();
  }
  std::vector<torch::Tensor> want;
  for (auto& p : reference->parameters()) want.push_back(p.detach().clone());

  auto store = new_store();
  expect_all_ok(run_ranks(world, [&](int rank) {
    auto pg = make_group(rank, world, store);
    auto net = make_net(rank == 0 ? 7 : 50 + rank);
    DistributedDataParallel<Net> ddp(net, pg);
    torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1));
    auto join = ddp.join();
    for (int i = 0; i < batches_of(rank); ++i) {
      auto [x, y] = slice(rank, i);
      opt.zero_grad();
      torch::mse_loss(ddp.forward(x), y).backward();
      opt.step();
    }
    join.finish();
    std::vector<torch::Tensor> got;
    for (auto& p : net->parameters()) got.push_back(p.detach());
    expect_same(got, want, rank);
    pg.shutdown();
  }));
}

TEST(Ddp, BadOptionsNameTheField) {
  EXPECT_THROW(DdpOptions().bucket_cap_mb(0).validate(), std::invalid_argument);
  try {
    DdpOptions().first_bucket_cap_mb(-1).validate();
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("first_bucket_cap_mb"), std::string::npos);
  }
}

}  // namespace
}  // namespace lockstep::ddp
