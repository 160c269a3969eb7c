// Which device a rank trains on (device_choice.h): the accelerator's spellings and choose_device's rule, on
// made-up machines with 0, 1, 2 and 8 GPUs; and what TrainerOptions refuses on the CPU. Free of LibTorch.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "lockstep/train/device_choice.h"
#include "lockstep/train/trainer_options.h"

namespace {

using lockstep::train::AcceleratorKind;
using lockstep::train::choose_device;
using lockstep::train::DeviceChoice;
using lockstep::train::parse_accelerator;
using lockstep::train::VisibleGpus;

VisibleGpus gpus(int count) {
  return {count, "test machine with " + std::to_string(count) + " GPU(s)"};
}

std::string error_of(AcceleratorKind kind, int local_rank, int local_world, int count, bool share = false) {
  try {
    choose_device(kind, local_rank, local_world, gpus(count), share);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

template <typename F>
std::string error_of(F&& call) {
  try {
    call();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(DeviceChoice, ParsesLightningsSpellings) {
  EXPECT_EQ(parse_accelerator("auto"), AcceleratorKind::kAuto);
  EXPECT_EQ(parse_accelerator("cpu"), AcceleratorKind::kCpu);
  EXPECT_EQ(parse_accelerator("gpu"), AcceleratorKind::kGpu);
  EXPECT_EQ(parse_accelerator("cuda"), AcceleratorKind::kGpu);
  for (AcceleratorKind kind : {AcceleratorKind::kAuto, AcceleratorKind::kCpu, AcceleratorKind::kGpu})
    EXPECT_EQ(parse_accelerator(to_string(kind)), kind);
  try {
    parse_accelerator("tpu");
    FAIL() << "tpu was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "accelerator 'tpu' is not known (expected one of: auto, cpu, gpu)");
  }
}

TEST(DeviceChoice, OneRankPerVisibleGpuInLocalRankOrder) {
  for (int world : {1, 2, 8}) {
    for (int rank = 0; rank < world; ++rank) {
      for (AcceleratorKind kind : {AcceleratorKind::kAuto, AcceleratorKind::kGpu}) {
        const DeviceChoice choice = choose_device(kind, rank, world, gpus(8), false);
        EXPECT_TRUE(choice.cuda);
        EXPECT_EQ(choice.index, rank) << "rank " << rank << " of " << world;
      }
    }
  }
}

TEST(DeviceChoice, CpuAndAutoWithoutGpusStayOnTheCpu) {
  for (int count : {0, 1, 8}) {
    const DeviceChoice cpu = choose_device(AcceleratorKind::kCpu, 1, 2, gpus(count), false);
    EXPECT_FALSE(cpu.cuda);
    EXPECT_EQ(cpu.index, -1);
  }
  // More ranks than cores or GPUs is fine on the CPU.
  EXPECT_FALSE(choose_device(AcceleratorKind::kAuto, 7, 8, gpus(0), false).cuda);
  EXPECT_FALSE(choose_device(AcceleratorKind::kCpu, 7, 8, gpus(1), false).cuda);
}

TEST(DeviceChoice, GpuWhereNoneIsVisibleNamesWhatWasFound) {
  EXPECT_EQ(error_of(AcceleratorKind::kGpu, 0, 1, 0),
            "accelerator 'gpu' was asked for, but this process sees no CUDA device (test machine with 0 "
            "GPU(s)): check nvidia-smi and CUDA_VISIBLE_DEVICES, or train on accelerator 'cpu'");
}

TEST(DeviceChoice, MoreRanksThanGpusIsRefusedUnlessTheyShare) {
  for (AcceleratorKind kind : {AcceleratorKind::kAuto, AcceleratorKind::kGpu}) {
    const std::string message = error_of(kind, 0, 3, 2);
    EXPECT_NE(message.find("3 ranks on this node but 2 visible GPU(s) (test machine with 2 GPU(s))"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("start at most 2 (devices 2)"), std::string::npos) << message;
    EXPECT_NE(message.find("backend 'gloo'"), std::string::npos) << message;
  }
  // Sharing (gloo moves CUDA tensors): round robin over the GPUs.
  for (int rank = 0; rank < 3; ++rank) {
    const DeviceChoice choice = choose_device(AcceleratorKind::kGpu, rank, 3, gpus(2), true);
    EXPECT_TRUE(choice.cuda);
    EXPECT_EQ(choice.index, rank % 2);
  }
}

TEST(DeviceChoice, LocalRankOutsideTheNodeIsAnError) {
  EXPECT_NE(error_of(AcceleratorKind::kGpu, 2, 2, 4).find("local rank 2 of 2 rank(s)"), std::string::npos);
  EXPECT_NE(error_of(AcceleratorKind::kCpu, -1, 2, 0).find("local rank -1 of 2"), std::string::npos);
}

std::string options_error(const lockstep::train::TrainerOptions& options) {
  try {
    options.validate();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(DeviceChoice, TrainerOptionsRefuseWhatTheCpuCannotRun) {
  using lockstep::comm::Backend;
  using lockstep::train::Precision;
  using lockstep::train::TrainerOptions;
  // auto (the default) is decided by each rank: nothing to refuse yet.
  EXPECT_EQ(options_error(TrainerOptions().precision(Precision::k16Mixed)), "");
  EXPECT_EQ(options_error(TrainerOptions().backend(Backend::kNccl)), "");
  EXPECT_EQ(options_error(TrainerOptions().accelerator(AcceleratorKind::kGpu).precision(Precision::k16Mixed)),
            "");
  const std::string fp16 =
      options_error(TrainerOptions().accelerator(AcceleratorKind::kCpu).precision(Precision::k16Mixed));
  EXPECT_NE(fp16.find("precision '16-mixed' needs a CUDA device"), std::string::npos) << fp16;
  EXPECT_NE(fp16.find("(accelerator 'cpu')"), std::string::npos) << fp16;
  EXPECT_NE(fp16.find("use precision 'bf16-mixed'"), std::string::npos) << fp16;
  const std::string nccl =
      options_error(TrainerOptions().accelerator(AcceleratorKind::kCpu).backend(Backend::kNccl));
  EXPECT_NE(nccl.find("backend 'nccl' moves CUDA tensors"), std::string::npos) << nccl;
  EXPECT_EQ(
      options_error(TrainerOptions().accelerator(AcceleratorKind::kCpu).precision(Precision::kBf16Mixed)),
      "");
  // What the CLI asks when auto finds no GPU.
  try {
    TrainerOptions()
        .precision(Precision::k16Mixed)
        .check_cpu_training("accelerator 'auto', and no GPU is visible");
    FAIL() << "16-mixed on the CPU was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("(accelerator 'auto', and no GPU is visible)"), std::string::npos);
  }
  EXPECT_NO_THROW(TrainerOptions().check_cpu_training("accelerator 'cpu'"));
}

TEST(Strategy, ParsesLightningsNames) {
  using lockstep::train::parse_strategy;
  using lockstep::train::StrategyKind;
  EXPECT_EQ(parse_strategy("ddp").kind(), StrategyKind::kDdp);
  EXPECT_EQ(parse_strategy("auto").kind(), StrategyKind::kDdp);
  EXPECT_EQ(parse_strategy("zero1").kind(), StrategyKind::kZero1);
  EXPECT_STREQ(to_string(StrategyKind::kZero1), "zero1");
  EXPECT_EQ(parse_strategy("zero2").kind(), StrategyKind::kZero2);
  EXPECT_STREQ(to_string(StrategyKind::kZero2), "zero2");
  EXPECT_EQ(parse_strategy("fsdp").kind(), StrategyKind::kFsdp);
  EXPECT_STREQ(to_string(StrategyKind::kFsdp), "fsdp");
  // Lightning's strings with the same semantics.
  const auto unused = parse_strategy("ddp_find_unused_parameters_true");
  EXPECT_EQ(unused.kind(), StrategyKind::kDdp);
  EXPECT_TRUE(unused.find_unused_parameters());
  EXPECT_EQ(unused.name(), "ddp_find_unused_parameters_true");
  EXPECT_FALSE(parse_strategy("ddp_find_unused_parameters_false").find_unused_parameters());
  EXPECT_EQ(parse_strategy("deepspeed_stage_1").kind(), StrategyKind::kZero1);
  EXPECT_EQ(parse_strategy("deepspeed_stage_2").kind(), StrategyKind::kZero2);
  // Refused with what to use instead; unknown ones list the accepted names.
  EXPECT_NE(error_of([] { parse_strategy("deepspeed_stage_3"); }).find("fsdp"), std::string::npos);
  EXPECT_NE(error_of([] { parse_strategy("ddp_spawn"); }).find("use ddp"), std::string::npos);
  EXPECT_NE(error_of([] { parse_strategy("deepspeed"); }).find("deepspeed_stage_1"), std::string::npos);
  EXPECT_NE(error_of([] { parse_strategy("ddpp"); }).find("expected one of: ddp, zero1"), std::string::npos);
}

TEST(Strategy, RefusesOptionsOfAnotherStrategyAndPrecisionsItCannotRun) {
  using lockstep::train::DdpStrategy;
  using lockstep::train::FsdpStrategy;
  using lockstep::train::Precision;
  using lockstep::train::Zero2Strategy;
  EXPECT_NO_THROW(
      DdpStrategy().find_unused_parameters(true).bucket_cap_mb(4).validate(Precision::k32, "precision"));
  EXPECT_NO_THROW(FsdpStrategy().min_unit_params(10).validate(Precision::kBf16Mixed, "precision"));
  EXPECT_NE(error_of([] {
              FsdpStrategy().bucket_cap_mb(4).validate(Precision::k32, "precision");
            }).find("strategy 'fsdp' has no option bucket_cap_mb"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              DdpStrategy().min_unit_params(10).validate(Precision::k32, "precision");
            }).find("has no option min_unit_params (it applies to fsdp)"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              Zero2Strategy().find_unused_parameters(true).validate(Precision::k32, "precision");
            }).find("needs every trainable parameter used in every step"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              Zero2Strategy().validate(Precision::k16Mixed, "precision");
            }).find("strategy 'zero2' does not support precision '16-mixed' yet"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              DdpStrategy().bucket_cap_mb(0).validate(Precision::k32, "precision");
            }).find("bucket_cap_mb must be a number of MiB > 0"),
            std::string::npos);
}

// The one rule the Trainer and the Accelerator share: GPUs are shared only over a backend that moves CUDA
// tensors through the host.
TEST(Strategy, RanksShareAGpuOnlyOverGloo) {
  using lockstep::comm::Backend;
  using lockstep::train::ranks_may_share_gpu;
  EXPECT_TRUE(ranks_may_share_gpu(Backend::kGloo));
  for (const Backend backend : {Backend::kAuto, Backend::kNccl, Backend::kShm, Backend::kHier, Backend::kMpi})
    EXPECT_FALSE(ranks_may_share_gpu(backend)) << to_string(backend);
}

}  // namespace
