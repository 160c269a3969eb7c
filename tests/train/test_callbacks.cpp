// Lightning's callbacks (ModelCheckpoint, EarlyStopping, LearningRateMonitor) against a fake Trainer: which
// files are written and removed, when training is asked to stop, what is logged, and that a state saved
// and loaded back makes the same decisions as the uninterrupted callback.
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "lockstep/train/callback.h"
#include "lockstep/train/early_stopping.h"
#include "lockstep/train/lr_monitor.h"
#include "lockstep/train/model_checkpoint.h"

namespace {

using lockstep::train::BatchEnd;
using lockstep::train::Callback;
using lockstep::train::EarlyStopping;
using lockstep::train::EarlyStoppingOptions;
using lockstep::train::LearningRateMonitor;
using lockstep::train::ModelCheckpoint;
using lockstep::train::ModelCheckpointOptions;
using lockstep::train::TrainerContext;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// Records what the callbacks ask for; the test sets the position and the metrics.
class FakeTrainer : public TrainerContext {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  int64_t current_epoch() const override { return epoch; }
  int64_t global_step() const override { return step; }
  const std::map<std::string, double>& callback_metrics() const override { return metrics; }
  std::vector<double> learning_rates() const override { return rates; }
  void request_stop(const std::string& reason) override { stops.push_back(reason); }
  bool should_stop() const override { return !stops.empty(); }
  void save_checkpoint(const std::string& path) override {
    saved.push_back(path);
    files.insert(path);
  }
  void remove_checkpoint(const std::string& path) override {
    removed.push_back(path);
    files.erase(path);
  }
  void log_metrics(const std::map<std::string, double>& values) override { logged.push_back(values); }
  std::string default_ckpt_dir() const override { return ckpt_dir; }

  // One epoch of `steps` optimizer steps ending with `values` as its metrics: the batch hooks, then
  // on_validation_end, as the Trainer calls them.
  void run_epoch(Callback& callback, const std::map<std::string, double>& values, int64_t steps = 10) {
    callback.on_train_epoch_start(*this);
    for (int64_t batch = 0; batch < steps; ++batch) {
      ++step;
      callback.on_train_batch_end(*this, BatchEnd{batch, /*stepped=*/true, 0.0});
    }
    metrics = values;
    metrics["epoch"] = static_cast<double>(epoch);
    metrics["step"] = static_cast<double>(step);
    callback.on_validation_end(*this);
    callback.on_train_epoch_end(*this);
    ++epoch;
  }
  void run_epochs(Callback& callback, const std::string& key, const std::vector<double>& values) {
    for (double value : values) run_epoch(callback, {{key, value}});
  }

