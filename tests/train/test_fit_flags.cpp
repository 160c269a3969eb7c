// `lockstep fit`'s flags beyond the basics (apps/lockstep/fit_flags.cpp, shared by `lockstep` and
// `lockstep-fit`): --config FILE.yaml (same keys as the flags, flags win, unknown keys and bad values are
// errors naming the key and the file), --print-config (YAML that --config reads back), and the learning-rate
// rules (--lr-scaling, --lr-reference-batch, --lr-schedule step).
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <gtest/gtest.h>

#include "fit_flags.h"  // apps/lockstep
#include "lockstep/train/fit_config.h"
#include "yaml_config.h"  // apps/lockstep

namespace {

namespace fs = std::filesystem;
using lockstep::train::accumulation_keeping;
using lockstep::train::FitConfig;

struct Parsed {
  int status = -1;  // parse_fit_flags' answer: -1 parsed, 0 printed (--print-config), 2 usage error
  FitConfig config;
  std::string out;    // stdout
  std::string error;  // stderr
};

Parsed parse(std::vector<std::string> flags) {
  flags.insert(flags.begin(), "fit");
  std::vector<char*> argv;
  for (std::string& flag : flags) argv.push_back(flag.data());
  Parsed parsed;
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  parsed.status = lockstep::cli::parse_fit_flags(static_cast<int>(argv.size()), argv.data(), parsed.config);
  parsed.error = testing::internal::GetCapturedStderr();
  parsed.out = testing::internal::GetCapturedStdout();
  return parsed;
}

// Flags that `lockstep fit` refuses as a usage error (status 2) with a message containing `error`.
struct Refused {
  std::vector<std::string> flags;
  std::string error;
};
void expect_refused(const std::vector<Refused>& cases) {
  for (const Refused& c : cases) {
    const Parsed bad = parse(c.flags);
    EXPECT_EQ(bad.status, 2) << c.flags[0];
    EXPECT_NE(bad.error.find(c.error), std::string::npos) << bad.error;
  }
}

class ConfigFileTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("lockstep_fit_flags_" + std::to_string(::getpid()) + "_" +
                                        testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text) {
    const fs::path path = dir_ / name;
    std::ofstream(path) << text;
    return path.string();
  }

  fs::path dir_;
};

TEST_F(ConfigFileTest, YamlValuesAreApplied) {
  const std::string file = write("run.yaml",
                                 "# a comment\n"
                                 "model: cnn\n"
                                 "data: synthetic\n"
                                 "max-epochs: 5\n"
                                 "batch_size: 32\n"  // the underscore spelling the flag accepts
                                 "lr: 3e-3\n"
                                 "lr-scaling: sqrt\n"
                                 "lr-schedule: step\n"
                                 "lr-gamma: 0.5\n"
                                 "synthetic-shape: 3,32,32\n"
                                 "augment: on\n"
                                 "limit-train-batches: 0.25\n"
                                 "devices: ~\n");  // null: the default
  const Parsed p = parse({"--config", file});
  ASSERT_EQ(p.status, -1) << p.error;
  EXPECT_EQ(p.config.model, "cnn");
  EXPECT_EQ(p.config.data, "synthetic");
  EXPECT_EQ(p.config.trainer.max_epochs(), 5);
  EXPECT_EQ(p.config.batch_size, 32);
  ASSERT_TRUE(p.config.lr.has_value());
  EXPECT_DOUBLE_EQ(*p.config.lr, 3e-3);
  EXPECT_EQ(p.config.lr_scaling, "sqrt");
  EXPECT_EQ(p.config.lr_schedule, "step");
  EXPECT_DOUBLE_EQ(p.config.lr_gamma, 0.5);
  ASSERT_TRUE(p.config.synthetic_shape.has_value());
  EXPECT_EQ(p.config.synthetic_shape->to_string(), "3,32,32");
  EXPECT_EQ(p.config.augment, std::optional<bool>(true));
  EXPECT_DOUBLE_EQ(p.config.trainer.limit_train_batches().fraction, 0.25);
  EXPECT_FALSE(p.config.trainer.devices().has_value());
  EXPECT_EQ(p.config.optimizer, "adam");  // not in the file: the default
}

TEST_F(ConfigFileTest, FlagsWinOverTheFile) {
  const std::string file = write("run.yaml", "max-epochs: 5\nmodel: cnn\nlr-scaling: linear\n");
  // Before and after --config: the command line wins either way.
  for (const auto& flags : {std::vector<std::string>{"--max-epochs", "2", "--config", file},
                            std::vector<std::string>{"--config", file, "--max_epochs=2"}}) {
    const Parsed p = parse(flags);
    ASSERT_EQ(p.status, -1) << p.error;
    EXPECT_EQ(p.config.trainer.max_epochs(), 2);
    EXPECT_EQ(p.config.model, "cnn");
    EXPECT_EQ(p.config.lr_scaling, "linear");
  }
}

