// The vocabulary split (VocabParallelEmbedding, vocab_parallel_cross_entropy) and the tensor-parallel GPT
// over ranks as threads, against one process: float64 outputs and gradients within 1e-12, and training
// steps of T = 1, 2, 4 and of 2 data × 2 tensor parallel ending on one process's parameters, also under
// lockstep's DDP and ZeRO-1 on the data-parallel dimension, and with dropout on against one process that
// draws the ranks' masks.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/embedding.h>
#include <torch/nn/functional/linear.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/functional/normalization.h>
#include <torch/nn/modules/embedding.h>
#include <torch/optim/adam.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "../comm/thread_group.h"
#include "lockstep/comm/device_mesh.h"
#include "lockstep/comm/process_group.h"
#include "lockstep/ddp/distributed_data_parallel.h"
#include "lockstep/models/gpt.h"
#include "lockstep/models/tensor_parallel_gpt.h"
#include "lockstep/models/vocab_parallel.h"
#include "lockstep/shard/zero_optimizer.h"
#include "parallel_testing.h"
#include "tp_sgd_step.h"

namespace lockstep::models {
namespace {

using lockstep::testing::lock_default_generator;
using lockstep::testing::max_abs_diff;
using lockstep::testing::mesh_shape_name;
using lockstep::testing::MeshShape;
using lockstep::testing::run_group_ranks;
using lockstep::testing::tp_sgd_step;

constexpr double kTpTolerance = 1e-12;
constexpr int64_t kVocab = 24;  // divisible by 1, 2, 3, 4 and 8

class VocabParallelWorld : public ::testing::TestWithParam<int> {};

TEST_P(VocabParallelWorld, EmbeddingEqualsTheFullOneInOutputAndEveryRowsGradient) {
  const int world = GetParam();
  torch::nn::Embedding full(kVocab, 5);
  full->to(at::kDouble);
  const at::Tensor ids = at::randint(kVocab, {3, 7}, at::kLong);
  const at::Tensor weights = at::randn({3, 7, 5}, at::kDouble);
  const at::Tensor expected = full(ids);
  (expected * weights).sum().backward();
  run_group_ranks(world, "vocab-embedding", [&](int rank, comm::ProcessGroup& group) {
    VocabParallelEmbedding wte(kVocab, 5, group);
    wte->to(at::kDouble);
    wte->load_full(full->weight.detach());
    const at::Tensor out = wte(ids);
    (out * weights).sum().backward();
    const int64_t rows = kVocab / world;
    EXPECT_EQ(wte->first_row(), rank * rows);
    EXPECT_LT(max_abs_diff(out, expected), kTpTolerance) << "rank " << rank;
    EXPECT_LT(max_abs_diff(wte->weight.grad(), full->weight.grad().narrow(0, rank * rows, rows)),
              kTpTolerance)
        << "rank " << rank;
  });
}

TEST_P(VocabParallelWorld, CrossEntropyEqualsTheFullOneInEveryLossAndTheLogitsGradient) {
  const int world = GetParam();
  // Large logits too: the shift by the row maxima keeps exp finite.
  const at::Tensor logits = (at::randn({6, kVocab}, at::kDouble) * 40.0).requires_grad_();
  const at::Tensor targets = at::tensor({0, 23, 5, 12, 17, 9}, at::kLong);
  const at::Tensor expected = torch::nn::functional::cross_entropy(
      logits, targets, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
  const at::Tensor row_weights = at::randn({6}, at::kDouble);
  (expected * row_weights).sum().backward();
  run_group_ranks(world, "vocab-ce", [&](int rank, comm::ProcessGroup& group) {
    const int64_t columns = kVocab / world;
    const at::Tensor mine = logits.detach().narrow(1, rank * columns, columns).clone().requires_grad_();
    const at::Tensor losses = vocab_parallel_cross_entropy(mine, targets, group);
    (losses * row_weights).sum().backward();
    EXPECT_LT(max_abs_diff(losses, expected), kTpTolerance) << "rank " << rank;
    EXPECT_LT(max_abs_diff(mine.grad(), logits.grad().narrow(1, rank * columns, columns)), kTpTolerance)
        << "rank " << rank;
  });
}

// Ties included: rows whose maximum sits in two slices, and a row of equal logits, pick the lowest id as
// argmax over the full logits does.
TEST_P(VocabParallelWorld, ArgmaxEqualsTheFullOnesTiesToTheLowestId) {
  const int world = GetParam();
  at::Tensor logits = at::randn({5, kVocab}, at::kDouble);
  logits[1].fill_(0.25);
  logits[2][kVocab - 1] = 9.0;
  logits[2][3] = 9.0;
  const at::Tensor expected = logits.argmax(-1);
  ASSERT_EQ(expected[1].item<int64_t>(), 0);
  ASSERT_EQ(expected[2].item<int64_t>(), 3);
  run_group_ranks(world, "vocab-argmax", [&](int rank, comm::ProcessGroup& group) {
    const int64_t columns = kVocab / world;
    const at::Tensor got = vocab_parallel_argmax(logits.narrow(1, rank * columns, columns), group);
    EXPECT_TRUE(got.equal(expected)) << "rank " << rank << ": " << got << " vs " << expected;
  });
}

INSTANTIATE_TEST_SUITE_P(Worlds, VocabParallelWorld, ::testing::Values(1, 2, 3, 4, 8));

// PyTorch's ignore_index (-100) or an id past the vocabulary: refused on every rank before any collective.
TEST(VocabParallel, ATargetOutsideTheVocabularyIsRefusedOnEveryRank) {
  run_group_ranks(2, "vocab-range", [&](int, comm::ProcessGroup& group) {
    const at::Tensor logits = at::randn({3, kVocab / 2}, at::kDouble);
    for (const int64_t bad : {int64_t{-100}, kVocab}) {
      try {
        vocab_parallel_cross_entropy(logits, at::tensor({int64_t{1}, bad, int64_t{2}}), group);
        ADD_FAILURE() << "target " << bad << " was accepted";
      } catch (const c10::Error& e) {
        EXPECT_NE(std::string(e.what()).find("a target (" + std::to_string(bad) +
                                             ") is outside the vocabulary [0, 24)"),
                  std::string::npos)
            << e.what();
      }
    }
  });
}

GptOptions tp_test_options() {
  return GptOptions::tiny().vocab_size(kVocab).context(8).heads(4).embedding(16).layers(2);
}

// A float64 Gpt made from `seed` (under the tests' generator lock).
Gpt seeded_gpt(uint64_t seed, const GptOptions& options = tp_test_options()) {
  auto lock = lock_default_generator(seed);
  Gpt model(options);
  model->to(at::kDouble);
  return model;
}

// `steps` global batches of `rows` token sequences of `length` + 1 ids, drawn from `seed` (under the lock).
std::vector<at::Tensor> seeded_batches(uint64_t seed, int steps, int64_t rows, int64_t length) {
  auto lock = lock_default_generator(seed);
  std::vector<at::Tensor> batches;
  for (int step = 0; step < steps; ++step)
    batches.push_back(at::randint(kVocab, {rows, length + 1}, at::kLong));
  return batches;
}

class TensorParallelGptShape : public ::testing::TestWithParam<MeshShape> {};

// Three SGD steps: every data-parallel rank takes its rows of the global batch, gradients are averaged
// over mesh.dp(); the losses (averaged over dp), every parameter slice and the parameters gathered whole
// (full_parameters) end where one process's do.
TEST_P(TensorParallelGptShape, TrainingStepsEqualOneProcessOnTheGlobalBatch) {
  const auto [world, tp] = GetParam();
  const int dp = world / tp;
  constexpr int kSteps = 3;
  constexpr double kLr = 0.5;
  constexpr int64_t kRows = 2;  // per data-parallel rank
  const int64_t length = tp_test_options().context();
  Gpt start = seeded_gpt(31);
  Gpt reference = seeded_gpt(31);
  const std::vector<at::Tensor> batches = seeded_batches(32, kSteps, kRows * dp, length);
  const auto sgd = [&](torch::nn::Module& model) {
    at::NoGradGuard no_grad;
    for (at::Tensor& p : model.parameters()) {
      p.sub_(p.grad() * kLr);
      p.mutable_grad().zero_();
    }
  };
  std::vector<double> reference_losses;
  for (const at::Tensor& batch : batches) {
    const at::Tensor logits = reference(batch.slice(1, 0, length));
    const at::Tensor loss =
        torch::nn::functional::cross_entropy(logits.reshape({-1, kVocab}), batch.slice(1, 1).reshape({-1}));
    loss.backward();
    reference_losses.push_back(loss.item<double>());
    sgd(*reference);
  }
  const auto reference_parameters = reference->named_parameters();

  run_group_ranks(world, "tp-gpt", [&](int rank, comm::ProcessGroup& group) {
    comm::DeviceMesh mesh(group, tp);
    TensorParallelGpt model(*start, mesh.tp());
    for (int step = 0; step < kSteps; ++step) {
      const at::Tensor rows = batches[static_cast<size_t>(step)].narrow(0, mesh.dp_rank() * kRows, kRows);
      EXPECT_NEAR(tp_sgd_step(model, mesh, rows, kLr), reference_losses[static_cast<size_t>(step)],
                  kTpTolerance)
          << "rank " << rank << " step " << step;
    }
    for (const auto& parameter : model->named_parameters()) {
      const at::Tensor expected = model->full_slice(parameter.key(), reference_parameters[parameter.key()]);
      EXPECT_LT(max_abs_diff(parameter.value(), expected), kTpTolerance)
          << parameter.key() << " on rank " << rank;
    }
    // Gathered whole again: one process's parameters, names and order.
    const auto whole = model->full_parameters();
    ASSERT_EQ(whole.size(), reference_parameters.size());
    for (size_t i = 0; i < whole.size(); ++i) {
      ASSERT_EQ(whole[i].first, reference_parameters.keys()[i]);
      EXPECT_LT(max_abs_diff(whole[i].second, reference_parameters[whole[i].first]), kTpTolerance)
          << whole[i].first << " gathered on rank " << rank;
    }
    mesh.shutdown();
  });
}

INSTANTIATE_TEST_SUITE_P(Shapes, TensorParallelGptShape,
                         ::testing::Values(MeshShape{1, 1}, MeshShape{2, 2}, MeshShape{4, 4}, MeshShape{4, 2},
                                           MeshShape{2, 1}),
                         mesh_shape_name);

// The data-parallel strategies on the mesh's data-parallel dimension: lockstep's DDP over mesh.dp() (its
// gradient all-reduce, averaged) with Adam, and with ZeRO-1 (ZeroOptimizer over mesh.dp(): each dp rank
// steps its chunk of every tensor-parallel slice). Three steps end on one process's Adam on the global batch.
class TensorParallelGptUnderDataParallel : public ::testing::TestWithParam<MeshShape> {};

TEST_P(TensorParallelGptUnderDataParallel, DdpAndZero1OnTheDataParallelGroupEqualOneProcessAdam) {
  const auto [world, tp] = GetParam();
  const int dp = world / tp;
  constexpr int kSteps = 3;
  constexpr int64_t kRows = 2;
  const int64_t length = tp_test_options().context();
  const auto adam_options = torch::optim::AdamOptions(1e-2);
  Gpt start = seeded_gpt(41);
  Gpt reference = seeded_gpt(41);
  const std::vector<at::Tensor> batches = seeded_batches(42, kSteps, kRows * dp, length);
  torch::optim::Adam reference_adam(reference->parameters(), adam_options);
  for (const at::Tensor& batch : batches) {
    reference_adam.zero_grad();
    torch::nn::functional::cross_entropy(reference(batch.slice(1, 0, length)).reshape({-1, kVocab}),
                                         batch.slice(1, 1).reshape({-1}))
        .backward();
    reference_adam.step();
  }
  const auto reference_parameters = reference->named_parameters();

  for (const bool zero1 : {false, true}) {
    SCOPED_TRACE(zero1 ? "zero1" : "ddp");
    run_group_ranks(world, zero1 ? "tp-zero1" : "tp-ddp", [&](int rank, comm::ProcessGroup& group) {
      comm::DeviceMesh mesh(group, tp);
      TensorParallelGpt model(*start, mesh.tp());
      ddp::DistributedDataParallel<TensorParallelGpt> wrapped(model, mesh.dp());
      auto adam = std::make_shared<torch::optim::Adam>(model->parameters(), adam_options);
      std::unique_ptr<shard::ZeroOptimizer> sharded;
      if (zero1) sharded = std::make_unique<shard::ZeroOptimizer>(adam, mesh.dp());
      torch::optim::Optimizer& optimizer = zero1 ? static_cast<torch::optim::Optimizer&>(*sharded) : *adam;
      for (int step = 0; step < kSteps; ++step) {
        const at::Tensor rows = batches[static_cast<size_t>(step)].narrow(0, mesh.dp_rank() * kRows, kRows);
        optimizer.zero_grad();
        wrapped.before_forward();
        model->loss(rows.slice(1, 0, length), rows.slice(1, 1)).backward();
        optimizer.step();
      }
      const auto whole = model->full_parameters();
      for (const auto& [name, value] : whole) {
        EXPECT_LT(max_abs_diff(value, reference_parameters[name]), kTpTolerance)
            << name << " on rank " << rank;
      }
      mesh.shutdown();
    });
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, TensorParallelGptUnderDataParallel,
                         ::testing::Values(MeshShape{2, 1}, MeshShape{2, 2}, MeshShape{4, 2}),
                         mesh_shape_name);

// One process's Gpt loss written out with explicit dropout masks: those the ranks of a tensor-parallel group
// draw (streams[t] as rank t does), the same for each of the `dp` data-parallel blocks of rows (every
// data-parallel rank draws the same). Written from Gpt's definition (gpt.h), in the order the ranks draw.
at::Tensor loss_with_the_ranks_masks(GptImpl& model, const at::Tensor& batch,
                                     std::vector<TensorParallelDropout>& streams, int dp) {
  namespace F = torch::nn::functional;
  const auto p = model.named_parameters();
  const int64_t length = batch.size(1) - 1, rows = batch.size(0) / dp, width = model.options().embedding();
  const int64_t heads = model.options().heads(), tp = static_cast<int64_t>(streams.size());
  const at::Tensor ids = batch.slice(1, 0, length);
  const auto tile = [&](const at::Tensor& mask) { return at::cat(std::vector<at::Tensor>(dp, mask), 0); };
  const auto replicated = [&](const at::Tensor& x) {
    return x * tile(streams[0].replicated_mask(x.narrow(0, 0, rows)));
  };
  const auto layer_norm = [&](const at::Tensor& x, const std::string& name) {
    return F::layer_norm(
        x, F::LayerNormFuncOptions({width}).weight(p[name + ".weight"]).bias(p[name + ".bias"]));
  };
  const auto linear = [&](const at::Tensor& x, const std::string& name) {
    return F::linear(x, p[name + ".weight"], p[name + ".bias"]);
  };
  at::Tensor x =
      replicated(F::embedding(ids, p["wte.weight"]) + F::embedding(at::arange(length), p["wpe.weight"]));
  for (int64_t layer = 0; layer < model.options().layers(); ++layer) {
    const std::string block = "blocks." + std::to_string(layer);
    const auto qkv = linear(layer_norm(x, block + ".ln_1"), block + ".attn.c_attn").split(width, 2);
    const auto by_head = [&](const at::Tensor& t) {
      return t.reshape({batch.size(0), length, heads, width / heads}).transpose(1, 2);
    };
    at::Tensor scores =
        at::matmul(by_head(qkv[0]), by_head(qkv[1]).transpose(-2, -1)) / std::sqrt(width / heads);
    scores = scores.masked_fill(at::ones({length, length}, at::kBool).triu(1), -INFINITY);
    at::Tensor weights = at::softmax(scores, -1);
    std::vector<at::Tensor> head_masks;  // rank t's heads: [t·H/T, (t+1)·H/T)
    for (int64_t t = 0; t < tp; ++t)
      head_masks.push_back(streams[static_cast<size_t>(t)].split_mask(
          weights.narrow(0, 0, rows).narrow(1, t * heads / tp, heads / tp)));
    weights = weights * tile(at::cat(head_masks, 1));
    const at::Tensor y =
        at::matmul(weights, by_head(qkv[2])).transpose(1, 2).reshape({batch.size(0), length, width});
    x = x + replicated(linear(y, block + ".attn.c_proj"));
    const at::Tensor hidden = F::gelu(linear(layer_norm(x, block + ".ln_2"), block + ".mlp.c_fc"),
                                      F::GELUFuncOptions().approximate("tanh"));
    x = x + replicated(linear(hidden, block + ".mlp.c_proj"));
  }
  const at::Tensor logits = F::linear(layer_norm(x, "ln_f"), p["wte.weight"]);
  return F::cross_entropy(logits.reshape({-1, logits.size(-1)}), batch.slice(1, 1).reshape({-1}));
}

// Dropout 0.2 on: the replicated activations dropped alike on a group's ranks, each rank's heads with masks
// of their own. Three SGD steps end where one process drawing the same masks ends (1e-12).
class TensorParallelGptDropout : public ::testing::TestWithParam<MeshShape> {};

TEST_P(TensorParallelGptDropout, TrainingStepsEqualOneProcessDrawingTheRanksMasks) {
  const auto [world, tp] = GetParam();
  const int dp = world / tp;
  constexpr int kSteps = 3;
  constexpr double kLr = 0.5;
  constexpr uint64_t kDropoutSeed = 77;
  constexpr int64_t kRows = 2;
  const GptOptions options = tp_test_options().dropout(0.2);
  const int64_t length = options.context();
  Gpt start = seeded_gpt(51, options);
  Gpt reference = seeded_gpt(51, options);
  const std::vector<at::Tensor> batches = seeded_batches(52, kSteps, kRows * dp, length);
  std::vector<TensorParallelDropout> streams;
  for (int t = 0; t < tp; ++t) streams.emplace_back(options.dropout(), kDropoutSeed, t);
  std::vector<double> reference_losses;
  for (const at::Tensor& batch : batches) {
    const at::Tensor loss = loss_with_the_ranks_masks(*reference, batch, streams, dp);
    loss.backward();
    reference_losses.push_back(loss.item<double>());
    at::NoGradGuard no_grad;
    for (at::Tensor& p : reference->parameters()) {
      p.sub_(p.grad() * kLr);
      p.mutable_grad().zero_();
    }
  }
  const auto reference_parameters = reference->named_parameters();

  run_group_ranks(world, "tp-dropout", [&](int rank, comm::ProcessGroup& group) {
    comm::DeviceMesh mesh(group, tp);
    TensorParallelGpt model(*start, mesh.tp(), kDropoutSeed);
    for (int step = 0; step < kSteps; ++step) {
      const at::Tensor rows = batches[static_cast<size_t>(step)].narrow(0, mesh.dp_rank() * kRows, kRows);
      EXPECT_NEAR(tp_sgd_step(model, mesh, rows, kLr), reference_losses[static_cast<size_t>(step)],
                  kTpTolerance)
          << "rank " << rank << " step " << step;
    }
    for (const auto& [name, value] : model->full_parameters()) {
      EXPECT_LT(max_abs_diff(value, reference_parameters[name]), kTpTolerance) << name << " on rank " << rank;
    }
    mesh.shutdown();
  });
}

INSTANTIATE_TEST_SUITE_P(Shapes, TensorParallelGptDropout,
                         ::testing::Values(MeshShape{1, 1}, MeshShape{2, 2}, MeshShape{4, 4},
                                           MeshShape{4, 2}),
                         mesh_shape_name);

// In eval() no mask is drawn: the output is the same as with dropout 0.
TEST(TensorParallelGpt, EvalDrawsNoDropout) {
  Gpt with = seeded_gpt(61, tp_test_options().dropout(0.3));
  Gpt without = seeded_gpt(61, tp_test_options());
  const at::Tensor tokens = at::randint(kVocab, {2, 8}, at::kLong);
  run_group_ranks(2, "tp-eval", [&](int, comm::ProcessGroup& group) {
    TensorParallelGpt a(*with, group, 5);
    TensorParallelGpt b(*without, group);
    a->eval();
    EXPECT_LT(max_abs_diff(a->forward(tokens), b->forward(tokens)), kTpTolerance);
    a->train();
    EXPECT_GT(max_abs_diff(a->forward(tokens), b->forward(tokens)), 1e-3);
  });
}

// Each rank holds 1/T of every block's matrices and of its column-parallel biases; the LayerNorms and the
// row-parallel biases (6·C per block) are replicated.
TEST(TensorParallelGpt, EachRankHoldsItsShareOfTheBlocks) {
  Gpt start = seeded_gpt(33);
  const int64_t c = tp_test_options().embedding();
  const auto block_numel = [](torch::nn::Module& model) {
    int64_t n = 0;
    for (const auto& p : model.named_parameters()) {
      if (p.key().rfind("blocks.", 0) == 0) n += p.value().numel();
    }
    return n;
  };
  EXPECT_EQ(block_numel(*start), 2 * (12 * c * c + 13 * c));
  for (int tp : {2, 4}) {
    run_group_ranks(tp, "tp-share", [&](int, comm::ProcessGroup& group) {
      TensorParallelGpt model(*start, group);
      EXPECT_EQ(block_numel(*model), 2 * ((12 * c * c + 7 * c) / tp + 6 * c)) << "T=" << tp;
    });
  }
}

TEST(TensorParallelGpt, SplitsItCannotMakeAreRefusedNamingTheSizes) {
  const auto refused = [](GptOptions options, int tp, const std::string& expected) {
    Gpt full(options);
    run_group_ranks(tp, "tp-refused", [&](int, comm::ProcessGroup& group) {
      try {
        TensorParallelGpt model(*full, group);
        ADD_FAILURE() << "made a tensor-parallel Gpt that should be refused: " << expected;
      } catch (const c10::Error& e) {
        EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
      }
    });
  };
  refused(tp_test_options().heads(2), 4,
          "GptOptions::heads 2 is not divisible by the tensor-parallel group's size 4");
  refused(tp_test_options().vocab_size(250), 4,
          "vocab_size 250 is not divisible by the tensor-parallel group's size 4");
}

}  // namespace
}  // namespace lockstep::models
