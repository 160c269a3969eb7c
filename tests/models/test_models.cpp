// The models layer: shapes, parameter counts and names, train/eval behaviour, that each model can learn
// a tiny fixed batch, and make_model's errors.
#include <gtest/gtest.h>

#include <map>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/nn/functional/loss.h>
#include <torch/optim/sgd.h>
#include <torch/torch.h>

#include "lockstep/models/models.h"

namespace lm = lockstep::models;

namespace {

const lm::InputShape kMnist{/*channels=*/1, /*height=*/28, /*width=*/28, /*num_classes=*/10};
const lm::InputShape kCifar{/*channels=*/3, /*height=*/32, /*width=*/32, /*num_classes=*/10};

std::vector<std::string> parameter_names(const torch::nn::Module& module) {
  std::vector<std::string> names;
  for (const auto& item : module.named_parameters()) names.push_back(item.key());
  return names;
}

bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

}  // namespace

class ModelShapes : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelShapes, LogitsAreBatchByClassesOnMnistAndCifarImages) {
  torch::NoGradGuard no_grad;
  for (const auto& shape : {kMnist, kCifar}) {
    torch::manual_seed(0);
    auto model = lm::make_model(GetParam(), shape);
    model->eval();
    const auto out = model->forward(torch::rand({3, shape.channels, shape.height, shape.width}));
    EXPECT_EQ(out.sizes(), (std::vector<int64_t>{3, 10}))
        << GetParam() << " on " << shape.channels << "x" << shape.height << "x" << shape.width;
    EXPECT_TRUE(torch::isfinite(out).all().item<bool>());
  }
}

TEST_P(ModelShapes, NumClassesFollowsTheShape) {
  torch::NoGradGuard no_grad;
  auto model = lm::make_model(GetParam(), {/*channels=*/1, /*height=*/28, /*width=*/28, /*num_classes=*/7});
  model->eval();
  EXPECT_EQ(model->forward(torch::rand({2, 1, 28, 28})).size(1), 7);
}

TEST_P(ModelShapes, SameSeedGivesSameNamesAndWeights) {
  torch::manual_seed(42);
  auto a = lm::make_model(GetParam(), kMnist);
  torch::manual_seed(42);
  auto b = lm::make_model(GetParam(), kMnist);
  const auto names = parameter_names(*a);
  ASSERT_EQ(names, parameter_names(*b));
  const auto pa = a->named_parameters();
  const auto pb = b->named_parameters();
  for (const auto& name : names) EXPECT_TRUE(torch::equal(pa[name], pb[name])) << name;
}

TEST_P(ModelShapes, SgdStepsOnAFixedBatchReduceTheLoss) {
  torch::manual_seed(1);
  // ResNet18 on a small image size keeps this test fast (the adaptive pool makes any size >= 8 work).
  const bool resnet = GetParam() == "resnet18";
  const lm::InputShape shape = resnet ? lm::InputShape{3, 16, 16, 10} : kMnist;
  auto model = lm::make_model(GetParam(), shape);
  model->train();
  const auto x = torch::randn({16, shape.channels, shape.height, shape.width});
  const auto y = torch::arange(16, torch::kLong) % 10;
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  double first = 0, last = 0;
  const int steps = resnet ? 5 : 15;
  for (int i = 0; i < steps; ++i) {
    optimizer.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(model->forward(x), y);
    loss.backward();
    optimizer.step();
    if (i == 0) first = loss.item<double>();
    last = loss.item<double>();
  }
  EXPECT_LT(last, 0.7 * first) << GetParam() << ": first loss " << first << ", last " << last;
}

INSTANTIATE_TEST_SUITE_P(AllModels, ModelShapes, ::testing::Values("mlp", "cnn", "resnet18"),
                         [](const auto& info) { return info.param; });

TEST(Mlp, HasTheSeedsParameterCountAndNames) {
  lm::Mlp model;
  EXPECT_EQ(lm::count_parameters(*model), 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10);
  EXPECT_EQ(parameter_names(*model), (std::vector<std::string>{"fc1.weight", "fc1.bias", "fc2.weight",
                                                               "fc2.bias", "fc3.weight", "fc3.bias"}));
  EXPECT_EQ(model->named_parameters()["fc1.weight"].sizes(), (std::vector<int64_t>{256, 784}));
  EXPECT_EQ(model->named_parameters()["fc3.weight"].sizes(), (std::vector<int64_t>{10, 128}));
}

TEST(Mlp, MakeModelUsesChannelsTimesHeightTimesWidthInputs) {
  auto model = lm::make_model("mlp", kCifar);
  EXPECT_EQ(model->named_parameters()["fc1.weight"].size(1), 3 * 32 * 32);
  EXPECT_EQ(lm::count_parameters(*model), 3072 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10);
}

