// Unused parameters as PyTorch's reducer treats them (reducer.h): N ranks, each on B/N samples of the
// global batch, end with the parameters *and gradients* of one process on all B samples, when a branch
// of the model is unused on the first steps, on some steps, or on some ranks only, and one layer is never
// used. SGD with momentum and weight decay and Adam with weight decay would both move a parameter that
// got a zero gradient where one process had none; gradients are reset to zero or to none (both
// LibTorch defaults: 1.13's zero_grad() zeros, 2.x's sets none). Every mode: plain, bucket views, one
// bucket per parameter, no_sync accumulation, a custom comm hook, and join with uneven inputs.
// Worlds 1 to 4; float64, so the comparison is tight.
#include <gtest/gtest.h>

#include <torch/nn.h>
#include <torch/optim.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <atomic>
#include <chrono>
#include <string>

#include "../comm/thread_group.h"
#include "lockstep/ddp/distributed_data_parallel.h"

namespace lockstep::ddp::unused_test {
namespace {

using lockstep::testing::expect_all_ok;
using lockstep::testing::run_ranks;
using namespace std::chrono_literals;
using ddp::AllReduceHook;
using ddp::CommHook;
using ddp::DdpOptions;
using ddp::DistributedDataParallel;

constexpr double kRtol = 1e-9;
constexpr double kAtol = 1e-12;
constexpr int64_t kGlobalBatch = 24;  // divisible by every world size tested
constexpr int kSteps = 5;

// A trunk and head used by every sample, a branch only for the flagged samples (skipped entirely when
// none is flagged: then its parameters are not in the graph), and a layer no forward uses.
struct BranchNetImpl : torch::nn::Module {
  BranchNetImpl() {
    trunk = register_module("trunk", torch::nn::Linear(10, 12));
    head = register_module("head", torch::nn::Linear(12, 3));
    branch = register_module("branch", torch::nn::Linear(12, 3));
    never = register_module("never", torch::nn::Linear(12, 3));
  }
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& flags) {
    auto h = torch::tanh(trunk->forward(x));
    auto out = head->forward(h);
    const auto flagged = flags.nonzero().reshape({-1});
    if (flagged.numel() > 0) out = out.index_add(0, flagged, branch->forward(h.index_select(0, flagged)));
    return out;
  }
  torch::nn::Linear trunk{nullptr}, head{nullptr}, branch{nullptr}, never{nullptr};
};
TORCH_MODULE(BranchNet);

BranchNet make_net(uint64_t seed) {
  const auto generator = lockstep::testing::lock_default_generator(seed);
  BranchNet net;
  net->to(torch::kDouble);
  return net;
}

// Which samples go through the branch, by step and global sample index.
enum class Scenario { kFirstSteps, kSomeSteps, kSomeRanks };

const char* name_of(Scenario s) {
  switch (s) {
    case Scenario::kFirstSteps:
      return "unused on the first steps";
    case Scenario::kSomeSteps:
      return "unused on some steps";
    case Scenario::kSomeRanks:
      return "used on some ranks only";
  }
  return "?";
}

bool flagged(Scenario s, int step, int64_t sample) {
  switch (s) {
    case Scenario::kFirstSteps:
      return step >= 2 && sample % 3 == 0;
    case Scenario::kSomeSteps:
      return step % 2 == 1 && sample % 2 == 0;
    case Scenario::kSomeRanks:
      return step != 1 && sample < kGlobalBatch / 4;  // rank 0's samples (world > 1)
  }
  return false;
}

struct Batch {
  torch::Tensor x, y, flags;
};

// Samples [begin, begin + count) of step `step`.
Batch batch(Scenario s, int step, int64_t begin, int64_t count) {
  const auto options = torch::TensorOptions().dtype(torch::kDouble);
  auto index = torch::arange(begin, begin + count, options).unsqueeze(1);
  auto x = torch::sin(index * torch::arange(1, 11, options) * 0.37 + step);
  auto y = torch::cos(index * torch::arange(1, 4, options) * 0.11 - step);
  auto flags = torch::zeros({count}, torch::kBool);
  for (int64_t i = 0; i < count; ++i) flags[i] = flagged(s, step, begin + i);
  return {x, y, flags};
}

enum class Opt { kSgd, kAdam };
enum class Reset { kZero, kNone };

std::unique_ptr<torch::optim::Optimizer> make_optimizer(BranchNet& net, Opt opt) {
  if (opt == Opt::kSgd) {
    return std::make_unique<torch::optim::SGD>(
        net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(0.01));
  }
  return std::make_unique<torch::optim::Adam>(net->parameters(),
                                              torch::optim::AdamOptions(0.01).weight_decay(0.01));
}

// zero_grad either way, whatever the LibTorch version's default.
void reset_grads(BranchNet& net, Reset reset) {
  for (auto& p : net->parameters()) {
    auto& grad = p.mutable_grad();
    if (!grad.defined()) continue;
    if (reset == Reset::kNone) {
      grad = torch::Tensor();
    } else {
      grad.detach_();
      grad.zero_();
    }
  }
}

struct Snapshot {
  std::vector<torch::Tensor> params, grads;  // grads[i] undefined where the parameter has none
};

Snapshot snapshot(BranchNet& net) {
  Snapshot out;
  for (auto& p : net->parameters()) {
    out.params.push_back(p.detach().clone());
    out.grads.push_back(p.grad().defined() ? p.grad().detach().clone() : torch::Tensor());
  }
  return out;
}

void expect_same(const Snapshot& got, const Snapshot& want, const std::string& what) {
  if (got.params.size() != want.params.size()) throw std::runtime_error(what + ": parameter count differs");
  for (size_t i = 0; i < got.params.size(); ++i) {
    const std::string where = what + ": parameter " + std::to_string(i);
    if (!torch::allclose(got.params[i], want.params[i], kRtol, kAtol)) {
      throw std::runtime_error(where + " differs from one process by " +
                               std::to_string((got.params[i] - want.params[i]).abs().max().item<double>()));
    }
    if (got.grads[i].defined() != want.grads[i].defined()) {
      throw std::runtime_error(where + ": .grad is " + (got.grads[i].defined() ? "defined" : "undefined") +
                               " but " + (want.grads[i].defined() ? "defined" : "undefined") +
                               " in one process");
    }
    if (got.grads[i].defined() && !torch::allclose(got.grads[i], want.grads[i], kRtol, kAtol)) {
      throw std::runtime_error(where + ": .grad differs from one process");
    }
  }
}

struct Case {
  Scenario scenario;
  Opt opt;
  Reset reset;
  std::string describe() const {
    return std::string(name_of(scenario)) + (opt == Opt::kSgd ? ", SGD" : ", Adam") +
           (reset == Reset::kZero ? ", grads zeroed" : ", grads set to none");
  }
};

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (auto s : {Scenario::kFirstSteps, Scenario::kSomeSteps, Scenario::kSomeRanks}) {
    for (auto o : {Opt::kSgd, Opt::kAdam}) {
      for (auto r : {Reset::kZero, Reset::kNone}) cases.push_back({s, o, r});
    }
  }
  return cases;
}