TEST_F(ConfigFileTest, UnknownKeyNamesTheKeyTheFileAndTheClosestKey) {
  const std::string file = write("typo.yaml", "model: mlp\nmax-epoch: 5\n");
  const Parsed p = parse({"--config", file});
  EXPECT_EQ(p.status, 2);
  EXPECT_NE(
      p.error.find("--config " + file + ": unknown key 'max-epoch' (line 2) (did you mean 'max-epochs'?)"),
      std::string::npos)
      << p.error;

  const Parsed far = parse({"--config", write("far.yaml", "colour: blue\n")});
  EXPECT_EQ(far.status, 2);
  EXPECT_NE(far.error.find("unknown key 'colour'"), std::string::npos) << far.error;
  EXPECT_EQ(far.error.find("did you mean"), std::string::npos) << far.error;

  // --config and --print-config are command-line only.
  const Parsed nested = parse({"--config", write("nested.yaml", "config: other.yaml\n")});
  EXPECT_EQ(nested.status, 2);
  EXPECT_NE(nested.error.find("unknown key 'config'"), std::string::npos) << nested.error;
}

TEST_F(ConfigFileTest, BadValueIsTheFlagsErrorAndPointsAtTheFile) {
  const std::string file = write("bad.yaml", "lr-scaling: cubic\n");
  const Parsed p = parse({"--config", file});
  EXPECT_EQ(p.status, 2);
  EXPECT_NE(p.error.find("--lr-scaling 'cubic' is not known (expected one of: none, linear, sqrt)"),
            std::string::npos)
      << p.error;
  EXPECT_NE(p.error.find("(lr-scaling is set in --config " + file + ")"), std::string::npos) << p.error;
  // The same value as a flag: the same error, without the pointer to a file.
  const Parsed flag = parse({"--lr-scaling", "cubic"});
  EXPECT_EQ(flag.status, 2);
  EXPECT_NE(flag.error.find("--lr-scaling 'cubic' is not known (expected one of: none, linear, sqrt)"),
            std::string::npos);
  EXPECT_EQ(flag.error.find("--config"), std::string::npos) << flag.error;

  const Parsed number = parse({"--config", write("number.yaml", "max-epochs: ten\n")});
  EXPECT_EQ(number.status, 2);
  EXPECT_NE(number.error.find("--max-epochs"), std::string::npos) << number.error;
  EXPECT_NE(number.error.find("ten"), std::string::npos) << number.error;

  const Parsed gamma = parse({"--config", write("gamma.yaml", "lr-schedule: step\nlr-gamma: 2\n")});
  EXPECT_EQ(gamma.status, 2);
  EXPECT_NE(gamma.error.find("--lr-gamma must be in (0, 1]"), std::string::npos) << gamma.error;
}

TEST_F(ConfigFileTest, MalformedFilesFailNamingTheFile) {
  const Parsed list = parse({"--config", write("list.yaml", "- model\n- mlp\n")});
  EXPECT_EQ(list.status, 2);
  EXPECT_NE(list.error.find("expected `key: value` lines"), std::string::npos) << list.error;

  const Parsed nested = parse({"--config", write("map.yaml", "model:\n  name: mlp\n")});
  EXPECT_EQ(nested.status, 2);
  EXPECT_NE(nested.error.find("key 'model' (line 2) needs a single value, got a mapping"), std::string::npos)
      << nested.error;

  // A key that is a list or a mapping (fuzz/regressions/fit_config has the fuzzer's inputs): named as such,
  // not yaml-cpp's "bad conversion".
  const Parsed list_key = parse({"--config", write("list-key.yaml", "max-epochs: 2\n[model, data]: mlp\n")});
  EXPECT_EQ(list_key.status, 2);
  EXPECT_NE(list_key.error.find("list-key.yaml: a key (line 2) is a list"), std::string::npos)
      << list_key.error;
  const Parsed map_key = parse({"--config", write("map-key.yaml", "{model: mlp}: 1\n")});
  EXPECT_EQ(map_key.status, 2);
  EXPECT_NE(map_key.error.find("map-key.yaml: a key (line 1) is a mapping"), std::string::npos)
      << map_key.error;
  const Parsed empty_key = parse({"--config", write("empty-key.yaml", "? \n: 1\n")});
  EXPECT_EQ(empty_key.status, 2);
  EXPECT_NE(empty_key.error.find("empty-key.yaml: a key"), std::string::npos) << empty_key.error;

  const Parsed broken = parse({"--config", write("broken.yaml", "model: [mlp\n")});
  EXPECT_EQ(broken.status, 2);
  EXPECT_NE(broken.error.find("broken.yaml: not valid YAML"), std::string::npos) << broken.error;

  const Parsed missing = parse({"--config", (dir_ / "absent.yaml").string()});
  EXPECT_EQ(missing.status, 2);
  EXPECT_NE(missing.error.find("absent.yaml"), std::string::npos) << missing.error;

  const Parsed huge = parse({"--config", write("huge.yaml", "# " + std::string(1 << 20, 'x') + "\n")});
  EXPECT_EQ(huge.status, 2);
  EXPECT_NE(huge.error.find("huge.yaml: over the limit of 1 MiB for a config file"), std::string::npos)
      << huge.error.substr(0, 300);

  const Parsed empty = parse({"--config", write("empty.yaml", "")});
  EXPECT_EQ(empty.status, -1) << empty.error;  // an empty file sets nothing
}