  int64_t epoch = 0;
  int64_t step = 0;
  std::map<std::string, double> metrics;
  std::vector<double> rates{0.1};
  std::string ckpt_dir = "ck";
  std::vector<std::string> saved, removed, stops;
  std::set<std::string> files;  // saved and not removed
  std::vector<std::map<std::string, double>> logged;
};

std::set<std::string> keys(const std::map<std::string, double>& models) {
  std::set<std::string> out;
  for (const auto& [path, score] : models) out.insert(path);
  return out;
}

// ---- ModelCheckpoint ----

TEST(ModelCheckpointTest, MinModeKeepsTheTopKAndRemovesWhatFallsOut) {
  ModelCheckpoint checkpoint(
      ModelCheckpointOptions().monitor("val_loss").save_top_k(2).filename("{epoch}-{val_loss:.2f}"));
  FakeTrainer trainer;
  trainer.run_epochs(checkpoint, "val_loss", {0.5, 0.4, 0.6, 0.3, 0.45});
  // 0.6 and 0.45 are not better than the 2nd best kept at their time (0.5, then 0.4): not written.
  EXPECT_EQ(trainer.saved,
            (std::vector<std::string>{"ck/epoch=0-val_loss=0.50.ckpt", "ck/epoch=1-val_loss=0.40.ckpt",
                                      "ck/epoch=3-val_loss=0.30.ckpt"}));
  EXPECT_EQ(trainer.removed, std::vector<std::string>{"ck/epoch=0-val_loss=0.50.ckpt"});
  EXPECT_EQ(trainer.files,
            (std::set<std::string>{"ck/epoch=1-val_loss=0.40.ckpt", "ck/epoch=3-val_loss=0.30.ckpt"}));
  EXPECT_EQ(keys(checkpoint.best_k_models()), trainer.files);
  EXPECT_EQ(checkpoint.best_model_path(), "ck/epoch=3-val_loss=0.30.ckpt");
  EXPECT_DOUBLE_EQ(*checkpoint.best_model_score(), 0.3);
  EXPECT_EQ(checkpoint.kth_best_model_path(), "ck/epoch=1-val_loss=0.40.ckpt");
  EXPECT_DOUBLE_EQ(*checkpoint.kth_value(), 0.4);
}

TEST(ModelCheckpointTest, MaxModeKeepsTheHighest) {
  ModelCheckpoint checkpoint(ModelCheckpointOptions().monitor("val_acc").mode("max").save_top_k(1));
  FakeTrainer trainer;
  trainer.run_epochs(checkpoint, "val_acc", {0.7, 0.8, 0.75, 0.9, 0.9});
  // Default pattern: Lightning's "epoch={epoch}-step={step}". A tie (the last 0.9) is not an improvement.
  EXPECT_EQ(trainer.saved, (std::vector<std::string>{"ck/epoch=0-step=10.ckpt", "ck/epoch=1-step=20.ckpt",
                                                     "ck/epoch=3-step=40.ckpt"}));
  EXPECT_EQ(trainer.removed,
            (std::vector<std::string>{"ck/epoch=0-step=10.ckpt", "ck/epoch=1-step=20.ckpt"}));
  EXPECT_EQ(trainer.files, std::set<std::string>{"ck/epoch=3-step=40.ckpt"});
  EXPECT_EQ(checkpoint.best_model_path(), "ck/epoch=3-step=40.ckpt");
  EXPECT_DOUBLE_EQ(*checkpoint.best_model_score(), 0.9);
}

TEST(ModelCheckpointTest, SaveTopKMinusOneKeepsAllAndZeroNone) {
  ModelCheckpoint all(ModelCheckpointOptions().monitor("val_loss").save_top_k(-1).dirpath("best"));
  FakeTrainer trainer;
  trainer.run_epochs(all, "val_loss", {0.5, 0.7, 0.3, 0.9});
  EXPECT_EQ(trainer.saved.size(), 4u);
  EXPECT_TRUE(trainer.removed.empty());
  EXPECT_EQ(all.best_k_models().size(), 4u);
  EXPECT_EQ(all.best_model_path(), "best/epoch=2-step=30.ckpt");
  EXPECT_EQ(all.kth_best_model_path(), "best/epoch=3-step=40.ckpt");  // the worst kept

  ModelCheckpoint none(ModelCheckpointOptions().monitor("val_loss").save_top_k(0));
  FakeTrainer idle;
  idle.run_epochs(none, "val_loss", {0.5, 0.3});
  EXPECT_TRUE(idle.saved.empty());
  EXPECT_TRUE(none.best_model_path().empty());
  EXPECT_FALSE(none.best_model_score().has_value());
}

TEST(ModelCheckpointTest, SaveLastWritesLastCkptUnlessTheTrainerAlreadyDoes) {
  ModelCheckpoint elsewhere(ModelCheckpointOptions().save_top_k(0).save_last(true).dirpath("other"));
  FakeTrainer trainer;
  trainer.run_epochs(elsewhere, "val_loss", {0.5, 0.4});
  EXPECT_EQ(trainer.saved, (std::vector<std::string>{"other/last.ckpt", "other/last.ckpt"}));
  EXPECT_EQ(elsewhere.last_model_path(), "other/last.ckpt");

  // In the Trainer's own directory (here: "ck/" spelled differently) the Trainer writes last.ckpt itself.
  ModelCheckpoint same(ModelCheckpointOptions().save_top_k(0).save_last(true).dirpath("./ck/"));
  FakeTrainer own;
  own.run_epochs(same, "val_loss", {0.5});
  EXPECT_TRUE(own.saved.empty());
  EXPECT_EQ(same.last_model_path(), "./ck/last.ckpt");
}

TEST(ModelCheckpointTest, WithoutMonitorKeepsTheLatest) {
  ModelCheckpoint latest(ModelCheckpointOptions().save_top_k(1));
  FakeTrainer trainer;
  trainer.run_epochs(latest, "val_loss", {0.5, 0.4, 0.6});
  EXPECT_EQ(trainer.saved.size(), 3u);
  EXPECT_EQ(trainer.removed,
            (std::vector<std::string>{"ck/epoch=0-step=10.ckpt", "ck/epoch=1-step=20.ckpt"}));
  EXPECT_EQ(trainer.files, std::set<std::string>{"ck/epoch=2-step=30.ckpt"});
  EXPECT_EQ(latest.best_model_path(), "ck/epoch=2-step=30.ckpt");

  EXPECT_THROW(ModelCheckpoint(ModelCheckpointOptions().save_top_k(2)), std::invalid_argument);
}

TEST(ModelCheckpointTest, FilenamePatterns) {
  const std::map<std::string, double> metrics{
      {"val_loss", 0.25149}, {"val_acc", 0.875}, {"train_loss", 1234.5}};
  const auto name = [&](const std::string& pattern, bool insert = true) {
    return ModelCheckpoint::format_checkpoint_name(pattern, insert, 3, 120, metrics);
  };
  EXPECT_EQ(name(""), "epoch=3-step=120.ckpt");
  EXPECT_EQ(name("", false), "3-120.ckpt");
  EXPECT_EQ(name("{epoch}-{val_loss:.2f}"), "epoch=3-val_loss=0.25.ckpt");
  EXPECT_EQ(name("{epoch}-{val_loss:.2f}", false), "3-0.25.ckpt");
  EXPECT_EQ(name("{val_loss}"), "val_loss=0.2515.ckpt");  // metrics: .4f without a format
  EXPECT_EQ(name("model_{epoch:03d}_{train_loss:.1e}"), "model_epoch=003_train_loss=1.2e+03.ckpt");
  EXPECT_EQ(name("{val_acc:d}-{epoch:.1f}", false), "1-3.0.ckpt");
  EXPECT_EQ(name("best"), "best.ckpt");

  try {
    name("{epoch}-{val_los:.2f}");
    FAIL() << "a missing metric must throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("names 'val_los'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("available: train_loss, val_acc, val_loss, epoch, step"),
              std::string::npos)
        << e.what();
  }
  for (const char* bad : {"{epoch", "epoch}", "{}", "{epoch:xyz}", "{a{b}}", "dir/{epoch}"}) {
    EXPECT_THROW(ModelCheckpoint(ModelCheckpointOptions().filename(bad)), std::invalid_argument) << bad;
  }
}