TEST(Mlp, OptionsHaveTheSeedsDefaultsAndChain) {
  const lm::MlpOptions defaults;
  EXPECT_EQ(defaults.in_features(), 784);
  EXPECT_EQ(defaults.hidden(), (std::vector<int64_t>{256, 128}));
  EXPECT_EQ(defaults.num_classes(), 10);
  EXPECT_DOUBLE_EQ(defaults.dropout(), 0.2);
  lm::Mlp custom(lm::MlpOptions().in_features(20).hidden({8}).num_classes(3).dropout(0.0));
  EXPECT_EQ(lm::count_parameters(*custom), 20 * 8 + 8 + 8 * 3 + 3);
  EXPECT_EQ(custom->forward(torch::rand({5, 20})).sizes(), (std::vector<int64_t>{5, 3}));
}

TEST(Mlp, RejectsBadOptionsAndInputs) {
  EXPECT_THROW(lm::Mlp(lm::MlpOptions().dropout(1.0)), c10::Error);
  EXPECT_THROW(lm::Mlp(lm::MlpOptions().hidden({256, 0})), c10::Error);
  EXPECT_THROW(lm::Mlp(lm::MlpOptions().in_features(0)), c10::Error);
  lm::Mlp model;
  try {
    model->forward(torch::rand({2, 3, 32, 32}));
    FAIL() << "expected an error for 3072 features";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected 784 features"), std::string::npos) << e.what();
  }
}

TEST(Mlp, DropoutIsActiveInTrainAndNotInEval) {
  torch::manual_seed(3);
  lm::Mlp model;
  const auto x = torch::rand({32, 1, 28, 28});
  torch::NoGradGuard no_grad;
  model->train();
  EXPECT_FALSE(torch::equal(model->forward(x), model->forward(x)));
  model->eval();
  EXPECT_TRUE(torch::equal(model->forward(x), model->forward(x)));
}

TEST(SmallCnn, HasFewerThan100kParameters) {
  lm::SmallCnn model;
  const auto count = lm::count_parameters(*model);
  EXPECT_LT(count, 100000);
  // conv1 288, bn1 64, conv2 18432, bn2 128, conv3 36864, bn3 128, fc1 36928, fc2 650
  EXPECT_EQ(count, 93482);
  const auto cifar_count = lm::count_parameters(*lm::make_model("cnn", kCifar));
  EXPECT_EQ(cifar_count, 93482 + 2 * 32 * 9);
  EXPECT_LT(cifar_count, 100000);
  EXPECT_EQ(parameter_names(*model),
            (std::vector<std::string>{"conv1.weight", "bn1.weight", "bn1.bias", "conv2.weight", "bn2.weight",
                                      "bn2.bias", "conv3.weight", "bn3.weight", "bn3.bias", "fc1.weight",
                                      "fc1.bias", "fc2.weight", "fc2.bias"}));
  EXPECT_EQ(model->named_parameters()["fc1.weight"].sizes(), (std::vector<int64_t>{64, 64 * 3 * 3}));
}

TEST(SmallCnn, DropoutIsActiveInTrainAndNotInEval) {
  torch::manual_seed(4);
  lm::SmallCnn model;
  const auto x = torch::rand({8, 1, 28, 28});
  torch::NoGradGuard no_grad;
  model->train();
  EXPECT_FALSE(torch::equal(model->forward(x), model->forward(x)));
  model->eval();
  EXPECT_TRUE(torch::equal(model->forward(x), model->forward(x)));
}

TEST(SmallCnn, AcceptsAnyImageOfAtLeast4x4) {
  torch::NoGradGuard no_grad;
  lm::SmallCnn model;
  model->eval();
  for (const int64_t size : {4, 7, 28, 32, 45}) {
    EXPECT_EQ(model->forward(torch::rand({2, 1, size, size})).sizes(), (std::vector<int64_t>{2, 10})) << size;
  }
  EXPECT_THROW(model->forward(torch::rand({2, 1, 3, 28})), c10::Error);
}

TEST(SmallCnn, TrainingStepIsReproducibleForASeed) {
  // Same seed: same weights, same dropout mask, same gradients, bit for bit.
  const auto x = torch::rand({8, 1, 28, 28}, torch::TensorOptions().dtype(torch::kFloat));
  const auto y = torch::arange(8, torch::kLong);
  std::vector<at::Tensor> grads[2];
  for (auto& out : grads) {
    torch::manual_seed(7);
    lm::SmallCnn model;
    model->train();
    torch::nn::functional::cross_entropy(model->forward(x), y).backward();
    for (const auto& p : model->parameters()) out.push_back(p.grad().clone());
  }
  ASSERT_EQ(grads[0].size(), grads[1].size());
  for (std::size_t i = 0; i < grads[0].size(); ++i) EXPECT_TRUE(torch::equal(grads[0][i], grads[1][i])) << i;
}

TEST(SmallCnn, RejectsTheWrongChannelCount) {
  lm::SmallCnn model;
  EXPECT_THROW(model->forward(torch::rand({2, 3, 32, 32})), c10::Error);
  EXPECT_THROW(lm::SmallCnn(lm::SmallCnnOptions().num_classes(0)), c10::Error);
}

