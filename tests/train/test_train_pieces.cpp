// Unit tests of the train layer's pieces that need no ranks: the fit config and its validation, batch
// limits, the LR schedule, atomic files, the metrics writer, and checkpoints' checksums (every damaged,
// truncated or foreign file refused with a message naming it). (The fit loop itself runs end to end
// with real ranks in tests/e2e/fit_e2e.sh.)
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>
#include <nlohmann/json.hpp>

#include "lockstep/optim/lr_schedule.h"
#include "lockstep/train/atomic_file.h"
#include "lockstep/train/checkpoint.h"
#include "lockstep/train/epoch_metrics.h"
#include "lockstep/train/error_message.h"
#include "lockstep/train/file_checksum.h"
#include "lockstep/train/fit_config.h"
#include "lockstep/train/step_breakdown.h"

namespace fs = std::filesystem;
using lockstep::comm::Backend;
using lockstep::optim::LrSchedule;
using lockstep::optim::LrShape;
using lockstep::train::AcceleratorKind;
using lockstep::train::BatchLimit;
using lockstep::train::EpochBreakdown;
using lockstep::train::FitConfig;
using lockstep::train::PhaseTimes;
using lockstep::train::Precision;
using lockstep::train::StepPhase;
using lockstep::train::StepTimer;