Snapshot one_process(const Case& c) {
  auto net = make_net(7);
  auto optimizer = make_optimizer(net, c.opt);
  for (int step = 0; step < kSteps; ++step) {
    reset_grads(net, c.reset);
    auto b = batch(c.scenario, step, 0, kGlobalBatch);
    torch::mse_loss(net->forward(b.x, b.flags), b.y).backward();
    optimizer->step();
  }
  return snapshot(net);
}

// Counts its buckets, so the test sees a user's hook carried the gradients.
class CountingHook : public CommHook {
 public:
  comm::Work run(comm::ProcessGroup& group, at::Tensor& bucket) override {
    ++calls;
    return inner_.run(group, bucket);
  }
  const char* name() const override { return "counting"; }
  std::atomic<int> calls{0};

 private:
  AllReduceHook inner_;
};

struct Mode {
  std::string name;
  DdpOptions options;
  int micro_batches = 1;  // > 1: the first ones under no_sync
};

std::vector<Mode> all_modes() {
  const auto base = DdpOptions().find_unused_parameters(true);
  return {
      {"plain", base},
      {"bucket views", DdpOptions(base).gradient_as_bucket_view(true)},
      {"one bucket per parameter", DdpOptions(base).bucket_cap_mb(1e-9).first_bucket_cap_mb(1e-9)},
      {"bucket views, one bucket per parameter",
       DdpOptions(base).gradient_as_bucket_view(true).bucket_cap_mb(1e-9).first_bucket_cap_mb(1e-9)},
      {"no_sync over 2 micro-batches", base, 2},
      {"no_sync over 2 micro-batches, bucket views", DdpOptions(base).gradient_as_bucket_view(true), 2},
      {"comm hook", base},
  };
}

comm::ProcessGroup make_group(int rank, int world, const c10::intrusive_ptr<c10d::Store>& store) {
  return comm::init_process_group(lockstep::testing::thread_group_options(rank, world, store, "unused-test")
                                      .rendezvous_timeout(30s)
                                      .collective_timeout(30s));
}

// One rank of `mode`: its slice of every step, in `micro_batches` pieces, the first ones under no_sync.
Snapshot train_rank(const Case& c, const Mode& mode, comm::ProcessGroup& pg, int rank, int world) {
  auto net = make_net(rank == 0 ? 7 : 40 + rank);  // DDP broadcasts rank 0's weights
  DdpOptions options = mode.options;
  std::shared_ptr<CountingHook> hook;
  if (mode.name == "comm hook") {
    hook = std::make_shared<CountingHook>();
    options.comm_hook(hook);
  }
  DistributedDataParallel<BranchNet> ddp(net, pg, options);
  auto optimizer = make_optimizer(net, c.opt);
  const int64_t per_rank = kGlobalBatch / world;
  const int64_t per_micro = per_rank / mode.micro_batches;
  for (int step = 0; step < kSteps; ++step) {
    reset_grads(net, c.reset);
    for (int m = 0; m < mode.micro_batches; ++m) {
      auto b = batch(c.scenario, step, rank * per_rank + m * per_micro, per_micro);
      auto loss = torch::mse_loss(ddp.forward(b.x, b.flags), b.y) / static_cast<double>(mode.micro_batches);
      if (m + 1 < mode.micro_batches) {
        auto guard = ddp.no_sync();
        loss.backward();
      } else {
        loss.backward();
      }
    }
    optimizer->step();
  }
  if (ddp.reducer().iterations() != kSteps) throw std::runtime_error("reducer counted the wrong iterations");
  if (hook && hook->calls == 0) throw std::runtime_error("the comm hook was never called");
  return snapshot(net);
}