TEST(ModelCheckpointTest, RepeatedNamesGetVersionsUnlessTheyReplaceTheFileLeaving) {
  ModelCheckpoint one(ModelCheckpointOptions().monitor("val_loss").filename("best"));
  FakeTrainer trainer;
  trainer.run_epochs(one, "val_loss", {0.5, 0.4});
  EXPECT_EQ(trainer.saved, (std::vector<std::string>{"ck/best.ckpt", "ck/best.ckpt"}));
  EXPECT_TRUE(trainer.removed.empty());  // replaced, not removed after being written
  EXPECT_EQ(trainer.files, std::set<std::string>{"ck/best.ckpt"});

  ModelCheckpoint two(ModelCheckpointOptions().monitor("val_loss").save_top_k(2).filename("best"));
  FakeTrainer twice;
  twice.run_epochs(two, "val_loss", {0.5, 0.4, 0.3});
  EXPECT_EQ(twice.saved, (std::vector<std::string>{"ck/best.ckpt", "ck/best-v1.ckpt", "ck/best.ckpt"}));
  EXPECT_EQ(twice.files, (std::set<std::string>{"ck/best.ckpt", "ck/best-v1.ckpt"}));
  EXPECT_EQ(two.best_model_path(), "ck/best.ckpt");
}

TEST(ModelCheckpointTest, EveryNTrainStepsSavesOnSteppedBatches) {
  ModelCheckpoint checkpoint(ModelCheckpointOptions().save_top_k(-1).every_n_train_steps(4));
  EXPECT_EQ(checkpoint.options().resolved_every_n_epochs(), 0);  // steps only, as Lightning
  FakeTrainer trainer;
  trainer.run_epoch(checkpoint, {{"val_loss", 1.0}}, /*steps=*/10);
  EXPECT_EQ(trainer.saved, (std::vector<std::string>{"ck/epoch=0-step=4.ckpt", "ck/epoch=0-step=8.ckpt"}));
  // A batch after which the optimizer did not step (gradient accumulation) saves nothing.
  trainer.step = 12;
  checkpoint.on_train_batch_end(trainer, BatchEnd{0, /*stepped=*/false, 0.0});
  EXPECT_EQ(trainer.saved.size(), 2u);
  checkpoint.on_train_batch_end(trainer, BatchEnd{0, /*stepped=*/true, 0.0});
  EXPECT_EQ(trainer.saved.size(), 3u);

  // Both triggers: the epoch end at a step just saved is not saved twice.
  ModelCheckpoint both(ModelCheckpointOptions().save_top_k(-1).every_n_train_steps(5).every_n_epochs(1));
  FakeTrainer twice;
  twice.run_epoch(both, {{"val_loss", 1.0}}, /*steps=*/10);
  EXPECT_EQ(twice.saved, (std::vector<std::string>{"ck/epoch=0-step=5.ckpt", "ck/epoch=0-step=10.ckpt"}));

  // every_n_epochs 2: after epochs 1, 3, ...
  ModelCheckpoint second(ModelCheckpointOptions().save_top_k(-1).every_n_epochs(2));
  FakeTrainer slow;
  slow.run_epochs(second, "val_loss", {1.0, 1.0, 1.0, 1.0});
  EXPECT_EQ(slow.saved, (std::vector<std::string>{"ck/epoch=1-step=20.ckpt", "ck/epoch=3-step=40.ckpt"}));
}

