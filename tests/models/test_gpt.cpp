// models::Gpt: shapes and errors, causality, the tied head, parameter counts (against the formula and
// GPT-2 small's known figure), exactness against a forward written here with plain tensor ops, that it
// learns a fixed batch, dropout in train() and eval(), and its stages (each reads only its own parameters).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "lockstep/models/gpt.h"
#include "lockstep/models/models.h"

// In a namespace of its own: test_models compiles its files as one unity batch, and test_models.cpp has
// helpers of the same names in its anonymous namespace.
namespace lockstep::models::gpt_test {

namespace lm = lockstep::models;

namespace {

std::vector<std::string> parameter_names(const torch::nn::Module& module) {
  std::vector<std::string> names;
  for (const auto& item : module.named_parameters()) names.push_back(item.key());
  return names;
}

// V·C + P·C + L·(12·C² + 13·C) + 2·C, written out: the embeddings; per block ln_1 and ln_2 (2·C each),
// c_attn (C·3C + 3C), attn.c_proj (C·C + C), mlp.c_fc (C·4C + 4C), mlp.c_proj (4C·C + C); ln_f (2·C). No
// head: it is wte.
int64_t formula_count(const lm::GptOptions& o) {
  const int64_t c = o.embedding();
  const int64_t block =
      2 * c + (c * 3 * c + 3 * c) + (c * c + c) + 2 * c + (c * 4 * c + 4 * c) + (4 * c * c + c);
  return o.vocab_size() * c + o.context() * c + o.layers() * block + 2 * c;
}

at::Tensor layer_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  const at::Tensor centred = x - x.mean(-1, /*keepdim=*/true);
  const at::Tensor variance = centred.pow(2).mean(-1, /*keepdim=*/true);  // biased, as LayerNorm
  return centred / (variance + 1e-5).sqrt() * weight + bias;
}

at::Tensor gelu_tanh(const at::Tensor& x) {
  return 0.5 * x * (1.0 + torch::tanh(std::sqrt(2.0 / std::acos(-1.0)) * (x + 0.044715 * x.pow(3))));
}

at::Tensor affine(const at::Tensor& x, std::map<std::string, at::Tensor>& p, const std::string& name) {
  return x.matmul(p[name + ".weight"].t()) + p[name + ".bias"];
}

// GPT-2's forward from the parameters `p` (named as Gpt's), with plain tensor ops: one head at a time,
// the causal softmax as exp·mask / sum. The token embedding is `embed`, the head's weight `head` (both
// wte for the tied model; two copies to see each use's gradient).
at::Tensor reference_logits(std::map<std::string, at::Tensor> p, const lm::GptOptions& o,
                            const at::Tensor& tokens, const at::Tensor& embed, const at::Tensor& head) {
  const int64_t batch = tokens.size(0), length = tokens.size(1), c = o.embedding();
  const int64_t d = c / o.heads();
  at::Tensor x = embed.index_select(0, tokens.reshape({-1})).reshape({batch, length, c}) +
                 p["wpe.weight"].slice(0, 0, length);
  const at::Tensor allowed = torch::ones({length, length}, x.options()).tril();  // j <= i
  for (int64_t l = 0; l < o.layers(); ++l) {
    const std::string block = "blocks." + std::to_string(l) + ".";
    const at::Tensor qkv =
        affine(layer_norm(x, p[block + "ln_1.weight"], p[block + "ln_1.bias"]), p, block + "attn.c_attn");
    std::vector<at::Tensor> heads;
    for (int64_t h = 0; h < o.heads(); ++h) {
      const at::Tensor q = qkv.slice(2, h * d, (h + 1) * d);
      const at::Tensor k = qkv.slice(2, c + h * d, c + (h + 1) * d);
      const at::Tensor v = qkv.slice(2, 2 * c + h * d, 2 * c + (h + 1) * d);
      const at::Tensor scores = q.matmul(k.transpose(1, 2)) / std::sqrt(static_cast<double>(d));
      const at::Tensor e = (scores - std::get<0>(scores.max(-1, /*keepdim=*/true))).exp() * allowed;
      heads.push_back((e / e.sum(-1, /*keepdim=*/true)).matmul(v));
    }
    x = x + affine(torch::cat(heads, /*dim=*/2), p, block + "attn.c_proj");
    const at::Tensor h = layer_norm(x, p[block + "ln_2.weight"], p[block + "ln_2.bias"]);
    x = x + affine(gelu_tanh(affine(h, p, block + "mlp.c_fc")), p, block + "mlp.c_proj");
  }
  return layer_norm(x, p["ln_f.weight"], p["ln_f.bias"]).matmul(head.t());
}

std::map<std::string, at::Tensor> parameter_map(const torch::nn::Module& module) {
  std::map<std::string, at::Tensor> out;
  for (const auto& item : module.named_parameters()) out[item.key()] = item.value();
  return out;
}

std::string error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const c10::Error& e) {
    return e.what();
  }
  return "(no error)";
}