class UnusedParameters : public ::testing::TestWithParam<int> {};

TEST_P(UnusedParameters, EveryModeMatchesOneProcess) {
  const int world = GetParam();
  const auto cases = all_cases();
  const auto modes = all_modes();
  std::vector<Snapshot> want;
  for (const auto& c : cases) want.push_back(one_process(c));
  auto store = c10::make_intrusive<c10d::HashStore>();
  expect_all_ok(run_ranks(world, [&](int rank) {
    auto pg = make_group(rank, world, store);
    for (const auto& mode : modes) {
      for (size_t k = 0; k < cases.size(); ++k) {
        const auto got = train_rank(cases[k], mode, pg, rank, world);
        expect_same(got, want[k],
                    "rank " + std::to_string(rank) + ", " + mode.name + ", " + cases[k].describe());
      }
    }
    pg.shutdown();
  }));
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, UnusedParameters, ::testing::Values(1, 2, 3, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "world" + std::to_string(info.param);
                         });

// The one-process side fails loudly if the scenarios stop exercising what they claim: the branch gets
// no gradient in some step and one in another, and `never` none at all.
TEST(UnusedParameters, ScenariosLeaveTheBranchUnusedSometimes) {
  for (auto s : {Scenario::kFirstSteps, Scenario::kSomeSteps, Scenario::kSomeRanks}) {
    int used_steps = 0;
    for (int step = 0; step < kSteps; ++step)
      used_steps += batch(s, step, 0, kGlobalBatch).flags.any().item<bool>();
    EXPECT_GT(used_steps, 0) << name_of(s);
    EXPECT_LT(used_steps, kSteps) << name_of(s);
  }
  const auto final_state = one_process({Scenario::kSomeSteps, Opt::kAdam, Reset::kZero});
  EXPECT_FALSE(final_state.grads[6].defined());  // never.weight
  EXPECT_TRUE(final_state.grads[4].defined());   // branch.weight
}

// Join with uneven inputs: rank r has 1 + r batches; the branch is used only by the samples of the rank
// that trains longest, on its odd iterations. The reference replays PyTorch's join semantics in one
// process (the gradients of the ranks still training, divided by the world size).
TEST(UnusedParameters, JoinWithUnevenInputsMatchesTheReplay) {
  const int world = 3;
  const int64_t per_batch = 4;
  const auto batches_of = [](int rank) { return 1 + rank; };
  const auto slice = [&](int rank, int i) {
    auto b = batch(Scenario::kFirstSteps, i, (rank * 10 + i) * per_batch, per_batch);
    b.flags.fill_(rank == world - 1 && i % 2 == 1);
    return b;
  };
  for (auto opt : {Opt::kSgd, Opt::kAdam}) {
    auto reference = make_net(7);
    auto ref_opt = make_optimizer(reference, opt);
    for (int i = 0; i < batches_of(world - 1); ++i) {
      reset_grads(reference, Reset::kNone);
      auto loss = torch::zeros({}, torch::kDouble);
      for (int r = 0; r < world; ++r) {
        if (i >= batches_of(r)) continue;
        auto b = slice(r, i);
        loss = loss + torch::mse_loss(reference->forward(b.x, b.flags), b.y) / world;
      }
      loss.backward();
      ref_opt->step();
    }
    const auto want = snapshot(reference);
    auto store = c10::make_intrusive<c10d::HashStore>();
    expect_all_ok(run_ranks(world, [&](int rank) {
      auto pg = make_group(rank, world, store);
      auto net = make_net(rank == 0 ? 7 : 60 + rank);
      DistributedDataParallel<BranchNet> ddp(net, pg, DdpOptions().find_unused_parameters(true));
      auto optimizer = make_optimizer(net, opt);
      auto join = ddp.join();
      for (int i = 0; i < batches_of(rank); ++i) {
        reset_grads(net, Reset::kNone);
        auto b = slice(rank, i);
        torch::mse_loss(ddp.forward(b.x, b.flags), b.y).backward();
        optimizer->step();
      }
      join.finish();
      auto got = snapshot(net);
      got.grads = want.grads;  // a joined rank's gradients are its own last ones; parameters must agree
      expect_same(got, want, "rank " + std::to_string(rank) + (opt == Opt::kSgd ? ", SGD" : ", Adam"));
      pg.shutdown();
    }));
  }
}

}  // namespace
}  // namespace lockstep::ddp::unused_test