TEST_F(ConfigFileTest, PrintConfigRoundTripsThroughConfig) {
  const std::string file =
      write("run.yaml", "model: cnn\ndata: synthetic\nlr-scaling: linear\nlr-step-epochs: 2\n");
  const Parsed first = parse({"--config", file, "--max-epochs", "4", "--metrics-file", "m #1.jsonl", "--lr",
                              "0.02", "--print-config"});
  ASSERT_EQ(first.status, 0) << first.error;  // printed, nothing to train
  // Every flag with its value, defaults included; unset ones as null with their default as a comment.
  EXPECT_NE(first.out.find("\nmodel: cnn\n"), std::string::npos) << first.out;
  EXPECT_NE(first.out.find("\nmax-epochs: 4\n"), std::string::npos) << first.out;
  EXPECT_NE(first.out.find("\nlr-scaling: linear\n"), std::string::npos) << first.out;
  EXPECT_NE(first.out.find("\noptimizer: adam\n"), std::string::npos) << first.out;
  EXPECT_NE(first.out.find("\nlr-gamma: 0.1\n"), std::string::npos) << first.out;
  EXPECT_NE(first.out.find("\ndevices: null"), std::string::npos) << first.out;
  EXPECT_NE(first.out.find("lr-reference-batch: null  # default: batch-size, 64"), std::string::npos)
      << first.out;
  EXPECT_EQ(first.out.find("print-config"), std::string::npos) << first.out;
  EXPECT_EQ(first.out.find("\nconfig:"), std::string::npos) << first.out;
  EXPECT_EQ(first.out.find("help"), std::string::npos) << first.out;

  const std::string printed = write("printed.yaml", first.out);
  const Parsed again = parse({"--config", printed});
  ASSERT_EQ(again.status, -1) << again.error << "\n" << first.out;
  const Parsed original =
      parse({"--config", file, "--max-epochs", "4", "--metrics-file", "m #1.jsonl", "--lr", "0.02"});
  ASSERT_EQ(original.status, -1) << original.error;
  const FitConfig& a = original.config;
  const FitConfig& b = again.config;
  EXPECT_EQ(b.model, a.model);
  EXPECT_EQ(b.data, a.data);
  EXPECT_EQ(b.trainer.max_epochs(), a.trainer.max_epochs());
  EXPECT_EQ(b.trainer.metrics_file(), "m #1.jsonl");  // quoted where YAML needs it
  EXPECT_EQ(b.lr, a.lr);
  EXPECT_EQ(b.lr_scaling, a.lr_scaling);
  EXPECT_EQ(b.lr_step_epochs, a.lr_step_epochs);
  EXPECT_EQ(b.lr_reference_batch, a.lr_reference_batch);
  EXPECT_EQ(b.trainer.devices(), a.trainer.devices());
  EXPECT_EQ(b.augment, a.augment);
  EXPECT_EQ(b.synthetic_shape.has_value(), a.synthetic_shape.has_value());
  EXPECT_EQ(b.trainer.limit_train_batches().to_string(), a.trainer.limit_train_batches().to_string());
  EXPECT_EQ(b.num_workers, a.num_workers);
  // And printing the reloaded config gives the same text: a fixed point.
  const Parsed reprinted = parse({"--config", printed, "--print-config"});
  ASSERT_EQ(reprinted.status, 0) << reprinted.error;
  EXPECT_EQ(reprinted.out, first.out);
}

TEST_F(ConfigFileTest, PrintConfigRefusesABadConfig) {
  const Parsed p = parse({"--lr-scaling", "cubic", "--print-config"});
  EXPECT_EQ(p.status, 2);
  EXPECT_TRUE(p.out.empty()) << p.out;
}