TEST(ModelCheckpointTest, StepSavesBeforeTheFirstValidationSkipAMissingMonitor) {
  ModelCheckpoint checkpoint(
      ModelCheckpointOptions().monitor("val_loss").every_n_train_steps(5).save_top_k(1));
  FakeTrainer trainer;
  trainer.run_epoch(checkpoint, {{"val_loss", 0.5}}, /*steps=*/10);  // steps 5 and 10: no val_loss yet
  EXPECT_TRUE(trainer.saved.empty());
  trainer.run_epoch(checkpoint, {{"val_loss", 0.4}}, /*steps=*/10);  // steps 15, 20: the first epoch's 0.5
  EXPECT_EQ(trainer.saved, std::vector<std::string>{"ck/epoch=1-step=15.ckpt"});
  // Once validation has run, a missing monitor is an error even at a step.
  trainer.metrics.erase("val_loss");
  trainer.step = 25;
  EXPECT_THROW(checkpoint.on_train_batch_end(trainer, BatchEnd{4, true, 0.0}), std::runtime_error);
}

TEST(ModelCheckpointTest, MissingMonitorNamesTheKeyAndTheAvailableOnes) {
  ModelCheckpoint checkpoint(ModelCheckpointOptions().monitor("val_lss"));
  FakeTrainer trainer;
  try {
    trainer.run_epoch(checkpoint, {{"val_loss", 0.5}, {"train_loss", 0.7}});
    FAIL() << "a missing monitor must throw";
  } catch (const std::runtime_error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("ModelCheckpoint(monitor='val_lss')"), std::string::npos) << message;
    EXPECT_NE(message.find("available: epoch, step, train_loss, val_loss"), std::string::npos) << message;
  }
}