TEST(ResNet18, HasAbout11Point2MillionParametersAndTorchvisionNames) {
  lm::ResNet18 model;
  const auto count = lm::count_parameters(*model);
  EXPECT_EQ(count, 11173962);  // the usual CIFAR ResNet18 figure
  EXPECT_GE(count, 11100000);
  EXPECT_LE(count, 11300000);
  const auto grey = lm::count_parameters(*lm::make_model("resnet18", kMnist));
  EXPECT_EQ(grey, 11173962 - 2 * 64 * 9);
  const auto names = parameter_names(*model);
  EXPECT_EQ(names.front(), "conv1.weight");
  EXPECT_EQ(names.back(), "fc.bias");
  for (const char* name : {"bn1.weight", "layer1.0.conv1.weight", "layer2.0.shortcut.0.weight",
                           "layer2.0.shortcut.1.bias", "layer4.1.bn2.weight", "fc.weight"}) {
    EXPECT_TRUE(contains(names, name)) << name;
  }
  EXPECT_FALSE(contains(names, "layer1.0.shortcut.0.weight"));  // identity shortcut in the first stage
  EXPECT_EQ(model->named_parameters()["conv1.weight"].sizes(), (std::vector<int64_t>{64, 3, 3, 3}));
  EXPECT_EQ(model->named_buffers().size(), 20u * 3);  // 20 BatchNorms: running mean, var, count
}

// Staged: six stages in forward order, every parameter in exactly one; without a runner the forward is the
// plain one (the stage functions are the layers).
TEST(ResNet18, ItsStagesHoldEveryParameterOnce) {
  lm::ResNet18 model(lm::ResNet18Options().in_channels(3));
  const auto stages = model->stage_modules();
  ASSERT_EQ(stages.size(), 6u);
  std::map<const void*, int> seen;
  for (const auto& stage : stages)
    for (const auto& p : stage->parameters()) ++seen[p.unsafeGetTensorImpl()];
  const auto params = model->parameters();
  EXPECT_EQ(seen.size(), params.size());
  for (const auto& p : params) EXPECT_EQ(seen[p.unsafeGetTensorImpl()], 1);
  EXPECT_EQ(stages[0]->parameters().size(), 3u);  // conv1.weight, bn1.weight, bn1.bias
  EXPECT_EQ(stages[5]->parameters().size(), 2u);  // fc
}

TEST(ResNet18, EvalIsDeterministic) {
  torch::manual_seed(5);
  auto model = lm::make_model("resnet18", kCifar);
  const auto x = torch::rand({2, 3, 32, 32});
  torch::NoGradGuard no_grad;
  model->eval();
  EXPECT_TRUE(torch::equal(model->forward(x), model->forward(x)));
}

TEST(MakeModel, UnknownNameListsTheKnownOnes) {
  try {
    lm::make_model("vgg", kMnist);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "unknown model 'vgg' (expected one of: mlp, cnn, resnet18)");
  }
  EXPECT_THROW(lm::make_model("", kMnist), std::invalid_argument);
  EXPECT_THROW(lm::make_model("MLP", kMnist), std::invalid_argument);
}

TEST(MakeModel, RejectsANonPositiveShape) {
  EXPECT_THROW(lm::make_model("mlp", {/*channels=*/0, 28, 28, 10}), c10::Error);
  EXPECT_THROW(lm::make_model("cnn", {1, 28, 28, /*num_classes=*/0}), c10::Error);
}

TEST(MakeModel, NamesAreTheDocumentedOnes) {
  EXPECT_EQ(lm::model_names(), (std::vector<std::string>{"mlp", "cnn", "resnet18"}));
  for (const auto& name : lm::model_names()) EXPECT_NE(lm::make_model(name, kMnist), nullptr) << name;
}

// make_model's dropout override: 0 makes training-mode forwards deterministic for mlp and cnn (their only
// randomness is dropout); the default (0.2) does not; resnet18 has no dropout and says so.
TEST(MakeModel, DropoutOverride) {
  const lockstep::models::InputShape shape{1, 28, 28, 10};
  torch::manual_seed(0);
  const at::Tensor x = torch::randn({8, 1, 28, 28});
  for (const std::string name : {"mlp", "cnn"}) {
    auto off = lockstep::models::make_model(name, shape, 0.0);
    off->train();
    EXPECT_TRUE(torch::equal(off->forward(x), off->forward(x))) << name;
    auto on = lockstep::models::make_model(name, shape);
    on->train();
    EXPECT_FALSE(torch::equal(on->forward(x), on->forward(x))) << name;
  }
  try {
    lockstep::models::make_model("resnet18", {3, 32, 32, 10}, 0.1);
    ADD_FAILURE() << "resnet18 accepted a dropout";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("resnet18 has no dropout layer"), std::string::npos) << e.what();
  }
}