namespace {

std::string error_of(const FitConfig& config) {
  try {
    config.validate();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("lockstep-train-test-" + std::to_string(::getpid()));
  TempDir() { fs::create_directories(path); }
  ~TempDir() { fs::remove_all(path); }
};

std::string read_all(const fs::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

// What lockstep fit and export print for an error: a LibTorch error's message without its C++ stack trace,
// unless LOCKSTEP_DEBUG asks for it; other exceptions as they are.
TEST(ErrorMessageTest, LibTorchErrorsLoseTheirStackTraceUnlessDebugging) {
  const auto torch_error = [] {
    try {
      TORCH_CHECK(false, "the model's input has 3 channels, expected 1");
    } catch (const c10::Error& e) {
      return e;
    }
    throw std::logic_error("TORCH_CHECK(false) did not throw");
  };
  const c10::Error error = torch_error();
  ::unsetenv("LOCKSTEP_DEBUG");
  EXPECT_EQ(lockstep::train::error_message(error), "the model's input has 3 channels, expected 1");
  ::setenv("LOCKSTEP_DEBUG", "0", 1);
  EXPECT_EQ(lockstep::train::error_message(error), "the model's input has 3 channels, expected 1");
  ::setenv("LOCKSTEP_DEBUG", "1", 1);
  EXPECT_EQ(lockstep::train::error_message(error), std::string(error.what()));
  ::unsetenv("LOCKSTEP_DEBUG");
  EXPECT_EQ(lockstep::train::error_message(std::invalid_argument("max_steps must be >= 1, got 0")),
            "max_steps must be >= 1, got 0");
}

TEST(FitConfigTest, DefaultsAreValidAndResolve) {
  FitConfig config;
  EXPECT_EQ(error_of(config), "");
  EXPECT_EQ(config.resolved_data_dir(), "/usr/share/datasets/fashion-mnist");
  EXPECT_DOUBLE_EQ(config.resolved_lr(), 1e-3);
  EXPECT_FALSE(config.resolved_augment());
  config.optimizer = "sgd";
  EXPECT_DOUBLE_EQ(config.resolved_lr(), 0.05);
  config.data = "cifar10";
  config.data_dir = "/x";
  EXPECT_TRUE(config.resolved_augment());
  config.augment = false;
  EXPECT_FALSE(config.resolved_augment());
}

// The library names its options (lockstep fit shows them as flags: test_fit_flags.cpp).
TEST(FitConfigTest, BadValuesNameTheOptionTheValueAndTheChoices) {
  FitConfig config;
  config.model = "vgg";
  EXPECT_EQ(error_of(config), "model 'vgg' is not known (expected one of: mlp, cnn, resnet18, gpt)");
  config = FitConfig();
  config.data = "imagenet";
  EXPECT_EQ(error_of(config),
            "data 'imagenet' is not known (expected one of: fashion-mnist, mnist, cifar10, synthetic, text)");
  config = FitConfig();
  config.batch_size = 0;
  EXPECT_EQ(error_of(config), "batch_size must be >= 1, got 0");
  config = FitConfig();
  config.lr = -1.0;
  EXPECT_NE(error_of(config).find("lr must be a positive number"), std::string::npos);
  config = FitConfig();
  config.trainer.backend(Backend::kNccl);
  EXPECT_EQ(error_of(config), "");  // on a GPU (accelerator auto decides at run time)
  config.trainer.accelerator(AcceleratorKind::kCpu);
  EXPECT_NE(error_of(config).find("backend 'auto', 'shm', 'hier', 'gloo' or 'mpi' on the CPU"),
            std::string::npos);
  config = FitConfig();
  config.trainer.backend(Backend::kMpi);
  EXPECT_EQ(error_of(config), "");
  config = FitConfig();
  config.trainer.backend(Backend::kShm);
  EXPECT_EQ(error_of(config), "");
  config = FitConfig();
  config.trainer.precision(Precision::k16Mixed);
  EXPECT_EQ(error_of(config), "");
  config.trainer.accelerator(AcceleratorKind::kCpu);
  EXPECT_NE(error_of(config).find("needs a CUDA device"), std::string::npos);
  EXPECT_NE(error_of(config).find("use precision 'bf16-mixed'"), std::string::npos);
  config.trainer.precision(Precision::kBf16Mixed);
  EXPECT_EQ(error_of(config), "");
  config = FitConfig();
  config.trainer.devices(0);
  EXPECT_EQ(error_of(config), "devices must be >= 1, got 0");
  config = FitConfig();
  config.trainer.max_epochs(0);  // the Trainer accepts 0 epochs; lockstep fit trains at least one
  EXPECT_EQ(error_of(config), "max_epochs must be >= 1, got 0");
  config = FitConfig();
  config.warmup_epochs = 11;
  EXPECT_NE(error_of(config).find("warmup_epochs must be in [0, max_epochs]"), std::string::npos);
  config = FitConfig();
  config.data = "synthetic";
  config.data_dir = "/tmp";
  EXPECT_NE(error_of(config).find("data_dir is meaningless"), std::string::npos);
  config = FitConfig();
  config.data = "cifar10";
  EXPECT_NE(error_of(config).find("data 'cifar10' needs data_dir"), std::string::npos);
  config = FitConfig();
  config.trainer.resume("auto");
  EXPECT_NE(error_of(config).find("resume 'auto' needs ckpt_dir"), std::string::npos);
}

// PhaseTimes of one rank: `busy` ms per batch spread over data, forward, backward and optimizer, plus
// `wait` ms of all-reduce, over 4 batches.
PhaseTimes phase_times(double busy, double wait) {
  PhaseTimes t;
  t.batches = 4;
  t.seconds = {0.1 * busy, 0.4 * busy, 0.4 * busy, wait, 0.1 * busy};
  for (double& s : t.seconds) s *= 4 / 1000.0;
  return t;
}

// The slowest rank is the busiest one, measured against the other ranks' median; its wait does not count
// (the fast ranks spend the difference waiting for it).
TEST(StepBreakdownTest, TheBusiestRankAgainstTheOthersMedian) {
  const EpochBreakdown b = lockstep::train::make_breakdown(
      {phase_times(10, 12), phase_times(10, 12), phase_times(12, 10), phase_times(20, 0.5)});
  EXPECT_EQ(b.slowest_rank, 3);
  EXPECT_NEAR(b.slowest_excess_pct, 100.0, 1e-9);  // 20 against the median of 10, 10, 12
  EXPECT_NEAR(b.step_ms[0], 22.0, 1e-9);
  EXPECT_NEAR(b.busy_ms[3], 20.0, 1e-9);
  EXPECT_NEAR(b.rank_ms[2][static_cast<size_t>(StepPhase::kForward)], 4.8, 1e-9);
  EXPECT_TRUE(b.has_straggler());
  EXPECT_NE(b.straggler_line(3).find("epoch 3: rank 3 is a straggler: 20.0 ms busy a step, 100% over"),
            std::string::npos)
      << b.straggler_line(3);
  // 20% over is not a straggler yet; 25% is.
  EXPECT_FALSE(lockstep::train::make_breakdown({phase_times(10, 2), phase_times(12, 0)}).has_straggler());
  EXPECT_TRUE(lockstep::train::make_breakdown({phase_times(10, 2.5), phase_times(12.5, 0)}).has_straggler());
  const EpochBreakdown one = lockstep::train::make_breakdown({phase_times(30, 0)});
  EXPECT_FALSE(one.has_straggler());
  EXPECT_EQ(one.slowest_excess_pct, 0.0);
}

TEST(StepBreakdownTest, ScalarsAndJsonNameEveryRankAndPhase) {
  const EpochBreakdown b = lockstep::train::make_breakdown({phase_times(10, 1), phase_times(11, 0)});
  const auto scalars = b.scalars();
  ASSERT_EQ(scalars.size(), 2u * 6 + 2);
  EXPECT_EQ(scalars[0].first, "breakdown/rank_0/data_ms");
  EXPECT_EQ(scalars[3].first, "breakdown/rank_0/allreduce_ms");
  EXPECT_NEAR(scalars[3].second, 1.0, 1e-12);
  EXPECT_EQ(scalars[11].first, "breakdown/rank_1/step_ms");
  EXPECT_EQ(scalars[12], (std::pair<std::string, double>{"breakdown/slowest_rank", 1.0}));
  const nlohmann::json json = nlohmann::json::parse(b.to_json());
  EXPECT_EQ(json["batches"], 4);
  EXPECT_EQ(json["ranks"].size(), 2u);
  EXPECT_NEAR(json["ranks"][1]["step_ms"].get<double>(), 11.0, 1e-9);
}

// Every n-th batch is timed; the others cost nothing and count nowhere.
TEST(StepBreakdownTest, TheTimerSamplesEveryNthBatch) {
  StepTimer timer(3);
  for (int64_t b = 0; b < 8; ++b) {
    timer.start_batch(b);
    EXPECT_EQ(timer.sampling(), b % 3 == 0) << b;
    timer.end(StepPhase::kData);
    timer.end(StepPhase::kBackward);
    timer.move(StepPhase::kBackward, StepPhase::kAllreduce, 0.5);
  }
  const PhaseTimes t = timer.take();
  EXPECT_EQ(t.batches, 3);  // 0, 3, 6
  EXPECT_NEAR(t.seconds[static_cast<size_t>(StepPhase::kAllreduce)], 1.5, 1e-12);
  EXPECT_EQ(timer.take().batches, 0) << "take() starts the next epoch afresh";
  StepTimer off;
  off.start_batch(0);
  EXPECT_FALSE(off.sampling());
}

// The step clock's lag (a test's straggler, LOCKSTEP_FAULT=R:S:lag) lands in the phase it grew in, on the
// thread that grew it only; the real time around it adds to it, so the check is a lower bound.
TEST(StepBreakdownTest, TheStepClockLagCountsInThePhaseItGrewIn) {
  StepTimer timer(1);
  timer.start_batch(0);
  timer.end(StepPhase::kData);
  lockstep::train::detail::step_clock_lag() += std::chrono::seconds(100);
  timer.end(StepPhase::kForward);
  timer.end(StepPhase::kBackward);
  const PhaseTimes t = timer.take();
  EXPECT_GE(t.seconds[static_cast<size_t>(StepPhase::kForward)], 100.0);
  EXPECT_LT(t.seconds[static_cast<size_t>(StepPhase::kData)], 100.0);
  EXPECT_LT(t.seconds[static_cast<size_t>(StepPhase::kBackward)], 100.0);
  std::chrono::nanoseconds other_thread{-1};
  std::thread([&] { other_thread = lockstep::train::detail::step_clock_lag(); }).join();
  EXPECT_EQ(other_thread.count(), 0) << "the lag is the thread's own";
  lockstep::train::detail::step_clock_lag() =
      std::chrono::nanoseconds(0);  // no timer of this thread is timing
}

TEST(BatchLimitTest, CountsAndFractions) {
  const BatchLimit all = BatchLimit::parse("--limit-train-batches", "1.0");
  EXPECT_EQ(all.apply(469), 469);
  EXPECT_EQ(BatchLimit::parse("--x", "0.25").apply(469), 117);  // floor, as Lightning
  EXPECT_EQ(BatchLimit::parse("--x", "0.0001").apply(469), 1);  // never zero batches of a non-empty epoch
  EXPECT_EQ(BatchLimit::parse("--x", "50").apply(469), 50);
  EXPECT_EQ(BatchLimit::parse("--x", "5000").apply(469), 469);
  EXPECT_EQ(BatchLimit::parse("--x", "50").apply(0), 0);
  for (const char* bad : {"0", "-3", "1.5", "0.0", "abc", "", "2x", "1e9"}) {
    try {
      BatchLimit::parse("--limit-val-batches", bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("--limit-val-batches '") + bad + "'"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(LrScheduleTest, ConstantCosineAndWarmup) {
  const LrSchedule constant(0.1, LrShape::kConstant, 100);
  EXPECT_DOUBLE_EQ(constant.at(0), 0.1);
  EXPECT_DOUBLE_EQ(constant.at(99), 0.1);

  const LrSchedule cosine(0.1, LrShape::kCosine, 100);
  EXPECT_DOUBLE_EQ(cosine.at(0), 0.1);
  EXPECT_NEAR(cosine.at(50), 0.05, 1e-12);  // halfway: half the rate
  EXPECT_NEAR(cosine.at(99), 0.1 * 0.5 * (1 + std::cos(M_PI * 99 / 100)), 1e-15);
  EXPECT_GT(cosine.at(99), 0.0);
  EXPECT_DOUBLE_EQ(cosine.at(1000), cosine.at(99));  // beyond the end: the last value
  for (int s = 1; s < 100; ++s) EXPECT_LT(cosine.at(s), cosine.at(s - 1)) << s;

  const LrSchedule warm(0.1, LrShape::kCosine, 110, /*warmup_steps=*/10);
  EXPECT_NEAR(warm.at(0), 0.01, 1e-15);
  EXPECT_NEAR(warm.at(9), 0.1, 1e-15);
  EXPECT_DOUBLE_EQ(warm.at(10), 0.1);  // cosine starts after warmup
  EXPECT_NEAR(warm.at(60), 0.05, 1e-12);

  EXPECT_THROW(LrSchedule(0.0, LrShape::kCosine, 10), std::invalid_argument);
  EXPECT_THROW(LrSchedule(0.1, LrShape::kCosine, 0), std::invalid_argument);
  EXPECT_THROW(lockstep::optim::parse_lr_shape("exponential"), std::invalid_argument);
  EXPECT_EQ(lockstep::optim::parse_lr_shape("cosine"), LrShape::kCosine);
}

TEST(LrScheduleTest, StepDecaysByGammaAtEachBoundary) {
  LrSchedule step(0.1, LrShape::kStep, /*total_steps=*/90);
  step.step_decay(/*every_steps=*/30, /*gamma=*/0.1);
  EXPECT_DOUBLE_EQ(step.at(0), 0.1);
  EXPECT_DOUBLE_EQ(step.at(29), 0.1);  // the last step before the first boundary
  EXPECT_DOUBLE_EQ(step.at(30), 0.1 * 0.1);
  EXPECT_DOUBLE_EQ(step.at(59), 0.1 * 0.1);
  EXPECT_DOUBLE_EQ(step.at(60), 0.1 * 0.1 * 0.1);
  EXPECT_DOUBLE_EQ(step.at(89), 0.1 * 0.1 * 0.1);
  EXPECT_DOUBLE_EQ(step.at(500), step.at(89));  // beyond the end: the last value
  EXPECT_EQ(lockstep::optim::parse_lr_shape("step"), LrShape::kStep);
  EXPECT_STREQ(lockstep::optim::to_string(LrShape::kStep), "step");

  // After a warmup, the decays count from its end (torch's SequentialLR(LinearLR, StepLR)).
  LrSchedule warm(0.2, LrShape::kStep, /*total_steps=*/50, /*warmup_steps=*/10);
  warm.step_decay(/*every_steps=*/20, /*gamma=*/0.5);
  EXPECT_NEAR(warm.at(0), 0.02, 1e-15);
  EXPECT_NEAR(warm.at(9), 0.2, 1e-15);
  EXPECT_DOUBLE_EQ(warm.at(10), 0.2);
  EXPECT_DOUBLE_EQ(warm.at(29), 0.2);
  EXPECT_DOUBLE_EQ(warm.at(30), 0.1);
  EXPECT_DOUBLE_EQ(warm.at(49), 0.1);
  EXPECT_EQ(warm.decay_every_steps(), 20);
  EXPECT_DOUBLE_EQ(warm.decay_gamma(), 0.5);

  // Without step_decay(): x0.1 every third of the steps after warmup.
  const LrSchedule plain(1.0, LrShape::kStep, /*total_steps=*/31, /*warmup_steps=*/1);
  EXPECT_EQ(plain.decay_every_steps(), 10);
  EXPECT_DOUBLE_EQ(plain.at(10), 1.0);
  EXPECT_DOUBLE_EQ(plain.at(11), 0.1);

  EXPECT_THROW(step.step_decay(0, 0.1), std::invalid_argument);
  EXPECT_THROW(step.step_decay(10, 0.0), std::invalid_argument);
  EXPECT_THROW(step.step_decay(10, 1.5), std::invalid_argument);
  LrSchedule cosine(0.1, LrShape::kCosine, 100);
  EXPECT_THROW(cosine.step_decay(10, 0.1), std::invalid_argument);
}

TEST(AtomicFileTest, ReplacesWholeOrNotAtAll) {
  TempDir dir;
  const fs::path target = dir.path / "final.pt";
  lockstep::train::write_atomically(target.string(),
                                    [](const std::string& tmp) { std::ofstream(tmp) << "first"; });
  EXPECT_EQ(read_all(target), "first");

  // A writer that fails half-way leaves the old file and no temporary behind.
  EXPECT_THROW(lockstep::train::write_atomically(target.string(),
                                                 [](const std::string& tmp) {
                                                   std::ofstream(tmp) << "half";
                                                   throw std::runtime_error("disk full");
                                                 }),
               std::runtime_error);
  EXPECT_EQ(read_all(target), "first");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()), 1);

  lockstep::train::write_atomically(target.string(),
                                    [](const std::string& tmp) { std::ofstream(tmp) << "second"; });
  EXPECT_EQ(read_all(target), "second");
}

TEST(AtomicFileTest, EnsureWritableDirCreatesOrExplains) {
  TempDir dir;
  const fs::path nested = dir.path / "a" / "b";
  lockstep::train::ensure_writable_dir(nested.string());
  EXPECT_TRUE(fs::is_directory(nested));
  EXPECT_TRUE(fs::is_empty(nested));  // the probe file is gone
  std::ofstream(dir.path / "file") << "x";
  try {
    lockstep::train::ensure_writable_dir((dir.path / "file" / "sub").string());
    ADD_FAILURE() << "a directory under a file was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find((dir.path / "file" / "sub").string()), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("(choose another ckpt_dir)"), std::string::npos) << e.what();
  }
}

TEST(MetricsWriterTest, AppendsOneJsonObjectPerEpoch) {
  TempDir dir;
  const fs::path path = dir.path / "m.jsonl";
  lockstep::train::EpochMetrics m;
  m.epoch = 0;
  m.step = 469;
  m.val_acc = 0.8512;
  m.world_size = 2;
  {
    lockstep::train::MetricsWriter writer(path.string());
    writer.write(m);
    m.epoch = 1;
    writer.write(m);
  }
  lockstep::train::MetricsWriter(path.string()).write(m);  // appends, never truncates
  std::ifstream in(path);
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    const auto json = nlohmann::json::parse(line);
    for (const char* key :
         {"epoch", "step", "train_loss", "val_loss", "val_acc", "epoch_s", "val_s", "samples_per_s"}) {
      EXPECT_TRUE(json.contains(key)) << key;
    }
    EXPECT_EQ(json["val_acc"].get<double>(), 0.8512);
    ++lines;
  }
  EXPECT_EQ(lines, 3);
  try {
    lockstep::train::MetricsWriter((dir.path / "missing" / "m.jsonl").string());
    ADD_FAILURE() << "opened a file in a missing directory";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("missing/m.jsonl"), std::string::npos) << e.what();
  }
}

namespace {

// A checkpoint of a 64x64 linear model (16 KiB of weights), as `lockstep fit` writes one.
struct SmallCheckpoint {
  torch::nn::Linear model{64, 64};
  torch::optim::SGD optimizer{model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9)};

  lockstep::train::CheckpointState state() const {
    lockstep::train::CheckpointState state;
    state.position.step = 7;
    state.model = "linear";
    state.rng_states = lockstep::train::cpu_rng_state().unsqueeze(0);
    return state;
  }
  void save(const fs::path& path) {
    lockstep::train::save_checkpoint(path.string(), *model, optimizer, state());
  }
};

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// load_checkpoint's error for `path` into a fresh model ("" when it loads).
std::string load_error(const fs::path& path) {
  SmallCheckpoint target;
  try {
    lockstep::train::load_checkpoint(path.string(), "linear", *target.model, target.optimizer);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_CONTAINS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

}  // namespace

TEST(CheckpointChecksumTest, RoundTripsAndEndsWithTheTrailer) {
  TempDir dir;
  const fs::path path = dir.path / "last.ckpt";
  SmallCheckpoint saved;
  saved.save(path);
  const std::string bytes = read_bytes(path);
  ASSERT_GT(bytes.size(), lockstep::train::kChecksumTrailerBytes);
  EXPECT_TRUE(lockstep::train::ends_with_checksum_trailer(bytes));
  EXPECT_EQ(bytes.substr(bytes.size() - 8), "LKSTPCRC");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()),
            1);  // no temporary left

  SmallCheckpoint loaded;
  const auto state =
      lockstep::train::load_checkpoint(path.string(), "linear", *loaded.model, loaded.optimizer);
  EXPECT_EQ(state.position.step, 7);
  EXPECT_TRUE(torch::equal(loaded.model->weight, saved.model->weight));

  // Zip readers find the archive's directory from the end, so LibTorch's own reader (and Python's
  // torch.jit.load, tests/e2e/export_e2e.sh) still reads the file with the trailer after it.
  torch::serialize::InputArchive plain;
  plain.load_from(path.string());
  c10::IValue step;
  ASSERT_TRUE(plain.try_read("step", step));
  EXPECT_EQ(step.toInt(), 7);
}

TEST(CheckpointChecksumTest, AFlippedByteAnywhereIsRefusedNamingBothChecksums) {
  TempDir dir;
  const fs::path good = dir.path / "last.ckpt";
  SmallCheckpoint saved;
  saved.save(good);
  const std::string bytes = read_bytes(good);
  // The weight's raw bytes lie stored (uncompressed) in the archive: flip one in the middle of them.
  const auto* weight = static_cast<const char*>(saved.model->weight.data_ptr());
  const size_t weight_at = bytes.find(std::string(weight, 64));
  ASSERT_NE(weight_at, std::string::npos) << "the weight's bytes are not in the file";
  const size_t weight_middle = weight_at + saved.model->weight.nbytes() / 2;

  // Without the checksum, LibTorch 1.13 loads such a file without complaint and with another value (its
  // zip reader checks no CRC): what the trailer is for.
  {
    std::string payload = bytes.substr(0, bytes.size() - lockstep::train::kChecksumTrailerBytes);
    payload[weight_middle] ^= 0x40;
    torch::serialize::InputArchive archive;
    archive.load_from(payload.data(), payload.size());
    torch::serialize::InputArchive model;
    ASSERT_TRUE(archive.try_read("model", model));
    at::Tensor read;
    ASSERT_TRUE(model.try_read("weight", read));
    EXPECT_FALSE(torch::equal(read, saved.model->weight));
  }

  const size_t trailer_at = bytes.size() - lockstep::train::kChecksumTrailerBytes;
  for (const size_t at : {weight_middle, size_t{0}, bytes.size() / 2, trailer_at - 1, trailer_at + 8}) {
    std::string damaged = bytes;
    damaged[at] ^= 0x01;
    const fs::path path = dir.path / ("flipped_" + std::to_string(at) + ".ckpt");
    write_bytes(path, damaged);
    const std::string message = load_error(path);
    EXPECT_CONTAINS(message, "checkpoint '" + path.string() + "' is damaged") << " (byte " << at << ")";
    EXPECT_CONTAINS(message, "changed after lockstep wrote it");
    EXPECT_CONTAINS(message, "resume from an older checkpoint (resume 'PATH')");
    if (at < trailer_at) {
      EXPECT_CONTAINS(message, "the crc32 of its " + std::to_string(trailer_at) + " bytes is 0x");
      EXPECT_CONTAINS(message, ", lockstep stored 0x");
    }
  }
}

TEST(CheckpointChecksumTest, ATruncatedFileIsRefusedAtEveryCut) {
  TempDir dir;
  const fs::path good = dir.path / "last.ckpt";
  SmallCheckpoint saved;
  saved.save(good);
  const std::string bytes = read_bytes(good);
  const size_t trailer_at = bytes.size() - lockstep::train::kChecksumTrailerBytes;
  // Cut points: empty, inside the zip's first header, half-way, just before and inside the trailer,
  // one byte short. `trailer_at` leaves a whole, valid zip without the trailer.
  for (const size_t cut : {size_t{0}, size_t{10}, bytes.size() / 2, trailer_at - 1, trailer_at,
                           trailer_at + 12, bytes.size() - 1}) {
    const fs::path path = dir.path / ("cut_" + std::to_string(cut) + ".ckpt");
    write_bytes(path, bytes.substr(0, cut));
    const std::string message = load_error(path);
    EXPECT_CONTAINS(message, "checkpoint '" + path.string() +
                                 "' does not end with lockstep's checksum trailer (" + std::to_string(cut) +
                                 " bytes)")
        << " (cut at " << cut << ")";
    EXPECT_CONTAINS(message, "truncated");
    EXPECT_CONTAINS(message, "or start from scratch");
  }
  // Bytes added after the trailer, or a trailer whose length was edited.
  write_bytes(dir.path / "extended.ckpt", bytes + "x");
  EXPECT_CONTAINS(load_error(dir.path / "extended.ckpt"), "does not end with lockstep's checksum trailer");
  std::string edited = bytes;
  edited[trailer_at] ^= 0x01;  // the stored length's lowest byte
  write_bytes(dir.path / "length.ckpt", edited);
  EXPECT_CONTAINS(load_error(dir.path / "length.ckpt"), "is damaged: lockstep wrote " +
                                                            std::to_string(trailer_at ^ 1) +
                                                            " bytes before its checksum "
                                                            "trailer, the file holds " +
                                                            std::to_string(trailer_at));
  edited = bytes;
  edited[trailer_at + 12] = 9;  // the trailer's format
  write_bytes(dir.path / "format.ckpt", edited);
  EXPECT_CONTAINS(load_error(dir.path / "format.ckpt"),
                  "has checksum trailer format 9; this lockstep reads format 1");
}

TEST(CheckpointChecksumTest, ForeignFilesAreRefusedNamingTheFile) {
  TempDir dir;
  // A text file.
  write_bytes(dir.path / "notes.ckpt", "epoch 3 was fine\n");
  std::string message = load_error(dir.path / "notes.ckpt");
  EXPECT_CONTAINS(message, "checkpoint '" + (dir.path / "notes.ckpt").string() +
                               "' does not end with lockstep's "
                               "checksum trailer (17 bytes)");
  EXPECT_CONTAINS(message, "not written by this lockstep");
  // An empty zip (its end-of-central-directory record alone).
  write_bytes(dir.path / "empty.zip", std::string("PK\x05\x06", 4) + std::string(18, '\0'));
  EXPECT_CONTAINS(
      load_error(dir.path / "empty.zip"),
      "'" + (dir.path / "empty.zip").string() + "' does not end with lockstep's checksum trailer (22 bytes)");
  // A LibTorch archive of a module without the trailer (final.pt given to --resume, or torch::save).
  SmallCheckpoint other;
  torch::serialize::OutputArchive archive;
  other.model->save(archive);
  archive.save_to((dir.path / "final.pt").string());
  EXPECT_CONTAINS(load_error(dir.path / "final.pt"),
                  "'" + (dir.path / "final.pt").string() + "' does not end with lockstep's checksum trailer");
  // A file with a correct trailer over bytes that are not an archive.
  {
    lockstep::train::ChecksummedWriter out((dir.path / "forged.ckpt").string());
    out.write("not a zip", 9);
    out.finish();
  }
  message = load_error(dir.path / "forged.ckpt");
  EXPECT_CONTAINS(message, "checkpoint '" + (dir.path / "forged.ckpt").string() +
                               "' has a correct checksum but is not a LibTorch archive");
  // A missing file.
  EXPECT_CONTAINS(load_error(dir.path / "absent.ckpt"),
                  "'" + (dir.path / "absent.ckpt").string() + "' does not exist");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()), 4);  // nothing written
}