TEST(ModelCheckpointTest, NonFiniteValuesNeverBecomeBest) {
  ModelCheckpoint checkpoint(ModelCheckpointOptions().monitor("val_loss").save_top_k(2));
  FakeTrainer trainer;
  trainer.run_epochs(checkpoint, "val_loss", {kNaN, 0.5, kInf, -kInf, 0.4, kNaN});
  EXPECT_EQ(trainer.saved, (std::vector<std::string>{"ck/epoch=1-step=20.ckpt", "ck/epoch=4-step=50.ckpt"}));
  EXPECT_EQ(checkpoint.best_model_path(), "ck/epoch=4-step=50.ckpt");
  EXPECT_DOUBLE_EQ(*checkpoint.best_model_score(), 0.4);

  ModelCheckpoint all(ModelCheckpointOptions().monitor("val_acc").mode("max").save_top_k(-1));
  FakeTrainer every;
  every.run_epochs(all, "val_acc", {kNaN, kInf});
  EXPECT_TRUE(every.saved.empty());
  EXPECT_TRUE(all.best_model_path().empty());
}

TEST(ModelCheckpointTest, NoDirectoryFailsAtFitStart) {
  ModelCheckpoint checkpoint(ModelCheckpointOptions().monitor("val_loss"));
  FakeTrainer trainer;
  trainer.ckpt_dir = "";
  try {
    checkpoint.on_fit_start(trainer);
    FAIL() << "no directory must throw";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("dirpath(DIR)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("give the Trainer one (ckpt_dir DIR)"), std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(ModelCheckpoint(ModelCheckpointOptions().dirpath("d")).on_fit_start(trainer));
}

TEST(ModelCheckpointTest, OptionsAreValidated) {
  EXPECT_THROW(ModelCheckpoint(ModelCheckpointOptions().mode("lowest")), std::invalid_argument);
  EXPECT_THROW(ModelCheckpoint(ModelCheckpointOptions().save_top_k(-2)), std::invalid_argument);
  EXPECT_THROW(ModelCheckpoint(ModelCheckpointOptions().every_n_train_steps(-1)), std::invalid_argument);
  EXPECT_THROW(ModelCheckpoint(ModelCheckpointOptions().every_n_epochs(-1)), std::invalid_argument);
  EXPECT_EQ(ModelCheckpoint(ModelCheckpointOptions().monitor("val_loss")).state_key(),
            "ModelCheckpoint{monitor=val_loss,mode=min,every_n_train_steps=0,every_n_epochs=1}");
}

TEST(ModelCheckpointTest, StateDictRoundTripResumesTheSameDecisions) {
  const auto options = ModelCheckpointOptions().monitor("val_loss").save_top_k(2);
  const std::vector<double> values{0.5, 0.4, 0.6, 0.45, 0.3, 0.35, 0.2};

  ModelCheckpoint uninterrupted(options);
  FakeTrainer full;
  full.run_epochs(uninterrupted, "val_loss", values);

  ModelCheckpoint first(options);
  FakeTrainer before;
  before.run_epochs(first, "val_loss", {values.begin(), values.begin() + 3});
  ModelCheckpoint resumed(options);
  resumed.load_state_dict(first.state_dict());
  EXPECT_EQ(resumed.best_k_models(), first.best_k_models());
  EXPECT_EQ(resumed.best_model_path(), first.best_model_path());
  FakeTrainer after;
  after.epoch = before.epoch;
  after.step = before.step;
  resumed.on_fit_start(after);
  after.run_epochs(resumed, "val_loss", {values.begin() + 3, values.end()});

  std::vector<std::string> saved = before.saved, removed = before.removed;
  saved.insert(saved.end(), after.saved.begin(), after.saved.end());
  removed.insert(removed.end(), after.removed.begin(), after.removed.end());
  EXPECT_EQ(saved, full.saved);
  EXPECT_EQ(removed, full.removed);
  EXPECT_EQ(resumed.best_k_models(), uninterrupted.best_k_models());
  EXPECT_EQ(resumed.best_model_path(), uninterrupted.best_model_path());
  EXPECT_EQ(resumed.best_model_score(), uninterrupted.best_model_score());
  EXPECT_EQ(resumed.kth_best_model_path(), uninterrupted.kth_best_model_path());
  EXPECT_EQ(resumed.state_dict(), uninterrupted.state_dict());

  // Resumed into another directory: the old files are not this run's to rank or remove (Lightning's rule).
  ModelCheckpoint moved(ModelCheckpointOptions().monitor("val_loss").save_top_k(2).dirpath("elsewhere"));
  moved.load_state_dict(first.state_dict());
  FakeTrainer there;
  moved.on_fit_start(there);
  EXPECT_EQ(moved.best_model_path(), first.best_model_path());
  EXPECT_TRUE(moved.best_k_models().empty());
  there.run_epochs(moved, "val_loss", {0.9, 0.8, 0.7});
  EXPECT_TRUE(there.removed.empty() || there.removed.front().rfind("elsewhere/", 0) == 0);

  EXPECT_THROW(resumed.load_state_dict("{\"best_k_models\": 3}"), std::runtime_error);
  EXPECT_THROW(resumed.load_state_dict("not json"), std::runtime_error);
}

// ---- EarlyStopping ----

TEST(EarlyStoppingTest, StopsAfterPatienceChecksWithoutImprovement) {
  EarlyStopping stopping(EarlyStoppingOptions("val_loss").patience(2));
  FakeTrainer trainer;
  trainer.run_epochs(stopping, "val_loss", {1.0, 0.9, 0.95});
  EXPECT_TRUE(trainer.stops.empty());
  EXPECT_EQ(stopping.wait_count(), 1);
  EXPECT_DOUBLE_EQ(stopping.best_score(), 0.9);
  trainer.run_epochs(stopping, "val_loss", {0.92});
  ASSERT_EQ(trainer.stops.size(), 1u);
  EXPECT_EQ(stopping.stopped_epoch(), 3);
  const std::string& reason = trainer.stops.front();
  EXPECT_NE(reason.find("val_loss did not improve"), std::string::npos) << reason;
  EXPECT_NE(reason.find("patience 2"), std::string::npos) << reason;
  EXPECT_NE(reason.find("the best was 0.9"), std::string::npos) << reason;
  EXPECT_EQ(stopping.stop_reason(), reason);
}

TEST(EarlyStoppingTest, AnImprovementResetsTheWait) {
  EarlyStopping stopping(EarlyStoppingOptions("val_loss").patience(2));
  FakeTrainer trainer;
  trainer.run_epochs(stopping, "val_loss", {1.0, 1.1, 0.8, 0.9, 0.7, 0.75});
  EXPECT_TRUE(trainer.stops.empty());
  EXPECT_EQ(stopping.wait_count(), 1);
}

TEST(EarlyStoppingTest, MinDeltaIsTheLeastImprovement) {
  EarlyStopping stopping(EarlyStoppingOptions("val_loss").patience(2).min_delta(0.1));
  FakeTrainer trainer;
  trainer.run_epochs(stopping, "val_loss", {1.0, 0.95});  // 0.05 better: not enough
  EXPECT_EQ(stopping.wait_count(), 1);
  EXPECT_DOUBLE_EQ(stopping.best_score(), 1.0);
  trainer.run_epochs(stopping, "val_loss", {0.85});  // 0.15 better than the best
  EXPECT_EQ(stopping.wait_count(), 0);
  EXPECT_DOUBLE_EQ(stopping.best_score(), 0.85);
  trainer.run_epochs(stopping, "val_loss", {0.8, 0.76});
  ASSERT_EQ(trainer.stops.size(), 1u);
  EXPECT_EQ(stopping.stopped_epoch(), 4);
}

TEST(EarlyStoppingTest, MaxModeWantsHigherValues) {
  EarlyStopping stopping(EarlyStoppingOptions("val_acc").mode("max").patience(2));
  FakeTrainer trainer;
  trainer.run_epochs(stopping, "val_acc", {0.5, 0.6, 0.6});
  EXPECT_EQ(stopping.wait_count(), 1);  // a tie is no improvement
  EXPECT_DOUBLE_EQ(stopping.best_score(), 0.6);
  trainer.run_epochs(stopping, "val_acc", {0.55});
  EXPECT_EQ(trainer.stops.size(), 1u);
}

TEST(EarlyStoppingTest, NonFiniteStopsAtOnceUnlessCheckFiniteIsOff) {
  EarlyStopping stopping(EarlyStoppingOptions("val_loss").patience(5));
  FakeTrainer trainer;
  trainer.run_epochs(stopping, "val_loss", {0.5, kNaN});
  ASSERT_EQ(trainer.stops.size(), 1u);
  EXPECT_NE(trainer.stops.front().find("val_loss = nan is not finite"), std::string::npos)
      << trainer.stops.front();
  EXPECT_EQ(stopping.stopped_epoch(), 1);

  EarlyStopping lenient(EarlyStoppingOptions("val_loss").patience(2).check_finite(false));
  FakeTrainer patient;
  patient.run_epochs(lenient, "val_loss", {0.5, kNaN});
  EXPECT_TRUE(patient.stops.empty());
  EXPECT_EQ(lenient.wait_count(), 1);  // NaN is no improvement
  EXPECT_DOUBLE_EQ(lenient.best_score(), 0.5);
  patient.run_epochs(lenient, "val_loss", {kInf});
  EXPECT_EQ(patient.stops.size(), 1u);
}

TEST(EarlyStoppingTest, ThresholdsStopAtOnce) {
  EarlyStopping good(EarlyStoppingOptions("val_loss").stopping_threshold(0.1));
  FakeTrainer reached;
  reached.run_epochs(good, "val_loss", {0.5, 0.1, 0.05});
  ASSERT_EQ(reached.stops.size(), 1u);  // 0.1 is not below 0.1
  EXPECT_EQ(good.stopped_epoch(), 2);
  EXPECT_NE(reached.stops.front().find("stopping threshold reached: val_loss = 0.05 < 0.1"),
            std::string::npos)
      << reached.stops.front();

  EarlyStopping bad(EarlyStoppingOptions("val_acc").mode("max").divergence_threshold(0.2));
  FakeTrainer diverged;
  diverged.run_epochs(bad, "val_acc", {0.5, 0.1});
  ASSERT_EQ(diverged.stops.size(), 1u);
  EXPECT_NE(diverged.stops.front().find("divergence threshold reached: val_acc = 0.1 < 0.2"),
            std::string::npos)
      << diverged.stops.front();
}

TEST(EarlyStoppingTest, MissingMonitorIsAnErrorUnlessNotStrict) {
  EarlyStopping strict(EarlyStoppingOptions("val_lss"));
  FakeTrainer trainer;
  try {
    trainer.run_epoch(strict, {{"val_loss", 0.5}});
    FAIL() << "a missing monitor must throw";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("EarlyStopping(monitor='val_lss')"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("available: epoch, step, val_loss"), std::string::npos) << e.what();
  }
  EarlyStopping lenient(EarlyStoppingOptions("val_lss").strict(false).patience(0));
  FakeTrainer quiet;
  quiet.run_epochs(lenient, "val_loss", {0.5, 0.6});
  EXPECT_TRUE(quiet.stops.empty());
}

TEST(EarlyStoppingTest, OptionsAreValidated) {
  EXPECT_THROW(EarlyStopping(EarlyStoppingOptions("")), std::invalid_argument);
  EXPECT_THROW(EarlyStopping(EarlyStoppingOptions("val_loss").mode("lowest")), std::invalid_argument);
  EXPECT_THROW(EarlyStopping(EarlyStoppingOptions("val_loss").patience(-1)), std::invalid_argument);
  EXPECT_THROW(EarlyStopping(EarlyStoppingOptions("val_loss").min_delta(-0.1)), std::invalid_argument);
  EXPECT_THROW(EarlyStopping(EarlyStoppingOptions("val_loss").stopping_threshold(kNaN)),
               std::invalid_argument);
  EXPECT_EQ(EarlyStopping(EarlyStoppingOptions("val_acc").mode("max")).state_key(),
            "EarlyStopping{monitor=val_acc,mode=max}");
}

TEST(EarlyStoppingTest, StateDictRoundTripResumesTheSameDecisions) {
  const auto options = EarlyStoppingOptions("val_loss").patience(3);
  const std::vector<double> values{1.0, 0.8, 0.9, 0.85, 0.95};  // stops at the last

  EarlyStopping uninterrupted(options);
  FakeTrainer full;
  full.run_epochs(uninterrupted, "val_loss", values);
  ASSERT_EQ(full.stops.size(), 1u);

  // A state saved before any value (best +inf) and one saved mid-wait both resume the same.
  for (std::size_t split : {std::size_t{0}, std::size_t{4}}) {
    EarlyStopping first(options);
    FakeTrainer before;
    before.run_epochs(first, "val_loss",
                      {values.begin(), values.begin() + static_cast<std::ptrdiff_t>(split)});
    EarlyStopping resumed(options);
    resumed.load_state_dict(first.state_dict());
    EXPECT_EQ(resumed.wait_count(), first.wait_count());
    EXPECT_EQ(resumed.best_score(), first.best_score());
    FakeTrainer after;
    after.epoch = before.epoch;
    after.run_epochs(resumed, "val_loss",
                     {values.begin() + static_cast<std::ptrdiff_t>(split), values.end()});
    EXPECT_EQ(after.stops, full.stops) << "split " << split;
    EXPECT_EQ(resumed.stopped_epoch(), uninterrupted.stopped_epoch());
    EXPECT_EQ(resumed.state_dict(), uninterrupted.state_dict());
  }
  EXPECT_THROW(uninterrupted.load_state_dict("{\"wait_count\": \"x\"}"), std::runtime_error);
}

// ---- LearningRateMonitor ----

TEST(LearningRateMonitorTest, RecordsEachGroupAtEpochStart) {
  LearningRateMonitor monitor;  // "epoch"
  FakeTrainer trainer;
  trainer.rates = {0.1, 0.01};
  trainer.run_epoch(monitor, {{"val_loss", 1.0}}, /*steps=*/3);
  trainer.rates = {0.05, 0.005};
  trainer.run_epoch(monitor, {{"val_loss", 1.0}}, /*steps=*/3);
  ASSERT_EQ(trainer.logged.size(), 2u);
  EXPECT_EQ(trainer.logged[0], (std::map<std::string, double>{{"lr-pg0", 0.1}, {"lr-pg1", 0.01}}));
  EXPECT_EQ(trainer.logged[1], (std::map<std::string, double>{{"lr-pg0", 0.05}, {"lr-pg1", 0.005}}));
  EXPECT_EQ(monitor.last_values(), trainer.logged[1]);
}

TEST(LearningRateMonitorTest, StepIntervalRecordsEachOptimizerStep) {
  LearningRateMonitor monitor("step");
  FakeTrainer trainer;
  trainer.run_epoch(monitor, {{"val_loss", 1.0}}, /*steps=*/4);
  EXPECT_EQ(trainer.logged.size(), 4u);
  monitor.on_train_batch_end(trainer, BatchEnd{5, /*stepped=*/false, 0.0});  // accumulating: no step
  EXPECT_EQ(trainer.logged.size(), 4u);
  EXPECT_DOUBLE_EQ(monitor.last_values().at("lr-pg0"), 0.1);
  EXPECT_THROW(LearningRateMonitor("batch"), std::invalid_argument);
}

}  // namespace