at::Tensor next_token_loss(const at::Tensor& logits, const at::Tensor& targets) {
  return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
}

// Records the stage indices forward runs.
class RecordingRunner : public lm::StageRunner {
 public:
  at::Tensor run_stage(size_t index, const std::function<at::Tensor(at::Tensor)>& stage,
                       at::Tensor x) override {
    indices.push_back(index);
    return stage(std::move(x));
  }
  std::vector<size_t> indices;
};

// FSDP's contract without the ranks: while stage i runs, only stage i's parameters hold their values; every
// other stage's are NaN (FSDP would have released them), so a stage that reads another's parameters turns
// the logits NaN.
class PoisoningRunner : public lm::StageRunner {
 public:
  explicit PoisoningRunner(std::vector<std::shared_ptr<torch::nn::Module>> stages)
      : stages_(std::move(stages)) {
    for (const auto& stage : stages_) {
      std::vector<at::Tensor> copies;
      for (const auto& param : stage->parameters()) copies.push_back(param.detach().clone());
      values_.push_back(std::move(copies));
    }
  }
  at::Tensor run_stage(size_t index, const std::function<at::Tensor(at::Tensor)>& stage,
                       at::Tensor x) override {
    for (size_t s = 0; s < stages_.size(); ++s) {
      const auto params = stages_[s]->parameters();
      for (size_t k = 0; k < params.size(); ++k) {
        if (s == index) {
          params[k].detach().copy_(values_[s][k]);
        } else {
          params[k].detach().fill_(std::numeric_limits<double>::quiet_NaN());
        }
      }
    }
    return stage(std::move(x));
  }
  void restore_all() {
    for (size_t s = 0; s < stages_.size(); ++s) {
      const auto params = stages_[s]->parameters();
      for (size_t k = 0; k < params.size(); ++k) params[k].detach().copy_(values_[s][k]);
    }
  }

 private:
  std::vector<std::shared_ptr<torch::nn::Module>> stages_;
  std::vector<std::vector<at::Tensor>> values_;
};

}  // namespace

TEST(Gpt, OptionsDefaultToTinyAndNameGpt2Small) {
  const lm::GptOptions tiny = lm::GptOptions::tiny();
  EXPECT_EQ(tiny.vocab_size(), 256);
  EXPECT_EQ(tiny.context(), 64);
  EXPECT_EQ(tiny.layers(), 2);
  EXPECT_EQ(tiny.heads(), 2);
  EXPECT_EQ(tiny.embedding(), 64);
  EXPECT_DOUBLE_EQ(tiny.dropout(), 0.0);
  EXPECT_EQ(lm::GptOptions().context(), tiny.context());
  const lm::GptOptions small = lm::GptOptions::gpt2_small();
  EXPECT_EQ(small.vocab_size(), 50257);
  EXPECT_EQ(small.context(), 1024);
  EXPECT_EQ(small.layers(), 12);
  EXPECT_EQ(small.heads(), 12);
  EXPECT_EQ(small.embedding(), 768);
  EXPECT_DOUBLE_EQ(small.dropout(), 0.1);
}