TEST(CheckpointChecksumTest, WriterErrorsNameThePath) {
  TempDir dir;
  const std::string path = (dir.path / "missing" / "x.ckpt").string();
  try {
    lockstep::train::ChecksummedWriter out(path);
    ADD_FAILURE() << "created a file in a missing directory";
  } catch (const std::runtime_error& e) {
    EXPECT_CONTAINS(e.what(), "cannot create '" + path + "'");
  }
}

// The names of a tensor-parallel checkpoint's parts: rank 0's is the path itself, the others' carry the
// save's name (a directory given with a trailing slash keeps its parts beside it); each save draws its own
// name. remove_tensor_parallel_parts keeps exactly the parts of ranks 1 .. T-1 of the kept save (their
// shards too) and removes every other part beside the path, file or directory — another save's at the same
// step too — but nothing that only looks alike.
TEST(TensorParallelParts, NamesCarryTheSaveAndOnlyTheNamedSetStays) {
  using lockstep::train::tensor_parallel_path;
  EXPECT_EQ(tensor_parallel_path("ck/last.ckpt", 0, "step-7-ab"), "ck/last.ckpt");
  EXPECT_EQ(tensor_parallel_path("ck/last.ckpt", 2, "step-7-ab"), "ck/last.ckpt.tp2.step-7-ab");
  EXPECT_EQ(tensor_parallel_path("ck/state/", 1, "step-3-cd"), "ck/state.tp1.step-3-cd");
  const std::string save = lockstep::train::tensor_parallel_save_name(12);
  EXPECT_EQ(save.rfind("step-12-", 0), 0u) << save;
  EXPECT_EQ(save.size(), std::string("step-12-").size() + 16) << save;
  EXPECT_NE(lockstep::train::tensor_parallel_save_name(12), save);
  const fs::path dir = fs::path(::testing::TempDir()) / "tp_parts";
  fs::remove_all(dir);
  fs::create_directories(dir / "last.ckpt.tp1.step-4-dd");  // a directory part (Accelerator::save_state)
  const std::vector<std::string> kept = {"last.ckpt.tp1.step-8-aa", "last.ckpt.tp2.step-8-aa",
                                         "last.ckpt.tp1.step-8-aa.step-8.shard-0-of-2"};
  const std::vector<std::string> removed = {"last.ckpt.tp1.step-8-bb", "last.ckpt.tp3.step-8-aa",
                                            "last.ckpt.tp2.step-4-cc.step-4.shard-1-of-2"};
  const std::vector<std::string> others = {"last.ckpt", "last.ckpt.tpx.step-8-aa", "last.ckpt.tp1.stepping",
                                           "last.ckpt.step-8.shard-0-of-2", "other.ckpt.tp1.step-3-aa"};
  for (const auto* names : {&kept, &removed, &others})
    for (const std::string& name : *names) std::ofstream(dir / name) << "x";
  lockstep::train::remove_tensor_parallel_parts((dir / "last.ckpt").string(), 3, "step-8-aa");
  EXPECT_FALSE(fs::exists(dir / "last.ckpt.tp1.step-4-dd"));
  for (const std::string& name : kept) EXPECT_TRUE(fs::exists(dir / name)) << name;
  for (const std::string& name : removed) EXPECT_FALSE(fs::exists(dir / name)) << name;
  for (const std::string& name : others) EXPECT_TRUE(fs::exists(dir / name)) << name;
  lockstep::train::remove_tensor_parallel_parts((dir / "last.ckpt").string(), 1, "");  // every part
  for (const std::string& name : kept) EXPECT_FALSE(fs::exists(dir / name)) << name;
  for (const std::string& name : others) EXPECT_TRUE(fs::exists(dir / name)) << name;
}
