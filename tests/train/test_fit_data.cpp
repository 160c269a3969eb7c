// `lockstep fit --data synthetic --synthetic-shape C,H,W`: the flag, parsed by the same code as the CLI
// and the rank program (apps/lockstep/fit_flags.cpp), reaches the dataset, the loader's batches and the
// models; bad values stop at the parser with a message naming the value and the fix.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fit_data.h"   // src/train
#include "fit_flags.h"  // apps/lockstep
#include "lockstep/data/loader.h"
#include "lockstep/models/classifier.h"
#include "lockstep/train/fit_config.h"

namespace {

using lockstep::train::FitConfig;
using lockstep::train::ImageShape;

struct Parsed {
  int status = -1;  // parse_fit_flags' answer: -1 parsed, 2 usage error
  FitConfig config;
  std::string error;  // what it printed to stderr
};

// parse_fit_flags over `flags` (without the command name), capturing stderr.
Parsed parse(std::vector<std::string> flags) {
  flags.insert(flags.begin(), "fit");
  std::vector<char*> argv;
  for (std::string& flag : flags) argv.push_back(flag.data());
  Parsed out;
  testing::internal::CaptureStderr();
  out.status = lockstep::cli::parse_fit_flags(static_cast<int>(argv.size()), argv.data(), out.config);
  out.error = testing::internal::GetCapturedStderr();
  return out;
}

std::string validate_error(const FitConfig& config) {
  try {
    config.validate();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(SyntheticShapeTest, FlagReachesTheDatasetAndTheBatches) {
  const Parsed parsed = parse({"--data", "synthetic", "--synthetic-shape", "3,32,32", "--synthetic-size",
                               "64", "--batch-size", "8", "--model", "resnet18"});
  ASSERT_EQ(parsed.status, -1) << parsed.error;
  EXPECT_EQ(parsed.config.resolved_synthetic_shape(), (ImageShape{3, 32, 32}));

  const lockstep::train::detail::FitData data = lockstep::train::detail::load_fit_data(parsed.config);
  EXPECT_EQ(data.train->images().sizes(), (std::vector<int64_t>{64, 3, 32, 32}));
  EXPECT_EQ(data.test->images().sizes(), (std::vector<int64_t>{16, 3, 32, 32}));
  EXPECT_EQ(data.name, "synthetic 3x32x32");

  lockstep::data::Loader loader(data.train, lockstep::data::LoaderOptions(parsed.config.batch_size)
                                                .transform(data.transform)
                                                .augment(parsed.config.resolved_augment()));
  std::vector<int64_t> indices(64);
  for (int64_t i = 0; i < 64; ++i) indices[static_cast<size_t>(i)] = i;
  loader.start_epoch(indices, /*epoch=*/0);
  const std::optional<lockstep::data::Batch> batch = loader.next();
  ASSERT_TRUE(batch.has_value());
  EXPECT_EQ(batch->data.sizes(), (std::vector<int64_t>{8, 3, 32, 32}));
  EXPECT_EQ(batch->data.scalar_type(), at::kFloat);
}

TEST(SyntheticShapeTest, DefaultIsFashionMnistShaped) {
  const Parsed parsed = parse({"--data", "synthetic", "--synthetic-size", "16"});
  ASSERT_EQ(parsed.status, -1) << parsed.error;
  EXPECT_FALSE(parsed.config.synthetic_shape.has_value());
  const auto data = lockstep::train::detail::load_fit_data(parsed.config);
  EXPECT_EQ(data.train->images().sizes(), (std::vector<int64_t>{16, 1, 28, 28}));
  EXPECT_EQ(data.name, "synthetic 1x28x28");
}

// fit() builds the model for the data's C, H, W (as here); each image model must take the shapes it accepts.
TEST(SyntheticShapeTest, EveryModelTakesTheDataShape) {
  for (const std::string& model : lockstep::train::fit_model_names()) {
    if (model == "gpt") continue;  // a language model: text only (TextFlagsTest in test_fit_flags.cpp)
    for (const ImageShape shape : {ImageShape{3, 32, 32}, ImageShape{1, 28, 28}, ImageShape{2, 4, 9}}) {
      SCOPED_TRACE(model + " on " + shape.to_string());
      FitConfig config;
      config.model = model;
      config.data = "synthetic";
      config.synthetic_size = 8;
      config.synthetic_shape = shape;
      ASSERT_EQ(validate_error(config), "");
      const auto data = lockstep::train::detail::load_fit_data(config);
      auto net = lockstep::models::make_model(
          model, {data.train->channels(), data.train->height(), data.train->width(), /*num_classes=*/10});
      lockstep::data::Loader loader(data.train, lockstep::data::LoaderOptions(4).transform(data.transform));
      loader.start_epoch({0, 1, 2, 3}, /*epoch=*/0);
      const at::Tensor logits = net->forward(loader.next()->data);
      EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{4, 10}));
    }
  }
}

TEST(SyntheticShapeTest, ParsesCommaSeparatedChannelsHeightWidth) {
  EXPECT_EQ(ImageShape::parse("--synthetic-shape", "3,32,32"), (ImageShape{3, 32, 32}));
  EXPECT_EQ(ImageShape::parse("--synthetic-shape", "1,1,1"), (ImageShape{1, 1, 1}));
  EXPECT_EQ(ImageShape::parse("--synthetic-shape", "1024,4096,4096"), (ImageShape{1024, 4096, 4096}));
  EXPECT_EQ(ImageShape::parse("--synthetic-shape", "3,224,224").to_string(), "3,224,224");
  EXPECT_EQ(ImageShape::parse("--synthetic-shape", "+3,32,032"), (ImageShape{3, 32, 32}));
}

TEST(SyntheticShapeTest, BadValuesFailNamingTheValueAndTheFix) {
  struct Case {
    std::string value;
    std::string message;
  };
  const std::vector<Case> cases{
      {"0,32,32", "--synthetic-shape '0,32,32': channels must be in 1..1024, got 0"},
      {"3,0,32", "--synthetic-shape '3,0,32': height must be in 1..4096, got 0"},
      {"3,32,0", "--synthetic-shape '3,32,0': width must be in 1..4096, got 0"},
      {"-3,32,32", "--synthetic-shape '-3,32,32': channels must be in 1..1024, got -3"},
      {"3,-32,32", "--synthetic-shape '3,-32,32': height must be in 1..4096, got -32"},
      {"3,32", "--synthetic-shape '3,32' is not C,H,W: expected 3 whole numbers separated by commas, got 2"},
      {"3,32,32,1",
       "--synthetic-shape '3,32,32,1' is not C,H,W: expected 3 whole numbers separated by commas, got 4"},
      {"3,32,32,", "--synthetic-shape '3,32,32,' is not C,H,W"},
      {"32", "--synthetic-shape '32' is not C,H,W"},
      {"", "--synthetic-shape '' is not C,H,W"},
      {"3x32x32", "--synthetic-shape '3x32x32' is not C,H,W"},
      {"3,32,abc", "--synthetic-shape '3,32,abc': width 'abc' is not a whole number"},
      {"3,32.5,32", "--synthetic-shape '3,32.5,32': height '32.5' is not a whole number"},
      {"3, 32,32", "--synthetic-shape '3, 32,32': height ' 32' is not a whole number"},
      {"3,,32", "--synthetic-shape '3,,32': height '' is not a whole number"},
      {"2000,32,32", "--synthetic-shape '2000,32,32': channels must be in 1..1024, got 2000"},
      {"3,32,100000", "--synthetic-shape '3,32,100000': width must be in 1..4096, got 100000"},
      {"3,99999999999999999999,32", "height must be in 1..4096, got 99999999999999999999"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("--synthetic-shape '" + c.value + "'");
    const Parsed parsed = parse({"--data", "synthetic", "--synthetic-shape", c.value});
    EXPECT_EQ(parsed.status, 2);
    EXPECT_NE(parsed.error.find(c.message), std::string::npos) << parsed.error;
    EXPECT_NE(parsed.error.find("e.g. 3,32,32"), std::string::npos) << parsed.error;  // the fix
  }
  // The --flag=value spelling carries a leading minus too.
  const Parsed negative = parse({"--data", "synthetic", "--synthetic-shape=-1,28,28"});
  EXPECT_EQ(negative.status, 2);
  EXPECT_NE(negative.error.find("channels must be in 1..1024, got -1"), std::string::npos) << negative.error;
}

TEST(SyntheticShapeTest, ContradictionsAndAbsurdSizesFailWithTheFix) {
  Parsed parsed = parse({"--synthetic-shape", "3,32,32"});  // --data fashion-mnist (the default)
  EXPECT_EQ(parsed.status, 2);
  EXPECT_NE(parsed.error.find(
                "--synthetic-shape applies to --data 'synthetic' only (--data 'fashion-mnist' has its own "
                "image shape): leave it unset, or use --data 'synthetic'"),
            std::string::npos)
      << parsed.error;

  parsed = parse({"--data", "synthetic", "--synthetic-shape", "3,3,32", "--model", "cnn"});
  EXPECT_EQ(parsed.status, 2);
  EXPECT_NE(parsed.error.find(
                "--model 'cnn' needs images of at least 4x4 (it max-pools twice), got --synthetic-shape "
                "'3,3,32': use a height and width >= 4, or --model 'mlp' or 'resnet18'"),
            std::string::npos)
      << parsed.error;
  EXPECT_EQ(parse({"--data", "synthetic", "--synthetic-shape", "3,3,32", "--model", "resnet18"}).status, -1);

  // 8192 + 2048 images of 3x1024x1024: 30 GiB on every rank.
  parsed = parse({"--data", "synthetic", "--synthetic-shape", "3,1024,1024"});
  EXPECT_EQ(parsed.status, 2);
  EXPECT_NE(parsed.error.find(
                "--synthetic-size 8192 of --synthetic-shape '3,1024,1024' needs 30.0 GiB per rank (train "
                "+ test split), more than the 4 GiB allowed: lower --synthetic-size or the shape"),
            std::string::npos)
      << parsed.error;
  EXPECT_EQ(
      parse({"--data", "synthetic", "--synthetic-shape", "3,1024,1024", "--synthetic-size", "64"}).status,
      -1);

  // A config filled in code (not through the flags) is checked by validate() the same way, in the
  // library's words (the option's name).
  FitConfig config;
  config.data = "synthetic";
  config.synthetic_shape = ImageShape{3, 0, 32};
  EXPECT_NE(validate_error(config).find("synthetic_shape '3,0,32': height must be in 1..4096, got 0"),
            std::string::npos);
}

TEST(SyntheticShapeTest, HelpListsTheFlag) {
  testing::internal::CaptureStdout();
  const Parsed parsed = parse({"--help"});
  const std::string help = testing::internal::GetCapturedStdout();
  EXPECT_EQ(parsed.status, 0);
  EXPECT_NE(help.find("--synthetic-shape C,H,W"), std::string::npos) << help;
  EXPECT_NE(help.find("Default: 1,28,28"), std::string::npos) << help;
}

}  // namespace