TEST(Gpt, LogitsAreBatchByTimeByVocabulary) {
  torch::manual_seed(0);
  lm::Gpt model(lm::GptOptions().vocab_size(50).context(16).heads(4).embedding(32));
  torch::NoGradGuard no_grad;
  for (const int64_t length : {1, 7, 16}) {
    const at::Tensor logits = model->forward(torch::randint(50, {3, length}));
    EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{3, length, 50}));
    EXPECT_TRUE(torch::isfinite(logits).all().item<bool>());
  }
  EXPECT_EQ(model->forward(torch::randint(50, {2, 5}, torch::kInt)).sizes(),
            (std::vector<int64_t>{2, 5, 50}));
}

TEST(Gpt, RejectsBadOptionsAndInputsNamingTheValue) {
  lm::Gpt model;
  const std::string too_long = error_of([&] { model->forward(torch::zeros({2, 65}, torch::kLong)); });
  EXPECT_NE(too_long.find("T = 65"), std::string::npos) << too_long;
  EXPECT_NE(too_long.find("GptOptions::context = 64"), std::string::npos) << too_long;
  const std::string floats = error_of([&] { model->forward(torch::zeros({2, 8})); });
  EXPECT_NE(floats.find("must be int64"), std::string::npos) << floats;
  EXPECT_NE(floats.find("Float"), std::string::npos) << floats;
  const std::string flat = error_of([&] { model->forward(torch::zeros({8}, torch::kLong)); });
  EXPECT_NE(flat.find("got a 1-d tensor"), std::string::npos) << flat;
  const std::string heads = error_of([] { lm::Gpt(lm::GptOptions().heads(3)); });
  EXPECT_NE(heads.find("GptOptions::embedding (64) must be divisible by GptOptions::heads (3)"),
            std::string::npos)
      << heads;
  const std::string dropout = error_of([] { lm::Gpt(lm::GptOptions().dropout(1.0)); });
  EXPECT_NE(dropout.find("GptOptions::dropout must be in [0, 1), got 1"), std::string::npos) << dropout;
  const std::string vocabulary = error_of([] { lm::Gpt(lm::GptOptions().vocab_size(0)); });
  EXPECT_NE(vocabulary.find("GptOptions::vocab_size must be > 0, got 0"), std::string::npos) << vocabulary;
}

TEST(Gpt, ALaterTokenChangesNoEarlierLogit) {
  torch::manual_seed(1);
  lm::Gpt model;
  torch::NoGradGuard no_grad;
  const at::Tensor tokens = torch::randint(256, {2, 24});
  const at::Tensor before = model->forward(tokens);
  for (const int64_t t : {0, 9, 23}) {
    at::Tensor changed = tokens.clone();
    changed.select(1, t).add_(1).remainder_(256);
    const at::Tensor after = model->forward(changed);
    EXPECT_TRUE(torch::equal(before.slice(1, 0, t), after.slice(1, 0, t))) << "position < " << t;
    EXPECT_FALSE(torch::equal(before.select(1, t), after.select(1, t))) << "position " << t;
  }
}

TEST(Gpt, TheHeadIsTheTokenEmbeddingAndGetsBothGradients) {
  torch::manual_seed(2);
  lm::Gpt model;
  std::vector<std::string> expected{"wte.weight", "wpe.weight"};
  for (const std::string block : {"blocks.0.", "blocks.1."}) {
    for (const std::string name : {"ln_1", "attn.c_attn", "attn.c_proj", "ln_2", "mlp.c_fc", "mlp.c_proj"}) {
      expected.push_back(block + name + ".weight");
      expected.push_back(block + name + ".bias");
    }
  }
  expected.insert(expected.end(), {"ln_f.weight", "ln_f.bias"});
  EXPECT_EQ(parameter_names(*model), expected);  // no head weight of its own

  // The model's wte gradient is the sum of the embedding's and the head's, each seen through its own copy
  // of wte in the reference forward.
  model->to(torch::kFloat64);
  const at::Tensor tokens = torch::randint(256, {2, 16});
  const at::Tensor targets = torch::randint(256, {2, 16});
  next_token_loss(model->forward(tokens), targets).backward();
  auto p = parameter_map(*model);
  const at::Tensor embed = p["wte.weight"].detach().clone().requires_grad_(true);
  const at::Tensor head = p["wte.weight"].detach().clone().requires_grad_(true);
  next_token_loss(reference_logits(p, model->options(), tokens, embed, head), targets).backward();
  EXPECT_GT(embed.grad().abs().max().item<double>(), 1e-6);
  EXPECT_GT(head.grad().abs().max().item<double>(), 1e-6);
  const double diff = (p["wte.weight"].grad() - (embed.grad() + head.grad())).abs().max().item<double>();
  EXPECT_LT(diff, 1e-12);
}

