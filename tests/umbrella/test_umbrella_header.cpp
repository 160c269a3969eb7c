// <lockstep/lockstep.h> compiles on its own (no precompiled header, nothing included before it) and brings
// in every layer: a name from each of the layers it once left out (log, FSDP, ShardedReducer, ForeachSgd)
// and from the oldest ones. Built against each LibTorch CI builds with (1.13 and 2.x).
#include <lockstep/lockstep.h>

#include <type_traits>

#include <gtest/gtest.h>

namespace {

TEST(UmbrellaHeader, DeclaresEveryLayer) {
  static_assert(std::is_class_v<lockstep::shard::FullyShardedDataParallel>);
  static_assert(std::is_base_of_v<lockstep::ddp::GradientSync, lockstep::shard::ShardedReducer>);
  static_assert(std::is_base_of_v<torch::optim::SGD, lockstep::optim::ForeachSgd>);
  static_assert(std::is_class_v<lockstep::shard::ZeroOptimizer>);
  static_assert(std::is_class_v<lockstep::train::Trainer>);
  static_assert(std::is_class_v<lockstep::ddp::DistributedDataParallel<torch::nn::Linear>>);
  static_assert(std::is_class_v<lockstep::log::CsvLogger>);
  EXPECT_STREQ(lockstep::comm::to_string(lockstep::comm::parse_backend("gloo")), "gloo");
  EXPECT_EQ(lockstep::train::parse_precision("bf16-mixed"), lockstep::train::Precision::kBf16Mixed);
  EXPECT_EQ(lockstep::log::crc32c("123456789"), 0xE3069283U);  // the CRC-32C check value
}

}  // namespace