TEST(ClosestKeyTest, FindsNearTyposOnly) {
  const std::vector<std::string> keys{"max-epochs", "batch-size", "lr", "lr-scaling", "lr-schedule"};
  EXPECT_EQ(lockstep::cli::closest_key("max_epochs", keys), "max-epochs");
  EXPECT_EQ(lockstep::cli::closest_key("batchsize", keys), "batch-size");
  EXPECT_EQ(lockstep::cli::closest_key("lr-scheduler", keys), "lr-schedule");
  EXPECT_EQ(lockstep::cli::closest_key("temperature", keys), "");
}

TEST(LrScalingTest, ScalesByGlobalOverReferenceBatch) {
  FitConfig config;
  config.lr = 0.1;
  config.batch_size = 64;
  // none: the same lr whatever the world size.
  for (int world : {1, 2, 4}) EXPECT_DOUBLE_EQ(config.scaled_lr(world), 0.1);

  config.lr_scaling = "linear";  // reference: the per-rank batch (64)
  EXPECT_DOUBLE_EQ(config.scaled_lr(1), 0.1);
  EXPECT_DOUBLE_EQ(config.scaled_lr(2), 0.2);
  EXPECT_DOUBLE_EQ(config.scaled_lr(4), 0.4);
  config.trainer.accumulate_grad_batches(2);  // global batch 64 x 4 x 2 = 512
  EXPECT_EQ(config.global_batch_size(4), 512);
  EXPECT_DOUBLE_EQ(config.scaled_lr(1), 0.2);
  EXPECT_DOUBLE_EQ(config.scaled_lr(4), 0.8);
  config.lr_reference_batch = 256;  // the seed's habit: lr given for a batch of 256
  EXPECT_DOUBLE_EQ(config.scaled_lr(4), 0.2);
  EXPECT_DOUBLE_EQ(config.scaled_lr(1), 0.05);

  config.lr_scaling = "sqrt";
  config.lr_reference_batch.reset();
  config.trainer.accumulate_grad_batches(1);
  EXPECT_DOUBLE_EQ(config.scaled_lr(1), 0.1);
  EXPECT_DOUBLE_EQ(config.scaled_lr(2), 0.1 * std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(config.scaled_lr(4), 0.2);
  config.trainer.accumulate_grad_batches(2);
  EXPECT_DOUBLE_EQ(config.scaled_lr(2), 0.2);

  // The optimizer's default lr is what gets scaled.
  FitConfig sgd;
  sgd.optimizer = "sgd";
  sgd.lr_scaling = "linear";
  EXPECT_DOUBLE_EQ(sgd.scaled_lr(4), 0.05 * 4);
  EXPECT_THROW(sgd.scaled_lr(0), std::invalid_argument);
}

TEST(LrScalingTest, FlagsReachTheConfigAndBadValuesNameTheFlag) {
  const Parsed p = parse({"--lr-scaling", "linear", "--lr-reference-batch", "256", "--lr-schedule", "step",
                          "--lr-step-epochs", "3", "--lr-gamma", "0.5"});
  ASSERT_EQ(p.status, -1) << p.error;
  EXPECT_EQ(p.config.lr_scaling, "linear");
  EXPECT_EQ(p.config.lr_reference_batch, std::optional<int64_t>(256));
  EXPECT_EQ(p.config.lr_schedule, "step");
  EXPECT_EQ(p.config.resolved_lr_step_epochs(), 3);
  EXPECT_DOUBLE_EQ(p.config.lr_gamma, 0.5);

  const Parsed defaults = parse({"--max-epochs", "10"});
  ASSERT_EQ(defaults.status, -1) << defaults.error;
  EXPECT_EQ(defaults.config.lr_scaling, "none");
  EXPECT_EQ(defaults.config.resolved_lr_reference_batch(), 64);
  EXPECT_EQ(defaults.config.resolved_lr_step_epochs(), 3);  // max(1, 10 / 3)

  expect_refused({
      {{"--lr-scaling", "cubic"}, "--lr-scaling 'cubic' is not known (expected one of: none, linear, sqrt)"},
      {{"--lr-schedule", "exp"},
       "--lr-schedule 'exp' is not known (expected one of: cosine, constant, step)"},
      {{"--lr-reference-batch", "0"}, "--lr-reference-batch must be >= 1, got 0"},
      {{"--lr-step-epochs", "0"}, "--lr-step-epochs must be >= 1, got 0"},
      {{"--lr-gamma", "0"}, "--lr-gamma must be in (0, 1]"},
  });
}

TEST(DdpFlagsTest, BucketCapReachesTheConfigAndBadValuesNameTheFlag) {
  EXPECT_FALSE(parse({}).config.trainer.strategy().bucket_cap_mb().has_value());  // auto: DdpOptions' default
  const Parsed automatic = parse({"--bucket-cap-mb", "auto"});
  ASSERT_EQ(automatic.status, -1) << automatic.error;
  EXPECT_FALSE(automatic.config.trainer.strategy().bucket_cap_mb().has_value());
  const Parsed p = parse({"--bucket-cap-mb", "4"});
  ASSERT_EQ(p.status, -1) << p.error;
  ASSERT_TRUE(p.config.trainer.strategy().bucket_cap_mb().has_value());
  EXPECT_DOUBLE_EQ(*p.config.trainer.strategy().bucket_cap_mb(), 4.0);
  for (const char* value : {"0", "-1", "nan", "inf", "4MB", "", "Auto"}) {
    const Parsed bad = parse({"--bucket-cap-mb", value});
    EXPECT_EQ(bad.status, 2) << value;
    // Text the flag cannot parse is refused by the flag (", or auto"), a number out of range by
    // TrainerOptions (", or unset"): both name the flag and the value.
    EXPECT_NE(bad.error.find("--bucket-cap-mb must be a number of MiB > 0, or "), std::string::npos)
        << bad.error;
    EXPECT_NE(bad.error.find(std::string(", got ") + value + "\n"), std::string::npos) << bad.error;
  }
}

TEST(GpuFlagsTest, CudaGraphsReachesTheTrainerOptionsOffByDefault) {
  const Parsed off = parse({});
  ASSERT_EQ(off.status, -1) << off.error;
  EXPECT_FALSE(off.config.trainer.cuda_graphs());
  for (const char* flag : {"--cuda-graphs", "--cuda_graphs"}) {
    const Parsed on = parse({flag});
    ASSERT_EQ(on.status, -1) << on.error;
    EXPECT_TRUE(on.config.trainer.cuda_graphs()) << flag;
  }
  EXPECT_NE(parse({"--help"}).out.find("--cuda-graphs"), std::string::npos);
}

TEST(FitFlagsTest, ElasticReachesTheTrainerOptionsOffByDefault) {
  const Parsed off = parse({});
  ASSERT_EQ(off.status, -1) << off.error;
  EXPECT_FALSE(off.config.trainer.elastic());
  const Parsed on = parse({"--elastic"});
  ASSERT_EQ(on.status, -1) << on.error;
  EXPECT_TRUE(on.config.trainer.elastic());
  EXPECT_NE(parse({"--help"}).out.find("--elastic"), std::string::npos);
}

TEST(FitFlagsTest, KeepGlobalBatchReachesTheTrainerOptionsOffByDefault) {
  const Parsed off = parse({});
  ASSERT_EQ(off.status, -1) << off.error;
  EXPECT_FALSE(off.config.trainer.keep_global_batch());
  const Parsed on = parse({"--elastic", "--keep-global-batch", "--accumulate-grad-batches", "2"});
  ASSERT_EQ(on.status, -1) << on.error;
  EXPECT_TRUE(on.config.trainer.keep_global_batch());
  EXPECT_NE(parse({"--help"}).out.find("--keep-global-batch"), std::string::npos);
}

// The rank-batches of a step kept on a new world: divided where the world divides them, else the nearest
// whole count (halves up), never below 1.
TEST(KeepGlobalBatchTest, AccumulationKeepsTheBatchesOfAStep) {
  struct Case {
    int64_t batches_per_step;
    int world;
    int64_t accumulate;
  };
  for (const Case& c : std::vector<Case>{{6, 3, 2},
                                         {6, 2, 3},
                                         {6, 1, 6},
                                         {6, 6, 1},
                                         {6, 4, 2},     // 1.5: 8 batches, the nearest to 6 (4 is as near)
                                         {6, 5, 1},     // 1.2: 5 batches
                                         {6, 8, 1},     // 0.75: 8 batches
                                         {6, 12, 1},    // 0.5, never 0
                                         {6, 13, 1},    // below a half: still 1
                                         {5, 2, 3},     // 2.5: 6 batches
                                         {8, 3, 3},     // 2.67: 9 batches
                                         {7, 3, 2}}) {  // 2.33: 6 batches
    EXPECT_EQ(accumulation_keeping(c.batches_per_step, c.world), c.accumulate)
        << c.batches_per_step << " batches a step on " << c.world << " ranks";
  }
  EXPECT_THROW(accumulation_keeping(0, 2), std::invalid_argument);
  EXPECT_THROW(accumulation_keeping(6, 0), std::invalid_argument);
}

// The rate follows the global batch of the run's plan (TrainingPlan::global_batch_size): with
// keep_global_batch, 2 ranks accumulating 3 keep the rate of 3 ranks accumulating 2.
TEST(LrScalingTest, FollowsTheGlobalBatchOfThePlan) {
  FitConfig config;
  config.lr = 0.1;
  config.batch_size = 64;
  config.lr_scaling = "linear";
  config.trainer.accumulate_grad_batches(2);
  EXPECT_DOUBLE_EQ(config.lr_for_global_batch(64 * 2 * 3), config.scaled_lr(3));
  EXPECT_DOUBLE_EQ(config.lr_for_global_batch(64 * 2 * 3), 0.6);
  EXPECT_THROW(config.lr_for_global_batch(0), std::invalid_argument);
}

TEST(FitHelpTest, ListsTheConfigAndLrFlags) {
  const Parsed p = parse({"--help"});
  EXPECT_EQ(p.status, 0);
  for (const char* flag :
       {"--config", "--print-config", "--lr-scaling", "--lr-reference-batch", "--lr-step-epochs",
        "--lr-gamma", "cosine|constant|step", "none|linear|sqrt", "Config files:"}) {
    EXPECT_NE(p.out.find(flag), std::string::npos) << flag;
  }
}

TEST(MonitorFlagsTest, DefaultsAreLightningsAndOff) {
  const Parsed p = parse({});
  ASSERT_EQ(p.status, -1) << p.error;
  EXPECT_EQ(p.config.monitor, "val_loss");
  EXPECT_EQ(p.config.monitor_mode, "min");
  EXPECT_EQ(p.config.save_top_k, 0);
  EXPECT_EQ(p.config.checkpoint_filename, "");
  EXPECT_EQ(p.config.early_stopping_patience, 0);
  EXPECT_DOUBLE_EQ(p.config.early_stopping_min_delta, 0.0);
}

TEST_F(ConfigFileTest, MonitorFlagsReachTheConfigFromFlagsAndYaml) {
  const Parsed p = parse({"--ckpt-dir", dir_.string(), "--monitor", "val_acc", "--monitor-mode", "max",
                          "--save-top-k", "3", "--checkpoint-filename", "{epoch}-{val_acc:.4f}",
                          "--early-stopping-patience", "2", "--early-stopping-min-delta", "0.01"});
  ASSERT_EQ(p.status, -1) << p.error;
  EXPECT_EQ(p.config.monitor, "val_acc");
  EXPECT_EQ(p.config.monitor_mode, "max");
  EXPECT_EQ(p.config.save_top_k, 3);
  EXPECT_EQ(p.config.checkpoint_filename, "{epoch}-{val_acc:.4f}");
  EXPECT_EQ(p.config.early_stopping_patience, 2);
  EXPECT_DOUBLE_EQ(p.config.early_stopping_min_delta, 0.01);

  const std::string file = write(
      "monitor.yaml", "ckpt-dir: " + dir_.string() +
                          "\nmonitor: train_loss\nsave-top-k: -1\n"
                          "checkpoint-filename: \"best-{train_loss:.3f}\"\nearly-stopping-patience: 4\n");
  const Parsed yaml = parse({"--config", file});
  ASSERT_EQ(yaml.status, -1) << yaml.error;
  EXPECT_EQ(yaml.config.monitor, "train_loss");
  EXPECT_EQ(yaml.config.save_top_k, -1);
  EXPECT_EQ(yaml.config.checkpoint_filename, "best-{train_loss:.3f}");
  EXPECT_EQ(yaml.config.early_stopping_patience, 4);

  // --print-config writes them, and reads back the same.
  const Parsed printed = parse({"--config", file, "--print-config"});
  ASSERT_EQ(printed.status, 0) << printed.error;
  EXPECT_NE(printed.out.find("\nmonitor-mode: min\n"), std::string::npos) << printed.out;
  EXPECT_NE(printed.out.find("\nsave-top-k: -1\n"), std::string::npos) << printed.out;
  const Parsed again = parse({"--config", write("printed.yaml", printed.out)});
  ASSERT_EQ(again.status, -1) << again.error << printed.out;
  EXPECT_EQ(again.config.checkpoint_filename, "best-{train_loss:.3f}");
  EXPECT_EQ(again.config.save_top_k, -1);

  const Parsed defaults = parse({"--print-config"});
  ASSERT_EQ(defaults.status, 0) << defaults.error;
  EXPECT_NE(defaults.out.find("checkpoint-filename: null  # default: epoch={epoch}-step={step}"),
            std::string::npos)
      << defaults.out;
}

TEST(MonitorFlagsTest, BadValuesNameTheFlagTheValueAndWhatIsAccepted) {
  expect_refused({
      {{"--monitor-mode", "lowest"}, "--monitor-mode 'lowest' is not known (expected one of: min, max)"},
      {{"--save-top-k", "-2", "--ckpt-dir", "ck"},
       "--save-top-k must be -1 (keep all), 0 (none) or a count >= 1, got -2"},
      {{"--save-top-k", "2"}, "--save-top-k 2 needs --ckpt-dir, where the best checkpoints are written"},
      {{"--early-stopping-patience", "-1"}, "--early-stopping-patience must be >= 0, got -1"},
      {{"--early-stopping-min-delta", "-0.5"}, "--early-stopping-min-delta must be a number >= 0, got -0.5"},
      {{"--early-stopping-min-delta", "nan"}, "--early-stopping-min-delta must be a number >= 0, got nan"},
      {{"--early-stopping-patience", "2", "--monitor", ""}, "--monitor '' names no metric"},
      {{"--checkpoint-filename", "{epoch}"},
       "--checkpoint-filename '{epoch}' names the --save-top-k files, "
       "and --save-top-k is 0"},
      {{"--save-top-k", "1", "--ckpt-dir", "ck", "--checkpoint-filename", "{epoch"},
       "--checkpoint-filename '{epoch' is not a file name pattern"},
      {{"--save-top-k", "1", "--ckpt-dir", "ck", "--checkpoint-filename", "a/{epoch}"},
       "--checkpoint-filename 'a/{epoch}' is not a file name pattern"},
      {{"--save-top-k", "1", "--ckpt-dir", "ck", "--checkpoint-filename", "{{epoch}}"},
       "--checkpoint-filename '{{epoch}}' is not a file name pattern"},
  });
}

TEST(FitHelpTest, ListsTheMonitorFlagsWithTheirDefaults) {
  const Parsed p = parse({"--help"});
  EXPECT_EQ(p.status, 0);
  for (const char* text : {"--monitor NAME=val_loss", "--monitor-mode min|max=min", "--save-top-k K=0",
                           "--checkpoint-filename PATTERN", "epoch={epoch}-step={step}",
                           "--early-stopping-patience N=0", "--early-stopping-min-delta D=0"}) {
    EXPECT_NE(p.out.find(text), std::string::npos) << text << "\n" << p.out;
  }
}

// --resume auto (what `lockstep slurm` gives a requeued job): last.ckpt when it exists, else a fresh start.
TEST_F(ConfigFileTest, ResumeAutoResumesOnlyWhenLastCkptExists) {
  const std::string ckpt = (dir_ / "ck").string();
  Parsed fresh = parse({"--data", "synthetic", "--ckpt-dir", ckpt, "--resume", "auto"});
  ASSERT_EQ(fresh.status, -1) << fresh.error;
  EXPECT_NO_THROW(fresh.config.validate()) << "no last.ckpt yet is not an error";
  EXPECT_EQ(fresh.config.trainer.resume_path(), "") << "nothing to resume: start fresh";

  fs::create_directories(ckpt);
  write("ck/last.ckpt", "bytes");
  EXPECT_EQ(fresh.config.trainer.resume_path(), ckpt + "/last.ckpt");
  EXPECT_NO_THROW(fresh.config.validate());

  const Parsed no_dir = parse({"--data", "synthetic", "--resume", "auto"});
  EXPECT_EQ(no_dir.status, 2);
  EXPECT_NE(no_dir.error.find("--resume 'auto' needs --ckpt-dir, where last.ckpt lives"), std::string::npos)
      << no_dir.error;
  FitConfig other;
  other.trainer.resume("/some/file.ckpt");
  EXPECT_EQ(other.trainer.resume_path(), "/some/file.ckpt") << "other values pass through";
}

// The library names its options; `lockstep fit` shows them as its flags, and leaves paths and prose alone.
TEST(InFlagWords, OptionNamesBecomeFlagsAndPathsStay) {
  using lockstep::cli::in_flag_words;
  EXPECT_EQ(in_flag_words("clip gradients (gradient_clip_val), or skip (on_nan skip)"),
            "clip gradients (--gradient-clip-val), or skip (--on-nan skip)");
  EXPECT_EQ(in_flag_words("num_nodes 2 needs one launcher per node"),
            "--num-nodes 2 needs one launcher per node");
  EXPECT_EQ(in_flag_words("cannot open '/runs/ckpt_dir/last.ckpt'"),
            "cannot open '/runs/ckpt_dir/last.ckpt'");
  EXPECT_EQ(in_flag_words("cannot create directory '/x': denied (choose another ckpt_dir)"),
            "cannot create directory '/x': denied (choose another --ckpt-dir)");
  EXPECT_EQ(in_flag_words("max_steps_total on_nanny"), "max_steps_total on_nanny");
  // One-word options only where they are written as options: with a value, or opening the message.
  EXPECT_EQ(in_flag_words("resume 'last' needs ckpt_dir, where last.ckpt lives"),
            "--resume 'last' needs --ckpt-dir, where last.ckpt lives");
  EXPECT_EQ(in_flag_words("the model's data moves to the backend; resume it later"),
            "the model's data moves to the backend; resume it later");
  EXPECT_EQ(in_flag_words("lr must be a positive number, got -1"), "--lr must be a positive number, got -1");
  EXPECT_EQ(in_flag_words("use backend 'gloo' or 'hier'"), "use --backend 'gloo' or 'hier'");
}

// Every option of FitConfig and TrainerOptions that a flag sets maps to that flag, aliases included.
TEST(InFlagWords, FitOptionFlagsComeFromTheFlagsThemselves) {
  const auto& flags = lockstep::cli::fit_option_flags();
  const auto flag_of = [&](const std::string& option) {
    for (const auto& [name, flag] : flags) {
      if (name == option) return flag;
    }
    return std::string();
  };
  EXPECT_EQ(flag_of("max_epochs"), "--max-epochs");
  EXPECT_EQ(flag_of("collective_timeout"), "--collective-timeout");
  EXPECT_EQ(flag_of("early_stopping_min_delta"), "--early-stopping-min-delta");
  EXPECT_EQ(flag_of("data_dir"), "--data-dir");
  EXPECT_EQ(flag_of("model"), "--model");
  EXPECT_EQ(flag_of("limit_val_batches"), "--limit-val-batches");
  EXPECT_EQ(flag_of("num_nodes"), "--num-nodes");
  EXPECT_EQ(flag_of("persistent_workers"), "") << "no flag sets it";
}

}  // namespace