TEST(Gpt, ParameterCountsFollowTheFormulaAndGpt2Small) {
  lm::Gpt tiny;
  EXPECT_EQ(lm::count_parameters(*tiny), formula_count(lm::GptOptions::tiny()));
  EXPECT_EQ(lm::count_parameters(*tiny), 120576);
  lm::Gpt other(lm::GptOptions().vocab_size(97).context(33).layers(3).heads(4).embedding(48));
  EXPECT_EQ(lm::count_parameters(*other), formula_count(other->options()));
  // GPT-2 small, tied head: 124,439,808 (the published "124M"). Built, not only computed: ~500 MB.
  EXPECT_EQ(formula_count(lm::GptOptions::gpt2_small()), 124439808);
  lm::Gpt small(lm::GptOptions::gpt2_small());
  EXPECT_EQ(lm::count_parameters(*small), 124439808);
}

TEST(Gpt, InitialisesAsGpt2) {
  torch::manual_seed(3);
  lm::Gpt model(lm::GptOptions().layers(8));
  auto p = parameter_map(*model);
  // normal(0, 0.02), and 0.02/√(2·8) = 0.005 for the residual projections; 4096-49152 samples each, so
  // the sample std is within ~2% of the true one.
  EXPECT_NEAR(p["wte.weight"].std().item<double>(), 0.02, 0.001);
  EXPECT_NEAR(p["blocks.3.attn.c_attn.weight"].std().item<double>(), 0.02, 0.001);
  EXPECT_NEAR(p["blocks.3.mlp.c_fc.weight"].std().item<double>(), 0.02, 0.001);
  EXPECT_NEAR(p["blocks.3.attn.c_proj.weight"].std().item<double>(), 0.005, 0.0003);
  EXPECT_NEAR(p["blocks.3.mlp.c_proj.weight"].std().item<double>(), 0.005, 0.0003);
  EXPECT_TRUE(torch::equal(p["blocks.3.attn.c_attn.bias"], torch::zeros({192})));
  EXPECT_TRUE(torch::equal(p["blocks.3.ln_2.weight"], torch::ones({64})));
  EXPECT_TRUE(torch::equal(p["ln_f.bias"], torch::zeros({64})));
}

TEST(Gpt, MatchesAPlainTensorForwardInFloat64) {
  torch::manual_seed(4);
  const lm::GptOptions options = lm::GptOptions().vocab_size(61).context(20).layers(3).heads(4).embedding(32);
  lm::Gpt model(options);
  model->to(torch::kFloat64);
  // Perturb the LayerNorms and biases away from 1 and 0, so that their use is checked too.
  {
    torch::NoGradGuard no_grad;
    for (auto& param : model->parameters()) param.add_(torch::randn_like(param) * 0.1);
  }
  torch::NoGradGuard no_grad;
  const at::Tensor tokens = torch::randint(61, {3, 20});
  auto p = parameter_map(*model);
  const at::Tensor expected = reference_logits(p, options, tokens, p["wte.weight"], p["wte.weight"]);
  const at::Tensor logits = model->forward(tokens);
  ASSERT_EQ(logits.scalar_type(), torch::kFloat64);
  EXPECT_LT((logits - expected).abs().max().item<double>(), 1e-12);
  EXPECT_GT(expected.abs().max().item<double>(), 0.1);  // not a comparison of near-zeros
}

