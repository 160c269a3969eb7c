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
  using lockstep::train::Strategy;
  EXPECT_EQ(parse_strategy("ddp"), Strategy::kDdp);
  EXPECT_EQ(parse_strategy("zero1"), Strategy::kZero1);
  EXPECT_STREQ(to_string(Strategy::kZero1), "zero1");
  EXPECT_EQ(parse_strategy("zero2"), Strategy::kZero2);
  EXPECT_STREQ(to_string(Strategy::kZero2), "zero2");
  EXPECT_EQ(parse_strategy("fsdp"), Strategy::kFsdp);
  EXPECT_STREQ(to_string(Strategy::kFsdp), "fsdp");
  EXPECT_THROW(parse_strategy("deepspeed"), std::invalid_argument);
}

}  // namespace