TEST(TextFlagsTest, GptTrainsOnTextAndTextFileReachesTheConfig) {
  const Parsed ok = parse({"--model", "gpt", "--data", "text", "--text-file", "/tmp/book.txt"});
  ASSERT_EQ(ok.status, -1) << ok.error;
  EXPECT_EQ(ok.config.text_file, "/tmp/book.txt");
  EXPECT_EQ(ok.config.resolved_text_file(), "/tmp/book.txt");
  const Parsed fortunes = parse({"--model", "gpt", "--data", "text"});
  ASSERT_EQ(fortunes.status, -1) << fortunes.error;
  EXPECT_EQ(fortunes.config.resolved_text_file(), "/usr/share/games/fortunes");
  EXPECT_EQ(parse({}).config.resolved_text_file(), "");  // images: no text
}

TEST(TextFlagsTest, ModelAndDataMustMatchAndImageFlagsAreRefused) {
  expect_refused({
      {{"--model", "gpt"},
       "--model 'gpt' is a language model and trains on --data 'text', not 'fashion-mnist'"},
      {{"--data", "text"}, "--data 'text' trains a language model, not --model 'mlp': use --model 'gpt'"},
      {{"--text-file", "a.txt"}, "--text-file applies to --data 'text' only"},
      {{"--model", "gpt", "--data", "text", "--data-dir", "d"}, "--data-dir does not apply to --data 'text'"},
      {{"--model", "gpt", "--data", "text", "--augment", "on"}, "--augment applies to images"},
      {{"--model", "gpt", "--data", "text", "--data-on-device"}, "--data-on-device applies to images"},
      {{"--model", "gpt", "--data", "text", "--mlp-hidden", "8"}, "leave it unset, or use --model 'mlp'"},
  });
}