TEST(Gpt, AdamOnAFixedBatchOfBytesDrivesTheLossDown) {
  torch::manual_seed(5);
  lm::Gpt model;
  const std::string text =
      "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of "
      "foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season of Light";
  const int64_t batch = 4, length = 32;
  at::Tensor bytes = torch::empty({batch, length + 1}, torch::kLong);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t <= length; ++t) bytes[b][t] = static_cast<unsigned char>(text[b * length + t]);
  const at::Tensor inputs = bytes.slice(1, 0, length), targets = bytes.slice(1, 1);
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(2e-3));
  double first = 0.0, last = 0.0;
  for (int step = 0; step < 100; ++step) {
    optimizer.zero_grad();
    const at::Tensor loss = next_token_loss(model->forward(inputs), targets);
    loss.backward();
    optimizer.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  // It starts at about ln 256 = 5.55 (small initial weights: nearly uniform over the bytes). No model that
  // ignores the context can go below the entropy of the targets' byte frequencies, 2.55 nats here; 120k
  // parameters can memorise 128 targets. Measured at lr 2e-3 over seeds 5-8: 0.044-0.046 after 100 steps
  // (at 3e-3 and above some seeds stall at 2.55 for the 100 steps). Under 0.25 (e^-0.25 = 78% on the right
  // byte on average) is 10x below anything context-free, with 5x margin over what is seen.
  EXPECT_NEAR(first, std::log(256.0), 0.2);
  EXPECT_LT(last, 0.25) << "first " << first << ", last " << last;
}

TEST(Gpt, DropoutIsActiveInTrainAndNotInEval) {
  torch::manual_seed(6);
  lm::Gpt model(lm::GptOptions().dropout(0.1));
  const at::Tensor tokens = torch::randint(256, {2, 16});
  torch::NoGradGuard no_grad;
  model->train();
  EXPECT_FALSE(torch::equal(model->forward(tokens), model->forward(tokens)));
  model->eval();
  EXPECT_TRUE(torch::equal(model->forward(tokens), model->forward(tokens)));
}

TEST(Gpt, StagesHoldEveryParameterOnceAndTheHeadRerunsStageZero) {
  lm::Gpt model(lm::GptOptions().layers(3));
  const auto stages = model->stage_modules();
  ASSERT_EQ(stages.size(), 5U);  // embeddings, 3 blocks, ln_f
  std::map<const void*, int> owners;
  for (const auto& stage : stages)
    for (const auto& param : stage->parameters()) ++owners[param.unsafeGetTensorImpl()];
  const auto params = model->parameters();
  EXPECT_EQ(owners.size(), params.size());
  for (const auto& param : params) EXPECT_EQ(owners[param.unsafeGetTensorImpl()], 1);
  EXPECT_EQ(parameter_names(*stages[0]), (std::vector<std::string>{"wte.weight", "wpe.weight"}));
  EXPECT_EQ(parameter_names(*stages[4]), (std::vector<std::string>{"weight", "bias"}));

  RecordingRunner runner;
  model->set_stage_runner(&runner);
  torch::NoGradGuard no_grad;
  model->forward(torch::randint(256, {1, 4}));
  model->set_stage_runner(nullptr);
  EXPECT_EQ(runner.indices, (std::vector<size_t>{0, 1, 2, 3, 4, 0}));
}

TEST(Gpt, EachStageReadsOnlyItsOwnParameters) {
  torch::manual_seed(7);
  lm::Gpt model(lm::GptOptions().layers(3));
  torch::NoGradGuard no_grad;
  const at::Tensor tokens = torch::randint(256, {2, 12});
  const at::Tensor expected = model->forward(tokens);
  PoisoningRunner runner(model->stage_modules());
  model->set_stage_runner(&runner);
  const at::Tensor logits = model->forward(tokens);
  model->set_stage_runner(nullptr);
  runner.restore_all();
  EXPECT_TRUE(torch::equal(logits, expected));
  EXPECT_TRUE(torch::equal(model->forward(tokens), expected));
}

}  // namespace lockstep::models::gpt_test