// --tensor-parallel reaches TrainerOptions; what it cannot split or work with is refused in flag words.
TEST(TensorParallelFlagsTest, ReachesTheTrainerAndWhatItCannotWorkWithIsRefused) {
  const Parsed ok = parse({"--model", "gpt", "--data", "text", "--tensor-parallel", "2", "--devices", "4",
                           "--strategy", "zero1"});
  ASSERT_EQ(ok.status, -1) << ok.error;
  EXPECT_EQ(ok.config.trainer.tensor_parallel(), 2);
  EXPECT_EQ(parse({}).config.trainer.tensor_parallel(), 1);
  const std::vector<std::string> gpt = {"--model", "gpt", "--data", "text", "--tensor-parallel", "2"};
  const auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), gpt.begin(), gpt.end());
    return more;
  };
  expect_refused({
      {{"--tensor-parallel", "2"}, "--tensor-parallel 2 splits --model 'gpt' only, not 'mlp'"},
      {{"--model", "gpt", "--data", "text", "--tensor-parallel", "0"},
       "--tensor-parallel must be >= 1, got 0"},
      {with({"--devices", "3"}), "--tensor-parallel 2 does not divide --devices=3: choose a multiple of it"},
      {with({"--strategy", "fsdp"}), "--tensor-parallel 2 does not work with --strategy 'fsdp'"},
  });
}
